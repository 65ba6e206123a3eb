"""`kpi-forecast k8s train-job`: the Job and the PyTorchJob it prints are valid Kubernetes
(kubernetes-validate, strict), run a `kpi-forecast train` our own CLI accepts, and are
submitted to a stand-in API server as the cluster's resources allow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI, HTTPException, Request

from kpi_forecast.cli.main import build_parser, main
from tests import api_standin

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[1]
KUBE_VERSION = "1.33"
JOB_ARGS = ["k8s", "train-job", "--image", "registry.example/kpi-forecast:train", "--data",
            "/workspace/kpis", "--out", "/workspace/models/prb", "--target", "prb_util"]


def printed(capsys: pytest.CaptureFixture, *args: str) -> list[dict]:
    assert main([*JOB_ARGS, "--dry-run", *args]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def training_command(container: dict) -> list[str]:
    """The `kpi-forecast train` arguments behind torchrun's `-m kpi_forecast.cli`."""
    command = container["command"]
    assert command[:3] == ["python", "-m", "torch.distributed.run"]
    return command[command.index("kpi_forecast.cli") + 1 :]


def test_a_two_node_gpu_job_is_valid_and_runs_our_train(capsys) -> None:
    service, job = printed(capsys, "--kind", "job", "--gpus", "4", "--nodes", "2", "--",
                           "--max-minutes", "30", "--context", "14D")
    for manifest in (service, job):
        kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)  # raises if invalid
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == spec["template"]["metadata"]["labels"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    command = container["command"]
    assert "--nnodes=2" in command and "--nproc-per-node=4" in command
    endpoint = next(c for c in command if c.startswith("--rdzv-endpoint="))
    assert endpoint.startswith(f"--rdzv-endpoint={job['metadata']['name']}-0."
                               f"{service['metadata']['name']}.")
    train = training_command(container)
    args = build_parser().parse_args(train)  # our CLI takes exactly this command
    assert (args.data, args.out, args.target, args.device) == (
        "/workspace/kpis", "/workspace/models/prb", "prb_util", "cuda")
    assert (args.max_minutes, args.context) == (30.0, "14D")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/workspace", "/dev/shm"} <= mounts


def test_a_cpu_job_trains_with_gloo_on_one_rank_per_node(capsys) -> None:
    _, job = printed(capsys, "--kind", "job", "--nodes", "3")
    kubernetes_validate.validate(job, KUBE_VERSION, strict=True)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "--nproc-per-node=1" in container["command"]
    assert build_parser().parse_args(training_command(container)).device == "cpu"


def test_a_pytorchjob_leaves_the_rendezvous_to_the_operator(capsys) -> None:
    (job,) = printed(capsys, "--kind", "pytorchjob", "--gpus", "8", "--nodes", "3")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 2
    assert job["spec"]["nprocPerNode"] == "8"
    for role in ("Master", "Worker"):
        template = replicas[role]["template"]
        # The operator's pods are ordinary pods: validate the template as Kubernetes would.
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate",
             "metadata": {"name": f"train-{role.lower()}"}, "template": template},
            KUBE_VERSION, strict=True)
        container = template["spec"]["containers"][0]
        assert container["name"] == "pytorch"  # the name the training operator requires
        assert not any(c.startswith("--rdzv") or c.startswith("--nnodes")
                       for c in container["command"])  # PET_* variables carry them
        build_parser().parse_args(training_command(container))


def test_bad_sizes_are_one_line_errors() -> None:
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", *JOB_ARGS, "--nodes", "0",
                           "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--nodes" in done.stderr and "Traceback" not in done.stderr


class Cluster:
    """The API calls train-job makes: the CRD lookup, and creating what it submits."""

    def __init__(self, operator: bool) -> None:
        self.operator = operator
        self.created: list[dict] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        async def crd(name: str) -> dict:
            if not self.operator or name != "pytorchjobs.kubeflow.org":
                raise HTTPException(404, "not found")
            return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": name}}

        async def create(request: Request) -> dict:
            body = await request.json()
            self.created.append(body)
            return body

        for path in ("/apis/batch/v1/namespaces/{ns}/jobs", "/api/v1/namespaces/{ns}/services",
                     "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"):
            app.post(path, status_code=201)(create)
        return app


@pytest.mark.parametrize("operator", [True, False])
def test_submits_a_pytorchjob_where_the_operator_runs_else_a_job(operator: bool, tmp_path: Path,
                                                                 capsys) -> None:
    cluster = Cluster(operator)
    with api_standin.serving(cluster.app(), tmp_path) as config:
        assert main([*JOB_ARGS, "--gpus", "1", "--nodes", "2", "--kubeconfig", str(config)]) == 0
    kinds = [obj["kind"] for obj in cluster.created]
    assert kinds == (["PyTorchJob"] if operator else ["Service", "Job"])
    assert "created" in capsys.readouterr().out


def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    config = api_standin.kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", *JOB_ARGS, "--kubeconfig",
                           str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("kpi-forecast: error: cannot reach the Kubernetes API server")


HISTORY_ARGS = ["k8s", "train-job", "--from-history", "--image",
                "registry.example/kpi-forecast:train", "--serving-image",
                "registry.example/kpi-forecast:1", "--target", "prb_util", "--out",
                "/opt/ric/model/candidates", "--claim", "kpi-models", "--xapp-config",
                "kpi-forecast-config", "--xapp", "http://service-ricxapp-kpi-forecast-http:8080",
                "--model", "prb", "--dbaas", "service-ricplt-dbaas-tcp.ricplt:6379",
                "--api-key-secret", "kpi-forecast-key"]


def test_a_retraining_from_history_exports_trains_and_asks_for_the_candidate(capsys) -> None:
    assert main([*HISTORY_ARGS, "--dry-run", "--", "--max-minutes", "20"]) == 0
    [job] = yaml.safe_load_all(capsys.readouterr().out)
    kubernetes_validate.validate(job, KUBE_VERSION, strict=True)
    pod = job["spec"]["template"]["spec"]
    export, train = pod["initContainers"]
    [ask] = pod["containers"]
    # Each step is a command our own CLI takes, in order: export, train on it, shadow it.
    exported = build_parser().parse_args(export["command"][1:])
    trained = build_parser().parse_args(train["command"][1:])
    asked = build_parser().parse_args(ask["command"][1:])
    assert (exported.kpi, trained.data) == ("prb_util", exported.out)
    assert (trained.target, trained.max_minutes) == ("prb_util", 20.0)
    assert trained.out == asked.model_dir == "/opt/ric/model/candidates/$(JOB_NAME)"
    assert (asked.model, asked.xapp) == ("prb", "http://service-ricxapp-kpi-forecast-http:8080")
    assert export["image"] == ask["image"] == "registry.example/kpi-forecast:1"
    assert train["image"] == "registry.example/kpi-forecast:train"
    # $(JOB_NAME) is expanded by the kubelet from the label the Job controller sets.
    for container in (train, ask):
        [name] = [e for e in container["env"] if e["name"] == "JOB_NAME"]
        assert name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['job-name']"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in train["volumeMounts"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "kpi-models"
    assert mounts["models"] == "/opt/ric/model" and mounts["history"] == "/history"
    assert {m["name"] for m in export["volumeMounts"]} == {"history", "config"}
    assert volumes["config"]["configMap"]["name"] == "kpi-forecast-config"
    env = {e["name"]: e for e in [*export["env"], *ask["env"]]}
    assert env["DBAAS_SERVICE_HOST"]["value"] == "service-ricplt-dbaas-tcp.ricplt"
    assert env["KPI_FORECAST_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == \
        "kpi-forecast-key"


@pytest.mark.parametrize(("change", "says"), [
    (["--nodes", "2"], "--from-history trains on one node"),
    (["--kind", "pytorchjob"], "no --kind pytorchjob"),
    (["--data", "/workspace/kpis"], "no --data"),
    (["--out", "/workspace/models"], "must lie on the model repository's volume"),
])
def test_a_retraining_from_history_that_cannot_run_is_one_line(change: list[str],
                                                                says: str) -> None:
    args = list(HISTORY_ARGS)
    if change[0] in args:
        args[args.index(change[0]) + 1] = change[1]
    else:
        args += change
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", *args, "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("kpi-forecast: error: ") and says in line, line

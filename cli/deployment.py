"""Operating the xApp on Kubernetes: `kpi-forecast k8s status | package | rollout`.

The chart's init-container model source fetches a `.tar.gz` of a model directory from
`MODEL_URL` into each pod. A rollout therefore publishes a new model version by changing that
URL (and a model-version annotation) in the Deployment's pod template: Kubernetes then replaces
the pods one by one (the chart's strategy never takes a serving pod away first). The command
waits until every pod serves the new version, and restores the previous template when the
rollout fails or times out.
"""

from __future__ import annotations

import json
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from kpi_forecast.model.artifact import load_metadata, verified_graph
from kpi_forecast.model.errors import UserError

FETCHER = "fetch-model"  # the chart's init container
CONTAINER = "kpi-forecast"
VERSION_ANNOTATION = "kpi-forecast.o-ran-sc.org/model-version"
HTTP_PORT = 8080


class RolloutError(UserError, RuntimeError):
    """The rollout could not start, or failed (the message says whether it was rolled back)."""


@dataclass
class PodState:
    name: str
    phase: str
    ready: bool
    restarts: int
    node: str | None
    model_version: str | None  # what the pod's /v1/model says; None when it cannot be asked


@dataclass
class DeploymentState:
    name: str
    namespace: str
    replicas: int
    ready: int
    updated: int
    available: int
    image: str
    model_version: str | None  # the pod template's annotation
    pods: list[PodState] = field(default_factory=list)

    def rolled_out(self, generation_seen: bool) -> bool:
        return generation_seen and self.updated == self.replicas == self.available == len(
            self.pods) and all(p.ready for p in self.pods)


def status(api: client.ApiClient, namespace: str, name: str) -> DeploymentState:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    try:
        deployment = apps.read_namespaced_deployment(name, namespace)
    except ApiException as exc:
        raise RolloutError(f"deployment {namespace}/{name}: {exc.reason}") from None
    spec, stat = deployment.spec, deployment.status
    selector = ",".join(f"{k}={v}" for k, v in spec.selector.match_labels.items())
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    container = next(c for c in spec.template.spec.containers if c.name == CONTAINER)
    return DeploymentState(
        name=name, namespace=namespace, replicas=spec.replicas or 0,
        ready=stat.ready_replicas or 0, updated=stat.updated_replicas or 0,
        available=stat.available_replicas or 0, image=container.image,
        model_version=(spec.template.metadata.annotations or {}).get(VERSION_ANNOTATION),
        pods=[_pod_state(core, namespace, pod) for pod in pods],
    )


def _pod_state(core: client.CoreV1Api, namespace: str, pod: client.V1Pod) -> PodState:
    statuses = pod.status.container_statuses or []
    ready = bool(statuses) and all(s.ready for s in statuses)
    version = None
    if ready:
        try:
            # Through the API server's pod proxy: what the pod itself says it serves. The raw
            # body: the client would otherwise turn the JSON into a Python repr string.
            response = core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod.metadata.name}:{HTTP_PORT}", namespace, "v1/model",
                _preload_content=False)
            version = json.loads(response.data)["model_version"]
        except (ApiException, ValueError, KeyError, TypeError):
            version = None
    return PodState(pod.metadata.name, pod.status.phase, ready,
                    sum(s.restart_count for s in statuses), pod.spec.node_name, version)


def package(model_dir: Path, out: Path) -> str:
    """The `.tar.gz` the chart's fetcher unpacks into the model directory; returns the version."""
    meta = load_metadata(model_dir)
    for precision in meta.precisions:
        verified_graph(model_dir, meta, precision)
    with tarfile.open(out, "w:gz") as archive:
        for path in sorted(Path(model_dir).iterdir()):
            if path.is_file():
                archive.add(path, arcname=path.name)
    return meta.model_version


def template_patch(model_url: str, version: str) -> dict:
    """Strategic-merge patch of the pod template: init containers and env merge by name."""
    return {"spec": {"template": {
        "metadata": {"annotations": {VERSION_ANNOTATION: version}},
        "spec": {"initContainers": [{"name": FETCHER,
                                     "env": [{"name": "MODEL_URL", "value": model_url}]}]},
    }}}


def rollout(api: client.ApiClient, namespace: str, name: str, model_dir: Path, model_url: str,
            timeout_s: float = 600.0, poll_s: float = 2.0,
            stop: threading.Event | None = None) -> DeploymentState:
    """Roll ``name`` to the model in ``model_dir`` (published at ``model_url``). With ``stop``
    set (SIGTERM, Ctrl-C) it stops watching and returns the state then: the rollout goes on
    in the cluster, as after ``kubectl rollout status`` is interrupted."""
    version = load_metadata(model_dir).model_version
    apps = client.AppsV1Api(api)
    deployment = apps.read_namespaced_deployment(name, namespace)
    fetcher = next((c for c in deployment.spec.template.spec.init_containers or []
                    if c.name == FETCHER), None)
    if fetcher is None:
        raise RolloutError(f"deployment {namespace}/{name} has no {FETCHER} init container: "
                           "install the chart with model.source=initContainer (a model baked "
                           "into the image rolls with a new image tag instead)")
    previous_url = next((e.value for e in fetcher.env or [] if e.name == "MODEL_URL"), "")
    previous_version = (deployment.spec.template.metadata.annotations or {}).get(
        VERSION_ANNOTATION, "")
    apps.patch_namespaced_deployment(name, namespace, template_patch(model_url, version))
    try:
        return _wait(api, namespace, name, version, timeout_s, poll_s, stop or threading.Event())
    except RolloutError as exc:
        apps.patch_namespaced_deployment(
            name, namespace, template_patch(previous_url, previous_version))
        raise RolloutError(f"{exc}; rolled back to {previous_version or 'the previous model'}"
                           ) from None


def _wait(api: client.ApiClient, namespace: str, name: str, version: str, timeout_s: float,
          poll_s: float, stop: threading.Event) -> DeploymentState:
    apps = client.AppsV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        deployment = apps.read_namespaced_deployment(name, namespace)
        for condition in deployment.status.conditions or []:
            if condition.type == "Progressing" and condition.reason == "ProgressDeadlineExceeded":
                raise RolloutError(f"rollout of {version} stalled: {condition.message}")
        seen = (deployment.status.observed_generation or 0) >= deployment.metadata.generation
        state = status(api, namespace, name)
        if state.rolled_out(seen) and all(p.model_version == version for p in state.pods):
            return state
        if time.monotonic() >= deadline:
            serving = sorted({str(p.model_version) for p in state.pods})
            raise RolloutError(f"rollout of {version} not done after {timeout_s:.0f} s "
                               f"(pods serve {', '.join(serving)})")
        if stop.wait(poll_s):
            return state

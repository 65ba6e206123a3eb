"""`kpi-forecast k8s train-job`: distributed training as a Kubernetes workload.

Two forms, one command line inside: ``torchrun`` running ``kpi-forecast train`` on every node.

* A Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``) where the training operator is installed:
  the operator creates the master and worker pods and gives torchrun its rendezvous through
  the ``PET_*`` environment.
* Otherwise a plain Indexed ``Job`` with a headless ``Service``: pod ``i`` of the job is node
  ``i``, and the nodes meet at pod 0's stable name through torchrun's c10d rendezvous.

Data and output live on a volume every node mounts (a ReadWriteMany claim for several nodes),
so that each rank reads its own files of a partitioned dataset and a restarted pod resumes
from the checkpoint rank 0 wrote. torchrun restarts failed ranks (``--max-restarts``); the
Job or the operator restarts a lost pod.

A third form retrains from the RIC's own history (``FromHistory``, one pod): an init container
of the serving image exports the KPI's history from the RIC's Redis (``kpi-forecast history
export``, with the xApp's descriptor), another of the training image trains on it into a
directory of its own (named by the Job) on the model repository's volume, and the pod's
container asks the xApp to shadow it as the model's candidate (``kpi-forecast models
candidate``). The chart's retraining CronJob runs the same pod.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"
CONTAINER = "pytorch"  # the container name the training operator requires
RDZV_PORT = 29400
WORKSPACE = "/workspace"


@dataclass
class TrainJobSpec:
    name: str
    image: str
    data: str  # a path under the workspace volume: a file or a Parquet dataset directory
    out: str  # the model directory to write, on the same volume
    target: str
    namespace: str = "ricplt"
    nodes: int = 1
    gpus: int = 0  # per node; 0 trains on CPU with gloo
    procs_per_node: int = 0  # ranks per node; 0 = one per GPU, or 1 on CPU
    cpu: int = 2  # cores requested per node
    memory: str = "8Gi"
    claim: str = "kpi-forecast-training"  # PersistentVolumeClaim mounted at WORKSPACE
    max_restarts: int = 3
    train_args: list[str] = field(default_factory=list)  # more `kpi-forecast train` options

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus < 0 or self.procs_per_node < 0 or self.cpu < 1:
            raise ValueError(f"need --nodes >= 1, --gpus >= 0, --procs-per-node >= 0 and "
                             f"--cpu >= 1 (got {self.nodes}, {self.gpus}, "
                             f"{self.procs_per_node}, {self.cpu})")
        if self.procs_per_node == 0:
            self.procs_per_node = self.gpus or 1

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": "kpi-forecast-train",
                "app.kubernetes.io/instance": self.name,
                "app.kubernetes.io/component": "training"}

    def train_command(self, data: str | None = None, out: str | None = None) -> list[str]:
        """The training, of ``data`` into ``out`` (default: the spec's)."""
        return ["kpi-forecast", "train", "--data", data or self.data, "--out", out or self.out,
                "--target", self.target, "--device", "cuda" if self.gpus else "cpu", "--quiet",
                *self.train_args]


def _torchrun(spec: TrainJobSpec, rendezvous: list[str]) -> list[str]:
    # torchrun is run as a module: the image may put only `python` and `kpi-forecast` on PATH.
    return ["python", "-m", "torch.distributed.run", *rendezvous,
            f"--max-restarts={spec.max_restarts}", "-m", "kpi_forecast.cli",
            *spec.train_command()[1:]]


def _pod_spec(spec: TrainJobSpec, command: list[str], restart_policy: str) -> dict:
    resources: dict = {"requests": {"cpu": str(spec.cpu), "memory": spec.memory},
                       "limits": {"memory": spec.memory}}
    if spec.gpus:
        resources["limits"]["nvidia.com/gpu"] = str(spec.gpus)
    return {
        "restartPolicy": restart_policy,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": CONTAINER,
            "image": spec.image,
            "command": command,
            "env": [{"name": "OMP_NUM_THREADS",
                     "value": str(max(1, spec.cpu // spec.procs_per_node))}],
            "resources": resources,
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE},
                             # NCCL and gloo pass tensors through shared memory.
                             {"name": "dshm", "mountPath": "/dev/shm"}],
        }],
        "volumes": [
            {"name": "workspace", "persistentVolumeClaim": {"claimName": spec.claim}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }


def job_manifests(spec: TrainJobSpec) -> list[dict]:
    """A headless Service and an Indexed Job: the form that needs nothing but Kubernetes."""
    service = f"{spec.name}-nodes"
    # Pod 0 of an Indexed Job is `<job>-0`; the Service's subdomain gives it a stable name.
    endpoint = f"{spec.name}-0.{service}.{spec.namespace}.svc:{RDZV_PORT}"
    rendezvous = [f"--nnodes={spec.nodes}", f"--nproc-per-node={spec.procs_per_node}",
                  "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={spec.name}"]
    pod = _pod_spec(spec, _torchrun(spec, rendezvous), "Never")
    pod["subdomain"] = service
    pod["containers"][0]["ports"] = [{"name": "rendezvous", "containerPort": RDZV_PORT}]
    metadata = {"name": spec.name, "namespace": spec.namespace, "labels": spec.labels}
    return [
        {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {**metadata, "name": service},
            "spec": {"clusterIP": "None", "selector": spec.labels,
                     # Rendezvous starts before every pod is ready.
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": "rendezvous", "port": RDZV_PORT}]},
        },
        {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": metadata,
            "spec": {
                "completionMode": "Indexed", "completions": spec.nodes,
                "parallelism": spec.nodes, "backoffLimit": spec.max_restarts * spec.nodes,
                "template": {"metadata": {"labels": spec.labels}, "spec": pod},
            },
        },
    ]


def pytorchjob_manifest(spec: TrainJobSpec) -> dict:
    """A Kubeflow PyTorchJob: the training operator wires the rendezvous (PET_* variables)."""
    template = {"metadata": {"labels": spec.labels},
                "spec": _pod_spec(spec, _torchrun(spec, []), "OnFailure")}
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}
    if spec.nodes > 1:
        replicas["Worker"] = {"replicas": spec.nodes - 1, "restartPolicy": "OnFailure",
                              "template": template}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": spec.labels},
        "spec": {
            "nprocPerNode": str(spec.procs_per_node),
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts},
            "pytorchReplicaSpecs": replicas,
        },
    }


CONFIG_DIR = "/opt/ric/config"  # where the xApp's descriptor ConfigMap is mounted, as in the chart
HISTORY = "/history/history.parquet"  # the exported history, on an emptyDir of the pod


@dataclass
class FromHistory:
    """A retraining from the RIC's own history: what the pod reads and whom it tells."""

    serving_image: str  # the xApp's image: it reads the RIC's Redis
    config_map: str  # the xApp's descriptor (config-file.json): the history store it names
    xapp: str  # the xApp's HTTP address, for the candidate
    model: str  # the model the candidate is for
    mount: str  # where the model repository's volume (spec.claim) is, as the xApp mounts it
    dbaas: str = ""  # HOST:PORT of the RIC's Redis, where the descriptor names none
    api_key_secret: str = ""  # Secret holding the model-control key (entry "api-key")

    def candidate_dir(self, spec: TrainJobSpec) -> str:
        """Each run's own directory (the Job's name), so a promoted one is never overwritten."""
        return f"{spec.out}/$(JOB_NAME)"


def _job_name() -> dict:
    """$(JOB_NAME): the Job's name, which the Job controller puts on its pods' labels."""
    return {"name": "JOB_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}}}


def _restricted() -> dict:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def history_pod(spec: TrainJobSpec, source: FromHistory) -> dict:
    """The retraining pod: export, train, then the candidate asked for."""
    candidate = source.candidate_dir(spec)
    dbaas = []
    if source.dbaas:
        host, _, port = source.dbaas.rpartition(":")
        dbaas = [{"name": "DBAAS_SERVICE_HOST", "value": host},
                 {"name": "DBAAS_SERVICE_PORT", "value": port}]
    key = ([{"name": "KPI_FORECAST_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": source.api_key_secret, "key": "api-key"}}}] if source.api_key_secret else [])
    pod = _pod_spec(spec, spec.train_command(HISTORY, candidate), "Never")
    [train] = pod.pop("containers")
    train["name"] = "train"
    train["env"].append(_job_name())
    train["volumeMounts"] = [{"name": "history", "mountPath": "/history"},
                             {"name": "models", "mountPath": source.mount},
                             {"name": "dshm", "mountPath": "/dev/shm"}]
    export = {
        "name": "export", "image": source.serving_image,
        "command": ["kpi-forecast", "history", "export", "--kpi", spec.target, "--out",
                    HISTORY, "--config", f"{CONFIG_DIR}/config-file.json"],
        "env": dbaas, "securityContext": _restricted(),
        "volumeMounts": [{"name": "history", "mountPath": "/history"},
                         {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    ask = {
        "name": "candidate", "image": source.serving_image,
        "command": ["kpi-forecast", "models", "candidate", "--xapp", source.xapp, "--model",
                    source.model, "--model-dir", candidate],
        "env": [_job_name(), *key], "securityContext": _restricted(),
    }
    pod["initContainers"] = [export, train]
    pod["containers"] = [ask]
    pod["volumes"] = [
        {"name": "history", "emptyDir": {}},
        {"name": "config", "configMap": {"name": source.config_map}},
        {"name": "models", "persistentVolumeClaim": {"claimName": spec.claim}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    return pod


def history_job_manifest(spec: TrainJobSpec, source: FromHistory) -> dict:
    """The retraining from the RIC's own history as a Job (one pod, not retried: the next
    run is the retry)."""
    if spec.nodes != 1:
        raise ValueError(f"--from-history trains on one node (got --nodes {spec.nodes})")
    if not spec.out.startswith(source.mount.rstrip("/") + "/"):
        raise ValueError(f"--out {spec.out} must lie on the model repository's volume, "
                         f"mounted at --mount-path {source.mount}")
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": spec.labels},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": spec.labels},
                                                 "spec": history_pod(spec, source)}},
    }


def manifests(spec: TrainJobSpec, kind: str) -> list[dict]:
    if kind == "pytorchjob":
        return [pytorchjob_manifest(spec)]
    return job_manifests(spec)


def has_pytorchjob(api) -> bool:
    """Whether the cluster serves the Kubeflow PyTorchJob resource."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        # Only whether it exists matters: skip parsing the (large) definition.
        client.ApiextensionsV1Api(api).read_custom_resource_definition(
            PYTORCHJOB_CRD, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def submit(api, objects: list[dict]) -> list[str]:
    """Create the objects; returns their `kind/name`."""
    from kubernetes import client

    created = []
    for obj in objects:
        namespace, kind = obj["metadata"]["namespace"], obj["kind"]
        if kind == "PyTorchJob":
            group, version = obj["apiVersion"].split("/")
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                group, version, namespace, "pytorchjobs", obj)
        elif kind == "Job":
            client.BatchV1Api(api).create_namespaced_job(namespace, obj)
        elif kind == "Service":
            client.CoreV1Api(api).create_namespaced_service(namespace, obj)
        else:
            raise ValueError(f"cannot submit a {kind}")
        created.append(f"{kind}/{obj['metadata']['name']}")
    return created


def describe(spec: TrainJobSpec) -> str:
    """One line saying what runs where."""
    where = f"{spec.gpus} GPU(s)" if spec.gpus else "CPU"
    return (f"{spec.nodes} node(s) x {spec.procs_per_node} rank(s) on {where}: "
            f"{shlex.join(spec.train_command())}")

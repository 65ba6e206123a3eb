"""`kpi-forecast k8s train-job`: distributed training on the cluster, as a Job or a Kubeflow
PyTorchJob (``k8s_job.py``)."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from kpi_forecast.cli.cluster import kubernetes_client
from kpi_forecast.model.errors import UserError
from kpi_forecast.training.arguments import non_negative_int, positive_int

if TYPE_CHECKING:
    from kpi_forecast.training import k8s_job

log = logging.getLogger(__name__)


def cmd_train_job(args: argparse.Namespace) -> None:
    import urllib3
    import yaml
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException

    from kpi_forecast.training import k8s_job

    logging.getLogger("urllib3").setLevel(logging.ERROR)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    source = from_history(args)
    try:
        spec = k8s_job.TrainJobSpec(
            name=args.name, image=args.image, data=args.data or k8s_job.HISTORY, out=args.out,
            target=args.target, namespace=args.namespace, nodes=args.nodes, gpus=args.gpus,
            procs_per_node=args.procs_per_node, cpu=args.cpu, memory=args.memory,
            claim=args.claim, train_args=extra)
        objects = [k8s_job.history_job_manifest(spec, source)] if source else None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    kind, api = ("job" if source else args.kind), None
    try:
        if kind == "auto" or not args.dry_run:
            try:
                api = kubernetes_client(args)
            except ConfigException as exc:
                if not args.dry_run:
                    raise UserError(str(exc)) from None
                log.warning("no cluster configured (%s): printing a plain Job", exc)
                kind = "job"
        if kind == "auto":
            kind = "pytorchjob" if k8s_job.has_pytorchjob(api) else "job"
        objects = objects or k8s_job.manifests(spec, kind)
        if args.dry_run:
            print(yaml.safe_dump_all(objects, sort_keys=False), end="")
            return
        created = k8s_job.submit(api, objects)
    except ApiException as exc:
        raise UserError(f"the API server refused: {exc.status} {exc.reason}") from None
    except urllib3.exceptions.HTTPError as exc:
        raise UserError(f"cannot reach the Kubernetes API server: {exc}") from None
    print(f"{args.namespace}: created {', '.join(created)}; {k8s_job.describe(spec)}")


HISTORY_OPTIONS = ("serving_image", "xapp_config", "xapp", "model")


def from_history(args: argparse.Namespace) -> k8s_job.FromHistory | None:
    """The retraining from the RIC's own history the options ask for (None: a training of
    --data); UserError naming what is missing or contradicts it."""
    from kpi_forecast.training import k8s_job

    if not args.from_history:
        if args.data is None:
            raise UserError("--data is required (or --from-history: the RIC's own history)")
        return None
    missing = [f"--{name.replace('_', '-')}" for name in HISTORY_OPTIONS
               if not getattr(args, name)]
    if missing:
        raise UserError(f"--from-history needs {', '.join(missing)}")
    if args.data is not None or args.kind == "pytorchjob":
        raise UserError("--from-history reads the exported history on one node: no --data, "
                        "no --kind pytorchjob")
    return k8s_job.FromHistory(
        serving_image=args.serving_image, config_map=args.xapp_config, xapp=args.xapp,
        model=args.model, mount=args.mount_path, dbaas=args.dbaas or "",
        api_key_secret=args.api_key_secret or "")


def add_k8s_commands(k8s: argparse._SubParsersAction) -> None:
    """k8s train-job."""
    job = k8s.add_parser(
        "train-job", help="distributed training on the cluster: a Job, or a Kubeflow "
        "PyTorchJob where that resource exists (printed with --dry-run, else submitted)",
        description="Arguments after '--' go to 'kpi-forecast train' unchanged.")
    job.set_defaults(run=cmd_train_job)
    job.add_argument("--image", required=True, help="the training image (Dockerfile target "
                     "train, or its GPU build)")
    job.add_argument("--data", help="file or Parquet dataset directory on the workspace "
                     "volume, e.g. /workspace/kpis")
    job.add_argument("--out", required=True, help="model directory on the workspace volume; "
                     "with --from-history, the folder of the candidates on the model "
                     "repository's volume (each run writes a directory named by its Job)")
    job.add_argument("--target", required=True, help="KPI column to forecast")
    job.add_argument("--gpus", type=non_negative_int, default=0, help="GPUs per node "
                     "(default 0: CPU with gloo)")
    job.add_argument("--nodes", type=positive_int, default=1)
    job.add_argument("--procs-per-node", type=non_negative_int, default=0,
                     help="ranks per node (default: one per GPU, or 1 on CPU)")
    job.add_argument("--cpu", type=positive_int, default=2, help="cores per node (default 2)")
    job.add_argument("--memory", default="8Gi", help="memory per node (default 8Gi)")
    job.add_argument("--claim", default="kpi-forecast-training",
                     help="PersistentVolumeClaim mounted at /workspace (ReadWriteMany for "
                     "several nodes)")
    job.add_argument("--name", default="kpi-forecast-train")
    job.add_argument("--namespace", default="ricplt")
    job.add_argument("--kind", choices=["auto", "job", "pytorchjob"], default="auto",
                     help="auto: a PyTorchJob when the cluster has the Kubeflow training "
                     "operator, else a Job")
    history = job.add_argument_group(
        "retraining from the RIC's own history (--from-history): export the KPI's history "
        "from the RIC's Redis, train on it, shadow the result as the model's candidate")
    history.add_argument("--from-history", action="store_true")
    history.add_argument("--serving-image", help="the xApp's image (it reads the RIC's Redis)")
    history.add_argument("--xapp-config", help="the xApp's descriptor ConfigMap")
    history.add_argument("--xapp", help="the xApp's HTTP address, e.g. "
                         "http://service-ricxapp-kpi-forecast-http.ricxapp:8080")
    history.add_argument("--model", help="the model the candidate is for")
    history.add_argument("--mount-path", default="/opt/ric/model", help="where --claim (the "
                         "model repository's volume) is mounted, as the xApp mounts it "
                         "(default /opt/ric/model, the chart's model.path)")
    history.add_argument("--dbaas", help="HOST:PORT of the RIC's Redis, where the descriptor "
                         "names none (the chart's sdl.host and sdl.port)")
    history.add_argument("--api-key-secret", help="Secret holding the model-control key "
                         "(entry api-key)")
    job.add_argument("--dry-run", action="store_true", help="print the manifests as YAML")
    job.add_argument("--kubeconfig")
    job.add_argument("--context")
    job.add_argument("train_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

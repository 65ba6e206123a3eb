"""`kpi-forecast k8s train-job`: distributed training on the cluster, as a Job or a Kubeflow
PyTorchJob (``k8s_job.py``)."""

from __future__ import annotations

import argparse
import logging

from kpi_forecast.cli.cluster import kubernetes_client
from kpi_forecast.model.errors import UserError
from kpi_forecast.training.arguments import non_negative_int, positive_int

log = logging.getLogger(__name__)


def cmd_train_job(args: argparse.Namespace) -> None:
    import urllib3
    import yaml
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException

    from kpi_forecast.training import k8s_job

    logging.getLogger("urllib3").setLevel(logging.ERROR)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    try:
        spec = k8s_job.TrainJobSpec(
            name=args.name, image=args.image, data=args.data, out=args.out,
            target=args.target, namespace=args.namespace, nodes=args.nodes, gpus=args.gpus,
            procs_per_node=args.procs_per_node, cpu=args.cpu, memory=args.memory,
            claim=args.claim, train_args=extra)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    kind, api = args.kind, None
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
        objects = k8s_job.manifests(spec, kind)
        if args.dry_run:
            print(yaml.safe_dump_all(objects, sort_keys=False), end="")
            return
        created = k8s_job.submit(api, objects)
    except ApiException as exc:
        raise UserError(f"the API server refused: {exc.status} {exc.reason}") from None
    except urllib3.exceptions.HTTPError as exc:
        raise UserError(f"cannot reach the Kubernetes API server: {exc}") from None
    print(f"{args.namespace}: created {', '.join(created)}; {k8s_job.describe(spec)}")


def add_k8s_commands(k8s: argparse._SubParsersAction) -> None:
    """k8s train-job."""
    job = k8s.add_parser(
        "train-job", help="distributed training on the cluster: a Job, or a Kubeflow "
        "PyTorchJob where that resource exists (printed with --dry-run, else submitted)",
        description="Arguments after '--' go to 'kpi-forecast train' unchanged.")
    job.set_defaults(run=cmd_train_job)
    job.add_argument("--image", required=True, help="the training image (Dockerfile target "
                     "train, or its GPU build)")
    job.add_argument("--data", required=True, help="file or Parquet dataset directory on the "
                     "workspace volume, e.g. /workspace/kpis")
    job.add_argument("--out", required=True, help="model directory on the workspace volume")
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
    job.add_argument("--dry-run", action="store_true", help="print the manifests as YAML")
    job.add_argument("--kubeconfig")
    job.add_argument("--context")
    job.add_argument("train_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

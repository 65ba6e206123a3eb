"""`kpi-forecast k8s status | package | rollout`: the deployed xApp's state, a model packed for
the chart's fetcher, and a rollout to it (the operations: ``deployment.py``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from kpi_forecast.cli.cluster import kubernetes_client
from kpi_forecast.cli.signals import stop_on_signals
from kpi_forecast.model.errors import UserError


def cmd_k8s(args: argparse.Namespace) -> None:
    import urllib3
    from kubernetes.config import ConfigException
    from tabulate import tabulate

    from kpi_forecast.cli import deployment

    # urllib3 logs each retry of a failing call: the one-line error below says it all.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        if args.k8s_command == "package":
            version = deployment.package(Path(args.model), Path(args.out))
            print(f"{args.out}: model {version}; publish it where the chart's fetcher reads "
                  "MODEL_URL, then run 'kpi-forecast k8s rollout'")
            return
        api = kubernetes_client(args)
        if args.k8s_command == "rollout":
            with stop_on_signals("no longer watching; the rollout goes on in the cluster") as stop:
                state = deployment.rollout(api, args.namespace, args.name, Path(args.model),
                                           args.model_url, timeout_s=args.timeout, stop=stop)
            if stop.is_set():
                print(f"{args.namespace}/{args.name}: stopped watching the rollout; "
                      "'kpi-forecast k8s status' follows it")
            else:
                print(f"{args.namespace}/{args.name}: every pod serves {state.model_version}")
        state = deployment.status(api, args.namespace, args.name)
    except ConfigException as exc:
        raise UserError(str(exc)) from None
    except urllib3.exceptions.HTTPError as exc:
        raise UserError(f"cannot reach the Kubernetes API server: {exc}") from None
    print(f"{state.namespace}/{state.name}: {state.ready}/{state.replicas} ready, "
          f"{state.updated} updated, image {state.image}, model {state.model_version or '-'}")
    rows = [(p.name, p.phase, "yes" if p.ready else "no", p.restarts, p.node or "-",
             p.model_version or "-") for p in state.pods]
    print(tabulate(rows, headers=["pod", "phase", "ready", "restarts", "node", "serves"]))



def add_commands(k8s: argparse._SubParsersAction) -> None:
    """k8s status, package and rollout."""
    for name, text in (("status", "deployment, pods, readiness and the model each pod serves"),
                       ("package", "pack a model directory as the chart's fetcher expects"),
                       ("rollout", "roll the deployment to a published model, roll back on "
                                   "failure")):
        sub = k8s.add_parser(name, help=text)
        sub.set_defaults(run=cmd_k8s)
        if name == "package":
            sub.add_argument("--model", required=True, help="model directory")
            sub.add_argument("--out", required=True, help=".tar.gz to write")
            continue
        sub.add_argument("--namespace", default="ricxapp")
        sub.add_argument("--name", default="ricxapp-kpi-forecast", help="the Deployment")
        sub.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, or the "
                         "in-cluster service account")
        sub.add_argument("--context")
        if name == "rollout":
            sub.add_argument("--model", required=True, help="the model directory published")
            sub.add_argument("--model-url", required=True,
                             help="where its .tar.gz is (kpi-forecast k8s package)")
            sub.add_argument("--timeout", type=float, default=600.0, help="seconds")

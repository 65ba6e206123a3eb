"""`kpi-forecast`: train, backtest, predict, export and serve from the command line.

This module only assembles the command groups and turns a user's mistake into one line and a
non-zero exit; the commands themselves live next to what they drive.
"""

from __future__ import annotations

import argparse
import logging
import sys

from kpi_forecast.cli import e2sim, history, k8s, models, serve
from kpi_forecast.model.errors import UserError
from kpi_forecast.training import commands as training_commands
from kpi_forecast.training import evaluation_commands, job_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kpi-forecast", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    training_commands.add_commands(commands)
    evaluation_commands.add_commands(commands)
    serve.add_commands(commands)
    history.add_commands(commands)
    models.add_commands(commands)
    ops = commands.add_parser("k8s", help="Kubernetes: the xApp's status, package, rollout; "
                              "distributed training jobs")
    k8s_commands = ops.add_subparsers(dest="k8s_command", required=True)
    k8s.add_commands(k8s_commands)
    job_commands.add_k8s_commands(k8s_commands)
    e2sim.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: the xApp's E2 ownership rounds alone would log one
    # every two seconds. Failures are logged by the callers, with what they were doing.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        args.run(args)
    except UserError as exc:
        print(f"kpi-forecast: error: {exc}", file=sys.stderr)
        return 2
    return 0

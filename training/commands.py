"""The training commands: train (also under torchrun) and export.

Torch is imported only inside them: the parser itself needs none.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kpi_forecast.cli.signals import stop_on_signals
from kpi_forecast.model.errors import UserError
from kpi_forecast.training.arguments import (
    holiday_calendar,
    parse_quantiles,
    parse_steps,
    positive_int,
)
from kpi_forecast.training.defaults import DEFAULT_HORIZON, default_context

if TYPE_CHECKING:
    from kpi_forecast.data.panel import Panel
    from kpi_forecast.training.distributed import Group

log = logging.getLogger(__name__)


def cmd_train(args: argparse.Namespace) -> None:
    from kpi_forecast.training.device import resolve_device
    from kpi_forecast.training.distributed import join

    started = time.monotonic()  # --max-minutes counts from here: reading the data is in it
    targets = parse_targets(args.target)
    # Under torchrun this process is one rank of several; alone it is the only one.
    group = join(resolve_device(args.device))
    if not group.main:
        logging.getLogger().setLevel(logging.WARNING)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(group.close)
        stop = cleanup.enter_context(stop_on_signals(
            "stopping after the step under way and writing the model so far"))
        if len(targets) == 1:
            _train_target(args, group, targets[0], Path(args.out), started,
                          args.max_minutes, stop)
            return
        # A repository: one model per KPI, in a folder named by it. The time budget is the
        # whole command's, shared: each target gets an equal part of what is left when it
        # starts, so one that stops early leaves its time to the next.
        deadline = started + args.max_minutes * 60
        for k, target in enumerate(targets):
            if stop.is_set():
                break
            begun = time.monotonic()
            share = max(deadline - begun, 0.0) / (len(targets) - k)
            _train_target(args, group, target, Path(args.out) / target, begun, share / 60,
                          stop)
        if group.main:
            print(f"repository: {args.out} ({', '.join(targets)}); serve it with "
                  f"kpi-forecast serve --models {args.out}")


def parse_targets(text: str) -> list[str]:
    """``--target``: one KPI column, or several separated by commas (a repository)."""
    targets = [t.strip() for t in text.split(",")]
    if not all(targets):
        raise UserError(f"--target {text!r}: KPI columns separated by commas, none empty")
    if len(set(targets)) != len(targets):
        raise UserError(f"--target {text!r}: a column named twice")
    return targets


def _train_target(args: argparse.Namespace, group: Group, target: str, out: Path,
                  started: float, max_minutes: float, stop: threading.Event) -> None:
    """Train one KPI's model into ``out`` within ``max_minutes`` from ``started``."""
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.training.distributed import aligned

    if Path(args.data).is_dir():  # a Parquet dataset: each rank reads only its files
        shard = load_panel(args.data, target, freq=args.freq, tz=args.tz,
                           shard=(group.rank, group.world))
        shard.holidays = args.holidays
        panel = aligned(shard, group)
        _train(args, group, panel, out, started, max_minutes, stop, block=panel)
    else:  # one file: every rank reads it and trains on its block of cells
        panel = load_panel(args.data, target, freq=args.freq, tz=args.tz)
        panel.holidays = args.holidays
        _train(args, group, panel, out, started, max_minutes, stop)


def _train(args: argparse.Namespace, group: Group, panel: Panel, out: Path, started: float,
           max_minutes: float, stop: threading.Event, block: Panel | None = None) -> None:
    from kpi_forecast.model.config import ModelConfig
    from kpi_forecast.training.fit import fit
    from kpi_forecast.training.train import TrainConfig

    step = panel.step
    horizon = parse_steps(args.horizon or DEFAULT_HORIZON, step, "--horizon")
    why = ""
    if args.context:
        context = parse_steps(args.context, step, "--context")
    else:
        context, why = default_context(panel, horizon, TrainConfig.validation_fraction)
        log.info("%s", why)
    try:
        model_cfg = ModelConfig(context=context, horizon=horizon, quantiles=args.quantiles,
                                attention=args.attention, dropout=args.dropout,
                                patch_len=args.patch_len)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    log.info("%d tokens per context window, %d step(s) each; %s", model_cfg.n_patches,
             model_cfg.patch_len, model_cfg.describe_skip())
    train_cfg = TrainConfig(max_minutes=max_minutes, max_epochs=args.max_epochs,
                            batch_size=args.batch_size, seed=args.seed, device=args.device)
    fitted = fit(panel, out, model_cfg, train_cfg, str(args.data),
                 progress=not args.quiet, group=group, block=block, started=started,
                 stop=stop, gpu_graph=args.gpu_graph, context_choice=why)
    if fitted is None:  # not rank 0: rank 0 writes and reports
        return
    meta, validation = fitted
    print(validation.overall.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"model: {out / 'model.onnx'} (version {meta.model_version})")
    print(f"report: {out / 'report.md'}")


def cmd_export(args: argparse.Namespace) -> None:
    from kpi_forecast.training.fit import export_model

    print(f"model: {export_model(Path(args.model))}")


def add_commands(commands: argparse._SubParsersAction) -> None:
    """train and export."""
    train = commands.add_parser(
        "train", help="train a forecaster and export it",
        description="Train a forecaster and export it. Runs unchanged under torchrun "
        "(torchrun --nproc-per-node N -m kpi_forecast.cli train ...): data-parallel, each rank "
        "training on its own block of cells, rank 0 writing; a rerun resumes from the last "
        "epoch's checkpoint in --out.")
    train.add_argument("--data", required=True,
                       help="long CSV, CSV.gz or Parquet file, a Parquet dataset directory, or "
                       "an InfluxDB measurement: influx://HOST:PORT/DATABASE?measurement=M&cell=C")
    train.add_argument("--target", required=True,
                       help="KPI column to forecast; several, separated by commas (a,b,c), "
                       "train one model each into a repository")
    train.add_argument("--out", required=True,
                       help="model directory to write; with several targets, the repository: "
                       "a model directory per target, named by it")
    train.add_argument("--freq", help="grid step, e.g. 1h or 15min (inferred when absent)")
    train.add_argument("--tz", help="zone of the calendar features (default: from the data)")
    train.add_argument("--holidays", type=holiday_calendar, default="", metavar="CODE",
                       help="public holidays of the cells' country as a calendar feature: an "
                       "ISO 3166 code such as FR, or with a subdivision such as IT-MI "
                       "(default: none)")
    train.add_argument("--context", help="input steps or duration (default 14D, else 7D)")
    train.add_argument("--horizon", help=f"forecast steps or duration (default {DEFAULT_HORIZON})")
    train.add_argument("--max-minutes", type=float, default=5.0,
                       help="time budget of the whole command: reading, training, export "
                            "and report (default 5), shared by the targets")
    train.add_argument("--max-epochs", type=int, default=60)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--batch-size", type=positive_int, default=0,
                       help="windows per step, across all ranks under torchrun (default: 256, "
                            "halved down to 32 while a pass over the data is under 100 steps)")
    train.add_argument("--dropout", type=float, default=0.1, help="default 0.1")
    train.add_argument("--quantiles", type=parse_quantiles, default=[0.1, 0.5, 0.9])
    train.add_argument("--attention", choices=["fused", "math"], default="fused")
    train.add_argument("--patch-len", type=positive_int, default=0, metavar="STEPS",
                       help="steps per token (default: about 14 tokens per context window). "
                       "Long-context mode: a few steps, or 1 for one token per step, where "
                       "attention dominates the cost and a GPU's fused kernels pay")
    train.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                       help="where to train (default: cuda when torch sees a GPU)")
    train.add_argument("--no-gpu-graph", dest="gpu_graph", action="store_false",
                       help="write only the float32 graph, not model.fp16.onnx for CUDA "
                       "(a model for CPU nodes only; the export takes half the time)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=cmd_train)

    export = commands.add_parser(
        "export", help="(re-)export model.onnx, model.int8.onnx and model.fp16.onnx "
        "from the weights")
    export.add_argument("--model", required=True)
    export.set_defaults(run=cmd_export)

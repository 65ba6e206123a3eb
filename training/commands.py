"""The training and evaluation commands: train, export, backtest, predict, and the cluster's
distributed training job (`kpi-forecast k8s train-job`).

Torch is imported only inside train and export: backtest and predict run on ONNX Runtime with
the `serve` extra alone, and the parser itself needs neither.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from kpi_forecast.cli.cluster import kubernetes_client
from kpi_forecast.cli.signals import stop_on_signals
from kpi_forecast.model.errors import UserError
from kpi_forecast.training.defaults import DEFAULT_HORIZON, default_context

if TYPE_CHECKING:
    from kpi_forecast.data.panel import Panel
    from kpi_forecast.model.runtime import OnnxForecaster
    from kpi_forecast.training.distributed import Group

log = logging.getLogger(__name__)


def parse_steps(text: str, step: pd.Timedelta, option: str) -> int:
    """A count of steps ("336") or a duration ("14D", "24h") converted to steps."""
    if text.isdigit():
        steps = int(text)
    else:
        try:
            duration = pd.Timedelta(text)
        except ValueError as exc:
            raise UserError(f"{option} {text!r}: neither a step count nor a duration") from exc
        steps = duration // step
        if steps * step != duration:
            raise UserError(f"{option} {text!r}: not a whole number of {step} steps")
    if steps < 1:
        raise UserError(f"{option} {text!r}: must be at least one step")
    return steps


def holiday_calendar(text: str) -> str:
    from kpi_forecast.model.features import check_holidays

    try:
        return check_holidays(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parse_quantiles(text: str) -> list[float]:
    try:
        return [float(q) for q in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from exc


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a whole number >= 1: {text}")
    return int(text)


def non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a whole number >= 0: {text}")
    return int(text)


def windows_or_auto(text: str) -> int | str:
    return text if text == "auto" else non_negative_int(text)


def cmd_train(args: argparse.Namespace) -> None:
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.training.device import resolve_device
    from kpi_forecast.training.distributed import aligned, join

    started = time.monotonic()  # --max-minutes counts from here: reading the data is in it
    # Under torchrun this process is one rank of several; alone it is the only one.
    group = join(resolve_device(args.device))
    if not group.main:
        logging.getLogger().setLevel(logging.WARNING)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(group.close)
        stop = cleanup.enter_context(stop_on_signals(
            "stopping after the step under way and writing the model so far"))
        if Path(args.data).is_dir():  # a Parquet dataset: each rank reads only its files
            shard = load_panel(args.data, args.target, freq=args.freq, tz=args.tz,
                               shard=(group.rank, group.world))
            shard.holidays = args.holidays
            panel = aligned(shard, group)
            _train(args, group, panel, started, stop, block=panel)
        else:  # one file: every rank reads it and trains on its block of cells
            panel = load_panel(args.data, args.target, freq=args.freq, tz=args.tz)
            panel.holidays = args.holidays
            _train(args, group, panel, started, stop)


def _train(args: argparse.Namespace, group: Group, panel: Panel, started: float,
           stop: threading.Event, block: Panel | None = None) -> None:
    from kpi_forecast.model.config import ModelConfig
    from kpi_forecast.training.fit import fit
    from kpi_forecast.training.train import TrainConfig

    step = panel.step
    horizon = parse_steps(args.horizon or DEFAULT_HORIZON, step, "--horizon")
    if args.context:
        context = parse_steps(args.context, step, "--context")
    else:
        context, why = default_context(panel, horizon, TrainConfig.validation_fraction)
        log.info("%s", why)
    try:
        model_cfg = ModelConfig(context=context, horizon=horizon, quantiles=args.quantiles,
                                attention=args.attention, dropout=args.dropout)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    log.info("%s", model_cfg.describe_skip())
    train_cfg = TrainConfig(max_minutes=args.max_minutes, max_epochs=args.max_epochs,
                            batch_size=args.batch_size, seed=args.seed, device=args.device)
    fitted = fit(panel, Path(args.out), model_cfg, train_cfg, str(args.data),
                 progress=not args.quiet, group=group, block=block, started=started,
                 stop=stop)
    if fitted is None:  # not rank 0: rank 0 writes and reports
        return
    meta, validation = fitted
    print(validation.overall.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"model: {Path(args.out) / 'model.onnx'} (version {meta.model_version})")
    print(f"report: {Path(args.out) / 'report.md'}")


def cmd_export(args: argparse.Namespace) -> None:
    from kpi_forecast.training.fit import export_model

    print(f"model: {export_model(Path(args.model))}")


def load_forecaster(args: argparse.Namespace) -> OnnxForecaster:
    from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions

    options = RuntimeOptions(provider=args.provider, intra_op_threads=args.threads)
    forecaster = OnnxForecaster(args.model, options)
    log.info("onnxruntime %s on %s", forecaster.describe()["onnxruntime"], forecaster.provider)
    return forecaster


def cmd_backtest(args: argparse.Namespace) -> None:
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.training.backtest import backtest

    forecaster = load_forecaster(args)
    meta = forecaster.metadata
    panel = load_panel(args.data, meta.target, freq=args.freq or meta.freq, tz=meta.calendar_tz)
    step = parse_steps(args.step, panel.step, "--step") if args.step else None
    result = backtest(forecaster, panel, folds=args.folds, step=step,
                      recalibrate_windows=recalibrate_windows(args, forecaster))
    out = Path(args.out or Path(args.model) / "backtest")
    out.mkdir(parents=True, exist_ok=True)
    result.overall.to_csv(out / "overall.csv", index_label="model")
    result.per_cell.to_csv(out / "per_cell.csv", index=False)
    print(f"{len(result.origins)} folds, origins {result.origins[0]} .. {result.origins[-1]}")
    print(f"last fold's quantiles {result.recalibrations[-1].describe(meta.quantile_names())}")
    print(result.overall.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"csv: {out / 'overall.csv'}, {out / 'per_cell.csv'}")


def cmd_predict(args: argparse.Namespace) -> None:
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.training.predict import predict_frame

    forecaster = load_forecaster(args)
    meta = forecaster.metadata
    panel = load_panel(args.data, meta.target, freq=args.freq or meta.freq, tz=meta.calendar_tz)
    frame, recalibrated = predict_frame(forecaster, panel, recalibrate_windows(args, forecaster))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    print(f"{len(frame)} forecasts for {panel.n_cells} cells: {args.out}")
    print(f"quantiles {recalibrated.describe(meta.quantile_names())}")


def recalibrate_windows(args: argparse.Namespace, forecaster: OnnxForecaster) -> int:
    from kpi_forecast.model.recalibration import week_of_windows

    if args.recalibrate == "auto":
        return week_of_windows(forecaster.metadata.horizon, forecaster.step)
    return args.recalibrate


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


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto",
                        help="ONNX Runtime execution provider (auto: CUDA when available)")
    parser.add_argument("--threads", type=non_negative_int, default=0,
                        help="ONNX Runtime intra-op threads per call (default 0: one, and a large "
                        "batch split across the CPUs)")


def add_recalibration_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recalibrate", type=windows_or_auto, default="auto", metavar="N",
                        help="recalibrate the quantiles on the last N horizons of each history "
                        "before forecasting (default auto: the horizons that cover a week; 0: "
                        "keep the model's own calibration)")


def add_commands(commands: argparse._SubParsersAction) -> None:
    """train, export, backtest and predict."""
    train = commands.add_parser(
        "train", help="train a forecaster and export it",
        description="Train a forecaster and export it. Runs unchanged under torchrun "
        "(torchrun --nproc-per-node N -m kpi_forecast.cli train ...): data-parallel, each rank "
        "training on its own block of cells, rank 0 writing; a rerun resumes from the last "
        "epoch's checkpoint in --out.")
    train.add_argument("--data", required=True,
                       help="long CSV, CSV.gz or Parquet file, or a Parquet dataset directory")
    train.add_argument("--target", required=True, help="KPI column to forecast")
    train.add_argument("--out", required=True, help="model directory to write")
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
                            "and report (default 5)")
    train.add_argument("--max-epochs", type=int, default=60)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--batch-size", type=positive_int, default=0,
                       help="windows per step, across all ranks under torchrun (default: 256, "
                            "halved down to 32 while a pass over the data is under 100 steps)")
    train.add_argument("--dropout", type=float, default=0.1, help="default 0.1")
    train.add_argument("--quantiles", type=parse_quantiles, default=[0.1, 0.5, 0.9])
    train.add_argument("--attention", choices=["fused", "math"], default="fused")
    train.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                       help="where to train (default: cuda when torch sees a GPU)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=cmd_train)

    export = commands.add_parser("export", help="(re-)export model.onnx from the weights")
    export.add_argument("--model", required=True)
    export.set_defaults(run=cmd_export)

    bt = commands.add_parser("backtest", help="rolling-origin evaluation against baselines")
    bt.add_argument("--model", required=True)
    bt.add_argument("--data", required=True)
    bt.add_argument("--folds", type=int, default=7)
    bt.add_argument("--step", help="steps or duration between origins (default: horizon)")
    bt.add_argument("--freq")
    bt.add_argument("--out", help="folder for the CSVs (default MODEL/backtest)")
    add_runtime_options(bt)
    add_recalibration_option(bt)
    bt.set_defaults(run=cmd_backtest)

    predict = commands.add_parser("predict", help="forecast after each cell's last sample")
    predict.add_argument("--model", required=True)
    predict.add_argument("--data", required=True)
    predict.add_argument("--out", required=True, help="CSV to write")
    predict.add_argument("--freq")
    add_runtime_options(predict)
    add_recalibration_option(predict)
    predict.set_defaults(run=cmd_predict)


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

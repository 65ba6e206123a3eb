"""The evaluation commands: backtest and predict, on ONNX Runtime (the `serve` extra alone)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from kpi_forecast.training.arguments import non_negative_int, parse_steps, windows_or_auto

if TYPE_CHECKING:
    from kpi_forecast.model.runtime import OnnxForecaster

log = logging.getLogger(__name__)


def load_forecaster(model_dir: Path, args: argparse.Namespace) -> OnnxForecaster:
    from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions

    options = RuntimeOptions(provider=args.provider, intra_op_threads=args.threads)
    forecaster = OnnxForecaster(model_dir, options)
    log.info("onnxruntime %s on %s", forecaster.describe()["onnxruntime"], forecaster.provider)
    return forecaster


def cmd_backtest(args: argparse.Namespace) -> None:
    """Each model's backtest (one, or each of a repository's) into its own folder."""
    from kpi_forecast.model.artifact import models_at

    models = models_at(args.model)
    for name, model_dir in models.items():
        out = (Path(args.out) / name if args.out and len(models) > 1
               else Path(args.out or model_dir / "backtest"))
        if len(models) > 1:
            print(f"{name}:")
        _backtest(load_forecaster(model_dir, args), args, out)


def _backtest(forecaster: OnnxForecaster, args: argparse.Namespace, out: Path) -> None:
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.training.backtest import backtest

    meta = forecaster.metadata
    panel = load_panel(args.data, meta.target, freq=args.freq or meta.freq, tz=meta.calendar_tz)
    step = parse_steps(args.step, panel.step, "--step") if args.step else None
    result = backtest(forecaster, panel, folds=args.folds, step=step,
                      recalibrate_windows=recalibrate_windows(args, forecaster))
    out.mkdir(parents=True, exist_ok=True)
    result.overall.to_csv(out / "overall.csv", index_label="model")
    result.per_cell.to_csv(out / "per_cell.csv", index=False)
    print(f"{len(result.origins)} folds, origins {result.origins[0]} .. {result.origins[-1]}")
    print(f"last fold's quantiles {result.recalibrations[-1].describe(meta.quantile_names())}")
    print(result.overall.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"csv: {out / 'overall.csv'}, {out / 'per_cell.csv'}")


def cmd_predict(args: argparse.Namespace) -> None:
    """One model's forecasts, or each of a repository's in one CSV with its KPI in ``kpi``."""
    import pandas as pd

    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.model.artifact import models_at
    from kpi_forecast.training.predict import predict_frame

    models = models_at(args.model)
    frames = []
    for model_dir in models.values():
        forecaster = load_forecaster(model_dir, args)
        meta = forecaster.metadata
        panel = load_panel(args.data, meta.target, freq=args.freq or meta.freq,
                           tz=meta.calendar_tz)
        frame, recalibrated = predict_frame(forecaster, panel,
                                            recalibrate_windows(args, forecaster))
        if len(models) > 1:
            frame.insert(0, "kpi", meta.target)
        frames.append(frame)
        print(f"{meta.target}: {len(frame)} forecasts for {panel.n_cells} cells, quantiles "
              f"{recalibrated.describe(meta.quantile_names())}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_csv(args.out, index=False)
    print(f"forecasts: {args.out}")


def recalibrate_windows(args: argparse.Namespace, forecaster: OnnxForecaster) -> int:
    from kpi_forecast.model.recalibration import week_of_windows

    if args.recalibrate == "auto":
        return week_of_windows(forecaster.metadata.horizon, forecaster.step)
    return args.recalibrate


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
    """backtest and predict."""
    bt = commands.add_parser("backtest", help="rolling-origin evaluation against baselines")
    bt.add_argument("--model", required=True,
                    help="model directory, or a repository: each of its models is backtested")
    bt.add_argument("--data", required=True, help="as train's --data")
    bt.add_argument("--folds", type=int, default=7)
    bt.add_argument("--step", help="steps or duration between origins (default: horizon)")
    bt.add_argument("--freq")
    bt.add_argument("--out", help="folder for the CSVs (default MODEL/backtest; for a "
                    "repository, a folder per model)")
    add_runtime_options(bt)
    add_recalibration_option(bt)
    bt.set_defaults(run=cmd_backtest)

    predict = commands.add_parser("predict", help="forecast after each cell's last sample")
    predict.add_argument("--model", required=True,
                         help="model directory, or a repository: every model's forecasts, "
                         "with a kpi column")
    predict.add_argument("--data", required=True, help="as train's --data")
    predict.add_argument("--out", required=True, help="CSV to write")
    predict.add_argument("--freq")
    add_runtime_options(predict)
    add_recalibration_option(predict)
    predict.set_defaults(run=cmd_predict)



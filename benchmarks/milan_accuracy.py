"""Accuracy on the real Milan traffic data (../shared/data/milan), in two protocols.

1. Day-ahead: horizon 24 h, context two weeks, trained on everything before the last 14 days,
   then origins every 24 h over those 14 days.
2. The survey paper's protocol: train on the first 55 days, forecast the following 7 days
   (horizon 168 h) from one origin.

Writes its section of docs/benchmarks.md and the raw CSVs in docs/benchmarks/.

    python -m benchmarks.milan_accuracy [--minutes 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import RAW, HeldOut, held_out, machine, write_section
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.training.backtest import MODEL_NAME
from kpi_forecast.training.metrics import coverage
from kpi_forecast.training.train import TrainConfig

CALENDAR_TZ = "+01:00"  # the Milan export's local offset (CET)
HOLIDAYS = "IT-MI"  # Italy's public holidays and Milan's Saint Ambrose (7 December)
MILAN = Path(__file__).resolve().parents[2] / "shared/data/milan/milan_hourly.csv.gz"


def run_protocol(name: str, train_days: int, horizon: int, folds: int, minutes: float,
                 seed: int) -> HeldOut:
    panel = load_panel(MILAN, "traffic")
    panel.holidays = HOLIDAYS
    evaluation = held_out(
        panel, train_days * 24, ModelConfig(context=14 * 24, horizon=horizon),
        TrainConfig(max_minutes=minutes, seed=seed), folds=folds, step=24, source=str(MILAN),
    )
    RAW.mkdir(parents=True, exist_ok=True)
    evaluation.table.to_csv(RAW / f"milan_{name}.csv", index_label="model")
    evaluation.result.per_cell.to_csv(RAW / f"milan_{name}_per_cell.csv", index=False)
    return evaluation


def per_origin(evaluation: HeldOut) -> pd.DataFrame:
    """MAE of every model for each forecast day, ours over weekly naive, and our P10-P90
    coverage (the default quantiles: the first and last level)."""
    result = evaluation.result
    observed = ~np.isnan(result.actual)
    rows = {}
    for fold, origin in enumerate(result.origins):
        mask = observed[fold]
        rows[origin.tz_convert(CALENDAR_TZ).strftime("%a %d %b")] = {
            name: np.abs(points[fold] - result.actual[fold])[mask].mean()
            for name, points in result.points.items()
        }
    table = pd.DataFrame(rows).T
    table["ours / weekly naive"] = table[MODEL_NAME] / table["seasonal_naive_week"]
    table["our coverage"] = [
        coverage(result.actual[fold], result.quantiles[fold, ..., 0],
                 result.quantiles[fold, ..., -1])
        for fold in range(len(result.origins))
    ]
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not MILAN.is_file():
        print(f"skipped: {MILAN} not present")
        return 0
    command = f"python -m benchmarks.milan_accuracy --minutes {args.minutes:g} --seed {args.seed}"
    lines = [
        "## Accuracy on the Milan data",
        "",
        f"Measured {dt.date.today()} on {machine()}, with `{command}` (part of `make bench`).",
        "Coverage is P10-P90; `train_s` is our training wall time (the baselines need none).",
        f"Our model is told Milan's public holidays (`--holidays {HOLIDAYS}`); the peer",
        "comparison below has it without them too (`kpi-forecast-no-holidays`).",
        "",
    ]
    protocols = [
        ("day_ahead", "Day-ahead: horizon 24 h, origins every 24 h over the last 14 days",
         62 - 14, 24, 14,
         ["mae", "rmse", "mase", "smape", "coverage", "pinball", "mae_vs_snaive_week", "train_s"]),
        ("survey_55_7", "Survey protocol: first 55 days -> the next 7 days (horizon 168 h)",
         55, 168, 1,
         ["mae", "mse", "rmse", "mase", "coverage", "mae_vs_snaive_week", "train_s"]),
    ]
    for name, title, train_days, horizon, folds, columns in protocols:
        evaluation = run_protocol(name, train_days, horizon, folds, args.minutes, args.seed)
        plain = evaluation.plain.overall.loc[MODEL_NAME]
        origins = evaluation.result.origins
        section_start = len(lines)
        lines += [
            f"### {title}",
            "",
            f"{len(origins)} origin(s) {origins[0]} .. {origins[-1]}; trained on the first "
            f"{train_days} days, {evaluation.training['epochs']} epochs (stopped by "
            f"{evaluation.training['stopped_by']}). On its own validation span (the last 15 % "
            f"of the training days) P10-P90 coverage was "
            f"{evaluation.validation['coverage']:.3f}. Our forecast is recalibrated on the "
            f"week before each origin (`kpi-forecast backtest`'s default); the model's own "
            f"(`--recalibrate 0`) had MAE {plain['mae']:.3f}, P10-P90 "
            f"coverage {plain['coverage']:.3f} and pinball loss "
            f"{plain['pinball']:.3f}.",
            "",
            evaluation.table[columns].to_markdown(floatfmt=".3f"),
            "",
        ]
        if folds > 1:
            days = per_origin(evaluation)
            days.to_csv(RAW / f"milan_{name}_per_day.csv", index_label="forecast day")
            lines += ["MAE per forecast day, and our P10-P90 coverage:", "",
                      days.to_markdown(floatfmt=".3f"), ""]
        print("\n".join(lines[section_start:]), flush=True)
    write_section("milan-accuracy", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

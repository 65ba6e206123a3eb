"""Accuracy on the real Milan traffic data (../shared/data/milan), day-ahead: horizon 24 h,
context two weeks, trained on everything before the last 14 days, then origins every 24 h over
those 14 days. (The survey paper's protocol, 55 days then 7, is in `benchmarks.peers`.)

Writes its section of docs/benchmarks.md and the raw CSVs in docs/benchmarks/.

    python -m benchmarks.milan_accuracy [--minutes 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import HeldOut, held_out, write_section
from benchmarks.results import RESULTS, Results
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.metrics import coverage
from kpi_forecast.training.backtest import MODEL_NAME
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
    RESULTS.mkdir(parents=True, exist_ok=True)
    evaluation.table.to_csv(RESULTS / f"milan_{name}.csv", index_label="model")
    evaluation.result.per_cell.to_csv(RESULTS / f"milan_{name}_per_cell.csv", index=False)
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


def per_day_summary(days: pd.DataFrame, csv_name: str) -> str:
    """One sentence on the per-day table: the range of ours over weekly naive, the days we
    lost, and the range of our coverage, with the CSV that holds every day."""
    ratio, cover = days["ours / weekly naive"], days["our coverage"]
    lost = ratio[ratio >= 1].index.tolist()
    return (
        f"Per forecast day, our MAE over weekly naive's ran from {ratio.min():.2f} "
        f"({ratio.idxmin()}) to {ratio.max():.2f} ({ratio.idxmax()}), below 1 on "
        f"{len(ratio) - len(lost)} of {len(ratio)} days"
        + (f" (not on {', '.join(lost)})" if lost else "")
        + f"; our P10-P90 coverage from {cover.min():.2f} to {cover.max():.2f}. Every day and "
        f"model: [`{csv_name}`](benchmarks/{csv_name})."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not MILAN.is_file():
        print(f"skipped: {MILAN} not present")
        return 0
    results = Results(
        "milan_accuracy",
        f"python -m benchmarks.milan_accuracy --minutes {args.minutes:g} --seed {args.seed}",
        "benchmarks.md", "milan-accuracy",
        tables=["milan_day_ahead", "milan_day_ahead_per_cell", "milan_day_ahead_per_day"])
    lines = [
        "## Accuracy on the Milan data, day-ahead",
        "",
        f"{results.measured} (part of `make bench`).",
        "Horizon 24 h, origins every 24 h over the last 14 days; coverage is P10-P90, "
        "`train_s` our",
        f"training wall time. Ours is told Milan's holidays (`--holidays {HOLIDAYS}`; without: the "
        "peers below).",
        "",
    ]
    train_days, horizon, folds = 62 - 14, 24, 14
    evaluation = run_protocol("day_ahead", train_days, horizon, folds, args.minutes, args.seed)
    plain = evaluation.plain.overall.loc[MODEL_NAME]
    origins = evaluation.result.origins
    days = per_origin(evaluation)
    days.to_csv(RESULTS / "milan_day_ahead_per_day.csv", index_label="forecast day")
    columns = ["mae", "rmse", "mase", "smape", "coverage", "pinball", "mae_vs_snaive_week",
               "train_s"]
    lines += [
        f"{len(origins)} origins {origins[0]} .. {origins[-1]}; trained on the first "
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
        per_day_summary(days, "milan_day_ahead_per_day.csv"),
    ]
    results.figures = {"model alone mae": plain["mae"], "model alone coverage": plain["coverage"],
                       "model alone pinball": plain["pinball"],
                       "validation coverage": evaluation.validation["coverage"],
                       "mae cut by recalibration": 1 - evaluation.table.loc[MODEL_NAME, "mae"]
                       / plain["mae"]}
    print("\n".join(lines), flush=True)
    write_section(results, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Accuracy on the real Milan traffic data (../shared/data/milan), both protocols of issue 2.

1. Day-ahead: horizon 24 h, context two weeks, trained on everything before the last 14 days,
   then origins every 24 h over those 14 days.
2. The survey paper's protocol: train on the first 55 days, forecast the following 7 days
   (horizon 168 h) from one origin.

Writes docs/benchmarks.md (the accuracy section) and docs/benchmarks/milan_*.csv.

    python -m benchmarks.milan_accuracy [--minutes 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import platform
import sys
import tempfile
from pathlib import Path

import pandas as pd

from model.config import ModelConfig
from model.runtime import OnnxForecaster
from training.backtest import MODEL_NAME, backtest
from training.fit import fit
from training.ingest import load_panel
from training.train import TrainConfig

MILAN = Path(__file__).resolve().parents[1].parent / "shared/data/milan/milan_hourly.csv.gz"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_protocol(name: str, train_days: int, horizon: int, folds: int, minutes: float,
                 seed: int) -> pd.DataFrame:
    panel = load_panel(MILAN, "traffic")
    train_steps = train_days * 24
    model_cfg = ModelConfig(context=14 * 24, horizon=horizon)
    train_cfg = TrainConfig(max_minutes=minutes, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        meta, _ = fit(panel.slice_steps(train_steps), Path(tmp), model_cfg, train_cfg,
                      str(MILAN), progress=False)
        result = backtest(OnnxForecaster(tmp), panel, folds=folds, step=24)
    table = result.overall.copy()
    table["mse"] = table["rmse"] ** 2
    table["mae_vs_snaive_week"] = table["mae"] / table.loc["seasonal_naive_week", "mae"]
    table["train_s"] = [meta.training["seconds"] if m == MODEL_NAME else 0.0 for m in table.index]
    table.attrs["origins"] = (result.origins[0], result.origins[-1], len(result.origins))
    table.attrs["epochs"] = (meta.training["epochs"], meta.training["stopped_by"])
    DOCS.joinpath("benchmarks").mkdir(parents=True, exist_ok=True)
    table.to_csv(DOCS / "benchmarks" / f"milan_{name}.csv", index_label="model")
    result.per_cell.to_csv(DOCS / "benchmarks" / f"milan_{name}_per_cell.csv", index=False)
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
    day_ahead = run_protocol("day_ahead", 62 - 14, 24, 14, args.minutes, args.seed)
    survey = run_protocol("survey_55_7", 55, 168, 1, args.minutes, args.seed)
    command = f"python -m benchmarks.milan_accuracy --minutes {args.minutes:g} --seed {args.seed}"
    lines = [
        "## Accuracy on the Milan data (issue 2)",
        "",
        f"Measured {dt.date.today()} on {os.cpu_count()} cores ({cpu_model()}), "
        f"Python {platform.python_version()}, with `{command}` (`make bench`).",
        "",
    ]
    for title, table, columns in (
        ("Day-ahead: horizon 24 h, origins every 24 h over the last 14 days", day_ahead,
         ["mae", "rmse", "mase", "smape", "coverage", "pinball", "mae_vs_snaive_week",
          "train_s"]),
        ("Survey protocol: first 55 days -> next 7 days (horizon 168 h)", survey,
         ["mae", "mse", "rmse", "mase", "coverage", "mae_vs_snaive_week", "train_s"]),
    ):
        first, last, n = table.attrs["origins"]
        epochs, stopped = table.attrs["epochs"]
        lines += [
            f"### {title}",
            "",
            f"{n} origin(s) {first} .. {last}; our model trained {epochs} epochs "
            f"(stopped by {stopped}). Coverage is P10-P90.",
            "",
            table[columns].to_markdown(floatfmt=".3f"),
            "",
        ]
    section = "\n".join(lines)
    print(section)
    path = DOCS / "benchmarks.md"
    marker_start, marker_end = "<!-- milan-accuracy:start -->", "<!-- milan-accuracy:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    block = f"{marker_start}\n{section}\n{marker_end}"
    if marker_start in text:
        head, rest = text.split(marker_start, 1)
        text = head + block + rest.split(marker_end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

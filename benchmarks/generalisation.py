"""Do the defaults generalise? Synthetic variants trained with no hand-tuning (issue 2).

Each case trains with the CLI defaults (context 14 days, horizon 1 day) on all but the last
7 days, then forecasts those 7 days from daily origins; the table compares MAE with weekly
seasonal naive on the same points.

    python -m benchmarks.generalisation [--minutes 1.5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import RAW, held_out, machine, write_section
from data.synthetic import generate
from model.config import ModelConfig
from training.ingest import load_panel
from training.train import TrainConfig


@dataclass
class Case:
    name: str
    target: str
    freq: str = "1h"
    cells: int = 24
    long_gaps: bool = False


CASES = [
    Case("PRB utilisation, hourly", "prb_util"),
    Case("active UEs, 15-minute", "active_ues", freq="15min"),
    Case("traffic, half-hourly", "traffic_mb", freq="30min"),
    Case("DL throughput, single series", "dl_throughput_mbps", cells=1),
    Case("traffic, long gaps (5-day holes in half the cells)", "traffic_mb", long_gaps=True),
]


def make_frame(case: Case, seed: int) -> pd.DataFrame:
    frame = generate(n_cells=case.cells, days=56, freq=case.freq, seed=seed, start="2024-09-02")
    if case.long_gaps:
        rng = np.random.default_rng(seed)
        stamps = frame["timestamp"]
        cells = sorted(frame["cell_id"].unique())[::2]
        holes = pd.Series(False, index=frame.index)
        for cell in cells:
            start = stamps.min() + pd.Timedelta(days=int(rng.integers(3, 40)))
            holes |= (frame["cell_id"] == cell) & stamps.between(start, start + pd.Timedelta("5D"))
        frame = frame[~holes]
    return frame


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "data.parquet"
            make_frame(case, args.seed).to_parquet(path)
            panel = load_panel(path, case.target)
        day, week = panel.steps_per("1D"), panel.steps_per("7D")
        evaluation = held_out(
            panel, panel.n_steps - week, ModelConfig(context=2 * week, horizon=day),
            TrainConfig(max_minutes=args.minutes, seed=args.seed), folds=7, step=day,
            source=case.name,
        )
        table = evaluation.table
        rows.append({
            "case": case.name, "cells": panel.n_cells, "freq": panel.freq,
            "MAE": table.loc["kpi-forecast", "mae"],
            "weekly naive MAE": table.loc["seasonal_naive_week", "mae"],
            "MAE / weekly naive": table.loc["kpi-forecast", "mae_vs_snaive_week"],
            "MAE / weekly naive, not recalibrated": (evaluation.unrecalibrated["mae"]
                                                     / table.loc["seasonal_naive_week", "mae"]),
            "coverage P10-P90": table.loc["kpi-forecast", "coverage"],
            "coverage, not recalibrated": evaluation.unrecalibrated["coverage"],
            "epochs": evaluation.training["epochs"],
        })
        print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    RAW.mkdir(parents=True, exist_ok=True)
    frame.to_csv(RAW / "generalisation.csv", index=False)
    command = f"python -m benchmarks.generalisation --minutes {args.minutes:g} --seed {args.seed}"
    section = "\n".join([
        "## Defaults on other data shapes (issue 2)",
        "",
        f"Measured {dt.date.today()} on {machine()}, with `{command}`. Synthetic data from "
        "`data/synthetic.py` (56 days from 2024-09-02, seed 0); defaults only: context 14 days, "
        "horizon 1 day; the last 7 days held out, daily origins. The forecast is recalibrated "
        "on the week before each origin (`kpi-forecast backtest`'s default); the columns "
        "marked 'not recalibrated' are the model's own forecast (`--recalibrate 0`).",
        "",
        frame.to_markdown(index=False, floatfmt=".3f"),
        "",
    ])
    write_section("generalisation", section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

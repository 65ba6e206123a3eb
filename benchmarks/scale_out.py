"""Scale-out figures on this machine: reading a partitioned Parquet dataset rank by
rank, and data-parallel training throughput for 1 and 2 gloo ranks.

The dataset is 10^4 synthetic cells x 8 weeks of hourly KPIs (13 million rows) in 32 files,
written once into artifacts/ (``data.synthetic.write_dataset``). Each measurement runs in its
own process, so its peak memory is its own.

    python -m benchmarks.scale_out [--cells 10000] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks.common import write_section
from benchmarks.results import RESULTS, Results
from kpi_forecast.data.synthetic import write_dataset

ROOT = Path(__file__).resolve().parents[1]
TARGET = "traffic_mb"
FILES = 32
DAYS = 56

# One rank's read, in a fresh process: rows, cells, seconds and the process's peak memory.
LOAD_ONE = """
import json, resource, sys, time
from kpi_forecast.data.ingest import load_panel
started = time.perf_counter()
panel = load_panel(sys.argv[1], "traffic_mb", shard=(0, int(sys.argv[2])))
seconds = time.perf_counter() - started
print(json.dumps({"cells": panel.n_cells, "steps": panel.n_steps, "seconds": seconds,
                  "observed": int((panel.values == panel.values).sum()),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def dataset(cells: int) -> Path:
    directory = ROOT / "artifacts" / f"bench-scale-{cells}-cells"
    if not (directory / "_complete").exists():  # "_" files are not part of the dataset
        rows = write_dataset(directory, cells, FILES, days=DAYS, seed=0)
        (directory / "_complete").write_text(f"{rows}\n")
    return directory


def loading(directory: Path) -> pd.DataFrame:
    rows = []
    for ranks in (1, 2, 4, 8):
        done = subprocess.run([sys.executable, "-c", LOAD_ONE, str(directory), str(ranks)],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append({
            "ranks": ranks, "cells per rank": result["cells"],
            "rows per rank (observed)": result["observed"],
            "read s": result["seconds"],
            "rows/s per rank": result["observed"] / result["seconds"],
            "peak MB per rank": result["peak_mb"],
        })
    return pd.DataFrame(rows).set_index("ranks")


def training(directory: Path, epochs: int) -> pd.DataFrame:
    rows = []
    for ranks in (1, 2):
        with tempfile.TemporaryDirectory() as out:
            command = ["-m", "kpi_forecast.cli", "train", "--data", str(directory), "--target",
                       TARGET, "--out", out, "--context", "14D", "--horizon", "1D",
                       "--max-epochs", str(epochs), "--quiet"]
            if ranks > 1:
                command = ["-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={ranks}", *command]
            # The two cores go to the one rank, or one each to two ranks.
            env = {**os.environ, "OMP_NUM_THREADS": str(2 // ranks), "GLOO_SOCKET_IFNAME": "lo"}
            subprocess.run([sys.executable, *command], cwd=ROOT, env=env, check=True,
                           capture_output=True)
            meta = json.loads((Path(out) / "metadata.json").read_text())["training"]
        rows.append({"ranks": ranks, "threads per rank": 2 // ranks, "epochs": meta["epochs"],
                     "training windows/s": meta["samples_per_second"],
                     "train s (with validation)": meta["seconds"]})
    table = pd.DataFrame(rows).set_index("ranks")
    table["speed-up"] = table["training windows/s"] / table.loc[1, "training windows/s"]
    return table


def markdown(table: pd.DataFrame) -> str:
    """Thousands separated; decimals only where a number is small enough to need them."""

    def text(value: float) -> str:
        return f"{value:,.2f}" if isinstance(value, float) and abs(value) < 100 else f"{value:,.0f}"

    return table.map(text).to_markdown(stralign="right", disable_numparse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    directory = dataset(args.cells)
    load = loading(directory)
    train = training(directory, args.epochs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    load.to_csv(RESULTS / "scale_out_loading.csv")
    train.to_csv(RESULTS / "scale_out_training.csv")
    results = Results(
        "scale_out", "python -m benchmarks.scale_out" + (
            f" --cells {args.cells}" if args.cells != 10_000 else "") + (
            f" --epochs {args.epochs}" if args.epochs != 3 else ""),
        "benchmarks.md", "scale-out", tables=["scale_out_loading", "scale_out_training"])
    section = "\n".join([
        "## Scale-out: partitioned data and data-parallel training",
        "",
        f"{results.measured} (part of `make bench`).",
        f"Data: {args.cells} synthetic cells x {DAYS} days hourly in {FILES} Parquet files "
        "(`cell_bucket=K/`).",
        "",
        "Reading one rank's share (`load_panel(DIR, shard=(0, n))`, a fresh process each; peak",
        "memory is the whole process's, imports included):",
        "",
        markdown(load),
        "",
        f"Training {args.epochs} epochs (`kpi-forecast train --data DIR`, under `torchrun "
        "--nproc-per-node 2` for 2 ranks, gloo on loopback). Windows per second count the "
        "global batch over the time in optimiser steps:",
        "",
        markdown(train),
        "",
    ])
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

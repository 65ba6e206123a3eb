"""Reading history from the RIC's InfluxDB against the same from Parquet: a year of hourly
history of 1,000 cells (8.76 million points), as ``kpi-forecast train --data`` reads it.

The points go into a real influxd (Debian's influxdb, 1.x) as the Viavi RIC tester's schema
has them (measurement ``CellReports``, the cell a tag, the KPI a field) and into a Parquet file
(long format). Each read is ``data.ingest.load_panel`` in a process of its own, alternating
between the two, its wall time and peak memory (max RSS) taken; for InfluxDB also the server's
CPU. Medians over the rounds.

    python -m benchmarks.influx_read [--cells 1000] [--days 365] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import write_section
from benchmarks.e2_scale import cpu_seconds
from benchmarks.results import RESULTS, Results
from tests.influx_server import influx_server, post_lines, query

DATABASE, MEASUREMENT, KPI = "RIC-Test", "CellReports", "traffic_mb"
# The peak is the process's own (VmHWM): getrusage's maxrss keeps the parent's across exec.
READ = """
import json, sys, time
from kpi_forecast.data.ingest import load_panel
started = time.perf_counter()
panel = load_panel(sys.argv[1], sys.argv[2], freq="1h")
seconds = time.perf_counter() - started
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "cells": panel.n_cells, "steps": panel.n_steps,
                  "observed": int((panel.values == panel.values).sum()),
                  "max_rss_mb": peak / 1024}))
"""


def history(cells: int, days: int) -> pd.DataFrame:
    """Hourly load with a daily and weekly shape per cell, long format."""
    steps = days * 24
    end = pd.Timestamp.now(tz="UTC").floor("D")  # the year up to today
    times = pd.date_range(end=end - pd.Timedelta("1h"), periods=steps, freq="1h")
    hour = np.arange(steps) % 24
    rng = np.random.default_rng(0)
    level = rng.uniform(100, 2000, cells)[:, None]
    shape = 1 + 0.6 * np.sin(2 * np.pi * (hour - 6) / 24)[None, :]
    values = (level * shape * rng.lognormal(0, 0.1, (cells, steps))).round(2)
    return pd.DataFrame({"timestamp": np.tile(times, cells),
                         "cell_id": np.repeat([f"cell-{c:04d}" for c in range(cells)], steps),
                         KPI: values.ravel()})


def write_influx(port: int, frame: pd.DataFrame) -> float:
    """The rows as line protocol, posted in chunks; the seconds it took."""
    query(port, f'CREATE DATABASE "{DATABASE}"')
    lines = (MEASUREMENT + ",nrCellIdentity=" + frame["cell_id"] + f" {KPI}="
             + frame[KPI].astype(str) + " "
             + frame["timestamp"].dt.as_unit("ns").astype("int64").astype(str)).to_numpy()
    started = time.perf_counter()
    post_lines(port, DATABASE, lines)
    return time.perf_counter() - started


def read(source: str) -> dict:
    done = subprocess.run([sys.executable, "-c", READ, source, KPI], capture_output=True,
                          text=True, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def influxd_pid(port: int) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"/usr/bin/influxd"):
                    return int(entry.name)
            except OSError:
                continue
    raise RuntimeError("influxd not found")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    frame = history(args.cells, args.days)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, influx_server(Path(tmp)) as port:
        parquet = Path(tmp) / "history.parquet"
        frame.to_parquet(parquet, index=False)
        write_s = write_influx(port, frame)
        source = (f"influx://127.0.0.1:{port}/{DATABASE}?measurement={MEASUREMENT}"
                  "&cell=nrCellIdentity")
        server = influxd_pid(port)
        for turn in range(args.rounds):
            order = [("influx", source), ("parquet", str(parquet))]
            for name, data in order if turn % 2 == 0 else order[::-1]:
                cpu = cpu_seconds(server)
                row = {"source": name, **read(data)}
                row["server_cpu_s"] = cpu_seconds(server) - cpu if name == "influx" else 0.0
                rows.append(row)
    table = pd.DataFrame(rows)
    shapes = table[["cells", "steps", "observed"]].drop_duplicates()
    if len(shapes) != 1:
        raise RuntimeError(f"the two sources gave different panels:\n{table}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "influx_read.csv", index=False)
    influx, parquet_row = (table[table["source"] == name].median(numeric_only=True)
                           for name in ("influx", "parquet"))
    options = {"--cells": (args.cells, 1000), "--days": (args.days, 365),
               "--rounds": (args.rounds, 3)}
    results = Results(
        "influx_read", " ".join(["python -m benchmarks.influx_read", *(
            f"{name} {value:g}" for name, (value, default) in options.items()
            if value != default)]), "benchmarks.md", "influx-read", tables=["influx_read"])
    results.figures.update({
        "influx seconds": influx["seconds"], "parquet seconds": parquet_row["seconds"],
        "influx max rss mb": influx["max_rss_mb"], "parquet max rss mb": parquet_row["max_rss_mb"],
        "time ratio": influx["seconds"] / parquet_row["seconds"],
        "points": int(len(frame)), "write seconds": write_s})
    lines = [
        "## History from InfluxDB against Parquet",
        "",
        f"{results.measured} (part of `make bench`): {args.cells:,} cells x {args.days} days "
        f"hourly ({len(frame):,} points) of one KPI, read by `load_panel` (as `train --data`) "
        f"from a real influxd 1.x (the cell a tag; written in {write_s:.0f} s) and from a "
        f"Parquet file, each read a process of its own, {args.rounds} round(s) alternating, "
        "medians.",
        "",
        "| source | read time | peak memory of the reading process | InfluxDB server CPU |",
        "|---|---|---|---|",
        f"| InfluxDB | {influx['seconds']:.1f} s | {influx['max_rss_mb']:,.0f} MB | "
        f"{influx['server_cpu_s']:.1f} s |",
        f"| Parquet | {parquet_row['seconds']:.1f} s | {parquet_row['max_rss_mb']:,.0f} MB | - |",
        "",
        f"- Reading from InfluxDB takes {influx['seconds'] / parquet_row['seconds']:.1f}x the "
        "time of the Parquet file; both gave the same panel "
        f"({int(influx['cells']):,} cells x {int(influx['steps']):,} steps, "
        f"{int(influx['observed']):,} values).",
    ]
    section = "\n".join(lines)
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

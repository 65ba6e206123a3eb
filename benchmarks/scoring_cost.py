"""Live scoring on against off, side by side: what recording and scoring forecasts costs the E2
path and a single-cell forecast.

As the first phase of ``benchmarks.e2_scale``: 10^4 cells reporting every second over librmr
into one `kpi-forecast serve` replica, its history and scores in a real redis-server, all on
these cores. Its model's step is one second and its horizon 24 steps, so a scoring round (every
held cell forecast, the horizon before scored) falls every 24 seconds: thousands of times as
often as an hourly model's once a day, the worst case of what scoring takes from ingestion.
Once with ``controls.scoring`` on and once off, alternating over the rounds; during each
steady window hey asks one held cell's forecast (`GET /v1/cells/{id}/forecast`) at a steady
rate. Per configuration, the median over rounds: indications ingested per second, replica CPU
per 1,000, p99 ingest lag, scoring rounds taken, single-cell p99 and the answers that were not
200. Targets: ingestion with scoring at least 0.95x without; single-cell p99 within 1.05x.

    python -m benchmarks.scoring_cost [--cells 10000] [--seconds 60] [--rounds 1] [--rate 200]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import write_section
from benchmarks.e2_scale import Bench
from benchmarks.results import RESULTS, Results
from kpi_forecast.cli.mock_e2_node import cell_id
from tests.redis_server import redis_server
from tests.rmr_library import RMR
from tests.system_tools import system_tool

CONFIGS = {"on": True, "off": False}


def hey_p99_ms(output: str) -> tuple[float, int, int]:
    """hey's p99 (ms), the answers 200 and the others, from its report."""
    p99 = float(re.search(r"99%\s+in\s+([\d.]+)\s+secs", output)[1]) * 1000
    codes = {int(code): int(count) for code, count in
             re.findall(r"\[(\d{3})\]\s+(\d+) responses", output)}
    return p99, codes.get(200, 0), sum(codes.values()) - codes.get(200, 0)


def one(scoring: bool, cells: int, seconds: float, rate: int) -> dict:
    """One configuration's figures, from a fresh Redis, node and replica."""
    hey = system_tool("hey")
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis_port:
        bench = Bench(Path(tmp), redis_port, cells, 100, seconds)
        bench.start_node(run_s=seconds + 240)
        try:
            replica = bench.start_replica("a", scoring={"enabled": scoring})
            bench.wait_until(bench.shared_out, 120, "the replica owning every node")
            bench.wait_until(bench.outcomes_taken, 120, "every cell's subscription outcome")
            time.sleep(30)  # a horizon's history in every cell: the rounds under way
            asking = subprocess.Popen(
                [hey, "-z", f"{seconds:g}s", "-c", "4", "-q", str(rate // 4),
                 f"{replica.url}/v1/cells/{cell_id(0)}/forecast"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            before = replica.metrics()
            row = bench.steady(f"scoring {'on' if scoring else 'off'}")
            after = replica.metrics()
            output, _ = asking.communicate(timeout=seconds + 60)
        finally:
            bench.stop()
    rounds = "kpi_forecast_scoring_rounds_total|model=model|role=served"
    p99, answered, refused = hey_p99_ms(output)
    return {"scoring": scoring, "per_s": row["per_s"], "offered_per_s": row["offered_per_s"],
            "cpu_ms_per_1000": row["a_cpu_ms_per_1000"], "cpu_share": row["a_cpu_share"],
            "p99_lag_s": row["a_p99_lag_s"], "redis_cpu_share": row["redis_cpu_share"],
            "rounds": after.get(rounds, 0.0) - before.get(rounds, 0.0),
            "single_cell_p99_ms": p99, "single_cell_answered": answered,
            "single_cell_not_200": refused}


def report(table: pd.DataFrame, cells: int, seconds: float, rate: int, results: Results
           ) -> str:
    on, off = (table[table["scoring"] == flag].median(numeric_only=True) for flag in (True, False))
    ingest, p99 = on["per_s"] / off["per_s"], on["single_cell_p99_ms"] / off["single_cell_p99_ms"]
    cpu = on["cpu_ms_per_1000"] / off["cpu_ms_per_1000"]
    results.figures.update({"ingestion ratio": ingest, "single-cell p99 ratio": p99,
                            "cpu ratio": cpu, "rounds on": on["rounds"]})
    lines = [
        "## Live scoring on against off",
        "",
        f"{results.measured} (part of `make bench`): {cells:,} cells reporting every second "
        f"over librmr into one replica on redis-server, with a one-second model whose rounds "
        f"fall every 24 s; {seconds:.0f} s of steady state per configuration, "
        f"{len(table) // 2} round(s) alternating, medians; hey asks one held cell's forecast at "
        f"{rate}/s beside it.",
        "",
        "| scoring | ingested per s (offered) | replica CPU per 1,000 indications | replica "
        "CPU (cores) | p99 ingest lag | Redis CPU (cores) | scoring rounds | single-cell p99 "
        "| single-cell answers not 200 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in (("on", on), ("off", off)):
        lines.append(
            f"| {name} | {row['per_s']:,.0f} ({row['offered_per_s']:,.0f}) | "
            f"{row['cpu_ms_per_1000']:,.0f} ms | {row['cpu_share']:.2f} | "
            f"{row['p99_lag_s'] * 1000:,.0f} ms | {row['redis_cpu_share']:.2f} | "
            f"{row['rounds']:.0f} | {row['single_cell_p99_ms']:.1f} ms | "
            f"{row['single_cell_not_200']:.0f} of "
            f"{row['single_cell_answered'] + row['single_cell_not_200']:,.0f} |")
    lines += [
        "",
        f"- Ingestion with scoring on: {ingest:.2f}x the rate without (target at least 0.95x), "
        f"at {cpu:.2f}x the replica CPU per indication.",
        f"- Single-cell p99 with scoring on: {p99:.2f}x (target within 1.05x).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rate", type=int, default=200)
    args = parser.parse_args()
    if not (RMR / "lib").is_dir():
        print("scoring_cost: ../shared/rmr is absent; nothing measured")
        return 0
    rows = []
    for turn in range(args.rounds):
        order = ["on", "off"] if turn % 2 == 0 else ["off", "on"]
        rows += [one(CONFIGS[name], args.cells, args.seconds, args.rate) for name in order]
    table = pd.DataFrame(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "scoring_cost.csv", index=False)
    options = {"--cells": (args.cells, 10_000), "--seconds": (args.seconds, 60.0),
               "--rounds": (args.rounds, 1), "--rate": (args.rate, 200)}
    results = Results(
        "scoring_cost", " ".join(["python -m benchmarks.scoring_cost", *(
            f"{name} {value:g}" for name, (value, default) in options.items()
            if value != default)]), "benchmarks.md", "scoring-cost", tables=["scoring_cost"])
    section = report(table, args.cells, args.seconds, args.rate, results)
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

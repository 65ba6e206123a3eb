"""Publication on against off, side by side: what publishing each period's forecasts to the
SDL costs the E2 path.

As the first phase of ``benchmarks.e2_scale``: 10^4 cells reporting every second over librmr
into one `kpi-forecast serve` replica, its history in a real redis-server, all on these cores.
Its model's step is one second, so a period ends every second and each one publishes every
cell's forecast (one SDL write per cell, pipelined): thousands of times as often as an hourly
model's, the worst case of what publication takes from ingestion. Once with
``controls.publication.sdl`` on and once off, alternating over the rounds. Per configuration,
the median over rounds: indications ingested per second, replica CPU per 1,000, p99 ingest lag,
Redis CPU, forecasts published per second and SDL writes per forecast. Target: ingestion with
publication at least 0.9x without.

    python -m benchmarks.publication_cost [--cells 10000] [--seconds 60] [--rounds 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import write_section
from benchmarks.e2_scale import Bench
from benchmarks.results import RESULTS, Results
from tests.redis_server import redis_server
from tests.rmr_library import RMR

CONFIGS = {"on": True, "off": False}
NAMESPACE = "kpi-forecast-forecasts"


def one(publication: bool, cells: int, seconds: float) -> dict:
    """One configuration's figures, from a fresh Redis, node and replica."""
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis_port:
        bench = Bench(Path(tmp), redis_port, cells, 100, seconds)
        bench.start_node(run_s=seconds + 240)
        try:
            replica = bench.start_replica("a", scoring={"enabled": False}, publication={
                "sdl": {"enabled": publication, "namespace": NAMESPACE}})
            bench.wait_until(bench.shared_out, 120, "the replica owning every node")
            bench.wait_until(bench.outcomes_taken, 120, "every cell's subscription outcome")
            time.sleep(10)
            before, sets_before = replica.metrics(), bench.redis.info("commandstats").get(
                "cmdstat_set", {"calls": 0})["calls"]
            row = bench.steady(f"publication {'on' if publication else 'off'}")
            after, sets_after = replica.metrics(), bench.redis.info("commandstats").get(
                "cmdstat_set", {"calls": 0})["calls"]
            held = len(bench.redis.keys(f"{{{NAMESPACE}}},*")) if publication else 0
        finally:
            bench.stop()
    published = "kpi_forecast_publication_forecasts_total|destination=sdl|model=model"
    failed = "kpi_forecast_publication_failures_total|destination=sdl|model=model"
    count = after.get(published, 0.0) - before.get(published, 0.0)
    return {"publication": publication, "per_s": row["per_s"],
            "offered_per_s": row["offered_per_s"], "cpu_ms_per_1000": row["a_cpu_ms_per_1000"],
            "cpu_share": row["a_cpu_share"], "p99_lag_s": row["a_p99_lag_s"],
            "redis_cpu_share": row["redis_cpu_share"],
            "published_per_s": count / row["seconds"],
            "not_published": after.get(failed, 0.0) - before.get(failed, 0.0),
            "sdl_writes_per_forecast": (sets_after - sets_before) / count if count else 0.0,
            "forecasts_held": held,
            "round_s": after.get("kpi_forecast_publication_round_duration_seconds|model=model",
                                 0.0)}


def report(table: pd.DataFrame, cells: int, seconds: float, results: Results) -> str:
    on, off = (table[table["publication"] == flag].median(numeric_only=True)
               for flag in (True, False))
    ingest, cpu = on["per_s"] / off["per_s"], on["cpu_ms_per_1000"] / off["cpu_ms_per_1000"]
    results.figures.update({"ingestion ratio": ingest, "cpu ratio": cpu,
                            "published per s": on["published_per_s"],
                            "sdl writes per forecast": on["sdl_writes_per_forecast"],
                            "round s": on["round_s"]})
    lines = [
        "## Publication on against off",
        "",
        f"{results.measured} (part of `make bench`): {cells:,} cells reporting every second "
        f"over librmr into one replica on redis-server, with a one-second model: a period ends "
        f"every second and publishes every cell's forecast to the SDL; {seconds:.0f} s of "
        f"steady state per configuration, {len(table) // 2} round(s) alternating, medians.",
        "",
        "| publication | ingested per s (offered) | replica CPU per 1,000 indications | replica "
        "CPU (cores) | p99 ingest lag | Redis CPU (cores) | forecasts published per s | SDL "
        "writes per forecast | last round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in (("on", on), ("off", off)):
        lines.append(
            f"| {name} | {row['per_s']:,.0f} ({row['offered_per_s']:,.0f}) | "
            f"{row['cpu_ms_per_1000']:,.0f} ms | {row['cpu_share']:.2f} | "
            f"{row['p99_lag_s'] * 1000:,.0f} ms | {row['redis_cpu_share']:.2f} | "
            f"{row['published_per_s']:,.0f} | {row['sdl_writes_per_forecast']:.2f} | "
            f"{row['round_s']:.2f} s |")
    lines += [
        "",
        f"- Ingestion with publication on: {ingest:.2f}x the rate without (target at least "
        f"0.9x), at {cpu:.2f}x the replica CPU per indication.",
        f"- {on['published_per_s']:,.0f} forecasts published a second, "
        f"{on['sdl_writes_per_forecast']:.2f} SDL writes each (one SET per cell and period, "
        f"pipelined), {on['not_published']:.0f} not published.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if not (RMR / "lib").is_dir():
        print("publication_cost: ../shared/rmr is absent; nothing measured")
        return 0
    rows = []
    for turn in range(args.rounds):
        order = ["on", "off"] if turn % 2 == 0 else ["off", "on"]
        rows += [one(CONFIGS[name], args.cells, args.seconds) for name in order]
    table = pd.DataFrame(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "publication_cost.csv", index=False)
    options = {"--cells": (args.cells, 10_000), "--seconds": (args.seconds, 60.0),
               "--rounds": (args.rounds, 1)}
    results = Results(
        "publication_cost", " ".join(["python -m benchmarks.publication_cost", *(
            f"{name} {value:g}" for name, (value, default) in options.items()
            if value != default)]), "benchmarks.md", "publication-cost",
        tables=["publication_cost"])
    section = report(table, args.cells, args.seconds, results)
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

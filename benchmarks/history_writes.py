"""Redis's CPU per report the shared history writes: the store's write script against the
fewest commands any layout with a key per cell can make for a report.

The E2 path's share of Redis is the write script (`xapp/store/sdl.py`): a report of a cell's
next step costs it three commands (the ring's header read, the step's record written, the
header's newest slot written). A layout that keeps one key per cell (a cell read with one GET)
and keeps a repeated report once must at least read what the report's step holds and write it
back: two commands. On one redis-server, side by side in rounds, each on cells of its own
that the store made:

- the store's write (`RedisCellHistory.put_checked`, as E2 ingestion calls it): every cell's
  next step, ``--batch`` cells per call;
- two commands a report: a script given the same keys and argument by the same call that
  reads each report's step record (GETRANGE) and writes it (SETRANGE), and nothing else;
- one command a report: the write alone, which no layout that keeps a report once can do;
- no command: the script's call and the parsing of its argument alone.

Redis's CPU is read from /proc (its process, every thread) around each phase; its commands
from `INFO stats`.

    python -m benchmarks.history_writes [--cells 3000] [--steps 60] [--batch 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import redis.asyncio as aioredis

from benchmarks.common import write_section
from benchmarks.e2_scale import cpu_seconds
from benchmarks.results import RESULTS, Results
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from tests.redis_server import redis_server

LENGTH = 672  # the default historyLength: four weeks of hourly steps
STEP_NS = 3_600 * 10**9
FIRST_SLOT = 470_000  # an hour of 2023, as the slot of each cell's first report

# The floor scripts take the store's own call (KEYS: the two sets, then each cell's ring;
# ARGV[3] the ring length, ARGV[5] per cell its count of reports, then each report's slot, part
# and value as doubles) and answer as it does: per cell, the reports taken.
_EACH_REPORT = """
local length, reports = tonumber(ARGV[3]), ARGV[5]
local results, at = {}, 1
for k = 3, #KEYS do
  local count
  count, at = struct.unpack('<d', reports, at)
  for _ = 1, count do
    local slot, part, value
    slot, part, value, at = struct.unpack('<ddd', reports, at)
    local where = 16 + (slot % length) * 16
    BODY
  end
  results[k - 2] = count
end
return results
"""
FLOORS = {
    "two commands a report (read the step, write it)": (
        "redis.call('GETRANGE', KEYS[k], where, where + 15)\n"
        "    redis.call('SETRANGE', KEYS[k], where, struct.pack('<di4i4', value, 1, 0))"),
    "one command a report (write the step)": (
        "redis.call('SETRANGE', KEYS[k], where, struct.pack('<di4i4', value, 1, 0))"),
    "no command (the call and its argument)": "",
}
STORE = "the store's write script"


async def stores(port: int, cells: int) -> dict[str, RedisCellHistory]:
    """One store per phase, each with KPI keys of its own, every cell's ring made by a first
    report; the floors' stores call their script in place of the write script."""
    client = aioredis.Redis(port=port)
    made = {}
    for number, name in enumerate([STORE, *FLOORS]):
        store = RedisCellHistory(client, "bench", "1h", LENGTH, max_cells=cells,
                                 kpi=f"phase{number}")
        await store.put_checked([(f"cell-{c}", [(FIRST_SLOT * STEP_NS, 1.0)])
                                 for c in range(cells)])
        if name in FLOORS:  # the same call, its Lua replaced, loaded before it is timed
            script = _EACH_REPORT.replace("BODY", FLOORS[name])
            store._script = client.register_script(script)
            await client.script_load(script)
        made[name] = store
    return made


async def phase(store: RedisCellHistory, client: aioredis.Redis, pid: int, cells: int,
                slots: range, batch: int) -> tuple[float, float]:
    """Redis's CPU seconds and commands for every cell's report at each of ``slots``."""
    commands = int((await client.info("stats"))["total_commands_processed"])
    started = cpu_seconds(pid)
    for slot in slots:
        for first in range(0, cells, batch):
            kept = await store.put_checked([(f"cell-{c}", [(slot * STEP_NS, 50.0)])
                                            for c in range(first, min(first + batch, cells))])
            if kept != [1] * len(kept):
                raise RuntimeError(f"a report was not taken: {kept[:5]}")
    cpu = cpu_seconds(pid) - started
    return cpu, int((await client.info("stats"))["total_commands_processed"]) - commands


def apart(pid: int) -> bool:
    """Redis on a core of its own, this process on the others, where there are two or more:
    the client's work then takes nothing from Redis's core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return False
    os.sched_setaffinity(pid, {cores[-1]})
    os.sched_setaffinity(0, set(cores[:-1]))
    return True


async def measure(port: int, cells: int, steps: int, batch: int, rounds: int,
                  pinned: bool = False) -> dict[str, list[tuple[float, float]]]:
    """Each phase's Redis CPU (us) and commands per report, round by round; ``pinned``: Redis
    and this process on cores apart (this process keeps that affinity)."""
    client = aioredis.Redis(port=port)
    pid = int((await client.info("server"))["process_id"])
    if pinned:
        apart(pid)
    made = await stores(port, cells)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in made}
    for number in range(rounds):  # alternating, so that drift falls on every phase alike
        slots = range(FIRST_SLOT + 1 + number * steps, FIRST_SLOT + 1 + (number + 1) * steps)
        for name, store in made.items():
            cpu, commands = await phase(store, client, pid, cells, slots, batch)
            runs[name].append((cpu * 1e6 / (cells * steps), commands / (cells * steps)))
    await client.aclose()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=60, help="reports per cell per round")
    parser.add_argument("--batch", type=int, default=128, help="cells per store call")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as port:
        runs = asyncio.run(measure(port, args.cells, args.steps, args.batch, args.rounds,
                                   pinned=True))
    table = pd.DataFrame([{
        "phase": name,
        "redis_us_per_report": statistics.median(us for us, _ in measured),
        "commands_per_report": statistics.median(c for _, c in measured),
        "rounds_us": " / ".join(f"{us:.2f}" for us, _ in measured)}
        for name, measured in runs.items()])
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "history_writes.csv", index=False)
    defaults = {"cells": 3000, "steps": 60, "batch": 128, "rounds": 5}
    options = "".join(f" --{k} {v}" for k, v in vars(args).items() if defaults[k] != v)
    results = Results("history_writes", f"python -m benchmarks.history_writes{options}",
                      "decisions/history-writes.md", "history-writes",
                      tables=["history_writes"])
    us = table.set_index("phase")["redis_us_per_report"]
    results.figures = {"store us per report": us[STORE],
                       "two commands us per report": us[next(iter(FLOORS))],
                       "two commands over store": us[next(iter(FLOORS))] / us[STORE]}
    section = "\n".join([
        "## Redis's CPU per report",
        "",
        f"{results.measured}: redis-server 7 (Debian) on loopback without persistence, on a "
        "core of its own where there are two or more (the client on the others); "
        f"{args.cells:,} cells with rings of {LENGTH} steps, each phase on cells of its own; "
        f"per round, every cell's next {args.steps} steps, {args.batch} cells per call, "
        f"the phases in turn, {args.rounds} rounds: medians, and each round's in `rounds_us`. "
        "Commands per report count the script calls too.",
        "",
        table.to_markdown(index=False, floatfmt=".3g"),
        "",
    ])
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a running `kpi-forecast serve` spends its time: py-spy samples of the whole process
(every thread) under the two loads the serving process is sized by, kept as flame graphs beside
the decision record that reads them (docs/decisions/profiles/).

1. ``e2-redis``: ``benchmarks.e2_scale``'s harness, 3,000 cells reporting every second over
   librmr into one replica whose history is in a real redis-server.
2. ``single-cell``: 200 requests/s (hey, 4 connections x 50/s) of ``POST /v1/forecast`` with
   one cell's history of the default model's context, as ``benchmarks.serving`` asks.

Each load is sampled twice in a row, ``--seconds`` each: once into the SVG flame graph, once
into collapsed stacks (kept beside it), from which the functions holding the most samples on
their own (self) and the project's with what they call (total) are written, as shares of all
samples, to ``docs/benchmarks/profiles.json`` and the record's section.

    python -m benchmarks.profiles [--seconds 30] [--cells 3000]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import write_section
from benchmarks.e2_scale import Bench
from benchmarks.request_cpu import single_cell_body
from benchmarks.results import DOCS, ROOT, Results
from benchmarks.runtime import default_model
from benchmarks.serving import STEADY, serving, xapp_command
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.xapp.descriptor.accuracy import RecalibrationControls, ScoringControls
from tests.redis_server import redis_server
from tests.rmr_library import RMR

PROFILES = DOCS / "decisions" / "profiles"
RATE_HZ = 100  # samples a second
# py-spy from the environment running this (make bench's), else the PATH's.
PY_SPY = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
TOP = 12  # functions kept per ranking
OURS = ("xapp/", "model/", "data/")  # the serving process's own code, as py-spy names files


def sample(pid: int, seconds: float, fmt: str, out: Path) -> None:
    """``seconds`` of py-spy samples of ``pid`` (every thread, the process not paused)."""
    subprocess.run([str(PY_SPY), "record", "--pid", str(pid), "--duration", f"{seconds:g}",
                    "--rate", str(RATE_HZ), "--nonblocking", "--threads", "--format", fmt,
                    "--output", str(out)], check=True, capture_output=True,
                   timeout=seconds + 120)


def profile(pid: int, seconds: float, name: str) -> dict[str, list[tuple[str, float]]]:
    """The flame graph of ``name`` in PROFILES, and the top functions of a second window."""
    PROFILES.mkdir(parents=True, exist_ok=True)
    sample(pid, seconds, "flamegraph", PROFILES / f"{name}.svg")
    stacks = PROFILES / f"{name}.stacks.txt"  # kept: the rankings can be read again
    sample(pid, seconds, "raw", stacks)
    return top_functions(stacks.read_text())


def ours(frame: str) -> bool:
    """A frame of the project's own code below its entry points (the command line, the
    server's start): where in the xApp the time goes. py-spy names a file by its path below
    the import path it came from: the project's folders."""
    where = frame.partition(" (")[2]
    return where.startswith(OURS) and not where.startswith("xapp/server.py")


def top_functions(collapsed: str) -> dict[str, list[tuple[str, float]]]:
    """The TOP functions by self samples (any code), and the project's own functions by total
    samples (with what they call), as shares of the samples py-spy took of threads that were
    not idle."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame for frame in stack.split(";") if frame]
        if not frames or not count.isdigit():
            continue
        n = int(count)
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            if ours(frame):
                total[frame] += n
    return {ranking: [(frame, round(n / samples, 4)) for frame, n in counter.most_common(TOP)]
            for ranking, counter in (("self", own), ("total", total))}


def e2_redis(cells: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis_port:
        bench = Bench(Path(tmp), redis_port, cells, 100, seconds)
        bench.start_node(run_s=2 * seconds + 240)
        try:
            # As deployed: the model's background work (live scoring, recalibration) on, where
            # e2_scale, which measures E2 alone, turns it off.
            replica = bench.start_replica(
                "a", scoring=ScoringControls().model_dump(by_alias=True),
                recalibration=RecalibrationControls().model_dump(by_alias=True))
            bench.wait_until(bench.shared_out, 120, "the replica owning every node")
            bench.wait_until(bench.outcomes_taken, 120, "every cell's subscription outcome")
            time.sleep(5)
            return profile(replica.process.pid, seconds, "e2-redis")
        finally:
            bench.stop()


def single_cell(seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        model_dir.mkdir()
        default_model(model_dir)
        body = Path(tmp) / "body.json"
        body.write_bytes(single_cell_body(load_metadata(model_dir).context))
        with serving(xapp_command(Path(tmp), model_dir, "adaptive", 0)) as (url, pid):
            connections, rate = STEADY
            load = subprocess.Popen(
                ["hey", "-z", f"{2 * seconds + 10:g}s", "-c", str(connections), "-q",
                 str(rate), "-m", "POST", "-T", "application/json", "-D", str(body),
                 f"{url}/v1/forecast"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(3)
                return profile(pid, seconds, "single-cell")
            finally:
                load.terminate()
                load.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--cells", type=int, default=3000)
    args = parser.parse_args()
    missing = [tool for tool, path in (("py-spy", PY_SPY), ("hey", shutil.which("hey")))
               if path is None]
    if missing or not (RMR / "lib").is_dir():
        print(f"profiles: {', '.join(missing) or '../shared/rmr'} absent; nothing sampled")
        return 0
    options = {"--seconds": (args.seconds, 30.0), "--cells": (args.cells, 3000)}
    results = Results(
        "profiles", " ".join(["python -m benchmarks.profiles", *(
            f"{name} {value:g}" for name, (value, default) in options.items()
            if value != default)]), "decisions/serving-profiles.md", "profiles")
    results.figures.update({"e2-redis": e2_redis(args.cells, args.seconds),
                            "single-cell": single_cell(args.seconds)})
    lines = ["## The profiles", "",
             f"{results.measured}: {args.seconds:g} s sampled per load at {RATE_HZ} Hz, every "
             "thread that was not idle; self: the function itself (any code), total: the "
             "project's own functions with what they call; shares of all samples.", ""]
    for name, what in (("e2-redis", f"{args.cells:,} cells reporting every second into one "
                        "replica on redis-server"),
                       ("single-cell", "200 single-cell forecasts a second")):
        lines += [f"### {name}: {what}", "", f"Flame graph: [profiles/{name}.svg]"
                  f"(profiles/{name}.svg).", "",
                  "| function | self | | the project's function | total |",
                  "|---|---|---|---|---|"]
        ranked = results.figures[name]
        for own, total in itertools.zip_longest(ranked["self"], ranked["total"]):
            lines.append(" | ".join(["", *cells(own), "", *cells(total), ""]).strip())
        lines.append("")
    write_section(results, "\n".join(lines))
    print(f"wrote {results.name} and the flame graphs in {PROFILES}")
    return 0


def cells(entry: tuple[str, float] | None) -> list[str]:
    """A ranking's entry as a table's two cells (none: empty ones)."""
    return ["", ""] if entry is None else [f"`{short(entry[0])}`", f"{entry[1]:.1%}"]


def short(frame: str) -> str:
    """A frame as py-spy names it, its file shortened to the package's path."""
    name, _, where = frame.partition(" (")
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/", str(ROOT) + "/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where}".replace("|", "\\|") if where else name


if __name__ == "__main__":
    sys.exit(main())

"""The serving path against another tree of the project (a git ref), side by side in one run on
this machine: the serving benchmark's ratios (single-cell p99 over the no-op handler's, goodput
at 2x and 4x capacity, the 1000-cell Arrow batch over the bare graph), the app's CPU per
single-cell forecast in process (``benchmarks.request_cpu``: what goodput under overload comes
down to, without a load generator's noise) and E2 ingestion's costs with the history in Redis
(``benchmarks.e2_scale``'s figures on paper: the replica's CPU per indication, Redis's CPU and
commands per indication, the replicas 10^5 cells need).

    python -m benchmarks.side_by_side --before REF [--rounds 2] [--serving-seconds 10]
        [--e2-cells 3000] [--e2-seconds 20] [--e2-only | --serving-only]
        [--page decisions/serving-core.md]

Both trees are checked out into temporary git worktrees (this one at HEAD, so commit first),
and each runs its own ``benchmarks.serving`` in turn, in this environment, with
``kpi_forecast`` made that tree's folders by a path entry ahead of the installed one (and
``../shared`` beside them the project's); ``benchmarks.request_cpu`` and
``benchmarks.e2_scale`` are this tree's, run on each tree's ``kpi_forecast`` (one harness, so
that only the code measured differs). Each figure is a ratio each run
measures against its own baseline, or a CPU cost, so the two trees compare on one machine; the
rounds alternate the order (before, after; after, before; ...), and each figure is the median
over them, since a p99 of a few thousand requests on a shared machine moves between runs. The
table goes to the decision record it is the evidence of (``--page``, under ``docs/``).
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
from benchmarks.runtime import default_model

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("cli", "data", "model", "training", "xapp")  # kpi_forecast's subpackages
PAGE = "decisions/serving-core.md"
SHARED = ROOT.parent / "shared"  # beside the project: what the benchmarks read (librmr)
# What each tree's benchmarks write, removed first: a figure is this run's or none.
WRITTEN = ("serving_load.csv", "serving_batch.csv")


def checkout(ref: str, where: Path) -> Path:
    """A worktree of ``ref`` at ``where``, and a path entry that imports kpi_forecast from it."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(where),
                    ref], check=True)
    for name in WRITTEN:
        (where / "docs" / "benchmarks" / name).unlink(missing_ok=True)
    if SHARED.is_dir() and not (where.parent / "shared").exists():
        (where.parent / "shared").symlink_to(SHARED)
    entry = where.with_name(f"{where.name}-path")
    package = entry / "kpi_forecast"
    package.mkdir(parents=True)
    for folder in FOLDERS:
        (package / folder).symlink_to(where / folder)
    return entry


def run(tree: Path, entry: Path, module: str, *options: str) -> str:
    """``module`` of ``tree`` run on ``tree``'s kpi_forecast; what it printed."""
    env = {**os.environ, "PYTHONPATH": str(entry)}
    return subprocess.run([sys.executable, "-m", module, *options], cwd=tree, env=env,
                          check=True, stdout=subprocess.PIPE, text=True).stdout


def request_cpu(entry: Path, model_dir: Path) -> float:
    """This tree's ``benchmarks.request_cpu`` (the before tree may not have it) on the
    kpi_forecast of ``entry``: the app's CPU per single-cell forecast, in microseconds."""
    printed = run(ROOT, entry, "benchmarks.request_cpu", "--model", str(model_dir))
    return json.loads(printed.splitlines()[-1])["cpu_us_per_request"]


def e2_costs(entry: Path, cells: int, seconds: float) -> dict[str, float]:
    """This tree's ``benchmarks.e2_scale`` on the kpi_forecast of ``entry``: its figures on
    paper."""
    printed = run(ROOT, entry, "benchmarks.e2_scale", "--cells", str(cells), "--seconds",
                  f"{seconds:g}", "--json")
    return {f"E2: {name}": value for name, value in json.loads(printed.splitlines()[-1]).items()}


def figures(tree: Path) -> dict[str, float]:
    raw = tree / "docs" / "benchmarks"
    load = pd.read_csv(raw / "serving_load.csv")
    by_phase = {phase: rows for phase, rows in load.groupby("phase")}
    # The runs at 200 requests/s, each beside a no-op run (one of each in older trees).
    steady = by_phase["200 requests/s"]["p99_ms"].reset_index(drop=True)
    noop = by_phase["200 requests/s, no-op handler"]["p99_ms"].reset_index(drop=True)
    overload = by_phase.get("overload, admission on")
    goodput = ({} if overload is None else
               dict(zip(overload["x_capacity"], overload["goodput_ratio"], strict=True)))
    offered = ({} if overload is None else
               dict(zip(overload["x_capacity"], overload["offered_rps"], strict=True)))
    arrow = pd.read_csv(raw / "serving_batch.csv").iloc[0]
    return {
        "single-cell p99 at 200 requests/s (ms)": float(steady.median()),
        "single-cell p99 over the no-op handler's": float((steady / noop).median()),
        "capacity (requests/s)": offered.get(1.0, float("nan")),
        "goodput at 2x capacity, over capacity": goodput.get(2.0, float("nan")),
        "goodput at 4x capacity, over capacity": goodput.get(4.0, float("nan")),
        "1000-cell Arrow batch over the bare graph (p50)": float(arrow["x_bare_graph"]),
    }


CPU_PER_REQUEST = "single-cell forecast, app CPU per request in process (us)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the git ref to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serving-seconds", type=float, default=10.0)
    parser.add_argument("--e2-cells", type=int, default=3000)
    parser.add_argument("--e2-seconds", type=float, default=20.0)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--e2-only", action="store_true", help="E2's costs alone, without "
                      "the serving benchmark and the CPU per request")
    only.add_argument("--serving-only", action="store_true", help="each tree's serving "
                      "benchmark alone: for a tree whose code this tree's E2 and in-process "
                      "harnesses cannot drive (an earlier model artifact, no shared history)")
    parser.add_argument("--page", default=PAGE, help="the decision record (under docs/) the "
                        "table goes to, in its side-by-side section")
    args = parser.parse_args()
    trees = {"before": args.before, "after": "HEAD"}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"  # one model for both trees' in-process measure
        model_dir.mkdir()
        default_model(model_dir)
        try:
            entries = {name: checkout(ref, Path(tmp) / name) for name, ref in trees.items()}
            for round_ in range(args.rounds):
                for name in (list(trees) if round_ % 2 == 0 else list(trees)[::-1]):
                    tree = Path(tmp) / name
                    measured = ({} if args.serving_only else
                                e2_costs(entries[name], args.e2_cells, args.e2_seconds))
                    if not args.e2_only:
                        run(tree, entries[name], "benchmarks.serving", "--seconds",
                            f"{args.serving_seconds:g}")
                        measured |= figures(tree)
                    if not (args.e2_only or args.serving_only):
                        measured[CPU_PER_REQUEST] = request_cpu(entries[name], model_dir)
                        for written in WRITTEN:
                            (tree / "docs" / "benchmarks" / written).unlink()
                    results[name].append(measured)
        finally:
            for name in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(Path(tmp) / name)], check=False, capture_output=True)
    refs = {name: subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref],
                                 capture_output=True, text=True, check=True).stdout.strip()
            for name, ref in (("before", args.before), ("after", "HEAD"))}
    table = pd.DataFrame({f"{name} ({refs[name]})": pd.DataFrame(rounds).median()
                          for name, rounds in results.items()})
    table["after / before"] = table.iloc[:, 1] / table.iloc[:, 0]
    stem = f"side_by_side_{Path(args.page).stem}"
    outcome = Results(
        stem, f"python -m benchmarks.side_by_side --before {refs['before']}"
        f" --rounds {args.rounds} --serving-seconds {args.serving_seconds:g}"
        f" --e2-cells {args.e2_cells} --e2-seconds {args.e2_seconds:g}"
        + (" --e2-only" if args.e2_only else "")
        + (" --serving-only" if args.serving_only else "")
        + (f" --page {args.page}" if args.page != PAGE else ""),
        args.page, "side-by-side", tables=[stem], revision=refs["after"],
        figures={column: table[column].to_dict() for column in table.columns})
    pd.DataFrame([{"tree": tree, "revision": refs[tree], "round": k + 1, **figures_of_round}
                  for tree, rounds in results.items()
                  for k, figures_of_round in enumerate(rounds)]).to_csv(
        RESULTS / f"{stem}.csv", index=False)
    harnesses = ("each tree's own `benchmarks.serving`" if args.serving_only else
                 ("" if args.e2_only else "each tree's own `benchmarks.serving`, and ")
                 + "this tree's `benchmarks.e2_scale` ("
                 f"{args.e2_cells:,} cells reporting every second, {args.e2_seconds:g} s a "
                 "phase)" + ("" if args.e2_only else " and `benchmarks.request_cpu`")
                 + " on each tree's code")
    write_section(outcome, "\n".join([
        f"{outcome.measured}: {harnesses}, one after the other, "
        f"the median over {args.rounds} rounds of alternating order; each round's figures "
        "follow.",
        "",
        table.to_markdown(floatfmt=".3g"),
        "",
        pd.DataFrame({f"{name} {k + 1}": figures_of_round
                      for name, rounds in results.items()
                      for k, figures_of_round in enumerate(rounds)}).to_markdown(floatfmt=".3g"),
    ]))
    print(table.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())

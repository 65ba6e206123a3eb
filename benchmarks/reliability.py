"""The fault table of docs/reliability.md: runs the fault tests (tests/faults, real processes)
and writes what each measured, the fault, what was injected, the load held during it, what was
lost and the time to recover, between the page's markers.

    python -m benchmarks.reliability
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

from benchmarks.common import write_section
from benchmarks.results import RESULTS, Results
from tests.faults.conftest import REPORT_ENV, Row

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m benchmarks.reliability"
FIELDS = [f.name for f in fields(Row)]


def table(rows: list[dict]) -> str:
    lines = ["| fault | injected | load held | lost | recovered | seconds |",
             "|---|---|---|---|---|---:|"]
    lines += [f"| {r['fault']} | {r['injected']} | {r['load']} | {r['lost']} | "
              f"{r['recovered']} | {r['recovery_s']:.1f} |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows_file = Path(scratch) / "rows.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/faults"],
            cwd=ROOT, env={**os.environ, REPORT_ENV: str(rows_file)})
        rows = [json.loads(line) for line in rows_file.read_text().splitlines()] \
            if rows_file.exists() else []
    if done.returncode != 0:
        print(f"reliability: the fault tests failed (exit {done.returncode}); the page is "
              "left as it was", file=sys.stderr)
        return 1
    results = Results("reliability", COMMAND, "reliability.md", "reliability",
                      tables=["reliability"])
    with (RESULTS / "reliability.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: r[k] for k in FIELDS} for r in rows)
    section = "\n".join([
        "## Measured",
        "",
        f"{results.measured} (part of `make bench`):"
        " the fault tests, each on its own processes; `seconds` is the time to recover.",
        "",
        table(rows),
    ])
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

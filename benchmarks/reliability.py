"""The fault table of docs/reliability.md: runs the fault tests (tests/faults, real processes)
and writes what each measured, the fault, what was injected, the load held during it, what was
lost and the time to recover, between the page's markers.

    python -m benchmarks.reliability
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import machine, write_section
from tests.faults.conftest import REPORT_ENV

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m benchmarks.reliability"


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
    section = "\n".join([
        "## Measured",
        "",
        f"Measured {dt.date.today()} on {machine()}, with `{COMMAND}` (part of `make bench`):"
        " the fault tests, each on its own processes; `seconds` is the time to recover.",
        "",
        table(rows),
    ])
    print(section)
    write_section("reliability", section, page="reliability.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

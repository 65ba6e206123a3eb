"""How long `make test` takes on a clean clone, as CI runs it (`.ci/run`): the whole command
(the venv's installation included) and the test suite within it, for one or more revisions,
one after the other, on this machine.

    python -m benchmarks.suite_time [--revisions REV ...]

Each revision is cloned from this repository into a temporary folder, with ``../shared``
beside it as beside the project, and runs its own `.ci/run` (the system tools it installs are
this machine's already); the figures go to the testing page's section. A revision whose run
fails is reported as failed, with its figures.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import write_section
from benchmarks.results import RESULTS, ROOT, Results

SHARED = ROOT.parent / "shared"

# pytest's last line: "881 passed, 2 warnings in 1138.21s (0:18:58)", "=" around it without -q
SUMMARY = re.compile(r"^(?:=+ )?(?P<counts>\d+ (?:passed|failed|skipped|errors?)\b.*?) in "
                     r"(?P<seconds>[\d.]+)s\b", re.MULTILINE)
COUNTED = ("passed", "failed", "skipped", "error")


def short(revision: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", revision],
                          capture_output=True, text=True, check=True).stdout.strip()


def run(revision: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", revision], check=True)
        if SHARED.is_dir():  # what the tests read beside the project, as on the build machines
            (clone.parent / "shared").symlink_to(SHARED)
        started = time.monotonic()
        done = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True, text=True,
                              env={**os.environ, "CI": "true"})
        seconds = time.monotonic() - started
    return {"revision": short(revision), "exit": done.returncode, "make_test_s": seconds,
            **outcome(done.stdout + done.stderr)}


def outcome(output: str) -> dict:
    """The suite's seconds and counts, from pytest's last summary line in ``output``."""
    summary = list(SUMMARY.finditer(output))
    counts = ({name: int(n) for n, name in re.findall(rf"(\d+) ({'|'.join(COUNTED)})s?\b",
                                                     summary[-1]["counts"])} if summary else {})
    return {"suite_s": float(summary[-1]["seconds"]) if summary else float("nan"),
            **{name: counts.get(name, 0) for name in COUNTED}}


def minutes(seconds: float) -> str:
    if seconds != seconds:  # NaN: the run printed no summary
        return "no summary"
    return f"{int(seconds // 60)}:{round(seconds % 60):02d}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", nargs="+", default=["HEAD"])
    args = parser.parse_args()
    rows = []
    for revision in args.revisions:
        rows.append(run(revision))
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(RESULTS / "suite_time.csv", index=False)
    results = Results(
        "suite_time", "python -m benchmarks.suite_time" + (
            f" --revisions {' '.join(args.revisions)}" if args.revisions != ["HEAD"] else ""),
        "testing.md", "suite-time", tables=["suite_time"], revision=short("HEAD"),
        figures={row["revision"]: {"make test s": row["make_test_s"], "suite s": row["suite_s"]}
                 for row in rows})
    lines = [
        f"{results.measured}: a clean clone of each revision running `.ci/run` (the system tools "
        "already installed), one after the other.",
        "",
        "| revision | `make test` (min:s) | the suite within it | passed | failed | skipped | "
        "errors | exit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {r['revision']} | {minutes(r['make_test_s'])} | {minutes(r['suite_s'])} | "
          f"{r['passed']} | {r['failed']} | {r['skipped']} | {r['error']} | {r['exit']} |"
          for r in rows],
    ]
    write_section(results, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

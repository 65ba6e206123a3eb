"""The serving benchmark's core pinning: the xApp and `hey` on disjoint cores where asked."""

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.serving import cpu_list, cpu_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("text", "cpus"), [("0", {0}), ("0,1", {0, 1}), ("2-5", {2, 3, 4, 5}),
                                            ("0,2-3,8", {0, 2, 3, 8})])
def test_cpu_lists_read_as_taskset_writes_them(text: str, cpus: set[int]) -> None:
    assert cpu_list(text) == cpus
    assert cpu_list(cpu_text(cpus)) == cpus


@pytest.mark.parametrize(("args", "why"), [
    (["--server-cpus", "0,1", "--client-cpus", "1-3"], "share cores"),
    (["--server-cpus", "0,1"], "go together"),
])
def test_overlapping_or_lone_core_lists_are_refused_before_anything_runs(
        args: list[str], why: str) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.serving", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    if "hey` is not installed" in done.stdout:
        pytest.skip("hey is not installed (apt-get install hey)")
    assert done.returncode == 2
    assert why in done.stderr

"""The suite's own guards: in CI (KPI_FORECAST_NO_SKIPS=1, set by .ci/run) a skipped test
fails the run, and every run says which system tools it used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def inner_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_inner.py"
    test.write_text("import pytest\n\n\ndef test_without_its_tool():\n"
                    "    pytest.skip('the tool is absent')\n")
    environ = {k: v for k, v in os.environ.items() if k != "KPI_FORECAST_NO_SKIPS"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), str(test)], cwd=ROOT,
                          env={**environ, **env}, capture_output=True, text=True, timeout=120)


def test_a_skip_fails_a_ci_run_and_passes_elsewhere(tmp_path: Path) -> None:
    ci = inner_run(tmp_path, KPI_FORECAST_NO_SKIPS="1")
    assert ci.returncode == 1, ci.stdout
    assert "1 test(s) skipped, and CI runs every test" in ci.stdout
    local = inner_run(tmp_path)
    assert local.returncode == 0, local.stdout
    for tool in ("promtool", "prometheus", "redis-server", "hey"):
        assert f"{tool}: not used by the tests that ran" in local.stdout
    assert "system tools: promtool" in local.stdout  # the header: where each one is


def test_ci_runs_the_readme_test_command_with_no_skips() -> None:
    script = (ROOT / ".ci/run").read_text()
    assert "KPI_FORECAST_NO_SKIPS=1 make test" in script
    for package in ("prometheus", "hey", "redis-server"):
        assert f"missing+=({package})" in script

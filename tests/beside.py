"""The suite's CPU-bound training tests, run beside the rest in a second pytest process at the
lowest CPU priority, as the image builds are (tests/image_builds.py): they train for fixed
epochs and assert nothing about time, so they can take only the CPU the other tests leave
(most of those wait on servers, subprocesses and sockets), and the suite takes about as long
as the longer of the two parts rather than their sum.

A run that selects only such tests, or runs inside that second process, runs them itself.
The second process starts with the first test after the fault tests (which measure latency
and run first); its report is printed at the end of the run, and its failures (or, in CI,
skips) fail the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.containers import lower_autogroup

# Modules whose tests train or export models and assert no timing.
MODULES = frozenset({
    "test_holidays.py", "test_distributed.py", "test_cli_end_to_end.py", "test_milan.py",
    "test_repository_cli.py", "test_retraining.py", "test_onnx_parity.py", "test_gpu_check.py",
})
# Their trainings end on their epochs, not on the clock: at the lowest priority a training may
# wait for the CPU longer than the default budget (5 minutes) would allow.
EPOCHS_NOT_CLOCK = ("--max-minutes", "60")
CHILD = "KPI_FORECAST_BESIDE"  # set in the second process
LOWEST = 19
WAIT_S = 3600  # the longest the run waits for the second process at its end

_planned: list[str] = []  # node ids to run beside
_process: subprocess.Popen | None = None
_log: Path | None = None


def split(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Take the tests to run beside out of ``items`` (reported as deselected here)."""
    if os.environ.get(CHILD) or config.option.collectonly:
        return
    beside = [item for item in items if item.path.name in MODULES]
    if not beside or len(beside) == len(items):
        return
    items[:] = [item for item in items if item.path.name not in MODULES]
    config.hook.pytest_deselected(items=beside)
    _planned[:] = [item.nodeid for item in beside]


def start(item: pytest.Item) -> None:
    """Start the second process before ``item`` runs, unless it is a fault test."""
    if _planned and _process is None and item.path.parent.name != "faults":
        _launch(item.config.rootpath)


def _launch(root: Path) -> None:
    global _process, _log
    _log = Path(tempfile.mkstemp(prefix="kpi-forecast-beside-", suffix=".log")[1])
    with _log.open("w") as out:
        # A session of its own, so that its autogroup's niceness can be lowered too.
        _process = subprocess.Popen(
            ["nice", "-n", str(LOWEST), sys.executable, "-m", "pytest", "-q",
             "-p", "no:cacheprovider", *_planned],
            cwd=root, env={**os.environ, CHILD: "1"}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    lower_autogroup(_process.pid, LOWEST)


def finish(session: pytest.Session, exitstatus: int) -> None:
    """Wait for the second process (started now if no test started it), print its report, and
    fail the run where it failed; an interrupted run stops it."""
    global _process
    if not _planned:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        if _process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(_process.pid, signal.SIGTERM)
        return
    if _process is None:
        _launch(session.config.rootpath)
    process, _process = _process, None
    assert process is not None and _log is not None
    try:
        process.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    report = _log.read_text()
    _log.unlink()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", f"{len(_planned)} tests run beside (tests/beside.py)")
        reporter.write(report)
    if process.returncode != 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

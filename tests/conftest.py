"""Suite-wide reporting: which system tools the run used, and, in CI, no test left skipped."""

from __future__ import annotations

import os
import shutil

# The tests share the cores with the image builds that run beside them (tests/image_builds.py):
# OpenMP threads that spin at torch's barriers lose their time slices to the builds' processes,
# and a training test ran several times slower; waiting passively keeps it near its own pace.
# Set before torch is first imported, in this process and the ones the tests start.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

from tests import beside, image_builds
from tests.a1_mediator import mediator_routes  # noqa: F401 - a fixture for the A1 tests
from tests.air_gapped import gpu_bundle  # noqa: F401 - the GPU check's and the GPU graph's
from tests.k8s_tools import helm  # noqa: F401 - a fixture for the chart and onboarding tests
from tests.rmr_library import rmr_library  # noqa: F401 - a fixture for every test module
from tests.system_tools import PACKAGES, USED

# Set by .ci/run: there every tool is installed, so a skip means a check did not run.
NO_SKIPS = os.environ.get("KPI_FORECAST_NO_SKIPS") == "1"


def pytest_report_header(config: pytest.Config) -> list[str]:
    found = {name: shutil.which(name) for name in PACKAGES}
    return ["system tools: " + ", ".join(f"{name} {path or 'absent'}"
                                         for name, path in found.items())]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_sep("-", "system tools")
    for name in PACKAGES:
        terminalreporter.write_line(f"{name}: used ({USED[name]})" if name in USED
                                    else f"{name}: not used by the tests that ran")
    skipped = len(terminalreporter.stats.get("skipped", []))
    if NO_SKIPS and skipped:
        terminalreporter.write_line(f"KPI_FORECAST_NO_SKIPS=1: {skipped} test(s) skipped, and "
                                    "CI runs every test", red=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    image_builds.image_tests_last(items)
    beside.split(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not session.config.option.collectonly:
        image_builds.plan(session.items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    image_builds.start_beside(item)
    beside.start(item)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    beside.finish(session, exitstatus)
    image_builds.close()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if NO_SKIPS and reporter is not None and reporter.stats.get("skipped") and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

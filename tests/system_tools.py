"""The system tools some tests run: Debian packages that `.ci/run` installs. A test that needs
one calls ``system_tool``, which skips it, with the reason, where the tool is absent (CI fails
on any skip: see conftest.py), and records which tests used which tool for the summary."""

from __future__ import annotations

import shutil

import pytest

PACKAGES = {"promtool": "prometheus", "prometheus": "prometheus", "redis-server": "redis-server",
            "hey": "hey", "podman": "podman", "runc": "runc", "debootstrap": "debootstrap",
            "influxd": "influxdb"}
USED: dict[str, str] = {}  # tool -> path, once a test has run it


def system_tool(name: str) -> str:
    """The path of ``name``; the calling test is skipped where it is not installed."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package {PACKAGES[name]}; .ci/run "
                    "installs it)")
    USED[name] = path
    return path

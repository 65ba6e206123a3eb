"""The container images the image tests use (tests/test_container.py), built once per session
and in the background: at the lowest CPU and I/O priority, from the first test after the fault
tests (which measure latency under injected faults, and run first) while the rest of the suite
runs; the image tests run last and wait for them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from benchmarks.containers import Podman, missing

IMAGE_TESTS = "test_container.py"
_wanted = False  # image tests are to run, and the machine has what they need
_engine: Podman | None = None


def image_tests_last(items: list[pytest.Item]) -> None:
    """Move the image tests to the end of the run, in their order."""
    images = [item for item in items if item.path.name == IMAGE_TESTS]
    items[:] = [item for item in items if item.path.name != IMAGE_TESTS] + images


def plan(items: list[pytest.Item]) -> None:
    """Build where image tests are to run and the machine has what they need (else the tests
    skip, saying what is missing)."""
    global _wanted
    _wanted = not missing() and any(item.path.name == IMAGE_TESTS for item in items)


def start_beside(item: pytest.Item) -> None:
    """Start the builds before ``item`` runs, unless it is a fault test."""
    global _engine
    if _wanted and _engine is None and item.path.parent.name != "faults":
        _engine = Podman(Path(tempfile.mkdtemp(prefix="kpi-forecast-podman-")))
        _engine.build_in_background()


def built() -> Podman:
    """The engine with every image built; raises what the build raised."""
    assert _engine is not None, "the builds start before the first test after the faults"
    _engine.wait_built()
    return _engine


def close() -> None:
    """Stop the builds if they still run (the session ended before the image tests), then
    remove the images and their storage."""
    global _engine
    if _engine is not None:
        engine, _engine = _engine, None
        engine.cancel()
        engine.close()

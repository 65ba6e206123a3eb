"""The container images the image tests use (tests/test_container.py), built once per session
and in the background: the builds start as soon as the suite is collected, at the lowest CPU
priority, while the other tests run; the image tests run last and wait for them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from benchmarks.containers import Podman, missing

IMAGE_TESTS = "test_container.py"
_engine: Podman | None = None


def image_tests_last(items: list[pytest.Item]) -> None:
    """Move the image tests to the end of the run, in their order."""
    images = [item for item in items if item.path.name == IMAGE_TESTS]
    items[:] = [item for item in items if item.path.name != IMAGE_TESTS] + images


def start(items: list[pytest.Item]) -> None:
    """Start the builds where image tests are to run and the machine has what they need (else
    the tests skip, saying what is missing)."""
    global _engine
    if _engine is None and not missing() and any(
            item.path.name == IMAGE_TESTS for item in items):
        _engine = Podman(Path(tempfile.mkdtemp(prefix="kpi-forecast-podman-")))
        _engine.build_in_background()


def built() -> Podman:
    """The engine with every image built; raises what the build raised."""
    assert _engine is not None, "the builds start at collection (tests/conftest.py)"
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

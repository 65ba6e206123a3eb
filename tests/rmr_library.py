"""librmr from ../shared/rmr (RMR 4.9.4, built from its public source), for the tests that run
the RIC's message router for real."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from kpi_forecast.xapp.ric import rmr
from kpi_forecast.xapp.ric.rmr import RmrTransport

RMR = Path(__file__).resolve().parents[1].parent / "shared" / "rmr"


@pytest.fixture
def rmr_library(monkeypatch: pytest.MonkeyPatch) -> Path:
    """librmr from ../shared/rmr, as a RIC without a routing manager runs it: no route table
    service, an empty static table (the xApp answers through wormholes)."""
    library = RMR / "lib" / rmr.LIBRARY
    if not library.is_file():
        pytest.skip(f"{library} not present (RMR 4.9.4 in ../shared/rmr)")
    monkeypatch.setenv("RMR_SEED_RT", str(rmr.NO_ROUTES))
    monkeypatch.setenv("RMR_RTG_SVC", "-1")
    monkeypatch.setattr(rmr, "LIBRARY", str(library))
    # For the processes the test starts, as an installed librmr is found.
    monkeypatch.setenv("LD_LIBRARY_PATH", os.pathsep.join(
        filter(None, [str(library.parent), os.environ.get("LD_LIBRARY_PATH")])))
    return library


def rmr_transport(on_broken: Callable[[str], None] | None = None) -> RmrTransport:
    """An RMR endpoint on a port free now (RMR has no "any free port")."""
    return RmrTransport(free_port(), on_broken=on_broken)

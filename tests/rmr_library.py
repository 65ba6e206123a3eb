"""librmr from ../shared/rmr (RMR 4.9.4, built from its public source), for the tests that run
the RIC's message router for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from kpi_forecast.xapp.e2 import rmr

RMR = Path(__file__).resolve().parents[1].parent / "shared" / "rmr"


@pytest.fixture
def rmr_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """librmr from ../shared/rmr, as a RIC without a routing manager runs it: no route table
    service, an empty static table (the xApp answers through wormholes)."""
    library = RMR / "lib" / rmr.LIBRARY
    if not library.is_file():
        pytest.skip(f"{library} not present (RMR 4.9.4 in ../shared/rmr)")
    table = tmp_path / "rmr-routes.txt"
    table.write_text("newrt|start\nnewrt|end\n")
    monkeypatch.setenv("RMR_SEED_RT", str(table))
    monkeypatch.setenv("RMR_RTG_SVC", "-1")
    monkeypatch.setattr(rmr, "LIBRARY", str(library))
    return library

"""docs/sizing.md: every byte count it states is the one the formats and the defaults make."""

from __future__ import annotations

import re

import yaml

from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.serving.scoring import MAX_BLOCKS
from kpi_forecast.xapp.store.cell_history import _Ring
from kpi_forecast.xapp.store.score_records import size
from kpi_forecast.xapp.store.sdl import HEADER, RECORD
from tests.processes import ROOT

PAGE = (ROOT / "docs" / "sizing.md").read_text()
VALUES = yaml.safe_load((ROOT / "helm" / "kpi-forecast" / "values.yaml").read_text())


def stated(pattern: str) -> int:
    """The integer the page states where ``pattern`` (its group) matches, commas dropped."""
    found = re.search(pattern, " ".join(PAGE.split()))
    assert found, pattern
    return int(found[1].replace(",", ""))


def test_the_per_cell_bytes_are_those_of_the_stores_formats() -> None:
    length = Controls.model_fields["history_length"].default
    assert length == VALUES["xapp"]["historyLength"] == 672
    ring = _Ring(length, 0)
    memory, redis = ring.sums.nbytes + ring.seen.nbytes, HEADER.size + RECORD.itemsize * length
    assert stated(r"\| memory store \| `16 × historyLength` .*? \| ([\d,]+) \|") == memory
    assert stated(r"\| Redis \(`sdl.py`.*?\| `16 \+ 16 × historyLength` \| ([\d,]+) \|") == redis
    record = size(24, 3, 7)  # day-ahead hourly, three quantiles, a week of horizons
    assert stated(r"at most `(\d+)`\) \|") == MAX_BLOCKS
    assert stated(r"\| ([\d,]+) for a day-ahead hourly model") == record
    assert size(0, 0, 0) == 20 and size(0, 0, 1) - size(0, 0, 0) == 64  # the formula's terms
    cells = VALUES["xapp"]["historyStore"]["maxCells"]
    controls = Controls(model_dir="model")
    assert cells == controls.history_store.max_cells == controls.scoring.max_cells
    assert stated(r"rings of that many cells alone take ([\d,]+) bytes") == memory * cells
    assert stated(r"where it takes ([\d,]+) bytes for them") == redis * cells
    assert stated(r"and their live scores ([\d,]+) bytes more") == record * cells


def test_the_chart_defaults_are_those_the_page_states() -> None:
    resources = VALUES["resources"]
    assert resources["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert resources["limits"] == {"memory": "2Gi"}
    assert "requests one core and `1Gi` of memory and limits memory to `2Gi`" in " ".join(
        PAGE.split())

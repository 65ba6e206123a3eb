"""What training takes from the data when the command line leaves it open (training.defaults),
and cells from different periods on one grid."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.generalisation import disjoint_cells
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.load_like import load_like
from kpi_forecast.data.panel import Panel, observed_spans
from kpi_forecast.training.defaults import default_context, validation_steps
from kpi_forecast.training.distributed import Group
from kpi_forecast.training.train import TrainConfig, split_windows
from kpi_forecast.training.windows import Windows

FRACTION = TrainConfig.validation_fraction


def hourly_panel(days: int) -> Panel:
    index = pd.date_range("2024-01-01", periods=days * 24, freq="1h", tz="UTC")
    values = np.ones((3, len(index)), np.float32)
    return Panel(["a", "b", "c"], index, values, "1h", "kpi")


@pytest.fixture(scope="module")
def disjoint(tmp_path_factory: pytest.TempPathFactory) -> Panel:
    path = tmp_path_factory.mktemp("disjoint") / "cells.parquet"
    disjoint_cells(seed=0).to_parquet(path)
    return load_panel(path, "traffic_mb")


def test_the_longest_context_the_history_holds_twice_over() -> None:
    # 14 days twice, 2 horizons and 15 % of the span for validation need 36 days; 7 days 19;
    # 3 days 10; a day 5.
    assert default_context(hourly_panel(56), 24, FRACTION)[0] == 14 * 24
    assert default_context(hourly_panel(36), 24, FRACTION)[0] == 14 * 24
    assert default_context(hourly_panel(35), 24, FRACTION)[0] == 7 * 24
    assert default_context(hourly_panel(19), 24, FRACTION)[0] == 7 * 24
    assert default_context(hourly_panel(18), 24, FRACTION)[0] == 3 * 24
    assert default_context(hourly_panel(10), 24, FRACTION)[0] == 3 * 24
    assert default_context(hourly_panel(9), 24, FRACTION)[0] == 24
    steps, why = default_context(hourly_panel(2), 24, FRACTION)
    assert steps == 24 and "shortest default" in why
    steps, why = default_context(hourly_panel(56), 24, FRACTION)
    assert "as many steps again to learn from" in why


def test_spans_count_each_cell_from_its_first_value_to_its_last() -> None:
    values = np.full((3, 10), np.nan, np.float32)
    values[0, 2:5] = 1.0
    values[1, [1, 8]] = 1.0  # a gap inside the span counts
    assert observed_spans(values).tolist() == [3, 8, 0]


def test_cells_months_apart_train_on_their_own_spans_not_the_grid(disjoint: Panel) -> None:
    week, day = disjoint.steps_per("7D"), disjoint.steps_per("1D")
    assert disjoint.spans.tolist() == pytest.approx([week, 2 * week, 3 * week], abs=60)
    assert disjoint.n_steps > 30 * week  # January to October on one grid
    # The median cell (two weeks) holds three days' context twice over, not a week's.
    steps, why = default_context(disjoint, day, FRACTION)
    assert steps == 3 * day and "median cell spans" in why
    # Validation: the last 15 % of the longest span, not of the grid (which would hold the
    # whole of the last cell), so the last cell trains up to its validation days. With a
    # week's context, the first cell, a week at the grid's start, holds no window.
    windows = Windows.from_panel(disjoint, week, day)
    val_start, train, val = split_windows(windows, TrainConfig(), np.random.default_rng(0),
                                          Group())
    longest = int(disjoint.spans.max())
    assert val_start == disjoint.n_steps - validation_steps(longest, day, FRACTION)
    assert set(train.local[:, 0]) == {1, 2} and set(val.local[:, 0]) == {2}
    last_cell = train.local[train.local[:, 0] == 2, 1]
    assert last_cell.max() + day <= val_start < last_cell.max() + 2 * day


def test_load_like_series_are_seeded_and_repeat_when_asked(tmp_path: Path) -> None:
    frame = load_like(28, seed=3)
    pd.testing.assert_frame_equal(frame, load_like(28, seed=3))
    assert len(frame) == 28 * 48 and (frame["load_mw"] > 0).all()
    repeating = load_like(28, seed=3, repeating=True)["load_mw"].to_numpy().reshape(4, -1)
    # Weeks that repeat almost exactly: a week apart, values differ by the noise alone
    # (0.2 % a step); the ordinary series drifts with its season and its weather runs.
    assert np.abs(np.diff(repeating, axis=0) / repeating[1:]).mean() < 0.01
    ordinary = frame["load_mw"].to_numpy().reshape(4, -1)
    assert np.abs(np.diff(ordinary, axis=0) / ordinary[1:]).mean() > 0.02

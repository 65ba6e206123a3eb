"""Seasonal baselines against hand-computed forecasts and a literal reference."""

from __future__ import annotations

import numpy as np
import pytest

from kpi_forecast.model.naive import seasonal_naive
from kpi_forecast.training.baselines import BASELINES, baseline_forecasts, seasonal_mean

NAN = np.nan


def _reference_seasonal_naive(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """The definition spelled out element by element, to check the vectorised version."""
    n, t = history.shape
    out = np.full((n, horizon), NAN)
    for i in range(n):
        for h in range(1, horizon + 1):
            k = -(-h // season)  # smallest k >= 1 with T + h - k*season inside the history
            idx = t + h - 1 - k * season
            while idx >= 0 and np.isnan(history[i, idx]):
                idx -= season
            if idx >= 0:
                out[i, h - 1] = history[i, idx]
    return out


def test_seasonal_naive_repeats_last_season_beyond_one_season() -> None:
    history = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]])
    expected = np.array([[4.0, 5.0, 6.0, 4.0, 5.0, 6.0, 4.0], [40, 50, 60, 40, 50, 60, 40.0]])
    np.testing.assert_array_equal(seasonal_naive(history, horizon=7, season=3), expected)


def test_seasonal_naive_falls_back_to_earlier_seasons() -> None:
    history = np.array(
        [
            [1.0, 2.0, 3.0, 4.0, NAN, 6.0],  # phase 1 missing last season: take 2
            [1.0, NAN, 3.0, 4.0, NAN, 6.0],  # phase 1 missing in every season
            [7.0, 8.0, 9.0, NAN, NAN, NAN],  # whole last season missing
        ]
    )
    expected = np.array([[4.0, 2.0, 6.0], [4.0, NAN, 6.0], [7.0, 8.0, 9.0]])
    np.testing.assert_array_equal(seasonal_naive(history, horizon=3, season=3), expected)


def test_seasonal_naive_history_not_a_whole_number_of_seasons() -> None:
    # T = 5, season 3: steps 1..3 take columns 2, 3, 4; a NaN in column 4 falls back to
    # column 1 in the partial first season, a NaN in column 2 has nowhere to go.
    history = np.array([[1.0, 2.0, 3.0, 4.0, NAN], [1.0, 2.0, NAN, 4.0, 5.0]])
    expected = np.array([[3.0, 4.0, 2.0], [NAN, 4.0, 5.0]])
    np.testing.assert_array_equal(seasonal_naive(history, horizon=3, season=3), expected)


def test_seasonal_naive_history_shorter_than_a_season() -> None:
    # Step 1 would need column T - 3 = -1: NaN, not a wrap-around to the last column.
    result = seasonal_naive(np.array([[1.0, 2.0]]), horizon=4, season=3)
    np.testing.assert_array_equal(result, [[NAN, 1.0, 2.0, NAN]])


def test_seasonal_naive_matches_reference_on_sparse_random_data() -> None:
    rng = np.random.default_rng(0)
    history = rng.normal(size=(40, 53))
    history[rng.random(history.shape) < 0.6] = NAN
    for season, horizon in [(1, 3), (5, 12), (7, 7), (24, 30), (60, 70)]:
        np.testing.assert_array_equal(
            seasonal_naive(history, horizon, season),
            _reference_seasonal_naive(history, horizon, season),
        )


def test_seasonal_naive_keeps_float32() -> None:
    history = np.arange(12, dtype=np.float32).reshape(2, 6)
    result = seasonal_naive(history, horizon=2, season=3)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, [[3.0, 4.0], [9.0, 10.0]])


def test_seasonal_mean_ignores_nan_and_older_seasons() -> None:
    # Season 2, last 2 seasons [1, 2] and [NaN, 4]; the leading 100s are older.
    history = np.array([[100.0, 100.0, 1.0, 2.0, NAN, 4.0]])
    result = seasonal_mean(history, horizon=3, season=2, n_seasons=2)
    np.testing.assert_array_equal(result, [[1.0, 3.0, 1.0]])


def test_seasonal_mean_short_history_and_all_missing_phase() -> None:
    # T = 3, season 2: phase 0 sees column 1 only, phase 1 sees columns 2 and 0.
    np.testing.assert_allclose(seasonal_mean(np.array([[1.0, 2.0, 3.0]]), 2, 2), [[2.0, 2.0]])
    history = np.array([[NAN, 1.0, NAN, 3.0]])
    np.testing.assert_allclose(seasonal_mean(history, 2, 2), [[NAN, 2.0]])


def test_baseline_forecasts_by_steps_per_day() -> None:
    # Four weeks of daily values 0..27 (steps_per_day = 1).
    history = np.arange(28.0)[None, :]
    result = baseline_forecasts(history, horizon=2, steps_per_day=1)
    assert set(BASELINES) == {"seasonal_naive_day", "seasonal_naive_week", "mean_4_weeks"}
    assert set(result) == set(BASELINES)
    np.testing.assert_array_equal(result["seasonal_naive_day"], [[27.0, 27.0]])
    np.testing.assert_array_equal(result["seasonal_naive_week"], [[21.0, 22.0]])
    # Columns 21, 14, 7, 0 and 22, 15, 8, 1.
    np.testing.assert_allclose(result["mean_4_weeks"], [[10.5, 11.5]])


def test_baseline_forecasts_scale_season_with_steps_per_day() -> None:
    steps_per_day = 2
    history = np.arange(2.0 * 7 * steps_per_day)[None, :]  # two weeks, 28 steps
    result = baseline_forecasts(history, horizon=3, steps_per_day=steps_per_day)
    np.testing.assert_array_equal(result["seasonal_naive_day"], [[26.0, 27.0, 26.0]])
    np.testing.assert_array_equal(result["seasonal_naive_week"], [[14.0, 15.0, 16.0]])
    # Only two of the four weeks exist: columns 14 and 0, 15 and 1, 16 and 2.
    np.testing.assert_allclose(result["mean_4_weeks"], [[7.0, 8.0, 9.0]])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: seasonal_naive(np.zeros(5), 1, 1), "n_series, T"),
        (lambda: seasonal_naive(np.zeros((1, 5)), 1, 0), "season"),
        (lambda: seasonal_naive(np.zeros((1, 5)), 0, 1), "horizon"),
        (lambda: seasonal_mean(np.zeros((1, 5)), 1, 1, n_seasons=0), "n_seasons"),
        (lambda: baseline_forecasts(np.zeros((1, 5)), 1, 0), "steps_per_day"),
    ],
)
def test_invalid_arguments_are_refused(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()

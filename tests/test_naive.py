"""The simple forecasts the recalibration blends with the model (model.naive)."""

import numpy as np
import pytest

from kpi_forecast.model.features import NaiveSources
from kpi_forecast.model.naive import (
    NAIVES,
    last_season,
    naive_forecast,
    naive_forecasts,
    weekly_profile,
)
from tests.tolerance import rounding_tolerance

DAY = 24
WEEK = 7 * DAY


def weekly_series(weeks: int, cells: int = 3, seed: int = 0) -> np.ndarray:
    """Level x weekday factor x daily shape, the same every week: what the profile models."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(10, 100, (cells, 1, 1))
    factor = rng.uniform(0.6, 1.2, (cells, 7, 1))
    shape = 1.0 + 0.5 * np.sin(2 * np.pi * (np.arange(DAY) + rng.integers(0, DAY, (cells, 1, 1)))
                               / DAY)
    week = (level * factor * shape).reshape(cells, WEEK)
    return np.tile(week, (1, weeks)).astype(np.float32)


def test_on_weeks_that_repeat_the_profile_is_the_next_week() -> None:
    history = weekly_series(weeks=4)
    profile = weekly_profile(history, 2 * DAY, DAY)
    # Means, quotients and products of a few dozen float32 values, in float64.
    np.testing.assert_allclose(profile, history[:, :2 * DAY], rtol=0,
                               atol=rounding_tolerance(WEEK, history.max()))
    np.testing.assert_array_equal(last_season(history, 2 * DAY, WEEK), history[:, :2 * DAY])


def test_the_profile_follows_the_last_days_level_and_averages_the_noise_away() -> None:
    rng = np.random.default_rng(1)
    clean = weekly_series(weeks=8, cells=50)
    noisy = clean * rng.lognormal(0, 0.1, clean.shape).astype(np.float32)
    # The whole last day 20 % busier, as after a change of level that lasts.
    noisy[:, -DAY:] *= 1.2
    ahead = clean[:, :DAY] * 1.2
    profile, week = weekly_profile(noisy, DAY, DAY), last_season(noisy, DAY, WEEK)
    assert np.abs(profile - ahead).mean() < 0.5 * np.abs(week - ahead).mean()


def test_gaps_are_skipped_and_a_short_history_has_no_profile() -> None:
    history = weekly_series(weeks=3)
    gappy = history.copy()
    gappy[:, 10:40] = np.nan  # a gap in the first week: the other two weeks still tell
    gappy[1, -WEEK:] = np.nan  # cell 1's last week missing: its level is unknown
    profile = weekly_profile(gappy, DAY, DAY)
    assert not np.isnan(profile[[0, 2]]).any() and np.isnan(profile[1]).all()
    np.testing.assert_allclose(profile[[0, 2]], history[[0, 2], :DAY], rtol=0,
                               atol=rounding_tolerance(WEEK, history.max()))
    assert np.isnan(weekly_profile(history[:, : WEEK - 1], DAY, DAY)).all()
    zeros = np.zeros((1, 2 * WEEK), np.float32)  # nothing to scale a shape by
    assert np.isnan(weekly_profile(zeros, DAY, DAY)).all()


def test_every_naive_in_order() -> None:
    history = weekly_series(weeks=2)
    naives = naive_forecasts(history, DAY, DAY)
    assert naives.shape == (len(NAIVES), 3, DAY) and naives.dtype == np.float32
    np.testing.assert_array_equal(naives[0], history[:, -DAY:])
    np.testing.assert_array_equal(naives[1], history[:, -WEEK : -WEEK + DAY])
    np.testing.assert_array_equal(naives[2], weekly_profile(history, DAY, DAY))


def test_on_the_calendar_each_naive_reads_the_steps_it_is_given() -> None:
    """As ``model.features.naive_sources`` moves a holiday's steps to a Sunday's."""
    history = weekly_series(weeks=3)
    hours = np.tile(np.arange(DAY), (3, 1))
    # The first horizon day read from three days back, from nine, and, in the profile,
    # from the last week's last day; cell 2's week source lies before its history starts.
    week = hours - 9 * DAY
    week[2] -= 3 * WEEK
    sources = NaiveSources(day=hours - 3 * DAY, week=week, phase=hours - DAY)
    naives = naive_forecasts(history, DAY, DAY, sources)
    np.testing.assert_array_equal(naives[0], history[:, -3 * DAY : -2 * DAY])
    np.testing.assert_array_equal(naives[1, :2], history[:2, -9 * DAY : -8 * DAY])
    assert np.isnan(naives[1, 2]).all()
    # Weeks that repeat: the profile at the last day's phases is that day, not the next.
    np.testing.assert_allclose(naives[2], history[:, -DAY:], rtol=0,
                               atol=rounding_tolerance(WEEK, history.max()))
    assert np.abs(history[:, -DAY:] - history[:, :DAY]).max() > 1.0


def test_an_unknown_naive_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="'yesterday'.*last_day, last_week, weekly_profile"):
        naive_forecast("yesterday", weekly_series(weeks=1), DAY, DAY)

"""The simple forecasts the recalibration blends with the model (model.naive)."""

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.model.naive import (
    NAIVES,
    NaiveSources,
    naive_forecasts,
    naive_sources,
    seasonal_naive,
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
    np.testing.assert_array_equal(seasonal_naive(history, 2 * DAY, WEEK), history[:, :2 * DAY])


def test_the_profile_follows_the_last_days_level_and_averages_the_noise_away() -> None:
    rng = np.random.default_rng(1)
    clean = weekly_series(weeks=8, cells=50)
    noisy = clean * rng.lognormal(0, 0.1, clean.shape).astype(np.float32)
    # The whole last day 20 % busier, as after a change of level that lasts.
    noisy[:, -DAY:] *= 1.2
    ahead = clean[:, :DAY] * 1.2
    profile, week = weekly_profile(noisy, DAY, DAY), seasonal_naive(noisy, DAY, WEEK)
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
    """As ``model.naive.naive_sources`` moves a holiday's steps to a Sunday's."""
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
        naive_forecasts(weekly_series(weeks=1), DAY, DAY, names=("yesterday",))


def wall_clock_series(stamps: pd.DatetimeIndex) -> np.ndarray:
    """A load that follows the Paris wall clock, the same every week: a weekday level times
    a daily shape whose every hour differs."""
    local = stamps.tz_convert("Europe/Paris").tz_localize(None)
    day = (local - local.normalize()) / pd.Timedelta("1D")
    shape = 2.0 + np.sin(2 * np.pi * day) + 0.5 * np.cos(6 * np.pi * day)
    return ((10.0 + 3.0 * local.day_of_week) * shape).to_numpy().astype(np.float32)


@pytest.mark.parametrize("step", ["1h", "15min"])
@pytest.mark.parametrize("end, horizon_days", [
    ("2025-04-01 23:00", 1),  # a week after the clocks went forward: last week's is before
    ("2025-10-28 23:00", 1),  # ... went back
    ("2025-03-29 23:00", 2),  # the horizon holds the hour the clock skips
    ("2025-10-25 23:00", 2),  # ... the hour it repeats
])
def test_across_a_dst_switch_the_naives_read_the_same_local_time(
        step: str, end: str, horizon_days: int) -> None:
    step_td = pd.Timedelta(step)
    per_day = int(pd.Timedelta("1D") / step_td)
    horizon, weeks = horizon_days * per_day, 3
    last = pd.DatetimeIndex([pd.Timestamp(end, tz="Europe/Paris")])
    stamps = pd.DatetimeIndex(last[0].tz_convert("UTC")
                              + step_td * np.arange(1 - weeks * 7 * per_day, horizon + 1))
    values = wall_clock_series(stamps)[None]
    history, actual = values[:, :-horizon], values[0, -horizon:]
    sources = naive_sources(last, horizon, step_td, "Europe/Paris", "", 8 * 7 * per_day)
    assert sources is not None and sources.wall is not None
    naives = naive_forecasts(history, horizon, per_day, sources)
    tolerance = rounding_tolerance(7 * per_day, values.max())
    # Last week's values and the weekly profile are the horizon itself: the load repeats
    # every week on the wall clock.
    np.testing.assert_array_equal(naives[1, 0], actual)
    np.testing.assert_allclose(naives[2, 0], actual, rtol=0, atol=tolerance)
    # The last day's values: the same local time a day before, the last day again after it.
    local = stamps[-horizon:].tz_convert("Europe/Paris").tz_localize(None)
    local_end = last[0].tz_localize(None)
    days_back = 1 + ((local - local_end) // step_td - 1) // per_day
    expected = wall_clock_series((local - pd.to_timedelta(days_back, "D"))
                                 .tz_localize("Europe/Paris", ambiguous="NaT"))
    np.testing.assert_array_equal(naives[0, 0], expected)
    # Read in UTC steps, 168 hours back is an hour off the local time for a week.
    plain = naive_forecasts(history, horizon, per_day)
    assert np.abs(plain[1, 0] - actual).max() > 1.0


def test_rows_far_from_a_switch_read_as_before_beside_rows_across_one() -> None:
    hour, per_day = pd.Timedelta("1h"), 24
    ends = pd.DatetimeIndex([pd.Timestamp("2025-04-01 23:00", tz="Europe/Paris"),
                             pd.Timestamp("2025-06-10 23:00", tz="Europe/Paris")] * 2)
    rng = np.random.default_rng(0)
    history = rng.uniform(10, 100, (4, 3 * WEEK)).astype(np.float32)
    sources = naive_sources(ends, per_day, hour, "Europe/Paris", "", 8 * WEEK)
    assert sources is not None and sources.wall is not None
    naives = naive_forecasts(history, per_day, per_day, sources)
    plain = naive_forecasts(history, per_day, per_day)
    np.testing.assert_array_equal(naives[:, 1::2], plain[:, 1::2])  # 8 weeks after the switch
    assert np.abs(naives[1, ::2] - plain[1, ::2]).max() > 0  # a week after it
    # A batch split in blocks (the runtime's) reads each block's rows alike.
    halves = [naive_forecasts(history[r], per_day, per_day, sources.rows(r))
              for r in (slice(0, 1), slice(1, 4))]
    np.testing.assert_array_equal(np.concatenate(halves, axis=1), naives)
    # No calendar with DST, or no switch within the naives' reach: nothing moves.
    assert naive_sources(ends[1:2], per_day, hour, "Europe/Paris", "", 8 * WEEK) is None
    assert naive_sources(ends, per_day, hour, "+01:00", "", 8 * WEEK) is None

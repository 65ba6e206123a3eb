"""Calendar features: local wall clock, DST, public holidays, and the per-window shortcut."""

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.model.features import (
    HOLIDAY,
    N_CALENDAR,
    N_CYCLIC,
    calendar_features,
    calendar_zone,
    check_holidays,
    distinct_ends,
    forecast_calendar,
    sunday_sources,
    window_calendar,
)
from kpi_forecast.model.naive import naive_sources
from tests.tolerance import rounding_tolerance


def from_pandas_fields(stamps: pd.DatetimeIndex, zone: str) -> np.ndarray:
    """The features written out with pandas' own field accessors, as the reference."""
    local = stamps.tz_convert(calendar_zone(zone))
    day = (local.hour + local.minute / 60 + local.second / 3600).to_numpy() / 24
    week = (local.day_of_week.to_numpy() + day) / 7
    return np.stack([np.sin(2 * np.pi * day), np.cos(2 * np.pi * day),
                     np.sin(2 * np.pi * week), np.cos(2 * np.pi * week)], axis=-1)


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/Sao_Paulo", "+05:30", "-03:00", "UTC"])
@pytest.mark.parametrize(("start", "freq"), [("2024-03-28", "15min"), ("2024-10-25", "1h"),
                                             ("1969-12-25", "1h")])
def test_features_follow_the_local_wall_clock(zone: str, start: str, freq: str) -> None:
    stamps = pd.date_range(start, periods=7 * 24 * 4, freq=freq, tz="UTC")
    features = calendar_features(stamps, zone)
    # Computed in float64, then stored in float32: one rounding of a number no larger than 1.
    np.testing.assert_allclose(features[:, :N_CYCLIC], from_pandas_fields(stamps, zone),
                               rtol=0, atol=rounding_tolerance(1, 1.0))
    assert not features[:, HOLIDAY].any()  # no holiday calendar, no holidays


def test_dst_switch_moves_the_hour_features() -> None:
    # 2024-03-31 01:00 UTC: Paris goes from 02:00 CET straight to 03:00 CEST.
    stamps = pd.DatetimeIndex(["2024-03-31 00:00", "2024-03-31 01:00"], tz="UTC")
    features = calendar_features(stamps, "Europe/Paris")
    hours = np.mod(np.arctan2(features[:, 0], features[:, 1]) / (2 * np.pi) * 24, 24)
    # The angle back from a float32 sine and cosine, in hours: a few roundings of up to 24.
    np.testing.assert_allclose(hours, [1.0, 3.0], rtol=0, atol=rounding_tolerance(4, 24.0))


def test_windows_sharing_an_end_are_identical_and_in_input_order() -> None:
    ends = pd.DatetimeIndex(["2024-03-31 05:00", "2024-01-02 00:00", "2024-03-31 05:00"],
                            tz="UTC")
    windows = window_calendar(ends, 48, pd.Timedelta("1h"), "Europe/Paris")
    assert windows.shape == (3, 48, N_CALENDAR)
    np.testing.assert_array_equal(windows[0], windows[2])
    for row, end in enumerate(ends):
        stamps = pd.date_range(end=end, periods=48, freq="1h")
        np.testing.assert_array_equal(windows[row], calendar_features(stamps, "Europe/Paris"))


def test_a_cached_window_cannot_be_corrupted_by_its_caller() -> None:
    end = pd.DatetimeIndex([pd.Timestamp("2024-10-27 03:00", tz="UTC")] * 2)
    first = window_calendar(end, 24, pd.Timedelta("1h"), "Europe/Paris")
    expected = calendar_features(pd.date_range(end=end[0], periods=24, freq="1h"), "Europe/Paris")
    np.testing.assert_array_equal(first[1], expected)
    first[:] = 0.0
    again = window_calendar(end[:1], 24, pd.Timedelta("1h"), "Europe/Paris")
    np.testing.assert_array_equal(again[0], expected)


def test_a_holiday_is_its_local_date() -> None:
    # Easter Monday 2024 in Paris (UTC+2) runs from 2024-03-31 22:00 to 2024-04-01 22:00 UTC.
    stamps = pd.date_range("2024-03-31 20:00", "2024-04-01 23:00", freq="1h", tz="UTC")
    flags = calendar_features(stamps, "Europe/Paris", "FR")[:, HOLIDAY]
    expected = (stamps >= "2024-03-31 22:00") & (stamps < "2024-04-01 22:00")
    np.testing.assert_array_equal(flags, expected.astype(np.float32))
    # The same hours are no holiday in New York, nor anywhere for a country without it.
    assert not calendar_features(stamps, "America/New_York", "US")[:, HOLIDAY].any()


def test_a_holiday_takes_sundays_place_in_the_week() -> None:
    # Whit Monday 2024 (20 May) in Paris, beside the Sunday before it and the Monday after.
    def day(date: str, as_sunday: bool = True) -> np.ndarray:
        stamps = pd.date_range(date, periods=24, freq="1h", tz="Europe/Paris")
        return calendar_features(stamps, "Europe/Paris", "FR", as_sunday)

    holiday, sunday, monday = day("2024-05-20"), day("2024-05-19"), day("2024-05-27")
    np.testing.assert_array_equal(holiday[:, :N_CYCLIC], sunday[:, :N_CYCLIC])
    assert holiday[:, HOLIDAY].all() and not sunday[:, HOLIDAY].any()
    # Read as the weekday it falls on, as models trained before this encoding read it.
    np.testing.assert_array_equal(day("2024-05-20", as_sunday=False)[:, :N_CYCLIC],
                                  monday[:, :N_CYCLIC])
    # A holiday at the weekend (11 November 2023, a Saturday) keeps its day.
    saturday = day("2023-11-11")
    assert saturday[:, HOLIDAY].all()
    np.testing.assert_array_equal(saturday[:, :N_CYCLIC], day("2023-11-04")[:, :N_CYCLIC])
    # Without a holiday calendar nothing moves.
    plain = calendar_features(pd.date_range("2024-05-20", periods=24, freq="1h",
                                            tz="Europe/Paris"), "Europe/Paris")
    np.testing.assert_array_equal(plain[:, :N_CYCLIC], monday[:, :N_CYCLIC])


def test_a_working_day_holiday_takes_the_forecast_of_the_nearest_sunday_ahead() -> None:
    hour = pd.Timedelta("1h")
    # A week from Tuesday 24 December 2024 00:00 in Paris: Christmas (Wednesday, steps 24-47)
    # takes Sunday 29 December's steps (120-143), four days on, hour for hour.
    last = pd.DatetimeIndex([pd.Timestamp("2024-12-23 23:00", tz="Europe/Paris")])
    sources = sunday_sources(last, 168, hour, "Europe/Paris", "FR")[0]
    expected = np.arange(168)
    expected[24:48] = np.arange(120, 144)
    np.testing.assert_array_equal(sources, expected)
    # From Monday 30 December, 29 December is behind the horizon: New Year's Day (steps 48-71)
    # takes Sunday 5 January's (144-167), the only Sunday ahead.
    week = sunday_sources(pd.DatetimeIndex([pd.Timestamp("2024-12-29 23:00", tz="Europe/Paris")]),
                          168, hour, "Europe/Paris", "FR")[0]
    np.testing.assert_array_equal(week[48:72], np.arange(144, 168))
    np.testing.assert_array_equal(np.delete(week, np.s_[48:72]),
                                  np.delete(np.arange(168), np.s_[48:72]))
    # Over two weeks from 24 December, New Year's Day (steps 192-215) takes the nearer of
    # 29 December (three days back) and 5 January (four on).
    fortnight = sunday_sources(last, 336, hour, "Europe/Paris", "FR")[0]
    np.testing.assert_array_equal(fortnight[192:216], np.arange(120, 144))
    np.testing.assert_array_equal(fortnight[24:48], np.arange(120, 144))
    # Nothing moves with no Sunday in the horizon, a holiday at the weekend (11 November 2023
    # is a Saturday), no holiday calendar, or a step that does not divide a day.
    def unmoved(end: str, horizon: int, step: pd.Timedelta = hour, holidays: str = "FR") -> None:
        stamps = pd.DatetimeIndex([pd.Timestamp(end, tz="Europe/Paris")])
        np.testing.assert_array_equal(
            sunday_sources(stamps, horizon, step, "Europe/Paris", holidays)[0],
            np.arange(horizon))

    unmoved("2024-12-23 23:00", 48)
    unmoved("2023-11-05 23:00", 168)
    unmoved("2024-12-23 23:00", 168, holidays="")
    unmoved("2024-12-23 23:00", 168 * 60 // 7, pd.Timedelta("7min"))


def test_the_naives_read_a_working_day_holiday_as_a_sunday() -> None:
    hour, reach = pd.Timedelta("1h"), 8 * 168

    def sources(end: str, horizon: int = 24, step: pd.Timedelta = hour, holidays: str = "FR"):
        return naive_sources(pd.DatetimeIndex([pd.Timestamp(end, tz="Europe/Paris")]),
                             horizon, step, "Europe/Paris", holidays, reach)

    day = np.arange(24)
    # Christmas 2024, a Wednesday: the last day's values are Sunday 22 December's (three days
    # before the history's last, a Tuesday), the last week's Sunday 15 December's (three
    # before Wednesday 18), the weekly profile's its Sunday, in the history's last week.
    christmas = sources("2024-12-24 23:00")
    np.testing.assert_array_equal(christmas.day[0], day - 72)
    np.testing.assert_array_equal(christmas.week[0], day - 240)
    np.testing.assert_array_equal(christmas.phase[0], day - 72)
    # New Year's Day: its week-old source, Christmas, is a day off already and stays.
    new_year = sources("2024-12-31 23:00")
    np.testing.assert_array_equal(new_year.day[0], day - 72)
    np.testing.assert_array_equal(new_year.week[0], day - 168)
    # Over a week from Tuesday 24 December only Christmas Day's steps (24-47) move: the last
    # day repeated is Monday's, its Sunday the day before; a week before is Wednesday 18.
    week = sources("2024-12-23 23:00", horizon=168)
    plain_day, plain_week = np.arange(168) % 24 - 24, np.arange(168) - 168
    np.testing.assert_array_equal(week.day[0, 24:48], day - 48)
    np.testing.assert_array_equal(week.week[0, 24:48], day - 216)
    for found, plain in ((week.day, plain_day), (week.week, plain_week)):
        np.testing.assert_array_equal(np.delete(found[0], np.s_[24:48]),
                                      np.delete(plain, np.s_[24:48]))
    # Wednesday 8 January 2025: a week before was New Year's Day and two weeks before
    # Christmas, so the last week's values are Wednesday 18 December's; its last day's stay.
    after = sources("2025-01-07 23:00")
    np.testing.assert_array_equal(after.week[0], day - 3 * 168)
    np.testing.assert_array_equal(after.day[0], day - 24)
    # ... as far back as the history the naives read: two weeks reach Christmas, no further.
    short = naive_sources(pd.DatetimeIndex([pd.Timestamp("2025-01-07 23:00", tz="Europe/Paris")]),
                          24, hour, "Europe/Paris", "FR", 2 * 168)
    np.testing.assert_array_equal(short.week[0], day - 2 * 168)
    # Boxing Day is a working day in France, 11 November 2023 a Saturday: nothing moves;
    # no calendar, or a step that does not divide a day: nothing to move.
    for end in ("2024-12-25 23:00", "2023-11-10 23:00"):
        plain = sources(end)
        for found, period in ((plain.day, 24), (plain.week, 168), (plain.phase, 168)):
            np.testing.assert_array_equal(found[0], day - period)
    assert sources("2024-12-24 23:00", holidays="") is None
    assert sources("2024-12-24 23:00", step=pd.Timedelta("7min")) is None


def test_a_subdivision_adds_its_own_holidays() -> None:
    saint_ambrose = pd.date_range("2013-12-07", periods=24, freq="1h", tz="+01:00")
    assert calendar_features(saint_ambrose, "+01:00", "IT-MI")[:, HOLIDAY].all()
    assert not calendar_features(saint_ambrose, "+01:00", "IT")[:, HOLIDAY].any()


@pytest.mark.parametrize("name", ["XX", "it", "IT-mi", "FR-75", "FR-"])
def test_an_unknown_holiday_calendar_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="unknown holiday calendar"):
        check_holidays(name)


def test_the_forecast_calendar_runs_on_over_the_horizon() -> None:
    last = pd.DatetimeIndex(["2024-04-30 21:00", "2024-04-30 05:00"], tz="UTC")
    features = forecast_calendar(last, 48, 24, pd.Timedelta("1h"), "Europe/Paris", "FR")
    assert features.shape == (2, 72, N_CALENDAR)
    for row, end in enumerate(last):
        stamps = pd.date_range(end=end, periods=48, freq="1h").append(
            pd.date_range(end + pd.Timedelta("1h"), periods=24, freq="1h"))
        np.testing.assert_array_equal(features[row],
                                      calendar_features(stamps, "Europe/Paris", "FR"))
    # 1 May (Labour Day) fills the whole horizon of the window ending at local midnight.
    assert features[0, 48:, HOLIDAY].all() and not features[0, :48, HOLIDAY].any()


def test_distinct_ends_are_utc_nanoseconds_whatever_the_unit_and_zone() -> None:
    stamps = pd.DatetimeIndex(["2025-05-20 23:00", "2025-05-20 22:00", "2025-05-20 23:00"],
                              tz="Europe/Paris")
    utc = stamps.tz_convert("UTC").as_unit("ns").asi8
    for last in (stamps, stamps.as_unit("s")):
        ends, inverse = distinct_ends(last)
        np.testing.assert_array_equal(ends[inverse], utc)
        assert len(ends) == 2
        one, row = distinct_ends(last[:1])
        np.testing.assert_array_equal(one[row], utc[:1])

"""The network reads its window and horizon on the calendar's wall clock across a DST switch:
the training windows are cut on it, and the runtime reads a window across a switch as they
were cut, so a load that repeats on the wall clock gives the network the same input on
either side of a switch."""


import numpy as np
import pandas as pd
import pytest

from kpi_forecast.data.panel import Panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import calendar_features, forecast_calendar, wall_clock_places
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions, fit_to_width
from kpi_forecast.training.windows import Windows
from tests.exported_model import exported_copy
from tests.tolerance import network_tolerance

PARIS = "Europe/Paris"
CONTEXT, HORIZON = 72, 12
WEEKS_LATER = pd.Timedelta(weeks=3)


def wall_clock_load(stamps: pd.DatetimeIndex) -> np.ndarray:
    """A load that is a function of the Paris wall clock's hour of the week alone."""
    local = stamps.tz_convert(PARIS)
    hour_of_week = np.asarray(local.day_of_week * 24 + local.hour)
    return (50 + 30 * np.sin(2 * np.pi * hour_of_week / 24) + hour_of_week / 10).astype(
        np.float32)


def test_places_skip_the_hour_a_clock_goes_forward_and_repeat_the_one_it_goes_back() -> None:
    spring = pd.date_range("2025-03-29 23:00", periods=6, freq="1h", tz="UTC")
    np.testing.assert_array_equal(wall_clock_places(spring, PARIS), [0, 1, 3, 4, 5, 6])
    autumn = pd.date_range("2025-10-25 23:00", periods=5, freq="1h", tz="UTC")
    np.testing.assert_array_equal(wall_clock_places(autumn, PARIS), [0, 1, 1, 2, 3])
    quarter = pd.date_range("2025-03-30 00:30", periods=4, freq="15min", tz="UTC")
    np.testing.assert_array_equal(wall_clock_places(quarter, PARIS), [0, 1, 6, 7])
    # No change of offset, a fixed offset, or daily steps that do not divide the hour.
    assert wall_clock_places(pd.date_range("2025-05-01", periods=48, freq="1h", tz="UTC"),
                             PARIS) is None
    assert wall_clock_places(spring, "+01:00") is None
    assert wall_clock_places(spring, "UTC") is None
    assert wall_clock_places(pd.date_range("2025-03-20", periods=20, freq="1D", tz="UTC"),
                             PARIS) is None


def test_training_windows_across_a_switch_are_cut_on_the_wall_clock() -> None:
    index = pd.date_range("2025-03-20 23:00", "2025-04-10 22:00", freq="1h", tz="UTC")
    values = np.stack([wall_clock_load(index), 2 * wall_clock_load(index)])
    panel = Panel(["a", "b"], index, values, "1h", "kpi", calendar_tz=PARIS)
    plain = Windows.from_panel(panel, CONTEXT, HORIZON)
    wall = Windows.from_panel(panel, CONTEXT, HORIZON, wall_clock=True)
    # One step more: the hour the clock skipped, missing in every cell.
    assert wall.values.shape[1] == panel.n_steps + 1
    skipped = np.flatnonzero(np.isnan(wall.values).any(axis=0))
    np.testing.assert_array_equal(skipped, [9 * 24 + 2])  # 02:00 on 30 March, local
    # A week apart on the wall clock is a week apart in the load, across the switch too.
    week = 7 * 24
    both = ~np.isnan(wall.values[:, week:]) & ~np.isnan(wall.values[:, :-week])
    np.testing.assert_array_equal(wall.values[:, week:][both], wall.values[:, :-week][both])
    # In UTC steps the week before the switch is an hour off the week after it.
    assert (plain.values[:, week:] != plain.values[:, :-week]).any()
    # The calendar is the local one: the same features as the panel's at the same moment.
    np.testing.assert_array_equal(
        wall.calendar[np.flatnonzero(~np.isnan(wall.values[0]))],
        calendar_features(index, PARIS))
    # Every window pair reads the same kind of batch as before.
    pairs = wall.pairs(0, wall.values.shape[1])
    context, calendar, target = wall.batch(pairs[:5])
    assert context.shape == (5, CONTEXT) and calendar.shape[1] == CONTEXT + HORIZON
    assert target.shape == (5, HORIZON)
    # Steps here map back to the panel's: before the switch the same, after it one less.
    assert wall.panel_step(24) == 24
    assert wall.panel_step(9 * 24 + 2) == wall.panel_step(9 * 24 + 3) == 9 * 24 + 2
    assert wall.panel_step(wall.values.shape[1] - 1) == panel.n_steps - 1
    assert plain.panel_step(100) == 100


@pytest.fixture(scope="module")
def wall(tmp_path_factory: pytest.TempPathFactory) -> OnnxForecaster:
    """A graph of Paris's calendar: the runtime reads its windows on the wall clock."""
    model_dir = exported_copy(tmp_path_factory.mktemp("wall") / "model", CONTEXT, HORIZON)
    return OnnxForecaster(model_dir, RuntimeOptions(provider="cpu", intra_op_threads=1))


def in_utc_steps(model: OnnxForecaster, history: np.ndarray, last: pd.Timestamp) -> np.ndarray:
    """The same graph fed UTC steps, as no runtime reads it: the contrast that shows the
    switch mattered."""
    calendar = forecast_calendar(pd.DatetimeIndex([last]), CONTEXT, HORIZON, pd.Timedelta("1h"),
                                 PARIS)
    return model.run(fit_to_width(history, CONTEXT), calendar)


def history_until(last: pd.Timestamp, steps: int = 200) -> np.ndarray:
    return wall_clock_load(pd.date_range(end=last, periods=steps, freq="1h"))[None]


def tolerance(*forecasts: np.ndarray) -> float:
    return network_tolerance(ModelConfig(CONTEXT, HORIZON),
                             max(float(np.abs(f).max()) for f in forecasts))


def test_a_window_across_the_spring_switch_reads_as_one_without_it(
        wall: OnnxForecaster) -> None:
    across = pd.Timestamp("2025-04-01 21:00", tz="UTC")  # its context holds 30 March
    later = across + WEEKS_LATER  # the same local time and weekday, no switch in reach
    history, later_history = history_until(across), history_until(later)
    # The wall-clock window has no 02:00 on 30 March: the later one misses the same hour.
    stamps = pd.date_range(end=later, periods=later_history.shape[1], freq="1h")
    later_history[0, stamps == pd.Timestamp("2025-04-20 02:00", tz=PARIS)] = np.nan
    got = wall.forecast(history, pd.DatetimeIndex([across]))
    expected = wall.forecast(later_history, pd.DatetimeIndex([later]))
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance(got, expected))
    # In UTC steps the days before the switch are an hour off.
    got, expected = in_utc_steps(wall, history, across), in_utc_steps(wall, later_history, later)
    assert np.abs(got - expected).max() > 10 * tolerance(got, expected)


def test_a_horizon_across_the_autumn_switch_forecasts_the_repeated_hour_twice(
        wall: OnnxForecaster) -> None:
    across = pd.Timestamp("2025-10-25 23:00", tz="UTC")  # 01:00 local; 02:00 comes twice
    later = across + WEEKS_LATER + pd.Timedelta("1h")  # 01:00 local three weeks later
    assert later.tz_convert(PARIS).hour == across.tz_convert(PARIS).hour == 1
    got = wall.forecast(history_until(across), pd.DatetimeIndex([across]))
    expected = wall.forecast(history_until(later), pd.DatetimeIndex([later]))
    # UTC steps 0 and 1 are both 02:00 on the wall clock; step j > 0 is its step j - 1.
    wall_steps = [0, *range(HORIZON - 1)]
    np.testing.assert_allclose(got, expected[:, wall_steps], rtol=0,
                               atol=tolerance(got, expected))
    # A model read in UTC steps forecasts twelve different hours.
    plain = in_utc_steps(wall, history_until(across), across)
    assert np.abs(plain[:, 0] - plain[:, 1]).max() > 10 * tolerance(plain)


def test_rows_with_and_without_a_switch_in_one_batch_read_as_alone(
        wall: OnnxForecaster) -> None:
    ends = pd.DatetimeIndex(["2025-04-01 21:00", "2025-05-06 21:00", "2025-10-25 23:00",
                             "2025-04-01 21:00"], tz="UTC")
    history = np.concatenate([history_until(end) for end in ends])
    together = wall.forecast(history, ends)
    alone = np.concatenate([wall.forecast(history[i : i + 1], ends[i : i + 1])
                            for i in range(len(ends))])
    np.testing.assert_allclose(together, alone, rtol=0, atol=tolerance(together, alone))
    # A history shorter than the context and the day a clock gone back reads is padded.
    short = wall.forecast(history[:1, -CONTEXT:], ends[:1])
    assert np.isfinite(short).all()

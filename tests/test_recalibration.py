"""Quantiles recalibrated on the recent windows of a history (model.recalibration)."""


import json
from pathlib import Path

import holidays
import numpy as np
import pandas as pd
import pytest

from kpi_forecast.model import recalibration as recalibration_module
from kpi_forecast.model.artifact import METADATA_FILE
from kpi_forecast.model.naive import naive_forecasts, seasonal_naive
from kpi_forecast.model.recalibration import (
    BLEND_SPANS,
    LEVEL_STEPS,
    MIN_BLEND_POINTS,
    MIN_RESIDUALS,
    SHARES,
    Recalibration,
    best_shares,
    covering_level,
    recalibration,
    week_of_windows,
)
from kpi_forecast.model.runtime import OnnxForecaster
from tests.exported_model import exported, exported_copy
from tests.tolerance import rounding_tolerance

CONTEXT, HORIZON = 72, 12
LEVELS = np.array([0.1, 0.5, 0.9])


@pytest.fixture(scope="module")
def forecaster(tmp_path_factory: pytest.TempPathFactory) -> OnnxForecaster:
    return OnnxForecaster(exported_copy(tmp_path_factory.mktemp("recalibration") / "model",
                                         CONTEXT, HORIZON))


def series(cells: int, steps: int, seed: int = 0) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """Daily-seasonal load with noise, and the timestamp of each row's last step."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    level = rng.uniform(20, 200, (cells, 1))
    values = level * (1.5 + np.sin(2 * np.pi * t / 24)) * rng.lognormal(0, 0.3, (cells, steps))
    last = pd.DatetimeIndex([pd.Timestamp("2024-03-30 23:00", tz="UTC")] * cells)
    return values.astype(np.float32), last


def window_forecasts(forecaster: OnnxForecaster, history: np.ndarray, last: pd.DatetimeIndex,
                     windows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The forecasts of the ``windows`` horizons ending the history, their contexts and their
    actuals."""
    n = history.shape[1]
    forecasts, contexts, actuals = [], [], []
    for i in range(1, windows + 1):
        end = n - i * HORIZON
        contexts.append(history[:, end - CONTEXT : end])
        forecasts.append(forecaster.forecast(contexts[-1], last - i * HORIZON * forecaster.step))
        actuals.append(history[:, end : end + HORIZON])
    return np.concatenate(forecasts), np.concatenate(contexts), np.concatenate(actuals)


def test_each_level_holds_again_on_the_windows_it_came_from(forecaster: OnnxForecaster) -> None:
    history, last = series(cells=20, steps=CONTEXT + 6 * HORIZON)
    fitted = recalibration(forecaster, history, last, windows=6)
    assert fitted.windows == 6 and fitted.residuals == 20 * 6 * HORIZON
    forecast, contexts, actual = window_forecasts(forecaster, history, last, 6)
    adjusted = fitted.apply(forecast, contexts)
    below_before = (actual[..., None] <= forecast).mean(axis=(0, 1))
    below_after = (actual[..., None] <= adjusted).mean(axis=(0, 1))
    # An untrained network's outer levels are far off; moved, they hold at the levels their
    # residuals were read at (as far out as held-out windows needed: a few grid steps here),
    # to within the quantile's interpolation between neighbouring residuals: a few points of
    # the 1440, so under 0.01 (counting, not rounding).
    assert np.abs(below_before - LEVELS)[[0, 2]].max() > 0.1
    assert fitted.read_at[0] <= 0.1 <= 0.9 <= fitted.read_at[2]
    assert np.abs(below_after - np.array(fitted.read_at))[[0, 2]].max() < 0.01
    # Its median does worse than yesterday's values: the blend takes some of them, at the
    # grid shares with the lowest error on these windows. The history is shorter than a
    # week: the last week and the weekly profile have no value, so they get no share.
    naives = naive_forecasts(contexts, HORIZON, 24)
    assert np.isnan(naives[1:]).all() and fitted.shares[2:] == (0.0, 0.0)
    assert fitted.shares == best_shares(forecast[..., 1], naives, actual, ~np.isnan(actual))
    assert fitted.weight < 1
    day = naives[0]
    blend = fitted.weight * forecast[..., 1] + fitted.shares[1] * day
    # Two products and a sum in float32, of numbers no larger than the larger of the two.
    np.testing.assert_allclose(adjusted[..., 1], blend, rtol=0, atol=rounding_tolerance(
        3, np.nanmax(np.abs(np.stack([forecast[..., 1], day])))))
    error = {m: np.abs(m * forecast[..., 1] + d * day - actual).mean()
             for m, d, w, p in SHARES if w == p == 0}
    assert min(error, key=error.get) == fitted.weight


class ZeroBand:
    """The exported network's contract, forecasting 0 at every level: a model that has not
    learnt a spread (the long-context mode after under one epoch), its band zero wide."""

    def __init__(self, model: OnnxForecaster) -> None:
        self.metadata, self.step = model.metadata, model.step

    def forecast(self, contexts: np.ndarray, stamps: pd.DatetimeIndex) -> np.ndarray:
        return np.zeros((len(contexts), HORIZON, len(LEVELS)), np.float32)


def test_a_zero_wide_band_is_opened_in_units_of_the_day_to_day_change(
        forecaster: OnnxForecaster) -> None:
    model = ZeroBand(forecaster)
    history, last = series(cells=20, steps=CONTEXT + 6 * HORIZON)
    fitted = recalibration(model, history, last, windows=6)
    # No band to scale: no offsets in its units; the flat points' own, below and above.
    assert fitted.offsets.tolist() == [0.0, 0.0, 0.0] and fitted.read_at == ()
    assert fitted.flat_offsets[0] < 0.0 == fitted.flat_offsets[1] < fitted.flat_offsets[2]
    assert fitted.residuals == 20 * 6 * HORIZON
    assert "where the band is zero wide: p10 -" in fitted.describe(["p10", "p50", "p90"])
    forecast, contexts, actual = window_forecasts(model, history, last, 6)
    adjusted = fitted.apply(forecast, contexts)
    # Blended onto the naives, the median moves, but alone it covers nothing; opened, the
    # band holds at least its 0.8, read as far out as held-out windows needed, less the
    # quantile's interpolation between neighbouring residuals (a few of the 1440 points).
    median = adjusted[..., 1]
    assert ((actual >= median) & (actual <= median)).mean() < 0.01
    assert ((actual >= adjusted[..., 0]) & (actual <= adjusted[..., 2])).mean() >= 0.79
    # A band that is not zero wide keeps none of this.
    assert recalibration(forecaster, history, last, windows=6).flat_offsets.size == 0


def test_the_shares_are_the_grid_point_closest_to_the_actuals() -> None:
    rng = np.random.default_rng(1)
    model, day, week, profile = (rng.random((50, HORIZON)) for _ in range(4))
    naives = np.stack([day, week, profile])
    scored = np.ones_like(model, bool)
    mixed = 0.4 * model + 0.2 * day + 0.3 * week + 0.1 * profile
    assert best_shares(model, naives, mixed, scored) == pytest.approx((0.4, 0.2, 0.3, 0.1))
    assert best_shares(model, naives, model, scored) == (1.0, 0.0, 0.0, 0.0)
    # Any naive alone: the grid runs to the model's share 0.
    for i, naive in enumerate(naives):
        assert best_shares(model, naives, naive, scored) == tuple(
            float(k == i + 1) for k in range(4))
    # Where a naive is missing the model stands in for it, so it cannot pull the shares.
    gappy = np.where(rng.random(day.shape) < 0.5, np.nan, day)
    none = np.full_like(week, np.nan)
    assert best_shares(model, np.stack([gappy, none, none]), model, scored) == (1.0, 0, 0, 0)


def test_on_weeks_that_repeat_the_median_is_last_week(tmp_path: Path) -> None:
    """A forecast that loses to last week's values, on data whose weeks repeat, is replaced by
    them: the forecast a user could have copied."""
    context = 2 * 168
    model = exported(tmp_path / "model", context, HORIZON)[1]
    t = np.arange(context + 7 * HORIZON)
    rng = np.random.default_rng(2)
    level = rng.uniform(20, 200, (20, 1))
    weekly = level * (2 + np.sin(2 * np.pi * t / 24) * (0.5 + 0.5 * (t // 24 % 7 >= 5)))
    history = (weekly * rng.lognormal(0, 0.01, weekly.shape)).astype(np.float32)
    last = pd.DatetimeIndex([pd.Timestamp("2024-03-30 23:00", tz="UTC")] * 20)
    fitted = recalibration(model, history, last, windows=7)
    shares = fitted.naive_shares()
    # Last week's values, or the profile of the last weeks, which repeat them: the model's
    # own median takes no share.
    assert shares["last_week"] + shares["weekly_profile"] >= 0.9 and fitted.weight == 0.0
    assert "0.00 model + " in fitted.describe(["p10", "p50", "p90"])
    # Applied to the next forecast, the median is (nearly) last week's values again.
    window = history[:, -context:]
    median = fitted.apply(model.forecast(window, last), window)[..., 1]
    naive = seasonal_naive(window, HORIZON, 168)
    own = model.forecast(window, last)[..., 1]
    assert np.abs(median - naive).mean() < 0.1 * np.abs(own - naive).mean()


def test_a_holiday_is_blended_with_a_sundays_values_where_the_model_has_a_calendar(
    tmp_path: Path,
) -> None:
    """Working days one shape, weekends and French holidays another; Christmas 2024 is a
    Wednesday. Where the model knows the holidays, the naives read Christmas as a Sunday,
    and the blend fitted on the recent windows forecasts it; without, it reads a Wednesday."""
    stamps = pd.date_range("2024-11-04", "2024-12-25 23:00", freq="1h", tz="Europe/Paris")
    off = (stamps.day_of_week >= 5) | np.isin(stamps.date, list(holidays.France(years=2024)))
    hours = 2 * np.pi * stamps.hour.to_numpy() / 24
    shape = np.where(off, 0.5 + 0.2 * np.cos(hours), 2.0 + np.sin(hours))
    history = (np.array([[20.0], [70.0], [150.0], [300.0]]) * shape).astype(np.float32)
    last = pd.DatetimeIndex([stamps[-1]] * 4)
    christmas = slice(-24, -12)  # its first 12 hours, one horizon
    errors = {}
    for calendar in ("FR", ""):
        model_dir = exported_copy(tmp_path / f"model{calendar}", CONTEXT, HORIZON)
        meta = json.loads((model_dir / METADATA_FILE).read_text())
        meta.update(holidays=calendar, calendar_tz="Europe/Paris")
        (model_dir / METADATA_FILE).write_text(json.dumps(meta))
        model = OnnxForecaster(model_dir)
        fitted = recalibration(model, history, last, week_of_windows(HORIZON, model.step))
        before = history[:, :-24]
        median = model.forecast(before, last - pd.Timedelta("24h"), fitted)[..., 1]
        errors[calendar] = np.abs(median - history[:, christmas]).max()
    # Blends of float32 values, each from the same hour of a day with the same shape.
    assert errors["FR"] <= rounding_tolerance(4, history.max())
    assert errors[""] > 0.1 * history[:, christmas].max()


def test_the_median_is_blended_not_offset_and_the_quantiles_never_cross(
    forecaster: OnnxForecaster,
) -> None:
    history, last = series(cells=4, steps=CONTEXT)
    forecast = forecaster.forecast(history, last)
    # Outer levels pulled past the median stop at it.
    crossing = Recalibration(np.array([2.0, 0.0, -2.0], np.float32), median=1, windows=1,
                             residuals=500)
    moved = crossing.apply(forecast, history)
    np.testing.assert_array_equal(moved, np.repeat(forecast[..., 1:2], 3, axis=-1))
    widened = Recalibration(np.array([-0.5, 0.0, 0.5], np.float32), 1, 1, 500).apply(
        forecast, history)
    width = forecast[..., 2] - forecast[..., 0]
    np.testing.assert_allclose(widened[..., 2], forecast[..., 2] + 0.5 * width, rtol=0,
                               atol=rounding_tolerance(4, np.abs(forecast).max()))
    np.testing.assert_array_equal(widened[..., 1], forecast[..., 1])
    assert (np.diff(widened, axis=-1) >= 0).all() and (widened >= 0).all()
    # Blended: the whole forecast moves with its median, towards yesterday's values (where
    # yesterday's is missing, the day before's: model.naive's rule); the week's share is 0,
    # and a week is longer than this history: it has no value anyway.
    history[0, -24:-20] = np.nan
    blended = Recalibration(np.zeros(3, np.float32), 1, 1, 500, shares=(0.8, 0.2, 0.0, 0.0),
                            steps_per_day=24).apply(forecast, history)
    day = history[:, -24:].copy()
    day[0, :4] = history[0, -48:-44]
    shift = 0.2 * (day[:, :HORIZON] - forecast[..., 1])
    np.testing.assert_allclose(blended, np.maximum(forecast + shift[..., None], 0), rtol=0,
                               atol=rounding_tolerance(4, np.nanmax(np.abs(history))))


def test_a_history_too_short_for_one_window_changes_nothing(forecaster: OnnxForecaster) -> None:
    history, last = series(cells=20, steps=CONTEXT + HORIZON - 1)
    fitted = recalibration(forecaster, history, last, windows=7)
    assert fitted.windows == 0
    forecast = forecaster.forecast(history[:, -CONTEXT:], last)
    assert fitted.apply(forecast, history) is forecast
    assert "not recalibrated" in fitted.describe(["p10", "p50", "p90"])


def test_only_the_windows_the_history_holds_are_used(forecaster: OnnxForecaster) -> None:
    history, last = series(cells=20, steps=CONTEXT + 3 * HORIZON + 5)
    assert recalibration(forecaster, history, last, windows=7).windows == 3


def test_missing_actuals_and_mostly_missing_contexts_are_not_scored(
    forecaster: OnnxForecaster,
) -> None:
    history, last = series(cells=20, steps=CONTEXT + 2 * HORIZON)
    history[0, -HORIZON:] = np.nan  # cell 0: the last window's actuals are missing
    # Cell 1: 40 of the older window's 72 context steps are missing, 28 of the newer one's.
    history[1, :40] = np.nan
    fitted = recalibration(forecaster, history, last, windows=2)
    assert fitted.residuals == 20 * 2 * HORIZON - HORIZON - HORIZON


def test_too_few_residuals_leave_the_model_calibration(forecaster: OnnxForecaster) -> None:
    cells = MIN_RESIDUALS // HORIZON  # one window of these is just under the minimum
    history, last = series(cells=cells, steps=CONTEXT + HORIZON)
    assert cells * HORIZON < MIN_RESIDUALS
    assert recalibration(forecaster, history, last, windows=1).windows == 0
    history, last = series(cells=cells + 1, steps=CONTEXT + HORIZON)
    assert recalibration(forecaster, history, last, windows=1).windows == 1


@pytest.mark.parametrize(("horizon", "freq", "windows"), [
    (24, "1h", 7), (168, "1h", 1), (96, "15min", 7), (48, "1h", 4), (336, "1h", 1),
])
def test_a_week_of_windows(horizon: int, freq: str, windows: int) -> None:
    assert week_of_windows(horizon, pd.Timedelta(freq)) == windows


class Counting:
    """A forecaster that counts the windows it is asked to forecast."""

    def __init__(self, forecaster: OnnxForecaster) -> None:
        self.inner, self.windows = forecaster, 0
        self.metadata, self.step = forecaster.metadata, forecaster.step

    def forecast(self, history: np.ndarray, last: pd.DatetimeIndex) -> np.ndarray:
        self.windows += len(history)
        return self.inner.forecast(history, last)


def test_past_max_cells_a_sample_of_the_cells_fits_nearly_the_same_offsets(
    forecaster: OnnxForecaster,
) -> None:
    history, last = series(cells=120, steps=CONTEXT + 4 * HORIZON, seed=3)
    whole, sampled = Counting(forecaster), Counting(forecaster)
    everyone = recalibration(whole, history, last, windows=4, max_cells=None)
    some = recalibration(sampled, history, last, windows=4, max_cells=40)
    assert (whole.windows, sampled.windows) == (120 * 4, 40 * 4)
    assert some.residuals == 40 * 4 * HORIZON < everyone.residuals
    # Sampling, not rounding: the 40 cells' quantile of the residuals against all 120 cells'.
    # Offsets are about -0.15 band widths here; 0.05 is a third of that, and the sample is
    # the same on every machine (a seeded draw), so the bound does not depend on one.
    np.testing.assert_allclose(some.offsets, everyone.offsets, atol=0.05)
    # Deterministic: the same sample each call.
    again = recalibration(forecaster, history, last, windows=4, max_cells=40)
    np.testing.assert_array_equal(again.offsets, some.offsets)


def test_few_cells_choose_the_shares_on_more_windows_than_the_offsets(
    forecaster: OnnxForecaster,
) -> None:
    # Two cells: 24 points a window, so 1000 points would take 42 windows; four times the
    # week's 7 is the most the shares look back, where the history holds them.
    history, last = series(cells=2, steps=CONTEXT + 40 * HORIZON)
    counting = Counting(forecaster)
    fitted = recalibration(counting, history, last, windows=7)
    assert (fitted.windows, fitted.blend_windows) == (7, BLEND_SPANS * 7)
    assert fitted.residuals == 2 * 7 * HORIZON and counting.windows == 2 * BLEND_SPANS * 7
    assert f"(from {BLEND_SPANS * 7} windows)" in fitted.describe(["p10", "p50", "p90"])
    short, last = series(cells=2, steps=CONTEXT + 10 * HORIZON)
    assert recalibration(forecaster, short, last, windows=7).blend_windows == 10
    # Many cells reach the points in the offsets' own windows.
    many, last = series(cells=100, steps=CONTEXT + 40 * HORIZON)
    assert 100 * HORIZON >= MIN_BLEND_POINTS
    assert recalibration(forecaster, many, last, windows=7).blend_windows == 7


def test_a_tail_is_read_as_far_out_as_held_out_windows_need() -> None:
    rng = np.random.default_rng(4)
    # Windows alike (the same 11 residuals each): a held-out window is covered as the others
    # are, at the level asked (0.9 of 11 sorted values falls on the tenth, exactly).
    alike = [np.sort(rng.normal(size=11))] * 7
    assert covering_level(alike, 0.9) == 0.9 and covering_level(alike, 0.1) == 0.1
    # Windows that move as wholes (a day above or below the forecast): the highest and the
    # lowest are beyond every quantile of the others, so the tails run to their ends.
    wholes = [np.full(HORIZON, shift) for shift in rng.normal(size=7)]
    assert covering_level(wholes, 0.9) == 1.0 and covering_level(wholes, 0.1) == 0.0
    # In between, one of the grid's levels; the median and a single window stay as asked.
    mixed = [shift + rng.normal(size=HORIZON) for shift in 2 * rng.normal(size=7)]
    level = covering_level(mixed, 0.9)
    assert 0.9 < level < 1.0 and round((level - 0.9) / (0.1 / LEVEL_STEPS), 9).is_integer()
    assert covering_level(mixed, 0.5) == 0.5 and covering_level(mixed[:1], 0.9) == 0.9


def test_a_series_whose_windows_move_as_wholes_gets_a_wider_band(
    forecaster: OnnxForecaster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One cell whose every window is shifted as a whole: read at the levels asked, its
    residuals' quantiles would cover the windows they came from and not the next one."""
    history, last = series(cells=1, steps=CONTEXT + 14 * HORIZON, seed=5)
    shifts = np.random.default_rng(5).lognormal(0, 0.5, history.shape[1] // HORIZON + 1)
    history = history * np.repeat(shifts, HORIZON)[-history.shape[1]:].astype(np.float32)
    fitted = recalibration(forecaster, history, last, windows=14)
    assert fitted.residuals == 14 * HORIZON
    low, median, high = fitted.read_at
    assert low < 0.1 and median == 0.5 and high > 0.9
    assert f"(tails read at {low:.3f}/{high:.3f})" in fitted.describe(["p10", "p50", "p90"])
    monkeypatch.setattr(recalibration_module, "covering_level", lambda residuals, level: level)
    plain = recalibration(forecaster, history, last, windows=14)
    assert plain.read_at == (0.1, 0.5, 0.9)
    assert fitted.offsets[0] < plain.offsets[0] and fitted.offsets[2] > plain.offsets[2]

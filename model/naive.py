"""The simple forecasts a user could have made from the same history, that the recalibration
blends with the model's median (``model.recalibration``). Torch-free, numpy only, and cheap
enough to compute per request inside the latency budget.

Every forecast maps a history ``[B, n]`` (NaN = missing) that ends right before the forecast
to ``[B, horizon]`` float32, NaN where the history cannot tell. ``seasonal_error`` is the
seasonal naive's in-sample error: MASE's scale, and the recalibration's for zero-wide bands.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.model.features import (
    NS_PER_DAY,
    SUNDAY,
    days_of,
    distinct_ends,
    on_wall_clock,
    wall_clock,
)

NAIVES = ("last_day", "last_week", "weekly_profile")
PROFILE_WEEKS = 8  # the weeks a weekly profile averages, at most


def naive_reach(steps_per_day: int) -> int:
    """The steps of history the naives read, at most."""
    return PROFILE_WEEKS * 7 * steps_per_day


def seasonal_error(history: np.ndarray, season: int) -> np.ndarray:
    """Per series of ``history`` [..., T], the seasonal naive's in-sample error: the mean of
    ``|y_t - y_{t-season}|`` over the pairs with no NaN on either side; NaN for a series with
    no such pair, or whose error is exactly 0 (a constant or perfectly periodic history)."""
    if season < 1:
        raise ValueError(f"season must be >= 1, got {season}")
    h = np.asarray(history, dtype=np.float64)
    diffs = np.abs(h[..., season:] - h[..., :-season])
    valid = ~np.isnan(diffs)
    count = valid.sum(axis=-1)
    total = np.where(valid, diffs, 0.0).sum(axis=-1)
    usable = (count > 0) & (total > 0)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=usable)


def seasonal_naive(history: np.ndarray, horizon: int, season: int,
                   sources: np.ndarray | None = None) -> np.ndarray:
    """The seasonal naive [B, horizon] after ``history`` [B, T] (NaN = missing): each step
    repeats the value one ``season`` (in steps) before it, the last season again for a longer
    horizon; or, with ``sources`` [B, horizon], the value that many steps back from the
    history's end (-1: its last step; ``naive_sources``).

    The one rule for a missing value, wherever a seasonal naive is used (the recalibration's
    simple forecasts, the training's baselines, the xApp's fallback): the same phase one season
    further back, and so on; NaN only where no season of the history has it, or the history
    is shorter than the step needs (no wrap-around). In the history's float type.
    """
    history = np.asarray(history)
    if history.ndim != 2:
        raise ValueError(f"history must be [n_series, T], got shape {history.shape}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if season < 1:
        raise ValueError(f"season must be >= 1, got {season}")
    if not np.issubdtype(history.dtype, np.floating):
        history = history.astype(np.float64)
    batch, n_steps = history.shape
    back = np.arange(horizon) % season - season if sources is None else sources
    index = np.broadcast_to(n_steps + back, (batch, horizon))
    if n_steps == 0:
        return np.full((batch, horizon), np.nan, history.dtype)
    values = np.where(index >= 0, np.take_along_axis(history, np.clip(index, 0, None), axis=1),
                      np.nan).astype(history.dtype, copy=False)
    missing = np.isnan(values)
    # Walk back a season at a time for the steps still missing: on dense data, never.
    while missing.any():
        index = np.where(missing, index - season, index)
        reachable = missing & (index >= 0)
        if not reachable.any():
            break
        found = np.take_along_axis(history, np.clip(index, 0, None), axis=1)
        values = np.where(reachable, found, values)
        missing = reachable & np.isnan(values)
    return values


def weekly_profile(history: np.ndarray, horizon: int, steps_per_day: int,
                   weeks: int = PROFILE_WEEKS, sources: NaiveSources | None = None
                   ) -> np.ndarray:
    """A seasonal decomposition in the manner of MSTL, multiplicative and without a fit: the
    weekly profile of the last whole weeks of the history (``weeks`` at most), each week's
    values over that week's level, averaged over the weeks; the forecast is that profile
    carried on at the last day's level.

    Days are blocks of ``steps_per_day`` counted back from the history's end, so the forecast's
    first block is a whole day and no calendar is needed (across a DST switch the history is
    read on the wall clock first: ``naive_forecasts``). Averaged over weeks, the profile
    keeps little of any one day's noise, which seasonal naive copies; scaled to the last day,
    the forecast follows a drift of level that a week-old copy misses
    (docs/decisions/weekly-profile.md). A level is the ratio of the observed values' sum to
    the profile's over the same steps, so a gap does not bias it by the part of the day it
    took. With ``sources``, the forecast reads the profile at their phases.
    """
    batch, n_steps = history.shape
    week = 7 * steps_per_day
    count = min(weeks, n_steps // week) if steps_per_day >= 1 else 0
    if count < 1:
        return np.full((batch, horizon), np.nan, np.float32)
    values = history[:, n_steps - count * week :].astype(np.float64).reshape(batch, count, week)
    observed = ~np.isnan(values)
    filled = np.where(observed, values, 0.0)
    totals = filled.sum(axis=-1)  # [B, weeks]: each week's observed sum

    def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
        """numerator / denominator where the denominator is positive, NaN elsewhere."""
        return np.divide(numerator, denominator, out=np.full(numerator.shape, np.nan),
                         where=denominator > 0)

    # Each week's level, first against a flat profile, then twice against the profile itself:
    # on a week with a gap that settles it to float rounding (tests/test_naive.py). Sums and
    # counts rather than nanmean: a one-cell forecast spends its time in numpy's per-call
    # overhead.
    weekly = ratio(totals, observed.sum(axis=-1).astype(np.float64))  # [B, weeks]
    for settled in (False, False, True):
        has_level = weekly > 0
        inverse = np.divide(1.0, weekly, out=np.zeros_like(weekly), where=has_level)
        summed = (filled * inverse[..., None]).sum(axis=1)
        profile = ratio(summed, (observed & has_level[..., None]).sum(axis=1).astype(np.float64))
        if not settled:
            # A phase observed in no week is NaN, and so then is every week's level: no profile.
            weekly = ratio(totals, (profile[:, None, :] * observed).sum(axis=-1))
    last_day = slice(week - steps_per_day, week)
    steps = observed[:, -1, last_day]
    base = ratio(filled[:, -1, last_day].sum(axis=-1),
                 (np.nan_to_num(profile[:, last_day]) * steps).sum(axis=-1))
    if sources is None:
        forecast = base[:, None] * profile[:, np.arange(horizon) % week]
    else:
        forecast = base[:, None] * np.take_along_axis(profile, week + sources.phase, axis=1)
    return forecast.astype(np.float32)


def _naive(name: str, history: np.ndarray, horizon: int, steps_per_day: int,
           sources: NaiveSources | None) -> np.ndarray:
    if name == "last_day":
        return seasonal_naive(history, horizon, steps_per_day,
                              None if sources is None else sources.day)
    if name == "last_week":
        return seasonal_naive(history, horizon, 7 * steps_per_day,
                              None if sources is None else sources.week)
    if name == "weekly_profile":
        return weekly_profile(history, horizon, steps_per_day, sources=sources)
    raise ValueError(f"no naive forecast {name!r}: one of {', '.join(NAIVES)}")


def naive_forecasts(history: np.ndarray, horizon: int, steps_per_day: int,
                    sources: NaiveSources | None = None, names: Sequence[str] = NAIVES
                    ) -> np.ndarray:
    """[len(names), B, horizon]: each naive of ``names`` (of NAIVES), read on the calendar where
    ``sources`` are given (``naive_sources``), on the wall clock where they say
    so: the history read on it once for all of them."""
    wall = None if sources is None else sources.wall
    if wall is None:
        return np.stack([_naive(name, history, horizon, steps_per_day, sources)
                         for name in names])
    local = wall.read(history)
    ahead = wall.horizon[wall.group]
    return np.stack([np.take_along_axis(
        _naive(name, local, sources.day.shape[1], steps_per_day, sources), ahead, axis=1)
        for name in names])


# Where the naives read each horizon step from: on the calendar, with its holidays and its
# DST switches.


@dataclass(frozen=True)
class WallClock:
    """The naives' history and horizon on the calendar's wall clock, for batches where its UTC
    offset changes within the history the naives read or the horizon (a DST switch): cell load
    follows people's hours, so a week-old value is read at the same local time, not 168 hours
    back. Per group of rows that share a last timestamp."""

    history: np.ndarray  # [G, reach] the UTC step each wall-clock step reads, back from the
    # history's end (-1: its last step; 0 where the clock skipped the hour)
    horizon: np.ndarray  # [G, H] the wall-clock horizon step each UTC horizon step is
    group: np.ndarray  # [B] each row's group

    def rows(self, rows: slice) -> WallClock:
        return WallClock(self.history, self.horizon, self.group[rows])

    def read(self, history: np.ndarray) -> np.ndarray:
        """The last ``reach`` steps of each row of ``history`` [B, n] on the wall clock."""
        return on_wall_clock(history, self.history, self.group)


@dataclass(frozen=True)
class NaiveSources:
    """Where the simple forecasts of ``model.naive`` read each horizon step from, per row of a
    batch: offsets back from the end of its history (-1: its last step), on the wall clock
    where ``wall`` is given (then over its horizon, which a clock going forward lengthens)."""

    day: np.ndarray  # [B, H] the last day's values
    week: np.ndarray  # [B, H] the last week's values
    phase: np.ndarray  # [B, H] the weekly profile's, in the history's last week
    wall: WallClock | None = None

    def rows(self, rows: slice) -> NaiveSources:
        return NaiveSources(self.day[rows], self.week[rows], self.phase[rows],
                            None if self.wall is None else self.wall.rows(rows))


def naive_sources(last: pd.DatetimeIndex, horizon: int, step: pd.Timedelta, calendar_tz: str,
                  holidays: str, reach: int) -> NaiveSources | None:
    """Where the naives take each horizon step after ``last`` from, in a history of ``reach``
    steps at most, on the wall clock of ``calendar_tz``. A public holiday on a working day is
    read as ``holiday_as_sunday`` reads it: it takes its plain source's time of day on the most
    recent day off at or before that source (a Sunday, or another such holiday), and the weekly
    profile's Sunday; a working day whose last week's value fell on such a holiday reads the
    week before it. Where the UTC offset changes within the history or the horizon, every
    naive reads the history on the wall clock (``WallClock``). Every other step reads as
    usual. None where nothing can move: no holiday calendar and no change of offset, or a step
    that does not divide a day."""
    if NS_PER_DAY % step.value:
        return None
    ends, inverse = distinct_ends(last)
    clocks = [wall_clock(int(end), horizon, step.value, calendar_tz, reach) for end in ends]
    moved = [clock for clock in clocks if clock.history is not None]
    if not holidays and not moved:
        return None
    width = max([horizon, *(int(clock.horizon.max()) + 1 for clock in moved)])
    found = [naive_sources_of(clock.end, width, step.value, clock.zone, holidays, reach)
             for clock in clocks]
    group = inverse.reshape(-1)
    wall = None
    if moved:
        wall = WallClock(
            np.stack([np.arange(-reach, 0) if c.history is None else c.history for c in clocks]),
            np.stack([np.arange(horizon) if c.horizon is None else c.horizon for c in clocks]),
            group)
    return NaiveSources(*(np.stack([f[i] for f in found])[group] for i in range(3)), wall=wall)


@functools.lru_cache(maxsize=256)
def naive_sources_of(end_ns: int, horizon: int, step_ns: int, calendar_tz: str, holidays: str,
                   reach: int) -> tuple[np.ndarray, ...]:
    day = NS_PER_DAY // step_ns
    week = 7 * day
    weekday, holiday = days_of(end_ns + horizon * step_ns, reach + horizon, step_ns,
                                calendar_tz, holidays)
    day_off = holiday | (weekday >= 5)
    working_holiday = holiday & (weekday < 5)
    moved = working_holiday[reach:]
    steps = np.arange(horizon)
    found = []
    for period in (day, week):
        plain = steps % period - period
        source = plain.copy()
        # Back a day at a time from a working day: a week holds a Sunday.
        for _ in range(6):
            working = (source >= -reach) & ~day_off[np.clip(reach + source, 0, None)]
            source = np.where(moved & working, source - day, source)
        found.append(np.where(source >= -reach, source, plain))
    # A working day whose week-old source was a holiday takes the same weekday a week earlier
    # (again while that was one too): the holiday's values say nothing of a working day's.
    working_step = ~day_off[reach:]
    for _ in range(reach // week):
        on_holiday = working_holiday[np.clip(reach + found[1], 0, None)]
        found[1] = np.where(working_step & on_holiday & (found[1] - week >= -reach),
                            found[1] - week, found[1])
    # The profile's phase has its weekday in the history's last week.
    phase = steps % week - week
    days_back = (weekday[reach + phase] - SUNDAY) % 7
    found.append(np.where(moved, (phase - days_back * day) % week - week, phase))
    for array in found:
        array.flags.writeable = False
    return tuple(found)

"""The simple forecasts a user could have made from the same history, that the recalibration
blends with the model's median (``model.recalibration``). Torch-free, numpy only, and cheap
enough to compute per request inside the latency budget.

Every forecast maps a history ``[B, n]`` (NaN = missing) that ends right before the forecast
to ``[B, horizon]`` float32, NaN where the history cannot tell. ``seasonal_error`` is the
seasonal naive's in-sample error: MASE's scale, and the recalibration's for zero-wide bands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # numpy only at run time; the calendar reading lives with the calendar
    from kpi_forecast.model.features import NaiveSources

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


def last_season(history: np.ndarray, horizon: int, season: int,
                sources: np.ndarray | None = None) -> np.ndarray:
    """Seasonal naive: each step repeats the value one ``season`` (in steps) before it, the
    last season again for a longer horizon (NaN where that is missing, or the history is
    shorter than a season); or, with ``sources`` [B, horizon], the value that many steps
    back from the history's end (-1: its last step; ``model.features.naive_sources``)."""
    batch, n_steps = history.shape
    if season < 1 or n_steps < season:
        return np.full((batch, horizon), np.nan, np.float32)
    if sources is None:
        return history[:, n_steps - season + np.arange(horizon) % season].astype(np.float32)
    index = n_steps + sources
    values = np.take_along_axis(history, np.clip(index, 0, None), axis=1)
    return np.where(index >= 0, values, np.nan).astype(np.float32)


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
        return last_season(history, horizon, steps_per_day,
                           None if sources is None else sources.day)
    if name == "last_week":
        return last_season(history, horizon, 7 * steps_per_day,
                           None if sources is None else sources.week)
    if name == "weekly_profile":
        return weekly_profile(history, horizon, steps_per_day, sources=sources)
    raise ValueError(f"no naive forecast {name!r}: one of {', '.join(NAIVES)}")


def naive_forecasts(history: np.ndarray, horizon: int, steps_per_day: int,
                    sources: NaiveSources | None = None, names: Sequence[str] = NAIVES
                    ) -> np.ndarray:
    """[len(names), B, horizon]: each naive of ``names`` (of NAIVES), read on the calendar where
    ``sources`` are given (``model.features.naive_sources``), on the wall clock where they say
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

"""Recalibration of the quantiles on the most recent windows of history. Torch-free.

The offsets fitted at training time (``training.calibrate``) hold for data like the validation
span. When the data drift (a holiday week, a new traffic pattern) the forecasts stop holding:
on the Milan data a P10-P90 band calibrated to 0.80 on its validation span covered 0.73 of the
following two weeks, which hold Christmas and New Year. As statsforecast's conformal intervals
do, we forecast the last few horizons of the history the caller already has, where the actuals
are known, and adjust the forecast so that it holds there again, in two steps:

1. The median is blended with the values one day and one week before each step (seasonal
   naive over a day and over a week) at the shares, on a grid 0.05 apart from the model
   alone to either naive alone, that gave the lowest absolute error on those windows; the
   other quantiles move with it. A network fitted on weeks of ordinary days follows a
   sudden change of level (the day after a holiday began) more slowly than yesterday's
   values do, and on a series whose weeks repeat, or a short history that cannot teach a
   network much, last week's values are the forecast to beat: a user could have copied
   them. Where the model is better, on ordinary days of well-known data, the grid keeps it
   alone or nearly so.
2. Each quantile level except the median is moved to hold on the windows:
   ``q_i + k_i * width``, where ``width`` is the forecast's own outermost band (P10-P90 by
   default) and ``k_i`` is the ``q_i``-quantile of the recent residuals
   ``(actual - q_i) / width``. Scaling by the band keeps one set of offsets valid for cells
   of any size and for every step of the horizon. A level moved past its neighbour nearer
   the median stops there, so quantiles never cross.

The adjustment comes from all the cells passed together, one per call: the forecasts it
corrects can be for any of those cells, at any later time, until the next refresh. Past
``MAX_CELLS`` cells it is fitted on a fixed random sample of them: a week of windows per cell
made `kpi-forecast predict` on 10^4 cells 4.4x the work of the forecasts themselves, and a
thousand cells' residuals already fix the offsets' quantiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from model.runtime import OnnxForecaster

DAY, WEEK = pd.Timedelta("1D"), pd.Timedelta("7D")
_PARTS = 20  # shares 1/20 = 0.05 apart
# (model, last day, last week) shares of the median, every split on that grid; the model's
# largest first, then the last day's, so that a tie keeps as much of the model as it can.
SHARES = np.array([(m, _PARTS - m - w, w) for m in range(_PARTS, -1, -1)
                   for w in range(_PARTS - m + 1)]) / _PARTS
# Fewer residuals than this leave the model's own calibration in place: the 10 % tail of a
# few dozen points is mostly noise.
MIN_RESIDUALS = 100
# A window whose context is mostly missing gives a forecast the model would not be asked for.
MIN_OBSERVED_CONTEXT = 0.5
MAX_CELLS = 1024  # cells a fit looks at, at most: 1024 x 7 windows x 24 steps = 172,032 residuals


@dataclass(frozen=True)
class Recalibration:
    """The model's share of the median, and per-quantile offsets in units of the band."""

    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    median: int = 0  # index of the level that is blended, not offset
    windows: int = 0  # recent windows behind it; 0 = none (no change)
    residuals: int = 0  # observed (cell, step) points behind it
    weight: float = 1.0  # the model's share of the median
    week_weight: float = 0.0  # last week's share; the rest is the last day's
    steps_per_day: int = 0

    @property
    def day_weight(self) -> float:
        return max(0.0, 1.0 - self.weight - self.week_weight)

    def apply(self, forecast: np.ndarray, history: np.ndarray) -> np.ndarray:
        """``forecast`` [B, H, Q] after the last step of ``history`` [B, n], adjusted; KPIs stay
        non-negative."""
        if self.windows == 0:
            return forecast
        if self.weight < 1.0:
            shift = np.zeros(forecast.shape[:2], np.float32)
            model = forecast[..., self.median]
            for share, days in ((self.day_weight, 1), (self.week_weight, 7)):
                if share > 0.0:
                    naive = last_season(history, forecast.shape[1], days * self.steps_per_day)
                    # Where the naive has no value the model keeps its share.
                    shift += share * np.nan_to_num(naive - model)
            forecast = forecast + shift[..., None].astype(forecast.dtype)
        width = forecast[..., -1:] - forecast[..., :1]
        moved = np.maximum(forecast + self.offsets * width, 0.0).astype(forecast.dtype)
        m = self.median
        moved[..., m::-1] = np.minimum.accumulate(moved[..., m::-1], axis=-1)
        moved[..., m:] = np.maximum.accumulate(moved[..., m:], axis=-1)
        return moved

    def describe(self, names: list[str]) -> str:
        if self.windows == 0:
            return "not recalibrated (no recent window used)"
        shifts = ", ".join(f"{n} {k:+.3f}" for n, k in zip(names, self.offsets, strict=True))
        return (f"recalibrated on the last {self.windows} window(s), {self.residuals} points: "
                f"median {self.weight:.2f} model + {self.day_weight:.2f} last day + "
                f"{self.week_weight:.2f} last week; "
                f"{shifts} x band")


def last_season(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """Seasonal naive: each step repeats the value one ``season`` (in steps) before it, the
    last season again for a longer horizon (NaN where that is missing, or the history is
    shorter than a season)."""
    n_steps = history.shape[1]
    if season < 1 or n_steps < season:
        return np.full((history.shape[0], horizon), np.nan, np.float32)
    return history[:, n_steps - season + np.arange(horizon) % season]


def week_of_windows(horizon: int, step: pd.Timedelta) -> int:
    """Windows one horizon apart that cover the last week: every weekday once for a day-ahead
    model, the last week for a week-ahead one."""
    return max(1, math.ceil(WEEK / (horizon * step)))


def recalibration(forecaster: OnnxForecaster, history: np.ndarray, last: pd.DatetimeIndex,
                  windows: int, max_cells: int | None = MAX_CELLS) -> Recalibration:
    """The median's shares and the offsets that hold on up to ``windows`` forecasts ending at
    the last step of ``history`` [cells, steps] (the last step of row b falls at ``last[b]``),
    one horizon apart; from ``max_cells`` of the rows at most (a seeded sample; None: all).

    A window is used when ``history`` holds its whole context and horizon; a cell's window
    counts when at least half of its context is observed.
    """
    meta = forecaster.metadata
    horizon, context = meta.horizon, meta.context
    levels = np.asarray(meta.quantiles)
    n_steps = history.shape[1]
    usable = min(windows, max(0, (n_steps - context) // horizon))
    if usable == 0 or len(levels) < 2:
        return Recalibration()
    if max_cells is not None and len(history) > max_cells:
        rows = np.sort(np.random.default_rng(0).choice(len(history), max_cells, replace=False))
        history, last = history[rows], last[rows]
    ends = [n_steps - i * horizon for i in range(1, usable + 1)]
    contexts = np.concatenate([history[:, end - context : end] for end in ends])
    actual = np.concatenate([history[:, end : end + horizon] for end in ends])
    stamps = last[:0].append([last - i * horizon * forecaster.step for i in range(1, usable + 1)])
    forecast = forecaster.forecast(contexts, stamps)
    width = forecast[..., -1] - forecast[..., 0]
    enough = (~np.isnan(contexts)).mean(axis=1) >= MIN_OBSERVED_CONTEXT
    scored = enough[:, None] & ~np.isnan(actual) & (width > 0)
    if scored.sum() < MIN_RESIDUALS:
        return Recalibration()
    median = int(np.argmin(np.abs(levels - 0.5)))
    steps_per_day = int(DAY // forecaster.step)
    model = forecast[..., median]
    # From the context the model saw, as at serving time: a season longer than it has none.
    day, week = (last_season(contexts, horizon, days * steps_per_day) for days in (1, 7))
    weight, day_weight, week_weight = best_shares(model, day, week, actual, scored)
    shift = (day_weight * np.nan_to_num(day - model) + week_weight * np.nan_to_num(week - model))
    forecast = forecast + shift[..., None]
    residual = (actual[..., None] - forecast)[scored] / width[scored][:, None]  # [points, Q]
    offsets = np.array([np.quantile(residual[:, i], q) for i, q in enumerate(levels)])
    offsets[median] = 0.0
    return Recalibration(offsets.astype(np.float32), median, usable, int(scored.sum()),
                         weight, week_weight, steps_per_day)


def best_shares(model: np.ndarray, day: np.ndarray, week: np.ndarray, actual: np.ndarray,
                scored: np.ndarray) -> tuple[float, float, float]:
    """The (model, last day, last week) shares of the median, from SHARES, with the lowest
    absolute error on the ``scored`` points (where a naive is missing, the model stands in for
    it); ties keep the most of the model."""
    model, actual = model[scored], actual[scored]
    day = np.where(np.isnan(day[scored]), model, day[scored])
    week = np.where(np.isnan(week[scored]), model, week[scored])
    errors = [np.abs(m * model + d * day + w * week - actual).sum() for m, d, w in SHARES]
    m, d, w = SHARES[int(np.argmin(errors))]
    return float(m), float(d), float(w)

"""Recalibration of the quantiles on the most recent windows of history. Torch-free.

As statsforecast's conformal intervals do, the caller's own recent horizons, where the actuals
are known, correct the forecast (why: docs/decisions/recalibration.md):

1. The median is blended with the simple forecasts of ``model.naive`` (a day and a week
   before, a weekly profile) at the shares, 0.05 apart, that gave the lowest absolute error on
   those windows; the other quantiles move with it. With a holiday calendar the simple
   forecasts read a holiday on a working day as a Sunday, as the network does.
2. Each quantile but the median moves by ``k_i`` times the forecast's outermost band, ``k_i``
   read from the residuals as far into the tail as leave-one-window-out cross-validation says
   a window not seen needs; quantiles never cross.
3. Where the band is zero wide, points get offsets of their own, in units of the cell's mean
   day-to-day change. The offsets pool every cell passed (past ``MAX_CELLS``, a fixed sample).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kpi_forecast.model.naive import (
    NAIVES,
    NaiveSources,
    naive_forecasts,
    naive_reach,
    naive_sources,
    seasonal_error,
)

if TYPE_CHECKING:  # the runtime applies a Recalibration: it imports this module
    from kpi_forecast.model.artifact import ModelMetadata
    from kpi_forecast.model.runtime import OnnxForecaster

DAY, WEEK = pd.Timedelta("1D"), pd.Timedelta("7D")
_PARTS = 20  # shares 1/20 = 0.05 apart


def _splits(parts: int, ways: int) -> list[tuple[int, ...]]:
    """Every way of splitting ``parts`` among ``ways``, the first one's largest first."""
    if ways == 1:
        return [(parts,)]
    return [(first, *rest) for first in range(parts, -1, -1)
            for rest in _splits(parts - first, ways - 1)]


# (model, *NAIVES) shares of the median, every split on that grid; the model's largest first,
# so that a tie keeps as much of the model as it can.
SHARES = np.array(_splits(_PARTS, 1 + len(NAIVES))) / _PARTS
SHARES_PER_PASS = 64  # shares scored at once: bounds the work array to 64 x the points
# Fewer residuals than this leave the model's own calibration in place: the 10 % tail of a
# few dozen points is mostly noise.
MIN_RESIDUALS = 100
# A window whose context is mostly missing gives a forecast the model would not be asked for.
MIN_OBSERVED_CONTEXT = 0.5
MAX_CELLS = 1024  # cells a fit looks at, at most: 1024 x 7 windows x 24 steps = 172,032 residuals
# The shares of the median are chosen on at least this many points, from up to BLEND_SPANS
# times the offsets' windows: among 1771 blends, the choice on one series' week of windows
# (336 half-hourly points) followed its noise: on the generalisation suite's 10-week smooth
# load-like series, MAE 23.8 against 22.7 chosen on three weeks. Many cells reach it in the
# offsets' own windows, and keep to them.
MIN_BLEND_POINTS = 1000
BLEND_SPANS = 4
LEVEL_STEPS = 40  # the levels a tail may be read at, from the one asked to the tail's end


@dataclass(frozen=True)
class Recalibration:
    """The shares of the median, and per-quantile offsets in units of the band."""

    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    median: int = 0  # index of the level that is blended, not offset
    windows: int = 0  # recent windows behind the offsets; 0 = none (no change)
    residuals: int = 0  # observed (cell, step) points behind it
    shares: tuple[float, ...] = (1.0,) + (0.0,) * len(NAIVES)  # the model's, then NAIVES'
    steps_per_day: int = 0
    blend_windows: int = 0  # recent windows behind the shares (at least ``windows``)
    # The levels each quantile's residuals were read at (``covering_level``); () = as asked.
    read_at: tuple[float, ...] = ()
    # Per quantile, in units of the cell's day-to-day change (``daily_change``), for the
    # points whose band is zero wide; empty where the recent windows had none.
    flat_offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    @property
    def weight(self) -> float:
        """The model's share of the median."""
        return self.shares[0]

    def naive_shares(self) -> dict[str, float]:
        return dict(zip(NAIVES, self.shares[1:], strict=True))

    def apply(self, forecast: np.ndarray, history: np.ndarray,
              sources: NaiveSources | None = None) -> np.ndarray:
        """``forecast`` [B, H, Q] after the last step of ``history`` [B, n], adjusted; KPIs stay
        non-negative. ``sources``: the naives' on the calendar (``naive_sources``), if any."""
        if self.windows == 0:
            return forecast
        if self.weight < 1.0:
            recent = history[:, -naive_reach(self.steps_per_day) :]
            model, horizon = forecast[..., self.median], forecast.shape[1]
            # Only the naives with a share: a single forecast pays for no other.
            taken = [name for name, share in self.naive_shares().items() if share > 0]
            found = dict(zip(taken, naive_forecasts(recent, horizon, self.steps_per_day,
                                                    sources, taken), strict=True))
            naives = np.stack([found.get(name, np.zeros_like(model)) for name in NAIVES])
            shift = blend_shift(self.shares, model, naives)
            forecast = forecast + shift[..., None].astype(forecast.dtype)
        width = forecast[..., -1:] - forecast[..., :1]
        moved = forecast + self.offsets * width
        flat = width == 0
        if self.flat_offsets.size and flat.any():
            change = daily_change(history, self.steps_per_day)[:, None, None]
            moved = np.where(flat, forecast + self.flat_offsets * change, moved)
        moved = np.maximum(moved, 0.0).astype(forecast.dtype)
        m = self.median
        moved[..., m::-1] = np.minimum.accumulate(moved[..., m::-1], axis=-1)
        moved[..., m:] = np.maximum.accumulate(moved[..., m:], axis=-1)
        return moved

    def describe(self, names: list[str]) -> str:
        if self.windows == 0:
            return "not recalibrated (no recent window used)"
        shifts = ", ".join(f"{n} {k:+.3f}" for n, k in zip(names, self.offsets, strict=True))
        blend = "".join(f" + {share:.2f} {name.replace('_', ' ')}"
                        for name, share in self.naive_shares().items() if share > 0)
        tails = (f" (tails read at {self.read_at[0]:.3f}/{self.read_at[-1]:.3f})"
                 if self.read_at else "")
        flat = ("; where the band is zero wide: " + ", ".join(
            f"{n} {k:+.3f}" for n, k in zip(names, self.flat_offsets, strict=True))
            + " x the day-to-day change" if self.flat_offsets.size else "")
        return (f"recalibrated on the last {self.windows} window(s), {self.residuals} points: "
                f"median {self.weight:.2f} model{blend} (from {self.blend_windows} windows); "
                f"{shifts} x band{tails}{flat}")


def calendar_sources(metadata: ModelMetadata, step: pd.Timedelta, last: pd.DatetimeIndex
                     ) -> NaiveSources | None:
    """Where the naives read each horizon step after ``last`` on the model's holiday calendar
    (``model.naive.naive_sources``); None: as usual."""
    return naive_sources(last, metadata.horizon, step, metadata.calendar_tz, metadata.holidays,
                         naive_reach(int(DAY // step)))


def blend_shift(shares: tuple[float, ...], model: np.ndarray, naives: np.ndarray) -> np.ndarray:
    """What the median [B, H] moves by to become the blend: each naive's share of its
    difference from the model (none where a naive has no value: the model keeps that share)."""
    shift = np.zeros(model.shape, np.float32)
    for share, naive in zip(shares[1:], naives, strict=True):
        if share > 0.0:
            shift += np.float32(share) * np.nan_to_num(naive - model)
    return shift


def daily_change(history: np.ndarray, steps_per_day: int) -> np.ndarray:
    """Per row of ``history`` [B, n], the mean absolute change from a step to the same step a
    day later over its last eight days (0 where no such pair is observed)."""
    return np.nan_to_num(seasonal_error(history[:, -8 * steps_per_day :], steps_per_day)
                         ).astype(np.float32)


def week_of_windows(horizon: int, step: pd.Timedelta) -> int:
    """Windows one horizon apart that cover the last week: every weekday once for a day-ahead
    model, the last week for a week-ahead one."""
    return max(1, math.ceil(WEEK / (horizon * step)))


def recalibration(forecaster: OnnxForecaster, history: np.ndarray, last: pd.DatetimeIndex,
                  windows: int, max_cells: int | None = MAX_CELLS) -> Recalibration:
    """The median's shares and the offsets that hold on up to ``windows`` forecasts ending at
    the last step of ``history`` [cells, steps] (the last step of row b falls at ``last[b]``),
    one horizon apart; from ``max_cells`` of the rows at most (a seeded sample; None: all).
    The shares come from more windows where those few hold fewer than MIN_BLEND_POINTS.

    A window is used when ``history`` holds its whole context and horizon; a cell's window
    counts when at least half of its context is observed.
    """
    meta = forecaster.metadata
    horizon, context = meta.horizon, meta.context
    levels = np.asarray(meta.quantiles)
    n_steps = history.shape[1]
    available = max(0, (n_steps - context) // horizon)
    usable = min(windows, available)
    if usable == 0 or len(levels) < 2:
        return Recalibration()
    if max_cells is not None and len(history) > max_cells:
        rows = np.sort(np.random.default_rng(0).choice(len(history), max_cells, replace=False))
        history, last = history[rows], last[rows]
    cells = len(history)
    blending = min(available, max(usable, min(BLEND_SPANS * windows,
                                              math.ceil(MIN_BLEND_POINTS / (cells * horizon)))))
    ends = [n_steps - i * horizon for i in range(1, blending + 1)]  # the most recent first
    contexts = np.concatenate([history[:, end - context : end] for end in ends])
    actual = np.concatenate([history[:, end : end + horizon] for end in ends])
    window_lasts = [last - i * horizon * forecaster.step for i in range(1, blending + 1)]
    forecast = forecaster.forecast(contexts, last[:0].append(window_lasts))
    width = forecast[..., -1] - forecast[..., 0]
    enough = (~np.isnan(contexts)).mean(axis=1) >= MIN_OBSERVED_CONTEXT
    observed = enough[:, None] & ~np.isnan(actual)
    recent = np.arange(len(contexts)) < usable * cells  # the offsets' windows
    if observed[recent].sum() < MIN_RESIDUALS:
        return Recalibration()
    median = int(np.argmin(np.abs(levels - 0.5)))
    steps_per_day = int(DAY // forecaster.step)
    model = forecast[..., median]
    # Each window's naives from the history before it, as a forecast after it would have.
    reach = naive_reach(steps_per_day)
    naives = np.concatenate([
        naive_forecasts(history[:, max(0, end - reach) : end], horizon, steps_per_day,
                        calendar_sources(meta, forecaster.step, window_last))
        for end, window_last in zip(ends, window_lasts, strict=True)], axis=1)
    shares = best_shares(model, naives, actual, observed)
    forecast = forecast + blend_shift(shares, model, naives)[..., None]
    # The offsets' windows are the first rows: the older ones only chose the shares.
    rows = usable * cells
    observed, width = observed[:rows], width[:rows]
    residual = actual[:rows, :, None] - forecast[:rows]
    change = daily_change(contexts[:rows], steps_per_day)
    scored = observed & (width > 0)
    flat = observed & (width == 0) & (change > 0)[:, None]
    offsets, read_at = np.zeros(len(levels)), []
    if scored.sum() >= MIN_RESIDUALS:
        offsets, read_at = _offsets(residual / np.where(scored, width, 1.0)[..., None], scored,
                                    cells, levels, median)
    flat_offsets = np.zeros(0)
    if flat.sum() >= MIN_RESIDUALS:
        flat_offsets, _ = _offsets(residual / np.where(flat, change[:, None], 1.0)[..., None],
                                   flat, cells, levels, median)
    return Recalibration(offsets.astype(np.float32), median, usable,
                         int(scored.sum() + flat.sum()), shares, steps_per_day, blending,
                         tuple(read_at), flat_offsets.astype(np.float32))


def _offsets(residuals: np.ndarray, scored: np.ndarray, cells: int, levels: np.ndarray,
             median: int) -> tuple[np.ndarray, list[float]]:
    """Each level's offset: the quantile of the ``scored`` ``residuals`` [windows x cells, H,
    Q] at the level ``covering_level`` reads it at (0 for the median), and those levels."""
    by_window = [(residuals[k : k + cells], scored[k : k + cells])
                 for k in range(0, len(residuals), cells)]
    read_at, offsets = [], []
    for i, level in enumerate(levels):
        values = [r[..., i][s] for r, s in by_window if s.any()]
        read_at.append(covering_level(values, float(level)))
        offsets.append(np.quantile(np.concatenate(values), read_at[-1]))
    offsets = np.array(offsets)
    offsets[median] = 0.0
    return offsets, read_at


def covering_level(residuals: list[np.ndarray], level: float) -> float:
    """The level at which the pooled ``residuals`` (one array a window) are to be read so that,
    left out in turn, the windows are covered at ``level``: the one nearest to it, on a grid
    of LEVEL_STEPS to the tail's end, whose quantile of the other windows' residuals left
    at most the tail's share of the held-out window's points beyond it, over all windows."""
    if level == 0.5 or len(residuals) < 2:
        return level
    upper = level > 0.5
    grid = np.linspace(level, 1.0 if upper else 0.0, LEVEL_STEPS + 1)
    beyond = np.zeros(len(grid))
    for k, held in enumerate(residuals):
        bounds = np.quantile(np.concatenate(residuals[:k] + residuals[k + 1 :]), grid)
        held = np.sort(held)
        beyond += (len(held) - np.searchsorted(held, bounds, side="right") if upper
                   else np.searchsorted(held, bounds, side="left"))
    tail = (1.0 - level if upper else level) * sum(len(r) for r in residuals)
    covered = np.flatnonzero(beyond <= tail)
    return float(grid[covered[0]] if len(covered) else grid[-1])


def best_shares(model: np.ndarray, naives: np.ndarray, actual: np.ndarray,
                scored: np.ndarray) -> tuple[float, ...]:
    """The (model, *NAIVES) shares of the median, from SHARES, with the lowest absolute error
    on the ``scored`` points of ``model``, ``naives`` [len(NAIVES), ...] and ``actual`` (where
    a naive is missing, the model stands in for it); ties keep the most of the model."""
    model, actual = model[scored], actual[scored]
    candidates = np.stack([model, *(np.where(np.isnan(n[scored]), model, n[scored])
                                    for n in naives)], axis=1).astype(np.float64)  # [P, K]
    errors = np.concatenate([
        np.abs(candidates @ SHARES[i : i + SHARES_PER_PASS].T - actual[:, None]).sum(axis=0)
        for i in range(0, len(SHARES), SHARES_PER_PASS)
    ])
    return tuple(float(share) for share in SHARES[int(np.argmin(errors))])

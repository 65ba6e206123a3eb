"""Seasonal baseline forecasters (pure numpy) that the learned model must beat: the seasonal
naive of a day and of a week (``model.naive.seasonal_naive``, the one the xApp's fallback and
the recalibration use, with its rule for missing values) and the mean of the last four weeks.

Every baseline maps a history ``[n_series, T]`` (NaN = missing) to a point forecast
``[n_series, horizon]`` for steps ``T, T+1, ...`` right after the history ends. All are
vectorised over series; the only Python loops run over seasons.

Phase convention: forecast step ``h`` (1-based) has the same phase as history column
``T - season + (h - 1) % season``, i.e. the last season of the history is repeated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kpi_forecast.model.naive import seasonal_naive

# (history, horizon, steps_per_day) -> forecast [n_series, horizon]
BaselineFn = Callable[[np.ndarray, int, int], np.ndarray]


def _as_history(history: np.ndarray) -> np.ndarray:
    """The history as a 2-D float array, without copying one that already is."""
    h = np.asarray(history)
    if h.ndim != 2:
        raise ValueError(f"history must be [n_series, T], got shape {h.shape}")
    if not np.issubdtype(h.dtype, np.floating):
        h = h.astype(np.float64)
    return h


def _check(horizon: int, season: int | None = None) -> None:
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if season is not None and season < 1:
        raise ValueError(f"season must be >= 1, got {season}")


def _repeat_last_season(per_phase: np.ndarray, horizon: int) -> np.ndarray:
    """Lay a ``[n_series, season]`` per-phase table out over ``horizon`` steps."""
    season = per_phase.shape[1]
    return per_phase[:, np.arange(horizon) % season]


def seasonal_mean(history: np.ndarray, horizon: int, season: int, n_seasons: int = 4) -> np.ndarray:
    """Per phase, the mean of the observed values over the last ``n_seasons`` seasons.

    With ``season`` one week and ``n_seasons=4`` this is the "mean of the last 4 weeks"
    baseline. NaNs are ignored; a phase with no observed value in the window is NaN.
    """
    h = _as_history(history)
    _check(horizon, season)
    if n_seasons < 1:
        raise ValueError(f"n_seasons must be >= 1, got {n_seasons}")
    n, t = h.shape
    width = n_seasons * season
    # Left-pad a short history with NaN so the window always splits into whole seasons
    # aligned on the history's end.
    window = np.full((n, width), np.nan)
    take = min(width, t)
    window[:, width - take :] = h[:, t - take :]
    blocks = window.reshape(n, n_seasons, season)
    count = (~np.isnan(blocks)).sum(axis=1)
    total = np.nansum(blocks, axis=1)
    per_phase = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return _repeat_last_season(per_phase.astype(h.dtype, copy=False), horizon)


def _in_days(fn: Callable[..., np.ndarray], days: int, **kwargs: int) -> BaselineFn:
    """Bind a seasonal baseline to a season of ``days`` days, resolved per data set."""

    def run(history: np.ndarray, horizon: int, steps_per_day: int) -> np.ndarray:
        if steps_per_day < 1:
            raise ValueError(f"steps_per_day must be >= 1, got {steps_per_day}")
        return fn(history, horizon, season=days * steps_per_day, **kwargs)

    return run


BASELINES: dict[str, BaselineFn] = {
    "seasonal_naive_day": _in_days(seasonal_naive, days=1),
    "seasonal_naive_week": _in_days(seasonal_naive, days=7),
    "mean_4_weeks": _in_days(seasonal_mean, days=7, n_seasons=4),
}


def baseline_forecasts(
    history: np.ndarray, horizon: int, steps_per_day: int
) -> dict[str, np.ndarray]:
    """The forecast of every registered baseline, keyed by its name in :data:`BASELINES`."""
    return {name: fn(history, horizon, steps_per_day) for name, fn in BASELINES.items()}

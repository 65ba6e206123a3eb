"""The seasonal-naive fallback: what the xApp answers when the model cannot within the budget.

Numpy only and about a hundred microseconds, so it fits in whatever time is left. The median
repeats the value one season back (a week when the history holds one, else a day, else the
last observed value); the other quantiles add the empirical quantiles of that same rule's
errors over the history, so the band reflects how well the rule has done for this cell.
"""

from __future__ import annotations

import numpy as np

MIN_RESIDUALS = 8  # fewer past errors than this say nothing about the spread


def seasonal_naive(
    history: np.ndarray, horizon: int, quantiles: list[float], steps_per_day: int
) -> np.ndarray:
    """[horizon, len(quantiles)] forecasts after the last step of ``history`` (NaN = missing)."""
    history = np.asarray(history, dtype=np.float64)
    observed = history[~np.isnan(history)]
    if observed.size == 0:
        raise ValueError("no observed value to forecast from")
    season = next(
        (s for s in (7 * steps_per_day, steps_per_day) if s > 0 and len(history) >= s + 1),
        0,
    )
    if season:
        median = _repeat_season(history, season, horizon, fill=observed[-1])
        residuals = (history[season:] - history[:-season])
        residuals = residuals[~np.isnan(residuals)]
    else:
        median = np.full(horizon, observed[-1])
        residuals = np.diff(observed)
    if residuals.size >= MIN_RESIDUALS:
        spread = np.quantile(residuals, quantiles)
        spread -= np.quantile(residuals, 0.5)  # centre the band on the median forecast
    else:
        spread = np.zeros(len(quantiles))
    forecast = np.maximum(median[:, None] + spread[None, :], 0.0)
    # Clipping at zero keeps the order; the sorted spread does too.
    return forecast.astype(np.float32)


def _repeat_season(history: np.ndarray, season: int, horizon: int, fill: float) -> np.ndarray:
    """Step h forecasts the value ``season`` steps earlier (and so on, for h >= season)."""
    n = len(history)
    steps = np.arange(horizon)
    source = n - season + (steps % season)
    values = history[source]
    # A missing value a season back: fall back to the last observed one.
    return np.where(np.isnan(values), fill, values)

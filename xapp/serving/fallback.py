"""The fallback: what the xApp answers when the model cannot within the budget.

Numpy only and about a hundred microseconds, so it fits in whatever time is left. The median is
the seasonal naive (``model.naive.seasonal_naive``, with its rule for missing values) of a week
when the history holds one, else of a day, else the last observed value; a step no season of
the history tells takes the last observed value. The other quantiles add the empirical
quantiles of that same rule's errors over the history, so the band reflects how well the rule
has done for this cell.
"""

from __future__ import annotations

import numpy as np

from kpi_forecast.model.naive import seasonal_naive

MIN_RESIDUALS = 8  # fewer past errors than this say nothing about the spread


def fallback_forecast(history: np.ndarray, horizon: int, quantiles: list[float],
                      steps_per_day: int) -> np.ndarray:
    """[B, horizon, len(quantiles)] float32 forecasts after the last step of each row of
    ``history`` [B, n] (NaN = missing); ValueError for a row with no observed value."""
    history = np.asarray(history, dtype=np.float64)
    rows, steps = history.shape
    observed = ~np.isnan(history)
    if not observed.any(axis=1).all():
        raise ValueError("no observed value to forecast from")
    last = history[np.arange(rows), steps - 1 - np.argmax(observed[:, ::-1], axis=1)]
    season = next((s for s in (7 * steps_per_day, steps_per_day) if 0 < s < steps), 0)
    if season:
        median = seasonal_naive(history, horizon, season)
        median = np.where(np.isnan(median), last[:, None], median)
        residuals = history[:, season:] - history[:, :-season]
    else:
        median = np.repeat(last[:, None], horizon, axis=1)
        residuals = np.diff(history, axis=1)
    enough = (~np.isnan(residuals)).sum(axis=1) >= MIN_RESIDUALS
    # Rows with too few errors get a zero-wide band (no quantile of an all-missing row).
    residuals = np.where(enough[:, None], residuals, 0.0)
    spread = np.nanquantile(residuals, [*quantiles, 0.5], axis=1)  # [Q + 1, B]
    spread = (spread[:-1] - spread[-1]).T  # centred on the median forecast: [B, Q]
    forecast = np.maximum(median[:, :, None] + spread[:, None, :], 0.0)
    # Clipping at zero keeps the order; the sorted spread does too.
    return forecast.astype(np.float32)

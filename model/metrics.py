"""Forecast-accuracy metrics over NaN-masked arrays (pure numpy).

Conventions shared by every function here:

* ``actual`` and point forecasts are float arrays of the same shape, normally
  ``[n_series, horizon]``; quantile forecasts add a trailing quantile axis,
  ``[n_series, horizon, n_quantiles]``, whose levels are a separate 1-D array.
* NaN in ``actual`` means "not observed": that position is left out of every metric.
  A metric with no observed position at all is NaN.
* A NaN *forecast* at an observed position is not skipped: it makes the pooled metric
  NaN. Skipping it would let a model that abstains look better than one that
  answers, and would compare models on different sets of points. The caller who wants
  to score a forecast with holes must mask ``actual`` there explicitly.
  (MASE is the exception by definition: it averages only the series whose scaled
  error is finite, so such a series drops out of it.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kpi_forecast.model.naive import seasonal_error

METRIC_KEYS = ("mae", "rmse", "mase", "smape", "coverage", "pinball")


def _pair(actual: np.ndarray, forecast: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as float64, refusing a shape mismatch that broadcasting would hide."""
    a = np.asarray(actual, dtype=np.float64)
    f = np.asarray(forecast, dtype=np.float64)
    if a.shape != f.shape:
        raise ValueError(f"{name} has shape {f.shape}, but actual has shape {a.shape}")
    return a, f


def _observed_mean(values: np.ndarray, actual: np.ndarray) -> float:
    """Mean of ``values`` over the positions where ``actual`` is observed; NaN if none."""
    observed = ~np.isnan(actual)
    if not observed.any():
        return float("nan")
    return float(values[observed].mean())


def mae(actual: np.ndarray, point: np.ndarray) -> float:
    """Mean absolute error over observed positions."""
    a, f = _pair(actual, point, "point")
    return _observed_mean(np.abs(a - f), a)


def mse(actual: np.ndarray, point: np.ndarray) -> float:
    """Mean squared error over observed positions."""
    a, f = _pair(actual, point, "point")
    return _observed_mean((a - f) ** 2, a)


def rmse(actual: np.ndarray, point: np.ndarray) -> float:
    """Root mean squared error over observed positions."""
    return float(np.sqrt(mse(actual, point)))


def smape(actual: np.ndarray, point: np.ndarray) -> float:
    """Symmetric MAPE in percent, ``200 * |a - f| / (|a| + |f|)``, bounded to [0, 200].

    A step where actual and forecast are both 0 is a perfect forecast and contributes 0
    (the formula alone would give 0/0).
    """
    a, f = _pair(actual, point, "point")
    num = np.abs(a - f)
    den = np.abs(a) + np.abs(f)
    terms = 200.0 * np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    # np.divide's ``where`` also swallows a NaN forecast (NaN > 0 is False); put it back
    # so a missing forecast poisons the result like in the other metrics.
    terms[np.isnan(f)] = np.nan
    return _observed_mean(terms, a)


def mase_scale(history: np.ndarray, season: int) -> np.ndarray:
    """Per-series MASE denominator: mean ``|y_t - y_{t-season}|`` over the history.

    ``history`` is ``[..., T]`` (normally ``[n_series, T]``); the result has shape
    ``history.shape[:-1]``. Pairs with a NaN on either side are skipped.

    NaN is returned for a series with no valid pair (history no longer than ``season``,
    or too sparse) *and* for a series whose scale is exactly 0 (a perfectly periodic or
    constant history): any error divided by it would be inf, so such a series is
    instead dropped from the MASE average by :func:`mase`.
    """
    return seasonal_error(history, season)


def mase(actual: np.ndarray, point: np.ndarray, scale: np.ndarray) -> float:
    """Mean absolute scaled error: per-series MAE / ``scale``, averaged over series.

    The series axis is everything but the last (horizon) axis; ``scale`` has that shape
    (see :func:`mase_scale`). Only series with a finite ratio enter the mean, so a
    series with no observed actual, a NaN or zero scale, or a NaN forecast is left out.
    NaN if no series is left.
    """
    a, f = _pair(actual, point, "point")
    s = np.asarray(scale, dtype=np.float64)
    if s.shape != a.shape[:-1]:
        raise ValueError(f"scale has shape {s.shape}, expected {a.shape[:-1]} (one per series)")
    observed = ~np.isnan(a)
    count = observed.sum(axis=-1)
    abs_err = np.abs(a - f)
    # A NaN forecast at an observed step must survive the sum, so mask on ``actual`` only.
    total = np.where(observed, abs_err, 0.0).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = total / count / s
    finite = np.isfinite(ratio)
    if not finite.any():
        return float("nan")
    return float(ratio[finite].mean())


def inside(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Per position, 1.0 where the actual lies in the closed interval ``[lower, upper]``, 0.0
    where it does not, NaN where a bound is missing."""
    a, lo = _pair(actual, lower, "lower")
    _, hi = _pair(actual, upper, "upper")
    within = ((a >= lo) & (a <= hi)).astype(np.float64)
    # A comparison with NaN is False, which would count a missing bound as a miss.
    within[np.isnan(lo) | np.isnan(hi)] = np.nan
    return within


def coverage(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> float:
    """Fraction of observed actuals inside the closed interval ``[lower, upper]``."""
    return _observed_mean(inside(actual, lower, upper), np.asarray(actual, dtype=np.float64))


def _check_quantiles(
    actual: np.ndarray, quantile_forecasts: np.ndarray, levels: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Quantile forecasts and levels as float64, with their shapes and levels validated."""
    q = np.asarray(quantile_forecasts, dtype=np.float64)
    lv = np.asarray(levels, dtype=np.float64)
    if lv.ndim != 1 or lv.size == 0:
        raise ValueError(f"levels must be a non-empty 1-D array, got shape {lv.shape}")
    if not np.all((lv > 0) & (lv < 1)):
        raise ValueError(f"quantile levels must lie strictly between 0 and 1, got {lv.tolist()}")
    expected = (*np.shape(actual), lv.size)
    if q.shape != expected:
        raise ValueError(
            f"quantile_forecasts has shape {q.shape}, expected {expected} "
            "(actual's shape plus one entry per level)"
        )
    return q, lv


def pinball(
    actual: np.ndarray, quantile_forecasts: np.ndarray, levels: Sequence[float] | np.ndarray
) -> float:
    """Mean pinball (quantile) loss over all levels and observed positions.

    For level ``q`` and error ``d = actual - forecast`` the loss is ``q * d`` when the
    actual is above the forecast and ``(q - 1) * d`` when below.
    """
    a = np.asarray(actual, dtype=np.float64)
    return _observed_mean(pinball_losses(a, quantile_forecasts, levels), a)


def pinball_losses(
    actual: np.ndarray, quantile_forecasts: np.ndarray, levels: Sequence[float] | np.ndarray
) -> np.ndarray:
    """Per position, the pinball loss averaged over the levels (``pinball`` before pooling)."""
    a = np.asarray(actual, dtype=np.float64)
    q, lv = _check_quantiles(a, quantile_forecasts, levels)
    d = a[..., None] - q
    return np.maximum(lv * d, (lv - 1.0) * d).mean(axis=-1)


def median_index(levels: Sequence[float] | np.ndarray) -> int:
    """Position of the level nearest 0.5: the quantile scored as the point forecast."""
    return int(np.argmin(np.abs(np.asarray(levels, dtype=np.float64) - 0.5)))


def level_index(levels: np.ndarray, level: float) -> int:
    """Position of ``level`` in ``levels``, tolerant to float round-off (0.1 vs 0.1000001)."""
    hits = np.flatnonzero(np.isclose(levels, level, rtol=0.0, atol=1e-9))
    if hits.size == 0:
        raise ValueError(
            f"interval level {level} is not among the quantile levels {levels.tolist()}"
        )
    return int(hits[0])


def evaluate(
    actual: np.ndarray,
    point: np.ndarray,
    scale: np.ndarray,
    quantile_forecasts: np.ndarray | None = None,
    levels: Sequence[float] | np.ndarray | None = None,
    interval: tuple[float, float] = (0.1, 0.9),
) -> dict[str, float]:
    """All headline metrics of one forecast, keyed as in :data:`METRIC_KEYS`.

    ``coverage`` is that of the interval between the two quantile levels named by
    ``interval`` (both must be among ``levels``); ``coverage`` and ``pinball`` are NaN
    for a point-only forecast, so every result has the same keys.
    """
    if (quantile_forecasts is None) != (levels is None):
        raise ValueError("quantile_forecasts and levels must be given together")
    result = {
        "mae": mae(actual, point),
        "rmse": rmse(actual, point),
        "mase": mase(actual, point, scale),
        "smape": smape(actual, point),
        "coverage": float("nan"),
        "pinball": float("nan"),
    }
    if quantile_forecasts is None:
        return result
    q, lv = _check_quantiles(actual, quantile_forecasts, levels)
    lo_level, hi_level = interval
    if not lo_level < hi_level:
        raise ValueError(f"interval must be (lower, upper) with lower < upper, got {interval}")
    lo, hi = level_index(lv, lo_level), level_index(lv, hi_level)
    result["coverage"] = coverage(actual, q[..., lo], q[..., hi])
    result["pinball"] = pinball(actual, q, lv)
    return result


def error_by_step(actual: np.ndarray, point: np.ndarray) -> np.ndarray:
    """MAE per horizon step (the last axis), pooled over series; NaN for an unobserved step."""
    a, f = _pair(actual, point, "point")
    horizon = a.shape[-1]
    a2 = a.reshape(-1, horizon)
    err = np.abs(a2 - f.reshape(-1, horizon))
    observed = ~np.isnan(a2)
    count = observed.sum(axis=0)
    total = np.where(observed, err, 0.0).sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)

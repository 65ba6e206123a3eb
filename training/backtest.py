"""Rolling-origin evaluation of a model directory against seasonal baselines. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.data.panel import DataError, Panel
from kpi_forecast.model.metrics import error_by_step, evaluate, mase_scale, median_index
from kpi_forecast.model.recalibration import Recalibration, recalibration
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.training.baselines import baseline_forecasts

MODEL_NAME = "kpi-forecast"
METRICS = ["mae", "rmse", "mase", "smape", "coverage", "pinball"]


@dataclass
class BacktestResult:
    overall: pd.DataFrame  # index: model; columns: METRICS
    per_cell: pd.DataFrame  # columns: cell_id, model, METRICS
    by_step: pd.DataFrame  # index: horizon step (1-based); columns: models; values: MAE
    origins: list[pd.Timestamp]  # first forecast step of each fold
    actual: np.ndarray  # [folds, cells, horizon]
    quantiles: np.ndarray  # [folds, cells, horizon, Q] from the model
    points: dict[str, np.ndarray]  # model name -> [folds, cells, horizon]
    recalibrations: list[Recalibration]  # of each fold's quantiles


def fold_origins(n_steps: int, horizon: int, folds: int, step: int) -> list[int]:
    """Step indices of the forecast origins, the last fold ending at the last step."""
    last = n_steps - horizon
    origins = [last - k * step for k in range(folds)][::-1]
    if origins[0] < 1:
        raise DataError(
            f"{folds} folds {step} steps apart with horizon {horizon} need more than "
            f"{n_steps} steps of data (lower --folds)"
        )
    return origins


def backtest(
    forecaster: OnnxForecaster,
    panel: Panel,
    folds: int,
    step: int | None = None,
    first_origin: int | None = None,
    recalibrate_windows: int = 0,
) -> BacktestResult:
    """Forecast from ``folds`` origins ``step`` steps apart (default: one horizon apart).

    With ``first_origin`` the folds start there and run forward to the end of the data.
    Each fold sees only the history before its origin: the model through its context window,
    the baselines and the MASE scale through the whole history. With ``recalibrate_windows``
    the model's quantiles are recalibrated on that many windows before each origin
    (``model.recalibration``).
    """
    meta = forecaster.metadata
    horizon = meta.horizon
    step = step or horizon
    if first_origin is not None:
        folds = (panel.n_steps - horizon - first_origin) // step + 1
    origins = fold_origins(panel.n_steps, horizon, folds, step)
    steps_per_day = panel.steps_per("1D")
    levels = np.asarray(meta.quantiles)
    median = median_index(levels)
    actual, quantiles, scales, recalibrations = [], [], [], []
    points: dict[str, list[np.ndarray]] = {}
    for origin in origins:
        history = panel.values[:, :origin]
        last = pd.DatetimeIndex([panel.index[origin - 1]] * panel.n_cells)
        recalibrations.append(recalibration(forecaster, history, last, recalibrate_windows))
        # The naives of the blend read the history before the origin, as far as they reach.
        forecast = forecaster.forecast(history, last, recalibrations[-1])
        quantiles.append(forecast)
        actual.append(panel.values[:, origin : origin + horizon])
        scales.append(mase_scale(history, 7 * steps_per_day))
        points.setdefault(MODEL_NAME, []).append(forecast[..., median])
        for name, point in baseline_forecasts(history, horizon, steps_per_day).items():
            points.setdefault(name, []).append(point)
    quantile_arr = np.stack(quantiles)
    point_arrs = {name: np.stack(p) for name, p in points.items()}
    # Every model is scored on the same points: those where all of them have a forecast
    # (a seasonal baseline has none where every earlier season is missing at that phase).
    unforecast = np.any([np.isnan(p) for p in point_arrs.values()], axis=0)
    actual_arr = np.where(unforecast, np.nan, np.stack(actual))
    scale_arr = np.stack(scales)  # [folds, cells]
    interval = _interval(levels)

    def score(model: str, cells: np.ndarray) -> dict[str, float]:
        def pooled(a: np.ndarray) -> np.ndarray:  # folds x chosen cells -> one series axis
            a = a[:, cells]
            return a.reshape(-1, *a.shape[2:])

        with_quantiles = model == MODEL_NAME
        return evaluate(
            pooled(actual_arr),
            pooled(point_arrs[model]),
            pooled(scale_arr),
            quantile_forecasts=pooled(quantile_arr) if with_quantiles else None,
            levels=levels if with_quantiles else None,
            interval=interval,
        )

    every_cell = np.arange(panel.n_cells)
    overall = pd.DataFrame({m: score(m, every_cell) for m in point_arrs}).T[METRICS]
    rows = [
        {"cell_id": cell, "model": m, **score(m, np.array([i]))}
        for i, cell in enumerate(panel.cell_ids)
        for m in point_arrs
    ]
    flat_actual = actual_arr.reshape(-1, horizon)
    by_step = pd.DataFrame(
        {m: error_by_step(flat_actual, p.reshape(-1, horizon)) for m, p in point_arrs.items()},
        index=pd.RangeIndex(1, horizon + 1, name="step"),
    )
    return BacktestResult(
        overall=overall,
        per_cell=pd.DataFrame(rows),
        by_step=by_step,
        origins=[panel.index[o] for o in origins],
        actual=actual_arr,
        quantiles=quantile_arr,
        points=point_arrs,
        recalibrations=recalibrations,
    )


def _interval(levels: np.ndarray) -> tuple[float, float]:
    """The central interval the coverage is reported for: P10-P90 when those are present."""
    wanted = (0.1, 0.9)
    if all(np.isclose(levels, q).any() for q in wanted):
        return wanted
    return float(levels[0]), float(levels[-1])

"""Live accuracy: a model's recorded forecasts scored against the actuals that arrive later,
beside the seasonal naives' forecasts of the same points (``model.naive``).

A block is one recorded forecast of one cell: the ``horizon`` steps after its origin. Its score
is a row of sums (``FIELDS``), so that the blocks of a window and the cells of a model pool
exactly, as ``model.metrics`` pools positions: a window's MAE is the sum of its absolute errors
over the number of its points. A point is a step of the block whose actual and every scored
naive are known, so that the model and the naives are compared on the same points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kpi_forecast.model.metrics import inside, median_index, pinball_losses

SCORED_NAIVES = ("last_day", "last_week")  # the seasonal naives (model.naive)
INTERVAL = (0.1, 0.9)  # the band whose coverage is scored
FIELDS = ("points", "abs_error", *(f"{name}_abs_error" for name in SCORED_NAIVES), "pinball",
          "interval_points", "inside")
POINTS, ABS_ERROR, PINBALL, INTERVAL_POINTS, INSIDE = (
    FIELDS.index(name) for name in ("points", "abs_error", "pinball", "interval_points",
                                    "inside"))
NAIVE_ERRORS = [FIELDS.index(f"{name}_abs_error") for name in SCORED_NAIVES]


def interval_indices(levels: Sequence[float]) -> tuple[int, int] | None:
    """Where the levels of INTERVAL are among ``levels``; None when either is not."""
    found = [np.flatnonzero(np.isclose(levels, level, rtol=0.0, atol=1e-9))
             for level in INTERVAL]
    return None if any(hit.size == 0 for hit in found) else (int(found[0][0]), int(found[1][0]))


def block_sums(actual: np.ndarray, quantile_forecasts: np.ndarray, levels: Sequence[float],
               naives: np.ndarray) -> np.ndarray:
    """Per row of ``actual`` [B, H] (NaN: not observed), the sums of FIELDS [B, len(FIELDS)] of
    its ``quantile_forecasts`` [B, H, Q] (the point: the median level, ``median_index``) and of
    the SCORED_NAIVES' ``naives`` [N, B, H], over the steps where the actual and every naive
    are known."""
    a = np.asarray(actual, dtype=np.float64)
    q = np.asarray(quantile_forecasts, dtype=np.float64)
    known = ~np.isnan(a) & ~np.isnan(naives).any(axis=0)
    a = np.where(known, a, np.nan)
    out = np.zeros((len(a), len(FIELDS)))

    def total(values: np.ndarray, where: np.ndarray = known) -> np.ndarray:
        return np.where(where, values, 0.0).sum(axis=1)

    out[:, POINTS] = known.sum(axis=1)
    out[:, ABS_ERROR] = total(np.abs(a - q[..., median_index(levels)]))
    for column, naive in zip(NAIVE_ERRORS, naives, strict=True):
        out[:, column] = total(np.abs(a - naive))
    out[:, PINBALL] = total(pinball_losses(a, q, levels))
    band = interval_indices(levels)
    if band is not None:
        within = inside(a, q[..., band[0]], q[..., band[1]])
        counted = known & ~np.isnan(within)
        out[:, INTERVAL_POINTS] = counted.sum(axis=1)
        out[:, INSIDE] = total(within, counted)
    return out


def in_window(origins: np.ndarray, horizon: int, end: int, steps: int) -> np.ndarray:
    """Which blocks (by their origins' slots; negative: none) have a step among the ``steps``
    steps before slot ``end``."""
    return (origins >= 0) & (origins + horizon > end - steps) & (origins < end)


@dataclass(frozen=True)
class Accuracy:
    """A window's scores (None where nothing says: no point, or a naive without error)."""

    points: int
    mae: float | None
    naive_mae: dict[str, float | None]
    skill: float | None  # 1 - MAE / the better naive's MAE: above 0, the model is better
    pinball: float | None
    coverage: float | None  # share of the actuals inside the INTERVAL band

    @classmethod
    def of(cls, sums: np.ndarray) -> Accuracy:
        """From a window's pooled sums (FIELDS)."""
        points = float(sums[POINTS])

        def per(total: float, count: float) -> float | None:
            return float(total / count) if count > 0 else None

        naive = {name: per(sums[column], points)
                 for name, column in zip(SCORED_NAIVES, NAIVE_ERRORS, strict=True)}
        mae = per(sums[ABS_ERROR], points)
        best = min((v for v in naive.values() if v is not None), default=None)
        return cls(points=int(points), mae=mae, naive_mae=naive,
                   skill=None if mae is None or not best else 1.0 - mae / best,
                   pinball=per(sums[PINBALL], points),
                   coverage=per(sums[INSIDE], sums[INTERVAL_POINTS]))

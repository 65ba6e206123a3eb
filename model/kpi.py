"""What a KPI value is, for every part that takes one (a user's file, the model's input, the
xApp's REST and Arrow bodies, E2 reports, the history): a number from 0 to MAX_KPI_VALUE.
NaN is a missing value, not a wrong one. Each caller says where the value was; the problem is
said here, once."""

from __future__ import annotations

import math

import numpy as np

# The network computes in float32 (largest 3.4e38) and squares deviations from the mean summed
# over a window: 1e15 squared times 10^5 steps is 1e35, so no window it accepts overflows,
# while no KPI in any unit a RAN exports (bytes per step of a cell included) comes near it.
MAX_KPI_VALUE = 1e15


def not_kpis(values: np.ndarray) -> np.ndarray:
    """Where ``values`` are no KPI value: infinite, negative or above MAX_KPI_VALUE (NaN is
    not flagged)."""
    values = np.asarray(values)
    with np.errstate(invalid="ignore"):
        return np.isinf(values) | (values < 0) | (values > MAX_KPI_VALUE)


def kpi_problem(value: float) -> str | None:
    """Why ``value`` is no KPI value, or None when it is one (or NaN, a missing one)."""
    if math.isinf(value):
        return "infinite"
    if value < 0:
        return "negative (KPIs are non-negative)"
    if value > MAX_KPI_VALUE:
        return f"above {MAX_KPI_VALUE:g}, the largest KPI value the model takes"
    return None

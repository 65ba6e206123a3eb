"""A JSON body's series as the forecaster takes it: values (None = NaN) and the time of the
last step, checked to end, with the model's horizon after it, within what timestamps hold."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.errors import ClientError
from kpi_forecast.xapp.schemas import SeriesIn


def span(body: SeriesIn, model: OnnxForecaster) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The series' first and last steps. One whose forecast would end past what timestamps
    hold (April 2262) is the client's error, not an overflow inside."""
    start = pd.Timestamp(body.start)
    if not fits(start.value, len(body.values) - 1 + model.metadata.horizon, model.step.value):
        raise ClientError(422, f"values: {len(body.values)} steps of {body.freq} from "
                          f"{body.start.isoformat()}, and the model's horizon after them, end "
                          f"past {pd.Timestamp.max.date()}")
    return start, start + (len(body.values) - 1) * model.step


def fits(start_ns: int | np.ndarray, steps: int | np.ndarray, step_ns: int) -> bool | np.ndarray:
    """Whether ``steps`` steps after ``start_ns`` (ns since 1970, not before it) are still a
    timestamp; arranged so that int64 arrays do not overflow on the way."""
    return steps <= (pd.Timestamp.max.value - start_ns) // step_ns


def series(body: SeriesIn, model: OnnxForecaster) -> tuple[np.ndarray, pd.Timestamp]:
    values = np.array(body.values, np.float32)  # None becomes NaN
    return values, span(body, model)[1]

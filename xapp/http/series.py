"""A JSON body's series as the forecaster takes it: values (None = NaN) and the time of the
last step, checked to end, with the model's horizon after it, within what timestamps hold."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.http.errors import ClientError
from kpi_forecast.xapp.http.schemas import SeriesIn

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MICROSECOND = dt.timedelta(microseconds=1)


def epoch_ns(stamp: dt.datetime) -> int:
    """An aware datetime as nanoseconds since 1970 UTC (what pandas' ``Timestamp.value``
    is), in integers: a Timestamp per request cost more than the rest of the series' checks."""
    return (stamp - EPOCH) // MICROSECOND * 1000


def _check_end(body: SeriesIn, model: OnnxForecaster, start_ns: int) -> None:
    """A series whose forecast would end past what timestamps hold (April 2262) is the
    client's error, not an overflow inside."""
    if not fits(start_ns, len(body.values) - 1 + model.metadata.horizon, model.step.value):
        raise ClientError(422, f"values: {len(body.values)} steps of {body.freq} from "
                          f"{body.start.isoformat()}, and the model's horizon after them, end "
                          f"past {pd.Timestamp.max.date()}")


def span(body: SeriesIn, model: OnnxForecaster) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The series' first and last steps (history to store)."""
    start = pd.Timestamp(body.start)
    _check_end(body, model, start.value)
    return start, start + (len(body.values) - 1) * model.step


def fits(start_ns: int | np.ndarray, steps: int | np.ndarray, step_ns: int) -> bool | np.ndarray:
    """Whether ``steps`` steps after ``start_ns`` (ns since 1970, not before it) are still a
    timestamp; arranged so that int64 arrays do not overflow on the way."""
    return steps <= (pd.Timestamp.max.value - start_ns) // step_ns


def series(body: SeriesIn, model: OnnxForecaster) -> tuple[np.ndarray, dt.datetime, int]:
    """The values, and the last step: in the zone the series came in (what the answer's
    timestamps follow) and as nanoseconds since 1970 UTC (what the batcher takes)."""
    values = np.array(body.values, np.float32)  # None becomes NaN
    start_ns = epoch_ns(body.start)
    _check_end(body, model, start_ns)
    last_ns = start_ns + (len(values) - 1) * model.step.value
    last = (EPOCH + dt.timedelta(microseconds=last_ns // 1000)).astimezone(body.start.tzinfo)
    return values, last, last_ns

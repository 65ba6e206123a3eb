"""Request and response bodies of the REST API: the service boundary, validated by pydantic;
and the forecasts' answers, built as plain dicts of the response models' shape
(``cell_response``, ``batch_response``)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
import orjson
import pandas as pd
from fastapi import Path, Response
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)

from kpi_forecast.model.kpi import MAX_KPI_VALUE
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.descriptor.fields import CELL_ID_PATTERN, MAX_CELL_ID, CellId
from kpi_forecast.xapp.serving.forecasting import check_end

if TYPE_CHECKING:
    from kpi_forecast.xapp.serving.forecasting import Forecast

MAX_VALUES = 100_000  # steps in one series: a year of 5-minute samples
MAX_BATCH_ITEMS = 100_000

# Years a series may start in, as written with its own offset. Far enough from both ends of
# what pandas' nanosecond timestamps hold (1677 to 2262) that a series and its forecast fit.
FIRST_YEAR, LAST_YEAR = 1970, 2199
YEAR_PATTERN = r"^(19[7-9][0-9]|2[01][0-9][0-9])-"  # the same years, for the OpenAPI document


def _text(value: object) -> object:
    # pydantic would take a number as seconds since 1970: the schema says a date-time string.
    if not isinstance(value, str | dt.datetime):
        raise ValueError("must be an ISO 8601 date-time string with its UTC offset")
    return value


def _year_in_range(value: dt.datetime) -> dt.datetime:
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ValueError(f"year {value.year} is outside {FIRST_YEAR} to {LAST_YEAR}")
    return value


def _whole(value: object) -> object:
    # JSON Schema's integer: 5 and 5.0, not true or "5" (pydantic's lax mode takes both).
    if isinstance(value, bool | str) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("must be a whole number")
    return int(value) if isinstance(value, float) else value


Start = Annotated[
    AwareDatetime, BeforeValidator(_text), AfterValidator(_year_in_range),
    Field(description=f"time of values[0], with its UTC offset; year {FIRST_YEAR} to "
          f"{LAST_YEAR}", json_schema_extra={"pattern": YEAR_PATTERN}),
]
# Strict: a JSON true is not the number 1, nor "12" the number 12.
Kpi = Annotated[float, Field(ge=0.0, le=MAX_KPI_VALUE, allow_inf_nan=False, strict=True)]
# The same rule for a cell id in a route's path.
CellIdPath = Annotated[str, Path(min_length=1, max_length=MAX_CELL_ID, pattern=CELL_ID_PATTERN)]
ModelNamePath = Annotated[str, Path(
    description="the model's name: its directory's in the repository (GET /v1/models)")]
Horizon = Annotated[Annotated[int, Field(ge=1)] | None, BeforeValidator(_whole), Field(
    default=None, description="steps to forecast; default from config, at most the model's "
    "horizon")]
FREQ_DESCRIPTION = "grid step, e.g. 1h or 15min; must be the model's"


class SeriesIn(BaseModel):
    """Consecutive samples of one cell on a regular grid; ``null`` marks a missing step."""

    model_config = ConfigDict(extra="forbid")

    start: Start
    freq: str = Field(description=FREQ_DESCRIPTION)
    values: list[Kpi | None] = Field(min_length=1, max_length=MAX_VALUES)


class ForecastRequest(SeriesIn):
    cell_id: CellId
    # A forecast needs at least one observed value (``contains`` says so in the schema).
    values: list[Kpi | None] = Field(min_length=1, max_length=MAX_VALUES,
                                     json_schema_extra={"contains": {"type": "number"}})
    horizon: Horizon

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{
            "cell_id": "c1", "start": "2013-12-01T00:00:00+01:00", "freq": "1h",
            "values": [12.0, None, 14.0], "horizon": 24,
        }]},
    )

    @field_validator("values")
    @classmethod
    def _observed(cls, values: list[float | None]) -> list[float | None]:
        if all(value is None for value in values):
            raise ValueError("no observed value: at least one must be a number")
        return values


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[ForecastRequest] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class CellsForecastRequest(BaseModel):
    """Forecasts for cells whose history the xApp holds (from E2 or POSTed history)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"cell_ids": ["c1", "c2"], "horizon": 24}]},
    )

    cell_ids: list[CellId] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)
    horizon: Horizon


class ForecastResponse(BaseModel):
    cell_id: str
    forecasts: list[dict[str, float | str]] = Field(
        description="one entry per step: timestamp (ISO 8601) and one pNN key per quantile"
    )
    model_version: str | None
    source: Literal["model", "fallback"]
    reason: str | None = Field(default=None, description="why the fallback answered: "
                               "queue_delay, timeout, model_error, or live_skill (the model's "
                               "guard: its live skill is below the threshold)")
    latency_ms: float = Field(description="server-side latency, arrival to response")


class BatchResponse(BaseModel):
    items: list[ForecastResponse]
    latency_ms: float


class CellOut(BaseModel):
    cell_id: str
    steps_held: int
    first: str
    last: str


class CellsResponse(BaseModel):
    count: int
    freq: str
    history_length: int
    cells: list[CellOut]


class HistoryAccepted(BaseModel):
    cell_id: str
    kept: int = Field(description="samples stored (older than the window held are dropped)")


class CellHistoryIn(SeriesIn):
    cell_id: CellId


class CellsHistoryRequest(BaseModel):
    """Many cells' history at once, e.g. to seed the xApp from a PM export at roll-out."""

    model_config = ConfigDict(extra="forbid")

    items: list[CellHistoryIn] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class CellsHistoryAccepted(BaseModel):
    items: list[HistoryAccepted]


class CellForecastsResponse(BaseModel):
    """A held cell's forecasts by every model serving, by model name."""

    cell_id: str
    forecasts: dict[str, ForecastResponse]
    errors: dict[str, str] = Field(description="why a model gave no forecast, by model name")


def span(body: SeriesIn, model: OnnxForecaster) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The series' first and last steps (history to store); InvalidRequest for one whose
    forecast would end past what timestamps hold."""
    check_end(body.start, len(body.values), body.freq, model)
    start = pd.Timestamp(body.start)
    return start, start + (len(body.values) - 1) * model.step


# --- the forecasts' answers, built as dicts ------------------------------------------------------
# An answer has the shape of ``ForecastResponse`` or ``BatchResponse`` (the OpenAPI document's,
# and what the contract tests validate them against) but is a plain dict encoded by orjson,
# built from checked parts without validating them again: building the pydantic models and
# dumping them is slower, and every single-cell forecast pays it (docs/decisions/hot-path.md).
# A point's timestamp is in the zone its series came in, its quantiles rounded to DECIMALS
# places.

DECIMALS = 4  # of the quantiles answered in JSON: a tenth of a thousandth of any KPI unit


def _points(forecast: Forecast, row: int, last: dt.datetime) -> list[dict]:
    answer, names = forecast.answer, forecast.names[row]
    quantiles = answer.quantiles[row, :forecast.horizons[row]]
    if names is not None and list(names) != answer.names:
        quantiles = quantiles[:, [answer.names.index(name) for name in names]]
    rows = np.round(quantiles.astype(np.float64), DECIMALS).tolist()
    stamps = _timestamps(last.astimezone(dt.UTC), last.tzinfo, forecast.step.to_pytimedelta(),
                         len(rows))
    keys = ("timestamp", *(names or answer.names))
    return [dict(zip(keys, (stamp, *values), strict=True))
            for stamp, values in zip(stamps, rows, strict=True)]


@functools.lru_cache(maxsize=256)
def _timestamps(last: dt.datetime, zone: dt.tzinfo, step: dt.timedelta, horizon: int
                ) -> tuple[str, ...]:
    """The forecast steps' ISO timestamps in ``zone``, from ``last`` in UTC: the same few
    windows are asked for all hour long.

    Steps are added in UTC: an aware datetime adds on the wall clock, which across a DST
    switch would label two steps with one instant. The zone is part of the key because
    datetimes of one instant in two zones are equal, and hash alike.
    """
    return tuple((last + (k + 1) * step).astimezone(zone).isoformat() for k in range(horizon))


def cell_response(cell_id: str, forecast: Forecast, row: int, last: dt.datetime) -> dict:
    """The answer of ``forecast``'s row ``row`` (a ``ForecastResponse``), whose last step is
    ``last``: its horizon's steps and its quantiles."""
    answer = forecast.answer
    return {
        "cell_id": cell_id, "forecasts": _points(forecast, row, last),
        "model_version": answer.model_version, "source": answer.source,
        "reason": answer.reason, "latency_ms": round(forecast.latency_ms, 3),
    }


def batch_response(forecast: Forecast, cell_ids: Sequence[str]) -> dict:
    """Many cells' answers (a ``BatchResponse``), row by row."""
    last = forecast.last_steps()
    return {"items": [cell_response(cell_id, forecast, row, last[row])
                      for row, cell_id in enumerate(cell_ids)],
            "latency_ms": round(forecast.latency_ms, 3)}


def json_response(payload: dict) -> Response:
    return Response(orjson.dumps(payload), media_type="application/json")

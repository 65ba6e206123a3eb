"""KServe's time-series forecast API on the same server, for clients of a KServe stack:
``POST /v1/timeseries/forecast`` and ``GET /v1/timeseries/models``, with the request, answer
and error shapes of the ``kserve`` package (``kserve.protocol.rest.timeseries.types``, restated
here as pydantic models: the serving image does not carry kserve; a test parses our answers
with kserve's own types).

Each input is one univariate series, forecast by the model the request names. ``frequency``
is KServe's (second, minute, hour, day, week, or their letters) and must be one step of the
model's grid. ``mean_forecast`` is the median (p50), the model's point forecast; ``quantiles``
holds those asked for, by level ("0.1"). A1 policies steer cells and do not apply here.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

import numpy as np
import pandas as pd
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kpi_forecast.xapp.components import Components
from kpi_forecast.xapp.http import openapi
from kpi_forecast.xapp.http.edge import facts
from kpi_forecast.xapp.http.errors import ClientError, status_of
from kpi_forecast.xapp.http.schemas import MAX_BATCH_ITEMS, ForecastRequest, json_response
from kpi_forecast.xapp.serving.errors import RequestError, Shed, UnknownModel
from kpi_forecast.xapp.serving.forecasting import parse_step
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable

UNIVARIATE = "univariate_time_series"
# KServe's frequencies that are one fixed step (months and years are not).
FREQUENCIES = {
    "S": "1s", "second": "1s", "T": "1min", "minute": "1min", "H": "1h", "hour": "1h",
    "D": "1D", "day": "1D", "W": "7D", "week": "7D",
}


class TimeSeriesInput(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["univariate_time_series", "multivariate_time_series"]
    name: str
    series: list[float | None] | list[list[float | None]]
    frequency: str
    start_timestamp: str | None = None


class ForecastOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    horizon: int
    quantiles: list[float] | None = None


class TimeSeriesRequest(BaseModel):
    """KServe's ``ForecastRequest``."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [{
        "model": "prb_util", "options": {"horizon": 24, "quantiles": [0.1, 0.9]},
        "inputs": [{"type": UNIVARIATE, "name": "c1", "series": [12.0, 13.5, 14.0],
                    "frequency": "H", "start_timestamp": "2013-12-01T00:00:00+01:00"}]}]})

    model: str
    inputs: list[TimeSeriesInput] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)
    options: ForecastOptions
    metadata: dict | None = None


class TimeSeriesForecast(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    name: str
    mean_forecast: list[float]
    frequency: str
    start_timestamp: str
    quantiles: dict[str, list[float]] | None = None


class ForecastOutput(BaseModel):
    type: str
    id: str
    status: Literal["completed", "error", "pending", "partial"]
    content: list[TimeSeriesForecast]


class TimeSeriesResponse(BaseModel):
    """KServe's ``ForecastResponse``, and the model version and source (model or fallback)."""

    model_config = ConfigDict(extra="allow")

    id: str
    created_at: int
    status: Literal["completed", "error", "pending", "partial"]
    model: str
    outputs: list[ForecastOutput]


class KServeError(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class KServeErrorResponse(BaseModel):
    error: KServeError


KSERVE_ERRORS = {status: {"model": KServeErrorResponse}
                 for status in (404, 409, 413, 422, 503)}


def add_timeseries_routes(router: APIRouter, components: Components) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``components``."""

    @router.post(
        "/v1/timeseries/forecast", response_model=TimeSeriesResponse, responses=KSERVE_ERRORS,
        tags=["kserve"], openapi_extra={**facts(series="many"), "requestBody": {"content": {
            "application/json": {"schema": openapi.component_ref(TimeSeriesRequest)}},
            "required": True}})
    async def timeseries_forecast(request: Request) -> Response:
        """KServe's time-series forecast: each input series' median and quantiles by the model
        named."""
        try:
            return await _forecast(components, request)
        except ClientError as exc:
            return kserve_error(exc.status, str(exc), "BadRequestError")
        except UnknownModel as exc:
            return kserve_error(404, str(exc), "NotFoundError", "model")
        except RequestError as exc:
            return kserve_error(status_of(exc), str(exc), "BadRequestError")
        except Shed as exc:
            return kserve_error(503, str(exc), "ServiceUnavailableError",
                                headers={"Retry-After": f"{max(1, round(exc.retry_after_s))}"})
        except HistoryUnavailable as exc:
            return kserve_error(503, str(exc), "ServiceUnavailableError")

    @router.get("/v1/timeseries/models", response_model=list[str], tags=["kserve"])
    async def timeseries_models() -> list[str]:
        """The names of the models ready to forecast, as KServe lists them."""
        return [name for name, served in components.state.models.items()
                if served.model is not None]


def kserve_error(status: int, message: str, kind: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> JSONResponse:
    """An error as KServe answers it."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                   "code": str(status)}}, status_code=status, headers=headers)


async def _forecast(components: Components, request: Request) -> Response:
    try:
        body = TimeSeriesRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return kserve_error(422, f"{where}: {first['msg']}", "BadRequestError", where)
    slot = components.slot(body.model)
    served = components.state.view(slot.name)
    meta = components.forecasting.model(served).metadata
    horizon = body.options.horizon
    if not 1 <= horizon <= meta.horizon:
        raise ClientError(422, f"options.horizon {horizon}: from 1 to the model's "
                          f"{meta.horizon}")
    asked = body.options.quantiles or list(served.controls.quantiles or meta.quantiles)
    missing = [q for q in asked if q not in meta.quantiles]
    if missing:
        raise ClientError(422, f"options.quantiles {missing} are not among the model's "
                          f"{meta.quantiles}")
    median = 0.5 if 0.5 in meta.quantiles else meta.quantiles[len(meta.quantiles) // 2]
    columns = tuple(q for q in meta.quantiles if q in {*asked, median})
    items = [_series(row, item, meta.freq, horizon) for row, item in enumerate(body.inputs)]
    forecast = await components.forecasting.given(slot, items, request.state.arrival,
                                                  request.scope["route"], quantiles=columns)
    answer = forecast.answer
    values = np.round(answer.quantiles.astype(np.float64), 4)
    where = {q: columns.index(q) for q in columns}
    step = forecast.step.to_pytimedelta()
    content = [{
        "type": UNIVARIATE, "name": item.name, "frequency": item.frequency,
        "start_timestamp": (last + step).isoformat(),
        "mean_forecast": values[row, :, where[median]].tolist(),
        "quantiles": {str(q): values[row, :, where[q]].tolist() for q in asked},
    } for row, (item, last) in enumerate(zip(body.inputs, forecast.last_steps(), strict=True))]
    return json_response({
        "id": uuid.uuid4().hex, "created_at": int(time.time()), "status": "completed",
        "model": slot.name, "model_version": answer.model_version, "source": answer.source,
        "reason": answer.reason, "latency_ms": round(forecast.latency_ms, 3),
        "outputs": [{"type": "forecast", "id": uuid.uuid4().hex, "status": "completed",
                     "content": content}],
    })


def _series(row: int, item: TimeSeriesInput, freq: str, horizon: int) -> ForecastRequest:
    """One input as a series on the model's grid (``freq``), or the client's error naming the
    input."""
    if item.type != UNIVARIATE:
        raise ClientError(422, f"inputs.{row}: only univariate_time_series is forecast")
    step = FREQUENCIES.get(item.frequency)
    if step is None or pd.Timedelta(step) != parse_step(freq):
        raise ClientError(422, f"inputs.{row}.frequency {item.frequency!r}: the model's step "
                          f"is {freq} (S, T, H, D or W, one step of it)")
    if item.start_timestamp is None:
        raise ClientError(422, f"inputs.{row}.start_timestamp: needed, the model reads the "
                          "calendar")
    try:
        return ForecastRequest.model_validate({
            "cell_id": item.name or "-", "start": item.start_timestamp, "freq": freq,
            "values": item.series, "horizon": horizon})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = {"cell_id": "name", "start": "start_timestamp", "values": "series"}.get(
            str(first["loc"][0]), str(first["loc"][0]))
        rest = "".join(f".{part}" for part in first["loc"][1:])
        raise ClientError(422, f"inputs.{row}.{field}{rest}: {first['msg']}") from None

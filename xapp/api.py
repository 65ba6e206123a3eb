"""The REST interface: O-RAN SC conventions under /ric/v1, forecasts under /v1.

Every error is JSON with an ``error`` message; client mistakes are 4xx, never 500. OpenAPI is
at /docs.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import math
import os
import time
from collections.abc import AsyncIterator
from typing import Annotated

import httpx
import numpy as np
import pandas as pd
from fastapi import FastAPI, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from kpi_forecast.model.artifact import ArtifactError
from kpi_forecast.model.features import calendar_zone
from kpi_forecast.model.kpi import kpi_problem, not_kpis
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp import binary, openapi, registration
from kpi_forecast.xapp.config import ConfigWatcher, Descriptor
from kpi_forecast.xapp.history import History, HistoryError, HistoryUnavailable
from kpi_forecast.xapp.schemas import (
    CELL_ID_PATTERN,
    FIRST_YEAR,
    FREQ_DESCRIPTION,
    LAST_YEAR,
    MAX_CELL_ID,
    BatchRequest,
    BatchResponse,
    CellOut,
    CellsForecastRequest,
    CellsHistoryAccepted,
    CellsHistoryRequest,
    CellsResponse,
    ErrorOut,
    ForecastRequest,
    ForecastResponse,
    HistoryAccepted,
    ModelOut,
    ReloadRequest,
    SeriesIn,
)
from kpi_forecast.xapp.service import STOP_STEP_S, Answer, ClientError, Service, Shed

log = logging.getLogger(__name__)

ERRORS = {code: {"model": ErrorOut} for code in (400, 404, 409, 413, 422, 503)}
DECIMALS = 4  # of the quantiles answered in JSON: a tenth of a thousandth of any KPI unit
CellIdPath = Annotated[str, Path(min_length=1, max_length=MAX_CELL_ID,
                                  pattern=CELL_ID_PATTERN)]


def create_app(
    descriptor: Descriptor, watch_config: bool = True, overrides: dict | None = None,
    appmgr_transport: httpx.AsyncBaseTransport | None = None, http_port: int = 8080,
) -> FastAPI:
    """The app; ``overrides`` (CLI flags) are re-applied to every reloaded config file."""
    service = Service(descriptor, http_port=http_port)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = await service.start()
        if watch_config:
            watcher = ConfigWatcher(descriptor.path, service.apply_descriptor,
                                    overrides=overrides)
            tasks.append(asyncio.create_task(watcher.run(), name="config-watch"))
        registered = service.controls.registration.enabled
        if registered:
            tasks.append(asyncio.create_task(
                registration.register(service.descriptor, appmgr_transport), name="register"))
        yield
        if registered:  # first, so the RIC stops routing to us while we drain
            await registration.deregister(service.descriptor, appmgr_transport,
                                          timeout_s=STOP_STEP_S)
        await service.stop(tasks)

    app = ForecastApp(
        generate_unique_id_function=lambda route: route.name,  # operationIds: the handlers
        title="kpi-forecast xApp",
        description="Per-cell KPI forecasts for the near-RT RIC.",
        version=descriptor.version,
        lifespan=lifespan,
    )
    app.state.service = service
    app.openapi = openapi.Document(  # type: ignore[method-assign]
        app, lambda: service.model.metadata if service.model else None,
        extra_models=(BatchRequest, ForecastRequest))
    app.add_middleware(Boundary, service=service)
    _add_error_handlers(app, service)
    _add_ric_routes(app, service)
    _add_forecast_routes(app, service)
    return app


# --- the edge: size limit, arrival time, request metrics ----------------------------------


class _TooLarge(Exception):
    pass


class Boundary:
    """Pure ASGI (no per-request task): stamps arrival, caps the body, counts requests (those
    ``ForecastApp`` refuses before they reach it are counted there)."""

    def __init__(self, app, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The request reached the socket about one loop lag before the app reads it: from
        # there its budget runs, and its wait counts (overload.py).
        scope.setdefault("state", {})["arrival"] = (time.monotonic()
                                                    - self.service.loop_lag.seconds)
        limit = self.service.controls.max_request_bytes
        status = 500
        started = False

        async def send_counted(message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        declared = dict(scope.get("headers", [])).get(b"content-length")
        received = 0

        async def receive_capped():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                # FastAPI turns errors while it reads a body into a 400: leave a mark so the
                # error handler answers 413 instead.
                scope["state"]["body_too_large"] = True
                raise _TooLarge
            return message

        try:
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise _TooLarge
            await self.app(scope, receive_capped, send_counted)
        except _TooLarge:
            if started:
                raise
            await too_large(limit)(scope, receive, send_counted)
        finally:
            self.service.metrics.requests.labels(
                route=_route_label(scope), method=scope["method"], status=str(status)).inc()


class ForecastApp(FastAPI):
    """FastAPI with admission control in front of all of it: a forecast refused for overload
    never enters the framework. Under overload most requests are refusals, and in front of
    FastAPI's layers one costs a third to a quarter of what it costs inside them
    (docs/benchmarks.md), time the admitted requests then have."""

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not _is_forecast(scope["path"]):
            await super().__call__(scope, receive, send)
            return
        service: Service = self.state.service
        try:
            service.admit()
        except Shed as exc:
            await shed_response(exc)(scope, receive, send)
            service.metrics.requests.labels(
                route=_route_label(scope), method=scope["method"], status="503").inc()
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            service.admission.release()


def _route_label(scope) -> str:
    """The route template a request is counted under ("unmatched" for no route)."""
    return getattr(scope.get("route"), "path", None) or (
        "/v1/cells/{cell_id}/forecast" if scope["path"].startswith("/v1/cells/")
        else scope["path"] if _is_forecast(scope["path"]) else "unmatched")


def _is_forecast(path: str) -> bool:
    """Forecast routes are what overload shedding applies to (not health, metrics, ingest)."""
    return path.startswith("/v1/forecast") or (
        path.startswith("/v1/cells/") and path.endswith("/forecast"))


def too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"error": f"request body larger than {limit} bytes (controls.maxRequestBytes)"},
        status_code=413,
    )


def shed_response(exc: Shed) -> JSONResponse:
    return JSONResponse(
        {"error": str(exc), "reason": exc.reason}, status_code=503,
        headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))},
    )


def _add_error_handlers(app: FastAPI, service: Service) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc.errors())

    @app.exception_handler(ClientError)
    async def client_error(request: Request, exc: ClientError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(Shed)
    async def shed(request: Request, exc: Shed) -> JSONResponse:
        return shed_response(exc)

    @app.exception_handler(HistoryUnavailable)
    async def store_down(request: Request, exc: HistoryUnavailable) -> JSONResponse:
        service.metrics.shed.labels(reason="history_store").inc()
        return shed_response(Shed("history_store", str(exc), retry_after_s=1.0))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if getattr(request.state, "body_too_large", False):
            return too_large(service.controls.max_request_bytes)
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


def _validation_error(errors: list) -> JSONResponse:
    def where(error: dict) -> str:
        parts = [p for p in error.get("loc", ()) if p != "body"]
        text = ""
        for part in parts:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
        return text or "body"

    first = errors[0] if errors else {"msg": "invalid request"}
    detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in errors[:20]]
    return JSONResponse({"error": f"{where(first)}: {first.get('msg')}", "detail": detail},
                        status_code=422)


# --- /ric/v1: health, config, metrics -------------------------------------------------------


def _add_ric_routes(app: FastAPI, service: Service) -> None:
    @app.get("/ric/v1/health/alive", tags=["ric"])
    async def alive() -> dict:
        return {"status": "alive"}

    @app.get("/ric/v1/health/ready", tags=["ric"], responses={503: {"model": ErrorOut}})
    async def ready() -> JSONResponse:
        if service.model is None:
            return JSONResponse({"error": "no model loaded and warmed up yet"}, status_code=503)
        return JSONResponse({"status": "ready",
                             "model_version": service.model.metadata.model_version})

    @app.get("/ric/v1/config", tags=["ric"])
    async def config() -> list[dict]:
        descriptor = service.descriptor
        return [{"metadata": {"xappName": descriptor.name, "configType": "json"},
                 "config": descriptor.raw}]

    @app.get("/ric/v1/metrics", tags=["ric"], response_class=Response, responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}})
    async def metrics() -> Response:
        try:
            held = await service.history.count() if service.history else 0
        except HistoryUnavailable:
            held = float("nan")  # unknown, rather than a scrape that fails as a whole
        service.metrics.cells_held.set(held)
        service.show_admission()
        return Response(generate_latest(service.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)


# --- /v1: forecasts, cells, model ------------------------------------------------------------


def _link(operation: str, **how: dict) -> dict:
    """An OpenAPI link from a 200 answer to the operation its values feed: cells written, then
    forecast (client generators and the fuzzer's stateful phase follow them)."""
    return {200: {"links": {operation: {"operationId": operation, **how}}}}


def _span(body: SeriesIn, model: OnnxForecaster) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The series' first and last steps. One whose forecast would end past what timestamps
    hold (April 2262) is the client's error, not an overflow inside."""
    start = pd.Timestamp(body.start)
    if not _fits(start.value, len(body.values) - 1 + model.metadata.horizon, model.step.value):
        raise ClientError(422, f"values: {len(body.values)} steps of {body.freq} from "
                          f"{body.start.isoformat()}, and the model's horizon after them, end "
                          f"past {pd.Timestamp.max.date()}")
    return start, start + (len(body.values) - 1) * model.step


def _fits(start_ns: int | np.ndarray, steps: int | np.ndarray, step_ns: int) -> bool | np.ndarray:
    """Whether ``steps`` steps after ``start_ns`` (ns since 1970, not before it) are still a
    timestamp; arranged so that int64 arrays do not overflow on the way."""
    return steps <= (pd.Timestamp.max.value - start_ns) // step_ns


def _series(body: SeriesIn, model: OnnxForecaster) -> tuple[np.ndarray, pd.Timestamp]:
    values = np.array(body.values, np.float32)  # None becomes NaN
    return values, _span(body, model)[1]


def _points(answer: Answer, row: int, last: dt.datetime, step: dt.timedelta,
            horizon: int | None) -> list[dict]:
    rows = np.round(answer.quantiles[row, :horizon].astype(np.float64), DECIMALS).tolist()
    stamps = _timestamps(last.astimezone(dt.UTC), last.tzinfo, step, len(rows))
    return [
        {"timestamp": stamp, **dict(zip(answer.names, values, strict=True))}
        for stamp, values in zip(stamps, rows, strict=True)
    ]


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


def _response(cell_id: str, answer: Answer, row: int, last: dt.datetime, step: dt.timedelta,
              latency_ms: float, horizon: int | None = None) -> ForecastResponse:
    """One cell's answer, its first ``horizon`` steps (default: all the answer holds)."""
    # Built here from checked parts: validating our own output again would cost more than
    # the model call at batch 1.
    return ForecastResponse.model_construct(
        cell_id=cell_id, forecasts=_points(answer, row, last, step, horizon),
        model_version=answer.model_version, source=answer.source, reason=answer.reason,
        latency_ms=round(latency_ms, 3),
    )


def _json(payload: ForecastResponse | BatchResponse) -> Response:
    return Response(payload.model_dump_json(), media_type="application/json")


def _add_forecast_routes(app: FastAPI, service: Service) -> None:
    @app.post("/v1/forecast", response_model=ForecastResponse, responses=ERRORS,
              tags=["forecast"], openapi_extra={"requestBody": {"content": {
                  "application/json": {"schema": openapi.component_ref(ForecastRequest)}},
                  "required": True}})
    async def forecast(request: Request) -> Response:
        # The hot route parses and validates its body in one pass of pydantic-core's JSON
        # parser: FastAPI's json.loads, then validation of the Python objects, cost twice as
        # much (the profile of the loaded xApp, docs/benchmarks.md).
        arrival = request.state.arrival
        try:
            body = ForecastRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            return _validation_error(exc.errors())
        model, _ = service.check_request(body.freq, body.horizon)
        values, last = _series(body, model)
        answer = await service.forecast(values[None], pd.DatetimeIndex([last]), body.horizon,
                                        arrival, body.freq)
        latency = service.observe("/v1/forecast", arrival, answer)
        return _json(_response(body.cell_id, answer, 0, last.to_pydatetime(),
                               model.step.to_pytimedelta(), latency))

    @app.post(
        "/v1/forecast/batch", response_model=BatchResponse, tags=["forecast"],
        responses={**ERRORS, 200: {"content": {binary.ARROW_STREAM: {
            "schema": {"type": "string", "format": "binary"}}}}},
        openapi_extra={"requestBody": {"content": {
            "application/json": {"schema": openapi.component_ref(BatchRequest)},
            binary.ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
        }, "required": True}},
        description="JSON items, or an Arrow IPC stream (`cell_id` string, `start` timestamp "
        "with a time zone, `values` list of floats, null = missing) answered in Arrow: a long "
        "table `cell_id, timestamp, pNN...`, with the model version, source and latency in "
        "the X-Model-Version, X-Source and X-Latency-Ms headers.",
    )
    async def forecast_batch(
        request: Request,
        freq: Annotated[str | None, Query(description="the grid step of an Arrow body "
                                          "(default: the model's); " + FREQ_DESCRIPTION)] = None,
        horizon: Annotated[int | None, Query(ge=1, description="steps to forecast, for an "
                                             "Arrow body and for JSON items that give none; at "
                                             "most the model's horizon")] = None,
    ) -> Response:
        arrival = request.state.arrival
        body = await request.body()
        if request.headers.get("content-type", "").startswith(binary.ARROW_STREAM):
            return await _batch_arrow(service, body, freq, horizon, arrival)
        try:
            batch = BatchRequest.model_validate_json(body)
        except ValidationError as exc:
            return _validation_error(exc.errors())
        return await _batch_json(service, batch, arrival, freq, horizon)

    @app.get("/v1/cells", response_model=CellsResponse, tags=["cells"], responses={
        **ERRORS,
        **_link("cell_forecast", parameters={"cell_id": "$response.body#/cells/0/cell_id"})})
    async def cells() -> CellsResponse:
        store = _store(service)
        infos = await store.cells()
        return CellsResponse(
            count=len(infos), freq=store.freq, history_length=store.length,
            cells=[CellOut(cell_id=i.cell_id, steps_held=i.steps_held,
                           first=i.first.isoformat(), last=i.last.isoformat()) for i in infos],
        )

    @app.post("/v1/cells/{cell_id}/history", response_model=HistoryAccepted, tags=["cells"],
              responses={**ERRORS, **_link("cell_forecast",
                                           parameters={"cell_id": "$response.body#/cell_id"})})
    async def add_history(cell_id: CellIdPath, body: SeriesIn) -> HistoryAccepted:
        store = _store(service)
        model, _ = service.check_request(body.freq, None)
        try:
            kept = await store.put_series(cell_id, _span(body, model)[0], body.values)
        except HistoryError as exc:
            raise ClientError(422, str(exc)) from None
        return HistoryAccepted(cell_id=cell_id, kept=kept)

    @app.post("/v1/cells/history", response_model=CellsHistoryAccepted, tags=["cells"],
              responses={**ERRORS, **_link("cells_forecast", requestBody={
                  "cell_ids": ["$response.body#/items/0/cell_id"]})})
    async def add_histories(body: CellsHistoryRequest) -> CellsHistoryAccepted:
        """Many cells' history in one call: one round trip to a shared store."""
        store = _store(service)
        for freq in {item.freq for item in body.items}:
            model, _ = service.check_request(freq, None)
        starts = [_span(item, model)[0] for item in body.items]
        kept = await store.put_cells([
            (item.cell_id, [(start + k * store.step, value)
                            for k, value in enumerate(item.values) if value is not None])
            for item, start in zip(body.items, starts, strict=True)])
        refused = [(item.cell_id, k) for item, k in zip(body.items, kept, strict=True)
                   if isinstance(k, HistoryError)]
        if refused:
            raise ClientError(422, f"{len(refused)} of {len(kept)} cells refused, the others "
                              f"were stored; first: {refused[0][1]}")
        return CellsHistoryAccepted(items=[HistoryAccepted(cell_id=item.cell_id, kept=k)
                                           for item, k in zip(body.items, kept, strict=True)])

    @app.get("/v1/cells/{cell_id}/forecast", response_model=ForecastResponse, responses=ERRORS,
             tags=["cells"])
    async def cell_forecast(
        cell_id: CellIdPath, request: Request,
        horizon: Annotated[int | None, Query(ge=1, description="steps to forecast; at most "
                                             "the model's horizon")] = None,
    ) -> Response:
        arrival = request.state.arrival
        store = _store(service)
        model, _ = service.check_request(store.freq, horizon)
        values, last = await _held(store, model, [cell_id])
        answer = await service.forecast(values, last, horizon, arrival, store.freq)
        latency = service.observe("/v1/cells/{cell_id}/forecast", arrival, answer)
        local = last.tz_convert(calendar_zone(model.metadata.calendar_tz))
        return _json(_response(cell_id, answer, 0, local[0].to_pydatetime(),
                               model.step.to_pytimedelta(), latency))

    @app.post("/v1/cells/forecast", response_model=BatchResponse, responses=ERRORS,
              tags=["cells"])
    async def cells_forecast(body: CellsForecastRequest, request: Request) -> Response:
        """Forecasts for many held cells in one call: what a control loop over its cells asks."""
        arrival = request.state.arrival
        store = _store(service)
        model, _ = service.check_request(store.freq, body.horizon)
        values, last = await _held(store, model, body.cell_ids)
        answer = await service.forecast(values, last, body.horizon, arrival, store.freq)
        latency = service.observe("/v1/cells/forecast", arrival, answer,
                                  len(body.cell_ids))
        local = last.tz_convert(calendar_zone(model.metadata.calendar_tz)).to_pydatetime()
        step = model.step.to_pytimedelta()
        items = [_response(cell_id, answer, row, local[row], step, latency)
                 for row, cell_id in enumerate(body.cell_ids)]
        return _json(BatchResponse.model_construct(items=items, latency_ms=round(latency, 3)))

    @app.get("/v1/model", response_model=ModelOut, responses=ERRORS, tags=["model"])
    async def model_info() -> ModelOut:
        model = service.model
        if model is None:
            raise Shed("not_ready", "no model loaded yet")
        return _model_out(service)

    @app.post("/v1/model/reload", response_model=ModelOut, responses=ERRORS, tags=["model"])
    async def reload(body: ReloadRequest | None = None) -> ModelOut:
        if body and body.model_dir and not os.path.isdir(body.model_dir):
            raise ClientError(404, f"model_dir {body.model_dir!r}: no such directory")
        try:
            await service.reload(body.model_dir if body else None)
        except (ArtifactError, ValueError) as exc:
            raise ClientError(422, f"model rejected, the previous one keeps serving: {exc}"
                              ) from None
        return _model_out(service)


def _store(service: Service) -> History:
    if service.history is None:
        raise Shed("not_ready", "no model loaded yet: the history grid is not known")
    return service.history


async def _held(store: History, model: OnnxForecaster, cell_ids: list[str]
                ) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """The cells' windows [cells, length] and last steps, or the client's error: a cell not
    held (404), or one with less than a patch of samples (409)."""
    windows = await store.windows(cell_ids)
    needed = model.metadata.config.patch_len
    for cell_id, held in zip(cell_ids, windows, strict=True):
        if held is None:
            raise ClientError(404, f"no history held for cell {cell_id!r}")
        observed = int((~np.isnan(held[0])).sum())
        if observed < needed:
            raise ClientError(409, f"cell {cell_id!r}: {observed} sample(s) held, at least "
                              f"{needed} needed (one patch of the model) before a forecast")
    return (np.stack([values for values, _ in windows]),
            pd.DatetimeIndex([last for _, last in windows]))


def _model_out(service: Service) -> ModelOut:
    model = service.model
    meta = model.metadata
    return ModelOut(
        model_version=meta.model_version, model_dir=str(model.model_dir), target=meta.target,
        freq=meta.freq, context=meta.context, horizon=meta.horizon, quantiles=meta.quantiles,
        calendar_tz=meta.calendar_tz, holidays=meta.holidays,
        load_seconds=round(service.load_seconds, 3), runtime=model.describe(),
        recalibration=service.recalibrator.describe(model),
    )


async def _batch_json(service: Service, batch: BatchRequest, arrival: float,
                      freq: str | None, horizon: int | None) -> Response:
    """Items of any lengths and horizons (``horizon`` for those that give none): one model
    call at the longest horizon asked for, each answer cut to its own."""
    for spelling in {item.freq for item in batch.items} | ({freq} if freq is not None else set()):
        model, _ = service.check_request(spelling, horizon)  # each the model's step
    # Each distinct horizon checked once, not once per item of up to 10^5.
    asked = {item.horizon or horizon for item in batch.items}
    resolved = {h: service.check_request(model.metadata.freq, h)[1] for h in asked}
    horizons = [resolved[item.horizon or horizon] for item in batch.items]
    series = [_series(item, model) for item in batch.items]
    longest = max(len(values) for values, _ in series)
    history = np.full((len(series), longest), np.nan, np.float32)
    for row, (values, _) in enumerate(series):
        history[row, longest - len(values) :] = values
    # Items may carry different UTC offsets: one index needs one zone.
    last = pd.DatetimeIndex(pd.to_datetime([stamp for _, stamp in series], utc=True))
    answer = await service.forecast(history, last, max(horizons), arrival, model.metadata.freq)
    latency = service.observe("/v1/forecast/batch", arrival, answer, len(series))
    step = model.step.to_pytimedelta()
    items = [
        _response(item.cell_id, answer, row, stamp.to_pydatetime(), step, latency, steps)
        for row, (item, (_, stamp), steps) in enumerate(zip(batch.items, series, horizons,
                                                            strict=True))
    ]
    return _json(BatchResponse.model_construct(items=items, latency_ms=round(latency, 3)))


async def _batch_arrow(service: Service, body: bytes, freq: str | None, horizon: int | None,
                       arrival: float) -> Response:
    freq = service.served().metadata.freq if freq is None else freq
    model, horizon = service.check_request(freq, horizon)
    try:
        cells, start, history, lengths = binary.read_request(body)
    except binary.BodyError as exc:
        raise ClientError(422, str(exc)) from None
    bad = not_kpis(history)
    if bad.any():
        row, step = (int(i) for i in np.argwhere(bad)[0])
        value = float(history[row, step])
        raise ClientError(422, f"series {row} ({cells[row]}): value {value} is not a KPI: "
                          f"{kpi_problem(value)}")
    outside = (start.year < FIRST_YEAR) | (start.year > LAST_YEAR)
    if outside.any():
        row = int(np.argmax(outside))
        raise ClientError(422, f"series {row} ({cells[row]}): start {start[row].isoformat()} "
                          f"is outside the years {FIRST_YEAR} to {LAST_YEAR}")
    start = start.as_unit("ns")
    late = ~_fits(start.asi8, lengths - 1 + model.metadata.horizon, model.step.value)
    if late.any():
        row = int(np.argmax(late))
        raise ClientError(422, f"series {row} ({cells[row]}): {lengths[row]} steps from "
                          f"{start[row].isoformat()}, and the model's horizon after them, end "
                          f"past {pd.Timestamp.max.date()}")
    last = start + pd.to_timedelta((lengths - 1) * model.step.value, "ns")
    answer = await service.forecast(history, pd.DatetimeIndex(last), horizon, arrival, freq)
    steps = np.arange(1, horizon + 1, dtype=np.int64) * model.step.value
    stamps = last.as_unit("ns").asi8[:, None] + steps[None, :]
    payload = binary.write_response(cells, stamps, answer.quantiles, answer.names)
    latency = service.observe("/v1/forecast/batch", arrival, answer, len(cells))
    headers = {"X-Model-Version": answer.model_version or "", "X-Source": answer.source,
               "X-Latency-Ms": f"{latency:.3f}"}
    if answer.reason:
        headers["X-Fallback-Reason"] = answer.reason
    return Response(payload, media_type=binary.ARROW_STREAM, headers=headers)

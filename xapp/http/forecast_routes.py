"""The forecast routes: one series (/v1/forecast), many (/v1/forecast/batch: JSON items, or
an Arrow IPC table read and written by ``arrow_ipc``), and the cells whose history the xApp
holds (one, or many). Each by the default model, and by any model by name under
/v1/models/{name}; and a held cell's forecasts by every model at once. Their answers are
built by ``answers``.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from kpi_forecast.model.kpi import kpi_problem, not_kpis
from kpi_forecast.xapp.components import Components
from kpi_forecast.xapp.http import arrow_ipc, openapi
from kpi_forecast.xapp.http.edge import facts
from kpi_forecast.xapp.http.errors import ERRORS, ClientError, validation_error
from kpi_forecast.xapp.http.schemas import (
    FIRST_YEAR,
    FREQ_DESCRIPTION,
    LAST_YEAR,
    BatchRequest,
    BatchResponse,
    CellForecastsResponse,
    CellIdPath,
    CellsForecastRequest,
    ForecastRequest,
    ForecastResponse,
    ModelNamePath,
    batch_response,
    cell_response,
    json_response,
)
from kpi_forecast.xapp.serving.errors import NotHeld, RequestError, Shed
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable

ONE_SERIES = {
    "response_model": ForecastResponse, "responses": ERRORS, "tags": ["forecast"],
    "openapi_extra": {**facts(series="one"), "requestBody": {"content": {
        "application/json": {"schema": openapi.component_ref(ForecastRequest)}},
        "required": True}}}
MANY_SERIES = {
    "response_model": BatchResponse, "tags": ["forecast"],
    "responses": {**ERRORS, 200: {"content": {arrow_ipc.ARROW_STREAM: {
        "schema": {"type": "string", "format": "binary"}}}}},
    "openapi_extra": {**facts(series="many"), "requestBody": {"content": {
        "application/json": {"schema": openapi.component_ref(BatchRequest)},
        arrow_ipc.ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
    }, "required": True}},
    "description": "JSON items, or an Arrow IPC stream (`cell_id` string, `start` timestamp "
    "with a time zone, `values` list of floats, null = missing) answered in Arrow: a long "
    "table `cell_id, timestamp, pNN...`, with the model version, source and latency in the "
    "X-Model-Version, X-Source and X-Latency-Ms headers."}
HELD_CELL = {"response_model": ForecastResponse, "responses": ERRORS, "tags": ["cells"],
             "openapi_extra": facts(series="one")}
HELD_CELLS = {"response_model": BatchResponse, "responses": ERRORS, "tags": ["cells"],
              "openapi_extra": facts(series="many")}
ArrowFreq = Annotated[str | None, Query(description="the grid step of an Arrow body (default: "
                                        "the model's); " + FREQ_DESCRIPTION)]
BatchHorizon = Annotated[int | None, Query(ge=1, description="steps to forecast, for an Arrow "
                                           "body and for JSON items that give none; at most "
                                           "the model's horizon")]
CellHorizon = Annotated[int | None, Query(ge=1, description="steps to forecast; at most the "
                                          "model's horizon")]


def add_forecast_routes(router: APIRouter, components: Components) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``components``: each
    forecast route by the default model, and by the model ``name`` under /v1/models/{name}."""

    @router.post("/v1/forecast", **ONE_SERIES)
    async def forecast(request: Request) -> Response:
        """One cell's recent history in, its forecast out: timestamped quantiles, the model
        version, whether the model or the seasonal-naive fallback answered, and the server's
        latency."""
        return await _one(components, components.default, request)

    @router.post("/v1/models/{name}/forecast", **ONE_SERIES)
    async def model_forecast(name: ModelNamePath, request: Request) -> Response:
        """One series' forecast by the model ``name``."""
        return await _one(components, components.slot(name), request)

    @router.post("/v1/forecast/batch", **MANY_SERIES)
    async def forecast_batch(request: Request, freq: ArrowFreq = None,
                             horizon: BatchHorizon = None) -> Response:
        """Many cells' forecasts in one call: JSON items (each its own history, start and
        horizon), or an Arrow IPC stream of cell_id, start and values, answered in Arrow."""
        return await _batch(components, components.default, request, freq, horizon)

    @router.post("/v1/models/{name}/forecast/batch", **MANY_SERIES)
    async def model_forecast_batch(name: ModelNamePath, request: Request,
                                   freq: ArrowFreq = None, horizon: BatchHorizon = None
                                   ) -> Response:
        """Many series' forecasts by the model ``name``, in JSON or Arrow."""
        return await _batch(components, components.slot(name), request, freq, horizon)

    @router.get("/v1/cells/{cell_id}/forecast", **HELD_CELL)
    async def cell_forecast(cell_id: CellIdPath, request: Request,
                            horizon: CellHorizon = None) -> Response:
        """A held cell's forecast, from the history the xApp holds for it (404: unknown cell,
        409: too little history)."""
        return json_response(await _cell(components, components.default, cell_id, request, horizon))

    @router.get("/v1/models/{name}/cells/{cell_id}/forecast", **HELD_CELL)
    async def model_cell_forecast(name: ModelNamePath, cell_id: CellIdPath, request: Request,
                                  horizon: CellHorizon = None) -> Response:
        """A held cell's forecast by the model ``name``, from the history of its KPI."""
        return json_response(await _cell(components, components.slot(name), cell_id, request,
                                         horizon))

    @router.get("/v1/cells/{cell_id}/forecasts", response_model=CellForecastsResponse,
                responses=ERRORS, tags=["cells"], openapi_extra=facts(series="many"))
    async def cell_forecasts(cell_id: CellIdPath, request: Request,
                             horizon: CellHorizon = None) -> Response:
        """A held cell's forecasts by every model serving, one per KPI, in one call; a model
        that cannot answer (not ready, the cell not held of its KPI) is named in ``errors``.
        404 when none can."""
        forecasts, errors = {}, {}
        for name, slot in list(components.models.items()):
            try:
                forecasts[name] = await _cell(components, slot, cell_id, request, horizon)
            except (RequestError, Shed, HistoryUnavailable) as exc:
                errors[name] = str(exc)
        if not forecasts:
            raise NotHeld(f"no model can forecast cell {cell_id!r}: " + "; ".join(
                f"{name}: {why}" for name, why in errors.items()))
        return json_response({"cell_id": cell_id, "forecasts": forecasts, "errors": errors})

    @router.post("/v1/cells/forecast", **HELD_CELLS)
    async def cells_forecast(body: CellsForecastRequest, request: Request) -> Response:
        """Forecasts for many held cells in one call: what a control loop over its cells asks."""
        return await _cells(components, components.default, body, request)

    @router.post("/v1/models/{name}/cells/forecast", **HELD_CELLS)
    async def model_cells_forecast(name: ModelNamePath, body: CellsForecastRequest,
                                   request: Request) -> Response:
        """Forecasts for many held cells by the model ``name``."""
        return await _cells(components, components.slot(name), body, request)


async def _one(components: Components, slot: ModelSlot, request: Request) -> Response:
    # The hot route parses and validates its body in one pass of pydantic-core's JSON parser,
    # rather than FastAPI's json.loads and then validation of the Python objects
    # (docs/decisions/hot-path.md).
    try:
        body = ForecastRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return validation_error(exc.errors())
    forecast = await components.forecasting.given(slot, [body], request.state.arrival,
                                                  request.scope["route"])
    return json_response(cell_response(body.cell_id, forecast, 0, forecast.last_steps()[0]))


async def _batch(components: Components, slot: ModelSlot, request: Request, freq: str | None,
                 horizon: int | None) -> Response:
    body = await request.body()
    if request.headers.get("content-type", "").startswith(arrow_ipc.ARROW_STREAM):
        return await _batch_arrow(components, slot, request, body, freq, horizon)
    try:
        batch = BatchRequest.model_validate_json(body)
    except ValidationError as exc:
        return validation_error(exc.errors())
    forecast = await components.forecasting.given(slot, batch.items, request.state.arrival,
                                                  request.scope["route"], horizon, freq)
    return json_response(batch_response(forecast, [item.cell_id for item in batch.items]))


async def _cell(components: Components, slot: ModelSlot, cell_id: str, request: Request,
                horizon: int | None) -> dict:
    forecast = await components.forecasting.held(slot, [cell_id], horizon, request.state.arrival,
                                                 request.scope["route"])
    return cell_response(cell_id, forecast, 0, forecast.last_steps()[0])


async def _cells(components: Components, slot: ModelSlot, body: CellsForecastRequest,
                 request: Request) -> Response:
    forecast = await components.forecasting.held(slot, body.cell_ids, body.horizon,
                                                 request.state.arrival, request.scope["route"])
    return json_response(batch_response(forecast, body.cell_ids))


async def _batch_arrow(components: Components, slot: ModelSlot, request: Request, body: bytes,
                       freq: str | None, horizon: int | None) -> Response:
    """An Arrow body (``arrow_ipc``): one table of forecasts for all its rows, at one horizon."""
    try:
        cells, start, history, lengths = arrow_ipc.read_request(body)
    except arrow_ipc.BodyError as exc:
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
    forecast = await components.forecasting.given_table(
        slot, cells, start, history, lengths, freq, horizon, request.state.arrival,
        request.scope["route"])
    answer = forecast.answer
    steps = np.arange(1, forecast.horizons[0] + 1, dtype=np.int64) * forecast.step.value
    stamps = forecast.last_ns[:, None] + steps[None, :]
    payload = arrow_ipc.write_response(cells, stamps, answer.quantiles, answer.names)
    headers = {"X-Model-Version": answer.model_version or "", "X-Source": answer.source,
               "X-Latency-Ms": f"{forecast.latency_ms:.3f}"}
    if answer.reason:
        headers["X-Fallback-Reason"] = answer.reason
    return Response(payload, media_type=arrow_ipc.ARROW_STREAM, headers=headers)

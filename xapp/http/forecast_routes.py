"""The forecast routes: one series (/v1/forecast), many (/v1/forecast/batch: JSON items, or
an Arrow IPC table read and written by ``arrow_ipc``), and the cells whose history the xApp
holds (one, or many). Each by the default model, and by any model by name under
/v1/models/{name}; and a held cell's forecasts by every model at once. Their answers are
built by ``answers``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pandas as pd
from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from kpi_forecast.model.features import calendar_zone
from kpi_forecast.model.kpi import kpi_problem, not_kpis
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.http import arrow_ipc, openapi
from kpi_forecast.xapp.http.edge import Route, facts
from kpi_forecast.xapp.http.errors import ERRORS, ClientError, Shed, validation_error
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
    fits,
    json_response,
    series,
)
from kpi_forecast.xapp.ric.a1.policies import request_budget
from kpi_forecast.xapp.service import Service
from kpi_forecast.xapp.serving.budget import (
    Decider,
    budget_for_rows,
    latency_budget_s,
    quantile_name,
)
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.serving.state import Served
from kpi_forecast.xapp.store.cell_history import CellHistory, HistoryUnavailable

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


def add_forecast_routes(router: APIRouter, service: Service) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``service``: each
    forecast route by the default model, and by the model ``name`` under /v1/models/{name}."""

    @router.post("/v1/forecast", **ONE_SERIES)
    async def forecast(request: Request) -> Response:
        """One cell's recent history in, its forecast out: timestamped quantiles, the model
        version, whether the model or the seasonal-naive fallback answered, and the server's
        latency."""
        return await _one(service, service.default, request)

    @router.post("/v1/models/{name}/forecast", **ONE_SERIES)
    async def model_forecast(name: ModelNamePath, request: Request) -> Response:
        """One series' forecast by the model ``name``."""
        return await _one(service, service.slot(name), request)

    @router.post("/v1/forecast/batch", **MANY_SERIES)
    async def forecast_batch(request: Request, freq: ArrowFreq = None,
                             horizon: BatchHorizon = None) -> Response:
        """Many cells' forecasts in one call: JSON items (each its own history, start and
        horizon), or an Arrow IPC stream of cell_id, start and values, answered in Arrow."""
        return await _batch(service, service.default, request, freq, horizon)

    @router.post("/v1/models/{name}/forecast/batch", **MANY_SERIES)
    async def model_forecast_batch(name: ModelNamePath, request: Request,
                                   freq: ArrowFreq = None, horizon: BatchHorizon = None
                                   ) -> Response:
        """Many series' forecasts by the model ``name``, in JSON or Arrow."""
        return await _batch(service, service.slot(name), request, freq, horizon)

    @router.get("/v1/cells/{cell_id}/forecast", **HELD_CELL)
    async def cell_forecast(cell_id: CellIdPath, request: Request,
                            horizon: CellHorizon = None) -> Response:
        """A held cell's forecast, from the history the xApp holds for it (404: unknown cell,
        409: too little history)."""
        return json_response(await _cell(service, service.default, cell_id, request, horizon))

    @router.get("/v1/models/{name}/cells/{cell_id}/forecast", **HELD_CELL)
    async def model_cell_forecast(name: ModelNamePath, cell_id: CellIdPath, request: Request,
                                  horizon: CellHorizon = None) -> Response:
        """A held cell's forecast by the model ``name``, from the history of its KPI."""
        return json_response(await _cell(service, service.slot(name), cell_id, request,
                                         horizon))

    @router.get("/v1/cells/{cell_id}/forecasts", response_model=CellForecastsResponse,
                responses=ERRORS, tags=["cells"], openapi_extra=facts(series="many"))
    async def cell_forecasts(cell_id: CellIdPath, request: Request,
                             horizon: CellHorizon = None) -> Response:
        """A held cell's forecasts by every model serving, one per KPI, in one call; a model
        that cannot answer (not ready, the cell not held of its KPI) is named in ``errors``.
        404 when none can."""
        forecasts, errors = {}, {}
        for name, slot in list(service.models.items()):
            try:
                forecasts[name] = await _cell(service, slot, cell_id, request, horizon)
            except (ClientError, Shed, HistoryUnavailable) as exc:
                errors[name] = str(exc)
        if not forecasts:
            raise ClientError(404, f"no model can forecast cell {cell_id!r}: " + "; ".join(
                f"{name}: {why}" for name, why in errors.items()))
        return json_response({"cell_id": cell_id, "forecasts": forecasts, "errors": errors})

    @router.post("/v1/cells/forecast", **HELD_CELLS)
    async def cells_forecast(body: CellsForecastRequest, request: Request) -> Response:
        """Forecasts for many held cells in one call: what a control loop over its cells asks."""
        return await _cells(service, service.default, body, request)

    @router.post("/v1/models/{name}/cells/forecast", **HELD_CELLS)
    async def model_cells_forecast(name: ModelNamePath, body: CellsForecastRequest,
                                   request: Request) -> Response:
        """Forecasts for many held cells by the model ``name``."""
        return await _cells(service, service.slot(name), body, request)


async def _one(service: Service, slot: ModelSlot, request: Request) -> Response:
    # The hot route parses and validates its body in one pass of pydantic-core's JSON parser,
    # rather than FastAPI's json.loads and then validation of the Python objects
    # (docs/decisions/hot-path.md).
    arrival, served, decider = request.state.arrival, service.state.models[slot.name], slot.decider
    try:
        body = ForecastRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return validation_error(exc.errors())
    [steer] = service.policies.for_cells([body.cell_id], served.name)
    horizon = body.horizon or steer.horizon
    model, _ = decider.check_request(served, body.freq, horizon)
    values, last, last_ns = series(body, model)
    answer = await decider.forecast(served, values[None], np.array([last_ns]), horizon,
                                    arrival, body.freq, steer.quantiles, steer.budget_s)
    latency = service.admission.observe(request.scope["route"], arrival, answer,
                                        budget_s=steer.budget_s)
    return json_response(cell_response(body.cell_id, answer, 0, last,
                                       model.step.to_pytimedelta(), latency))


async def _batch(service: Service, slot: ModelSlot, request: Request, freq: str | None,
                 horizon: int | None) -> Response:
    arrival, served = request.state.arrival, service.state.models[slot.name]
    body = await request.body()
    if request.headers.get("content-type", "").startswith(arrow_ipc.ARROW_STREAM):
        return await _batch_arrow(service, slot, served, request.scope["route"], body, freq,
                                  horizon, arrival)
    try:
        batch = BatchRequest.model_validate_json(body)
    except ValidationError as exc:
        return validation_error(exc.errors())
    return await _batch_json(service, slot, served, request.scope["route"], batch, arrival,
                             freq, horizon)


async def _cell(service: Service, slot: ModelSlot, cell_id: str, request: Request,
                horizon: int | None) -> dict:
    arrival, served, decider = request.state.arrival, service.state.models[slot.name], slot.decider
    store = held_store(served)
    [steer] = service.policies.for_cells([cell_id], served.name)
    horizon = horizon or steer.horizon
    model, _ = decider.check_request(served, store.freq, horizon)
    budget_s = steer.budget_s or latency_budget_s(served.controls)
    values, last = await _held(store, model, [cell_id], arrival + budget_s)
    answer = await decider.forecast(served, values, last.as_unit("ns").asi8, horizon,
                                    arrival, store.freq, steer.quantiles, steer.budget_s)
    latency = service.admission.observe(request.scope["route"], arrival, answer,
                                        budget_s=steer.budget_s)
    local = last.tz_convert(calendar_zone(model.metadata.calendar_tz))
    return cell_response(cell_id, answer, 0, local[0].to_pydatetime(),
                         model.step.to_pytimedelta(), latency)


async def _cells(service: Service, slot: ModelSlot, body: CellsForecastRequest,
                 request: Request) -> Response:
    arrival, served, decider = request.state.arrival, service.state.models[slot.name], slot.decider
    store = held_store(served)
    model = decider.served(served)
    plan = _plan(service, decider, served, model, body.cell_ids,
                 [body.horizon] * len(body.cell_ids))
    values, last = await _held(store, model, body.cell_ids, arrival + budget_for_rows(
        served.controls, len(body.cell_ids), plan.budget_s))
    answer = await decider.forecast(served, values, last.as_unit("ns").asi8,
                                    max(plan.horizons), arrival, store.freq,
                                    plan.quantiles, plan.budget_s)
    latency = service.admission.observe(request.scope["route"], arrival, answer,
                                        len(body.cell_ids), plan.budget_s)
    local = last.tz_convert(calendar_zone(model.metadata.calendar_tz)).to_pydatetime()
    step = model.step.to_pytimedelta()
    items = [cell_response(cell_id, answer, row, local[row], step, latency,
                           plan.horizons[row], plan.names[row])
             for row, cell_id in enumerate(body.cell_ids)]
    return json_response(batch_response(items, latency))


def held_store(served: Served) -> CellHistory:
    """The cell history, or a Shed while no model has said on which grid."""
    if served.history is None:
        raise Shed("not_ready", "no model loaded yet: the history grid is not known")
    return served.history


@dataclass(frozen=True)
class _Plan:
    """What a request for many cells gets, item by item, once A1 policies have had a say."""

    horizons: list[int]
    quantiles: tuple[float, ...] | None  # asked of the model: every item's (None: controls')
    names: list[tuple[str, ...] | None]  # each item's quantiles (None: all that are answered)
    budget_s: float | None  # the smallest of the cells' budgets (None: the controls')


def _plan(service: Service, decider: Decider, served: Served, model: OnnxForecaster,
          cell_ids: list[str], asked: list[int | None]) -> _Plan:
    """Each item's horizon (asked, else its policy's, else the controls') and quantiles; the
    client's error for a horizon beyond the model's or a cell excluded from forecasting."""
    steering = service.policies.for_cells(cell_ids, served.name)
    wanted = [a or s.horizon for a, s in zip(asked, steering, strict=True)]
    # Each distinct horizon checked once, not once per item of up to 10^5.
    resolved = {h: decider.check_request(served, model.metadata.freq, h)[1]
                for h in set(wanted)}
    budget_s = request_budget(steering, latency_budget_s(served.controls))
    asked_quantiles = {s.quantiles for s in steering}
    if asked_quantiles == {None}:
        return _Plan([resolved[h] for h in wanted], None, [None] * len(cell_ids), budget_s)
    per_set = {q: Decider.wanted(served, model, q) for q in asked_quantiles}
    union = set().union(*per_set.values())
    quantiles = tuple(q for q in model.metadata.quantiles if q in union)
    names = {q: tuple(quantile_name(v) for v in chosen) for q, chosen in per_set.items()}
    return _Plan([resolved[h] for h in wanted], quantiles,
                 [names[s.quantiles] for s in steering], budget_s)


async def _held(store: CellHistory, model: OnnxForecaster, cell_ids: list[str], deadline: float
                ) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """The cells' windows [cells, length] and last steps, or the client's error: a cell not
    held (404), or one with less than a patch of samples (409). A store that has not answered
    by ``deadline`` (``time.monotonic``: the request's latency budget) is a 503: a hung Redis
    holds no request past its budget."""
    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            windows = await store.windows(cell_ids)
    except TimeoutError:
        raise HistoryUnavailable("history store: no answer within the request's latency "
                                 "budget") from None
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


async def _batch_json(service: Service, slot: ModelSlot, served: Served, route: Route,
                      batch: BatchRequest, arrival: float, freq: str | None,
                      horizon: int | None) -> Response:
    """Items of any lengths and horizons (``horizon`` for those that give none): one model
    call at the longest horizon asked for, each answer cut to its own."""
    decider = slot.decider
    for spelling in {item.freq for item in batch.items} | ({freq} if freq is not None else set()):
        model, _ = decider.check_request(served, spelling, horizon)  # each the model's step
    plan = _plan(service, decider, served, model, [item.cell_id for item in batch.items],
                 [item.horizon or horizon for item in batch.items])
    rows = [series(item, model) for item in batch.items]
    longest = max(len(values) for values, _, _ in rows)
    history = np.full((len(rows), longest), np.nan, np.float32)
    for row, (values, _, _) in enumerate(rows):
        history[row, longest - len(values) :] = values
    last_ns = np.array([stamp_ns for _, _, stamp_ns in rows], np.int64)
    answer = await decider.forecast(served, history, last_ns, max(plan.horizons), arrival,
                                    model.metadata.freq, plan.quantiles, plan.budget_s)
    latency = service.admission.observe(route, arrival, answer, len(rows), plan.budget_s)
    step = model.step.to_pytimedelta()
    items = [
        cell_response(item.cell_id, answer, row, stamp, step, latency, plan.horizons[row],
                      plan.names[row])
        for row, (item, (_, stamp, _)) in enumerate(zip(batch.items, rows, strict=True))
    ]
    return json_response(batch_response(items, latency))


async def _batch_arrow(service: Service, slot: ModelSlot, served: Served, route: Route,
                       body: bytes, freq: str | None, horizon: int | None, arrival: float
                       ) -> Response:
    """An Arrow body (``arrow_ipc``): one table of forecasts for all its rows, at one horizon."""
    decider = slot.decider
    freq = decider.served(served).metadata.freq if freq is None else freq
    model, horizon = decider.check_request(served, freq, horizon)
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
    start = start.as_unit("ns")
    late = ~fits(start.asi8, lengths - 1 + model.metadata.horizon, model.step.value)
    if late.any():
        row = int(np.argmax(late))
        raise ClientError(422, f"series {row} ({cells[row]}): {lengths[row]} steps from "
                          f"{start[row].isoformat()}, and the model's horizon after them, end "
                          f"past {pd.Timestamp.max.date()}")
    # One table answers every row at one horizon and one set of quantiles: A1 policies have
    # their say here in the cells they exclude and the budget they set.
    budget_s = request_budget(service.policies.for_cells(cells, served.name),
                              latency_budget_s(served.controls))
    last_ns = start.asi8 + (lengths - 1) * model.step.value  # fits() checked it stays in range
    answer = await decider.forecast(served, history, last_ns, horizon, arrival, freq,
                                    budget_s=budget_s)
    steps = np.arange(1, horizon + 1, dtype=np.int64) * model.step.value
    stamps = last_ns[:, None] + steps[None, :]
    payload = arrow_ipc.write_response(cells, stamps, answer.quantiles, answer.names)
    latency = service.admission.observe(route, arrival, answer, len(cells), budget_s)
    headers = {"X-Model-Version": answer.model_version or "", "X-Source": answer.source,
               "X-Latency-Ms": f"{latency:.3f}"}
    if answer.reason:
        headers["X-Fallback-Reason"] = answer.reason
    return Response(payload, media_type=arrow_ipc.ARROW_STREAM, headers=headers)

"""The forecast routes: one series (/v1/forecast), many (/v1/forecast/batch, JSON here and
Arrow in ``arrow_route``), and the cells whose history the xApp holds (one, or many)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pandas as pd
from fastapi import Query, Request, Response
from pydantic import ValidationError

from kpi_forecast.model.features import calendar_zone
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.http import arrow_ipc, openapi
from kpi_forecast.xapp.http.answers import batch_response, cell_response, json_response
from kpi_forecast.xapp.http.arrow_routes import forecast_arrow
from kpi_forecast.xapp.http.errors import ERRORS, ClientError, validation_error
from kpi_forecast.xapp.http.routes import BY_NAME, Handlers
from kpi_forecast.xapp.http.schemas import (
    FREQ_DESCRIPTION,
    BatchRequest,
    BatchResponse,
    CellIdPath,
    CellsForecastRequest,
    ForecastRequest,
    ForecastResponse,
)
from kpi_forecast.xapp.http.series import series
from kpi_forecast.xapp.ric.a1.policies import request_budget
from kpi_forecast.xapp.service import Service
from kpi_forecast.xapp.serving.decision import quantile_name
from kpi_forecast.xapp.store.history import History, HistoryUnavailable


def forecast_handlers(service: Service) -> Handlers:
    """Each route's handler and OpenAPI options, by the route table's name."""
    decider, gate, policies = service.decider, service.gate, service.policies

    async def forecast(request: Request) -> Response:
        """One cell's recent history in, its forecast out: timestamped quantiles, the model
        version, whether the model or the seasonal-naive fallback answered, and the server's
        latency."""
        # The hot route parses and validates its body in one pass of pydantic-core's JSON
        # parser, rather than FastAPI's json.loads and then validation of the Python objects
        # (docs/decisions/hot-path.md).
        arrival = request.state.arrival
        try:
            body = ForecastRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            return validation_error(exc.errors())
        [steer] = policies.for_cells([body.cell_id])
        horizon = body.horizon or steer.horizon
        model, _ = decider.check_request(body.freq, horizon)
        values, last, last_ns = series(body, model)
        answer = await decider.forecast(values[None], np.array([last_ns]), horizon, arrival,
                                        body.freq, steer.quantiles, steer.budget_s)
        latency = gate.observe(BY_NAME["forecast"], arrival, answer, budget_s=steer.budget_s)
        return json_response(cell_response(body.cell_id, answer, 0, last,
                                           model.step.to_pytimedelta(), latency))

    async def forecast_batch(
        request: Request,
        freq: Annotated[str | None, Query(description="the grid step of an Arrow body "
                                          "(default: the model's); " + FREQ_DESCRIPTION)] = None,
        horizon: Annotated[int | None, Query(ge=1, description="steps to forecast, for an "
                                             "Arrow body and for JSON items that give none; at "
                                             "most the model's horizon")] = None,
    ) -> Response:
        """Many cells' forecasts in one call: JSON items (each its own history, start and
        horizon), or an Arrow IPC stream of cell_id, start and values, answered in Arrow."""
        arrival = request.state.arrival
        body = await request.body()
        if request.headers.get("content-type", "").startswith(arrow_ipc.ARROW_STREAM):
            return await forecast_arrow(service, body, freq, horizon, arrival)
        try:
            batch = BatchRequest.model_validate_json(body)
        except ValidationError as exc:
            return validation_error(exc.errors())
        return await _batch_json(service, batch, arrival, freq, horizon)

    async def cell_forecast(
        cell_id: CellIdPath, request: Request,
        horizon: Annotated[int | None, Query(ge=1, description="steps to forecast; at most "
                                             "the model's horizon")] = None,
    ) -> Response:
        """A held cell's forecast, from the history the xApp holds for it (404: unknown cell,
        409: too little history)."""
        arrival = request.state.arrival
        store = service.holder.store()
        [steer] = policies.for_cells([cell_id])
        horizon = horizon or steer.horizon
        model, _ = decider.check_request(store.freq, horizon)
        budget_s = steer.budget_s or service.budget.seconds
        values, last = await _held(store, model, [cell_id], arrival + budget_s)
        answer = await decider.forecast(values, last.as_unit("ns").asi8, horizon, arrival,
                                        store.freq, steer.quantiles, steer.budget_s)
        latency = gate.observe(BY_NAME["cell_forecast"], arrival, answer,
                               budget_s=steer.budget_s)
        local = last.tz_convert(calendar_zone(model.metadata.calendar_tz))
        return json_response(cell_response(cell_id, answer, 0, local[0].to_pydatetime(),
                                           model.step.to_pytimedelta(), latency))

    async def cells_forecast(body: CellsForecastRequest, request: Request) -> Response:
        """Forecasts for many held cells in one call: what a control loop over its cells asks."""
        arrival = request.state.arrival
        store = service.holder.store()
        model = decider.served()
        plan = _plan(service, model, body.cell_ids, [body.horizon] * len(body.cell_ids))
        values, last = await _held(store, model, body.cell_ids, arrival + service.budget.for_rows(
            len(body.cell_ids), plan.budget_s))
        answer = await decider.forecast(values, last.as_unit("ns").asi8, max(plan.horizons),
                                        arrival, store.freq, plan.quantiles, plan.budget_s)
        latency = gate.observe(BY_NAME["cells_forecast"], arrival, answer, len(body.cell_ids),
                               plan.budget_s)
        local = last.tz_convert(calendar_zone(model.metadata.calendar_tz)).to_pydatetime()
        step = model.step.to_pytimedelta()
        items = [cell_response(cell_id, answer, row, local[row], step, latency,
                               plan.horizons[row], plan.names[row])
                 for row, cell_id in enumerate(body.cell_ids)]
        return json_response(batch_response(items, latency))

    return {
        "forecast": (forecast, {
            "response_model": ForecastResponse, "responses": ERRORS, "tags": ["forecast"],
            "openapi_extra": {"requestBody": {"content": {
                "application/json": {"schema": openapi.component_ref(ForecastRequest)}},
                "required": True}}}),
        "forecast_batch": (forecast_batch, {
            "response_model": BatchResponse, "tags": ["forecast"],
            "responses": {**ERRORS, 200: {"content": {arrow_ipc.ARROW_STREAM: {
                "schema": {"type": "string", "format": "binary"}}}}},
            "openapi_extra": {"requestBody": {"content": {
                "application/json": {"schema": openapi.component_ref(BatchRequest)},
                arrow_ipc.ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
            }, "required": True}},
            "description": "JSON items, or an Arrow IPC stream (`cell_id` string, `start` "
            "timestamp with a time zone, `values` list of floats, null = missing) answered in "
            "Arrow: a long table `cell_id, timestamp, pNN...`, with the model version, source "
            "and latency in the X-Model-Version, X-Source and X-Latency-Ms headers."}),
        "cell_forecast": (cell_forecast, {
            "response_model": ForecastResponse, "responses": ERRORS, "tags": ["cells"]}),
        "cells_forecast": (cells_forecast, {
            "response_model": BatchResponse, "responses": ERRORS, "tags": ["cells"]}),
    }


@dataclass(frozen=True)
class _Plan:
    """What a request for many cells gets, item by item, once A1 policies have had a say."""

    horizons: list[int]
    quantiles: tuple[float, ...] | None  # asked of the model: every item's (None: controls')
    names: list[tuple[str, ...] | None]  # each item's quantiles (None: all that are answered)
    budget_s: float | None  # the smallest of the cells' budgets (None: the controls')


def _plan(service: Service, model: OnnxForecaster, cell_ids: list[str],
          asked: list[int | None]) -> _Plan:
    """Each item's horizon (asked, else its policy's, else the controls') and quantiles; the
    client's error for a horizon beyond the model's or a cell excluded from forecasting."""
    decider = service.decider
    steering = service.policies.for_cells(cell_ids)
    wanted = [a or s.horizon for a, s in zip(asked, steering, strict=True)]
    # Each distinct horizon checked once, not once per item of up to 10^5.
    resolved = {h: decider.check_request(model.metadata.freq, h)[1] for h in set(wanted)}
    budget_s = request_budget(steering, service.budget.seconds)
    asked_quantiles = {s.quantiles for s in steering}
    if asked_quantiles == {None}:
        return _Plan([resolved[h] for h in wanted], None, [None] * len(cell_ids), budget_s)
    per_set = {q: decider.wanted(model, q) for q in asked_quantiles}
    union = set().union(*per_set.values())
    quantiles = tuple(q for q in model.metadata.quantiles if q in union)
    names = {q: tuple(quantile_name(v) for v in chosen) for q, chosen in per_set.items()}
    return _Plan([resolved[h] for h in wanted], quantiles,
                 [names[s.quantiles] for s in steering], budget_s)


async def _held(store: History, model: OnnxForecaster, cell_ids: list[str], deadline: float
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


async def _batch_json(service: Service, batch: BatchRequest, arrival: float,
                      freq: str | None, horizon: int | None) -> Response:
    """Items of any lengths and horizons (``horizon`` for those that give none): one model
    call at the longest horizon asked for, each answer cut to its own."""
    decider = service.decider
    for spelling in {item.freq for item in batch.items} | ({freq} if freq is not None else set()):
        model, _ = decider.check_request(spelling, horizon)  # each the model's step
    plan = _plan(service, model, [item.cell_id for item in batch.items],
                 [item.horizon or horizon for item in batch.items])
    rows = [series(item, model) for item in batch.items]
    longest = max(len(values) for values, _, _ in rows)
    history = np.full((len(rows), longest), np.nan, np.float32)
    for row, (values, _, _) in enumerate(rows):
        history[row, longest - len(values) :] = values
    last_ns = np.array([stamp_ns for _, _, stamp_ns in rows], np.int64)
    answer = await decider.forecast(history, last_ns, max(plan.horizons), arrival,
                                    model.metadata.freq, plan.quantiles, plan.budget_s)
    latency = service.gate.observe(BY_NAME["forecast_batch"], arrival, answer, len(rows),
                                   plan.budget_s)
    step = model.step.to_pytimedelta()
    items = [
        cell_response(item.cell_id, answer, row, stamp, step, latency, plan.horizons[row],
                      plan.names[row])
        for row, (item, (_, stamp, _)) in enumerate(zip(batch.items, rows, strict=True))
    ]
    return json_response(batch_response(items, latency))

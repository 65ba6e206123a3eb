"""The cells' history routes: which cells are held, and history written for one cell or many
(what a caller without E2 sends before asking for their forecasts); of the default model's
KPI, and of any model's under /v1/models/{name}."""

from __future__ import annotations

from fastapi import APIRouter

from kpi_forecast.xapp.components import Components
from kpi_forecast.xapp.http.edge import facts
from kpi_forecast.xapp.http.errors import ERRORS, ClientError
from kpi_forecast.xapp.http.schemas import (
    CellIdPath,
    CellOut,
    CellsHistoryAccepted,
    CellsHistoryRequest,
    CellsResponse,
    HistoryAccepted,
    ModelNamePath,
    SeriesIn,
    span,
)
from kpi_forecast.xapp.serving.forecasting import check_step, held_store
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.store.cell_history import HistoryError


def _link(operation: str, **how: dict) -> dict:
    """An OpenAPI link from a 200 answer to the operation its values feed: cells written, then
    forecast (client generators and the fuzzer's stateful phase follow them)."""
    return {200: {"links": {operation: {"operationId": operation, **how}}}}


CELLS = {"tags": ["cells"], "response_model": CellsResponse, "responses": {
    **ERRORS, **_link("cell_forecast", parameters={"cell_id": "$response.body#/cells/0/cell_id"})}}
ONE_HISTORY = {"tags": ["cells"], "response_model": HistoryAccepted,
               "openapi_extra": facts(group="history_writes"), "responses": {
                   **ERRORS, **_link("cell_forecast",
                                     parameters={"cell_id": "$response.body#/cell_id"})}}
MANY_HISTORIES = {"tags": ["cells"], "response_model": CellsHistoryAccepted,
                  "openapi_extra": facts(group="history_writes"), "responses": {
                      **ERRORS, **_link("cells_forecast", requestBody={
                          "cell_ids": ["$response.body#/items/0/cell_id"]})}}


def add_cell_routes(router: APIRouter, components: Components) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``components``: each for
    the default model's KPI, and for the model ``name``'s under /v1/models/{name}."""

    @router.get("/v1/cells", **CELLS)
    async def cells() -> CellsResponse:
        """The cells whose history the xApp holds (from E2 or written here), with how much of
        it."""
        return await _cells(components, components.default)

    @router.get("/v1/models/{name}/cells", **CELLS)
    async def model_cells(name: ModelNamePath) -> CellsResponse:
        """The cells whose history of the model ``name``'s KPI the xApp holds."""
        return await _cells(components, components.slot(name))

    @router.post("/v1/cells/{cell_id}/history", **ONE_HISTORY)
    async def add_history(cell_id: CellIdPath, body: SeriesIn) -> HistoryAccepted:
        """Write a cell's history: the values from a start time on the model's grid."""
        return await _add_history(components, components.default, cell_id, body)

    @router.post("/v1/models/{name}/cells/{cell_id}/history", **ONE_HISTORY)
    async def model_add_history(name: ModelNamePath, cell_id: CellIdPath, body: SeriesIn
                                ) -> HistoryAccepted:
        """Write a cell's history of the model ``name``'s KPI."""
        return await _add_history(components, components.slot(name), cell_id, body)

    @router.post("/v1/cells/history", **MANY_HISTORIES)
    async def add_histories(body: CellsHistoryRequest) -> CellsHistoryAccepted:
        """Many cells' history in one call: one round trip to a shared store."""
        return await _add_histories(components, components.default, body)

    @router.post("/v1/models/{name}/cells/history", **MANY_HISTORIES)
    async def model_add_histories(name: ModelNamePath, body: CellsHistoryRequest
                                  ) -> CellsHistoryAccepted:
        """Many cells' history of the model ``name``'s KPI in one call."""
        return await _add_histories(components, components.slot(name), body)


async def _cells(components: Components, slot: ModelSlot) -> CellsResponse:
    store = held_store(components.state.view(slot.name))
    infos = await store.cells()
    return CellsResponse(
        count=len(infos), freq=store.freq, history_length=store.length,
        cells=[CellOut(cell_id=i.cell_id, steps_held=i.steps_held,
                       first=i.first.isoformat(), last=i.last.isoformat()) for i in infos],
    )


async def _add_history(components: Components, slot: ModelSlot, cell_id: str, body: SeriesIn
                       ) -> HistoryAccepted:
    served = components.state.view(slot.name)
    store = held_store(served)
    model = components.forecasting.model(served)
    check_step(model, body.freq)
    try:
        kept = await store.put_series(cell_id, span(body, model)[0], body.values, "rest")
    except HistoryError as exc:
        raise ClientError(422, str(exc)) from None
    return HistoryAccepted(cell_id=cell_id, kept=kept)


async def _add_histories(components: Components, slot: ModelSlot, body: CellsHistoryRequest
                         ) -> CellsHistoryAccepted:
    served = components.state.view(slot.name)
    store = held_store(served)
    model = components.forecasting.model(served)
    for freq in {item.freq for item in body.items}:
        check_step(model, freq)
    starts = [span(item, model)[0] for item in body.items]
    kept = await store.put_cells([
        (item.cell_id, [(start + k * store.step, value)
                        for k, value in enumerate(item.values) if value is not None])
        for item, start in zip(body.items, starts, strict=True)], "rest")
    refused = [(item.cell_id, k) for item, k in zip(body.items, kept, strict=True)
               if isinstance(k, HistoryError)]
    if refused:
        raise ClientError(422, f"{len(refused)} of {len(kept)} cells refused, the others "
                          f"were stored; first: {refused[0][1]}")
    return CellsHistoryAccepted(items=[HistoryAccepted(cell_id=item.cell_id, kept=k)
                                       for item, k in zip(body.items, kept, strict=True)])

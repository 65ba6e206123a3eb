"""The REST interface assembled: O-RAN SC conventions under /ric/v1, forecasts under /v1.

Every route of the table in ``routes.py`` gets its handler here, by name, from the modules
that hold them; the boundary (``boundary.py``) and the error answers (``errors.py``) go
around them. Every error is JSON with an ``error`` message; client mistakes are 4xx, never
500. OpenAPI is at /docs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

from kpi_forecast.xapp.descriptor.config_file import ConfigWatcher, Descriptor
from kpi_forecast.xapp.http import openapi
from kpi_forecast.xapp.http.cell_routes import history_handlers
from kpi_forecast.xapp.http.edge import Boundary, ForecastApp
from kpi_forecast.xapp.http.errors import add_error_handlers
from kpi_forecast.xapp.http.forecast_routes import forecast_handlers
from kpi_forecast.xapp.http.model_routes import model_handlers
from kpi_forecast.xapp.http.ric_routes import ric_handlers
from kpi_forecast.xapp.http.routes import ROUTES, Handlers
from kpi_forecast.xapp.http.schemas import BatchRequest, ErrorOut, ForecastRequest
from kpi_forecast.xapp.ric import registration
from kpi_forecast.xapp.service import STOP_STEP_S, Service, TransportFactory, rmr_transport


def create_app(
    descriptor: Descriptor, watch_config: bool = True, overrides: dict | None = None,
    appmgr_transport: httpx.AsyncBaseTransport | None = None, http_port: int = 8080,
    e2_transport: TransportFactory = rmr_transport,
) -> FastAPI:
    """The app; ``overrides`` (CLI flags) are re-applied to every reloaded config file."""
    service = Service(descriptor, http_port=http_port, e2_transport=e2_transport)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = await service.start()
        if watch_config:
            watcher = ConfigWatcher(descriptor.path, service.apply_descriptor,
                                    overrides=overrides)
            tasks.append(asyncio.create_task(watcher.run(), name="config-watch"))
        registered = registration.wanted(service.controls.registration)
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
        lambda: service.controls.api, extra_models=(BatchRequest, ForecastRequest, ErrorOut))
    app.add_middleware(Boundary, service=service)
    add_error_handlers(app, service.metrics, lambda: service.controls.max_request_bytes)
    _add_routes(app, {**ric_handlers(service), **forecast_handlers(service),
                      **history_handlers(service), **model_handlers(service)})
    return app


def _add_routes(app: FastAPI, handlers: Handlers) -> None:
    """The route table's routes, in its order, each with the handler of its name."""
    unbound = {route.name for route in ROUTES} ^ set(handlers)
    if unbound:
        raise RuntimeError(f"routes and handlers do not match: {sorted(unbound)}")
    for route in ROUTES:
        endpoint, options = handlers[route.name]
        app.add_api_route(route.path, endpoint, methods=[route.method], name=route.name,
                          **options)

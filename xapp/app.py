"""The xApp assembled: the components (``components.py``) behind the REST interface, O-RAN SC
conventions under /ric/v1, forecasts under /v1.

The routers of ``http/`` (each route declared with its facts where it is) go into one app; the
edge (``http/edge.py``) and the error answers (``http/errors.py``) go around them. Every error
is JSON with an ``error`` message; client mistakes are 4xx, never 500. OpenAPI is at /docs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

from kpi_forecast.xapp.components import STOP_STEP_S, Components, TransportFactory, rmr_transport
from kpi_forecast.xapp.descriptor.config_file import ConfigWatcher, Descriptor
from kpi_forecast.xapp.http import openapi
from kpi_forecast.xapp.http.cell_routes import add_cell_routes
from kpi_forecast.xapp.http.edge import Access, Boundary, ForecastApp, Route
from kpi_forecast.xapp.http.errors import ErrorOut, add_error_handlers
from kpi_forecast.xapp.http.forecast_routes import add_forecast_routes
from kpi_forecast.xapp.http.model_routes import add_model_routes
from kpi_forecast.xapp.http.ric_routes import add_ric_routes
from kpi_forecast.xapp.http.schemas import BatchRequest, ForecastRequest
from kpi_forecast.xapp.http.timeseries_routes import TimeSeriesRequest, add_timeseries_routes
from kpi_forecast.xapp.ric import registration


def create_app(
    descriptor: Descriptor, watch_config: bool = True, overrides: dict | None = None,
    appmgr_transport: httpx.AsyncBaseTransport | None = None, http_port: int = 8080,
    e2_transport: TransportFactory = rmr_transport,
) -> FastAPI:
    """The app; ``overrides`` (CLI flags) are re-applied to every reloaded config file."""
    components = Components(descriptor, http_port=http_port, e2_transport=e2_transport)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = await components.start()
        if watch_config:
            watcher = ConfigWatcher(descriptor.path, components.apply_descriptor,
                                    overrides=overrides)
            tasks.append(asyncio.create_task(watcher.run(), name="config-watch"))
        registered = registration.wanted(components.state.now.controls.registration)
        if registered:
            tasks.append(asyncio.create_task(
                registration.register(components.descriptor, appmgr_transport), name="register"))
        yield
        if registered:  # first, so the RIC stops routing to us while we drain
            await registration.deregister(components.descriptor, appmgr_transport,
                                          timeout_s=STOP_STEP_S)
        await components.stop(tasks)

    app = ForecastApp(
        components.admission, components.metrics,
        generate_unique_id_function=lambda route: route.name,  # operationIds: the handlers
        title="kpi-forecast xApp",
        description="Per-cell KPI forecasts for the near-RT RIC.",
        version=descriptor.version,
        lifespan=lifespan,
    )
    app.state.components = components
    # The routes go on the app's own router, as its one route table, each with its facts.
    app.router.route_class = Route
    for add_routes in (add_ric_routes, add_forecast_routes, add_cell_routes, add_model_routes,
                       add_timeseries_routes):
        add_routes(app.router, components)
    components.metrics.declare_forecast_routes(
        [route.path for route in app.routes if isinstance(route, Route) and route.forecast],
        list(components.models))
    app.openapi = openapi.Document(  # type: ignore[method-assign]
        app, components.state,
        extra_models=(BatchRequest, ForecastRequest, TimeSeriesRequest, ErrorOut))
    app.add_middleware(Boundary, state=components.state,
                       access=Access(components.state, components.metrics),
                       metrics=components.metrics, loop_lag=components.loop_lag)
    add_error_handlers(app, components.metrics, components.state)
    return app

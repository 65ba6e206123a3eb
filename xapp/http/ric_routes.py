"""The O-RAN SC routes under /ric/v1: health (alive, ready), the descriptor in force, and the
Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kpi_forecast.xapp.http.errors import ErrorOut
from kpi_forecast.xapp.service import Service
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable


def add_ric_routes(router: APIRouter, service: Service) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``service``."""

    @router.get("/ric/v1/health/alive", tags=["ric"])
    async def alive() -> dict:
        """Liveness: the process is up and answering."""
        return {"status": "alive"}

    @router.get("/ric/v1/health/ready", tags=["ric"], responses={503: {"model": ErrorOut}})
    async def ready() -> JSONResponse:
        """Readiness: a model is loaded, verified and warmed up, and RMR (where E2 or A1 is on)
        has a route table; 503 with the reason until then."""
        model = service.state.now.model
        if model is None:
            why = service.holder.problem or "loading it"
            return JSONResponse({"error": f"no model loaded and warmed up yet: {why}"},
                                status_code=503)
        if not service.e2.ready():
            return JSONResponse({"error": "RMR not ready: no route table yet (from the routing "
                                 "manager, RMR_RTG_SVC, or static, RMR_SEED_RT)"},
                                status_code=503)
        return JSONResponse({"status": "ready", "model_version": model.metadata.model_version})

    @router.get("/ric/v1/config", tags=["ric"])
    async def config() -> list[dict]:
        """The xApp descriptor in force, as O-RAN SC's xApp frameworks serve it."""
        descriptor = service.descriptor
        return [{"metadata": {"xappName": descriptor.name, "configType": "json"},
                 "config": descriptor.raw}]

    @router.get("/ric/v1/metrics", tags=["ric"], response_class=Response, responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}})
    async def metrics() -> Response:
        """Prometheus metrics, prefixed kpi_forecast_."""
        history = service.state.now.history
        try:
            held = await history.count() if history else 0
        except HistoryUnavailable:
            held = float("nan")  # unknown, rather than a scrape that fails as a whole
        service.metrics.cells_held.set(held)
        service.admission.show()
        return Response(generate_latest(service.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)


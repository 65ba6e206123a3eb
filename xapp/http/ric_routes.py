"""The O-RAN SC routes under /ric/v1: health (alive, ready), the descriptor in force, the
Prometheus metrics, and where the subscription manager posts the E2 subscriptions' outcomes."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from kpi_forecast.xapp.components import Components
from kpi_forecast.xapp.http.errors import ERRORS, ErrorOut
from kpi_forecast.xapp.ric.e2.submgr_api import SubscriptionResponse
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable


class OutcomesOut(BaseModel):
    """What one posted SubscriptionResponse did."""

    routed: int  # cells whose indications are now taken
    refused: int  # cells the subscription manager says were refused
    repeated: int  # outcomes taken before (submgr retries until it gets a 200)
    unknown: int  # outcomes of no subscription this replica waits for: counted, dropped


def add_ric_routes(router: APIRouter, components: Components) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``components``."""

    @router.get("/ric/v1/health/alive", tags=["ric"])
    async def alive() -> dict:
        """Liveness: the process is up and answering."""
        return {"status": "alive"}

    @router.get("/ric/v1/health/ready", tags=["ric"], responses={503: {"model": ErrorOut}})
    async def ready() -> JSONResponse:
        """Readiness: no model is still loading for the first time, at least one is loaded,
        verified and warmed up, and RMR (where E2 or A1 is on) has a route table; 503 with the
        reason until then. ``models`` gives each model's state: one that failed stays
        UNAVAILABLE, with its reason, and does not hold the others back."""
        states = {name: slot.status(components.state) for name, slot in components.models.items()}
        models = {name: {"state": status, **({"reason": why} if why else {})}
                  for name, (status, why) in states.items()}
        ready = [name for name, (status, _) in states.items() if status == "READY"]
        loading = [name for name, slot in components.models.items() if slot.holder.first_loading]
        if loading or not ready:
            why = "; ".join(f"{name}: {status}{f' ({reason})' if reason else ''}"
                            for name, (status, reason) in states.items())
            return JSONResponse({"error": f"models not ready yet: {why}", "models": models},
                                status_code=503)
        if not components.e2.ready():
            return JSONResponse({"error": "RMR not ready: no route table yet (from the routing "
                                 "manager, RMR_RTG_SVC, or static, RMR_SEED_RT)",
                                 "models": models}, status_code=503)
        default = components.state.now.model
        return JSONResponse({
            "status": "ready", "models": models,
            "model_version": default.metadata.model_version if default else None})

    @router.get("/ric/v1/config", tags=["ric"])
    async def config() -> list[dict]:
        """The xApp descriptor in force, as O-RAN SC's xApp frameworks serve it."""
        descriptor = components.descriptor
        return [{"metadata": {"xappName": descriptor.name, "configType": "json"},
                 "config": descriptor.raw}]

    @router.get("/ric/v1/metrics", tags=["ric"], response_class=Response, responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}})
    async def metrics() -> Response:
        """Prometheus metrics, prefixed kpi_forecast_."""
        for name, served in components.state.models.items():
            try:
                held = await served.history.count() if served.history else 0
            except HistoryUnavailable:
                held = float("nan")  # unknown, rather than a scrape that fails as a whole
            components.metrics.cells_held.labels(model=name).set(held)
        components.admission.show()
        return Response(generate_latest(components.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    @router.post("/ric/v1/subscriptions/response", tags=["ric"], response_model=OutcomesOut,
                 responses={code: ERRORS[code] for code in (400, 404, 422)})
    async def subscription_outcome(body: SubscriptionResponse) -> JSONResponse:
        """Where the subscription manager posts each E2 subscription detail's outcome (O-RAN
        SC xapp-frame's ``Subscriber.Notify``, retried until a 200): an admitted cell's E2
        instance id routes its indications, a refusal is logged and counted by cause. 200
        once taken, a repeat included; an outcome of a subscription this replica does not
        hold is counted and answered 200 too (nothing to retry). 404 where this replica
        makes no subscriptions."""
        subscriber = components.e2.subscriber
        if subscriber is None:
            return JSONResponse({"error": "this replica makes no E2 subscriptions "
                                 "(controls.e2.enabled with a submgrUrl)"}, status_code=404)
        taken = subscriber.take_outcome(body)
        return JSONResponse(OutcomesOut(routed=taken.routed, refused=taken.refused,
                                        repeated=taken.repeated,
                                        unknown=taken.unknown).model_dump())

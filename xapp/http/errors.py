"""What a refused request is answered: every error is JSON with an ``error`` message; a
client's mistake is a 4xx, never a 500; a request shed to protect the budget is a 503 with
Retry-After."""

from __future__ import annotations

import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.errors import (
    DecisionConflict,
    Excluded,
    InvalidRequest,
    NotHeld,
    RequestError,
    Shed,
    TooLittleHistory,
    UnknownModel,
)
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable


class ErrorOut(BaseModel):
    """Every error's body."""

    error: str
    detail: list[dict] | None = None


# The error answers every route may give, for the OpenAPI document.
ERRORS = {code: {"model": ErrorOut} for code in (400, 404, 409, 413, 422, 503)}


class ClientError(Exception):
    """A request the client got wrong: answered with ``status`` and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# The status of each error of the serving core a client can fix.
STATUS: dict[type[RequestError], int] = {
    InvalidRequest: 422, UnknownModel: 404, NotHeld: 404, TooLittleHistory: 409, Excluded: 409,
    DecisionConflict: 409,
}


def status_of(exc: RequestError) -> int:
    return next(code for kind, code in STATUS.items() if isinstance(exc, kind))


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


def validation_error(errors: list) -> JSONResponse:
    """422 naming the first problem by its place in the body (``items[3].values``)."""

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


def add_error_handlers(app: FastAPI, metrics: Metrics, state: ServingState) -> None:
    """Map every error a handler raises to its JSON answer (the body size limit in force from
    ``state``, for a body the boundary cut off while the framework read it)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc.errors())

    @app.exception_handler(ClientError)
    async def client_error(request: Request, exc: ClientError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=status_of(exc))

    @app.exception_handler(Shed)
    async def shed(request: Request, exc: Shed) -> JSONResponse:
        return shed_response(exc)

    @app.exception_handler(HistoryUnavailable)
    async def store_down(request: Request, exc: HistoryUnavailable) -> JSONResponse:
        metrics.shed.labels(reason="history_store").inc()
        return shed_response(Shed("history_store", str(exc), retry_after_s=1.0))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if getattr(request.state, "body_too_large", False):
            return too_large(state.now.controls.max_request_bytes)
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # every method of the path, not only its first route's
            headers = {**(headers or {}), "Allow": ", ".join(allowed(request))}
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=headers)


def allowed(request: Request) -> list[str]:
    """The methods the app's routes take on the request's path (a path served by several
    routes, one per method, answers 405 naming them all)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "_"})
        if match is Match.PARTIAL:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)

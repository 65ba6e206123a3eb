"""The ASGI edge, in front of the framework: a request's arrival time, the route groups a
caller may not use (``access.py``), the body's size cap, the request counter, and admission
control, which refuses a forecast before it is read."""

from __future__ import annotations

import time

from fastapi import FastAPI

from kpi_forecast.xapp.http.errors import Shed, shed_response, too_large
from kpi_forecast.xapp.http.routes import UNMATCHED, find
from kpi_forecast.xapp.service import Service


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

        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length")
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
            # A route group the caller may not use is refused before its body is read.
            route = find(scope["method"], scope["path"])
            refusal = None if route is None else self.service.access.refusal(route, headers)
            if refusal is not None:
                await refusal(scope, receive, send_counted)
                return
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise _TooLarge
            await self.app(scope, receive_capped, send_counted)
        except _TooLarge:
            if started:
                raise
            await too_large(limit)(scope, receive, send_counted)
        finally:
            self.service.metrics.requests.labels(
                route=route_label(scope), method=scope["method"], status=str(status)).inc()


class ForecastApp(FastAPI):
    """FastAPI with admission control in front of all of it: a forecast refused for overload
    never enters the framework. Under overload most requests are refusals, and in front of
    FastAPI's layers one costs a fraction of what it costs inside them, time the admitted
    requests then have (docs/decisions/hot-path.md)."""

    async def __call__(self, scope, receive, send) -> None:
        route = find(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if route is None or not route.forecast:
            await super().__call__(scope, receive, send)
            return
        service: Service = self.state.service
        try:
            service.gate.admit()
        except Shed as exc:
            await shed_response(exc)(scope, receive, send)
            service.metrics.requests.labels(
                route=route.path, method=scope["method"], status="503").inc()
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            service.gate.release()


def route_label(scope) -> str:
    """The route template a request is counted under ("unmatched" for no route)."""
    routed = getattr(scope.get("route"), "path", None)
    if routed:
        return routed
    route = find(scope["method"], scope["path"])
    return route.path if route else UNMATCHED

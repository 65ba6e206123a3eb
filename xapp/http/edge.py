"""The ASGI edge, in front of the framework: what a request may do is settled here before its
body is read. Each route declares its facts where it is declared (``facts``: what it
forecasts, its access group); the edge finds a request's route among the framework's own
routes, once, and from its facts refuses a route group the caller may not use (access, 403),
a body over the size cap (413), or a forecast admission control sheds (503); it stamps the
request's arrival and counts it under its route's template.

Access (``controls.api``): model control and history writes, each open, behind a key, or off.
The key comes from the environment (the chart's from a Kubernetes Secret): it is never in the
descriptor, so /ric/v1/config and the logs never show it, and it is compared in constant time.
"""

from __future__ import annotations

import hmac
import os
import time
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from kpi_forecast.xapp.descriptor.controls import API_KEY_ENV, API_KEY_HEADER, Api
from kpi_forecast.xapp.http.errors import shed_response, too_large
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.admission import Admission, LoopLag
from kpi_forecast.xapp.serving.errors import Shed
from kpi_forecast.xapp.serving.state import ServingState

Series = Literal["none", "one", "many"]
# Which access a route needs (controls.api): reading is open; the others change what the
# xApp forecasts.
Group = Literal["read", "model_control", "history_writes"]
GROUPS: tuple[Group, ...] = typing.get_args(Group)[1:]  # the restricted ones
UNMATCHED = "unmatched"
HEADER = API_KEY_HEADER.lower().encode()
# The facts' keys in a route's openapi_extra: the OpenAPI document shows them too.
SERIES_KEY, GROUP_KEY = "x-forecasts", "x-api-group"


def facts(series: Series = "none", group: Group = "read") -> dict[str, Any]:
    """A route's facts, for its ``openapi_extra``: what it forecasts (one series, whose answers
    steer the admission limit; many, held to the budget of the model calls they need) and the
    access group it needs."""
    return ({SERIES_KEY: series} if series != "none" else {}) | (
        {GROUP_KEY: group} if group != "read" else {})


MODEL_ROUTES = "/v1/models/{name}"  # a model's routes, by its name


class Route(APIRoute):
    """FastAPI's route, with the facts it was declared with."""

    def __init__(self, path: str, endpoint: Any, **options: Any) -> None:
        super().__init__(path, endpoint, **options)
        declared = self.openapi_extra or {}
        self.series: Series = declared.get(SERIES_KEY, "none")
        self.group: Group = declared.get(GROUP_KEY, "read")
        [self.method] = self.methods
        self._by_model = path.startswith(MODEL_ROUTES)

    @property
    def forecast(self) -> bool:
        """Forecast routes are what admission control applies to."""
        return self.series != "none"

    def model_of(self, path: str) -> str | None:
        """The model a request for ``path`` names; None: the default model's route."""
        # The route index matched the path already: the name is its fourth segment.
        return path.split("/", 4)[3] if self._by_model else None


class RouteIndex:
    """The framework's routes looked up by method and path before the framework routes the
    request: a literal path by a dict lookup (every forecast asks), a templated one by the
    route's own pattern."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        ours = [route for route in routes if isinstance(route, Route)]
        self._literal = {(r.method, r.path): r for r in ours if "{" not in r.path}
        self._templated = tuple(r for r in ours if "{" in r.path)

    def find(self, method: str, path: str) -> Route | None:
        return self._literal.get((method, path)) or next(
            (r for r in self._templated
             if r.method == method and r.path_regex.fullmatch(path) is not None), None)


class Access:
    def __init__(self, state: ServingState, metrics: Metrics,
                 environ: Mapping[str, str] = os.environ) -> None:
        self._state = state
        self._metrics = metrics
        key = environ.get(API_KEY_ENV, "")
        self._key = key.encode() if key else None

    def refusal(self, route: Route, headers: Mapping[bytes, bytes]) -> JSONResponse | None:
        """The 403 for a request to ``route`` with ``headers``, or None when it may go on."""
        if route.group == "read":
            return None
        mode = getattr(self._state.now.controls.api, route.group)
        if mode == "open":
            return None
        setting = f"controls.api.{Api.model_fields[route.group].alias}"
        if mode == "off":
            reason = f"{route.method} {route.path} is off ({setting}: off)"
        elif self._key is None:
            reason = (f"{route.method} {route.path} needs the API key, and none is set "
                      f"(${API_KEY_ENV}; {setting}: key)")
        elif hmac.compare_digest(headers.get(HEADER, b""), self._key):
            return None
        else:
            reason = (f"{route.method} {route.path} needs the API key in the {API_KEY_HEADER} "
                      f"header ({setting}: key)")
        self._metrics.refused.labels(group=route.group).inc()
        return JSONResponse({"error": reason, "group": route.group}, status_code=403)


class _TooLarge(Exception):
    pass


class ForecastApp(FastAPI):
    """FastAPI with admission control in front of all of it: a forecast refused for overload
    never enters the framework. Under overload most requests are refusals, and in front of
    FastAPI's layers one costs a fraction of what it costs inside them, time the admitted
    requests then have (docs/decisions/hot-path.md). The route a request is for is found
    here, once, and left in its scope for ``Boundary``."""

    def __init__(self, gate: Admission, metrics: Metrics, **options: Any) -> None:
        super().__init__(**options)
        self.gate = gate
        self.metrics = metrics
        self._index: RouteIndex | None = None

    def route_for(self, method: str, path: str) -> Route | None:
        if self._index is None:  # the routes are all added before the first request
            self._index = RouteIndex(self.router.routes)
        return self._index.find(method, path)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        route = self.route_for(scope["method"], scope["path"])
        scope.setdefault("state", {})["edge_route"] = route
        if route is None or not route.forecast:
            await super().__call__(scope, receive, send)
            return
        try:
            self.gate.admit(route.model_of(scope["path"]))
        except Shed as exc:
            await shed_response(exc)(scope, receive, send)
            self.metrics.requests.labels(
                route=route.path, method=scope["method"], status="503").inc()
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.gate.release()


class Boundary:
    """Pure ASGI middleware (no per-request task) inside the framework's error handling: stamps
    arrival, refuses a route group the caller may not use, caps the body, counts requests
    (those ``ForecastApp`` sheds are counted there)."""

    def __init__(self, app, state: ServingState, access: Access, metrics: Metrics,
                 loop_lag: LoopLag) -> None:
        self.app = app
        self.state = state
        self.access = access
        self.metrics = metrics
        self.loop_lag = loop_lag

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The request reached the socket about one loop lag before the app reads it: from
        # there its budget runs, and its wait counts (serving/admission.py).
        request_state = scope.setdefault("state", {})
        request_state["arrival"] = time.monotonic() - self.loop_lag.seconds
        route: Route | None = request_state.get("edge_route")
        limit = self.state.now.controls.max_request_bytes
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
                request_state["body_too_large"] = True
                raise _TooLarge
            return message

        try:
            # A route group the caller may not use is refused before its body is read.
            refusal = None if route is None else self.access.refusal(route, headers)
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
            self.metrics.requests.labels(
                route=route_label(scope), method=scope["method"], status=str(status)).inc()


def route_label(scope) -> str:
    """The route template a request is counted under ("unmatched" for no route)."""
    routed = getattr(scope.get("route"), "path", None)
    if routed:
        return routed
    route = scope.get("state", {}).get("edge_route")
    return route.path if route else UNMATCHED

"""The one route table of the xApp: what the app routes, what the metrics label, what
admission control gates, what a request's budget is and which access it needs.

Each route is declared once, here; `api.py` binds a handler to each by name (and refuses a
table and handlers that do not match), `boundary.py` gates and labels requests with it, and
`metrics.py` creates the series of every forecast route from it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

Series = Literal["none", "one", "many"]
# Which access a route needs (controls.api): reading is open; the others change what the
# xApp forecasts.
Group = Literal["read", "model_control", "history_writes"]
# What each routes module gives api.py: by route name, the handler and its OpenAPI options.
Handlers = dict[str, tuple[Callable[..., Awaitable[Any]], dict[str, Any]]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # the template, as the metrics label it
    name: str  # the handler's name: the OpenAPI operationId
    # What a forecast route forecasts: one series (its answers steer the admission limit) or
    # many (held to the budget of the model calls they need); "none" for every other route.
    series: Series = "none"
    group: Group = "read"

    @property
    def forecast(self) -> bool:
        """Forecast routes are what overload shedding applies to."""
        return self.series != "none"

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and _PATTERNS[self.path].fullmatch(path) is not None


ROUTES = (
    Route("GET", "/ric/v1/health/alive", "alive"),
    Route("GET", "/ric/v1/health/ready", "ready"),
    Route("GET", "/ric/v1/config", "config"),
    Route("GET", "/ric/v1/metrics", "metrics"),
    Route("POST", "/v1/forecast", "forecast", series="one"),
    Route("POST", "/v1/forecast/batch", "forecast_batch", series="many"),
    Route("GET", "/v1/cells", "cells"),
    Route("POST", "/v1/cells/{cell_id}/history", "add_history", group="history_writes"),
    Route("POST", "/v1/cells/history", "add_histories", group="history_writes"),
    Route("GET", "/v1/cells/{cell_id}/forecast", "cell_forecast", series="one"),
    Route("POST", "/v1/cells/forecast", "cells_forecast", series="many"),
    Route("GET", "/v1/model", "model_info"),
    Route("POST", "/v1/model/reload", "reload", group="model_control"),
)
BY_NAME = {route.name: route for route in ROUTES}
FORECAST_ROUTES = tuple(route for route in ROUTES if route.forecast)
GROUPS: tuple[Group, ...] = ("model_control", "history_writes")  # the restricted ones
UNMATCHED = "unmatched"


def find(method: str, path: str) -> Route | None:
    """The route a request is for, before the framework has routed it (None: no route)."""
    # A literal path first, looked up rather than matched (every forecast asks): and
    # /v1/cells/history is not a cell called "history".
    literal = _LITERAL.get((method, path))
    return literal or next((r for r in _TEMPLATED if r.matches(method, path)), None)


_PATTERNS = {route.path: re.compile(re.sub(r"\{[^}]+\}", "[^/]+", route.path))
             for route in ROUTES}
_LITERAL = {(route.method, route.path): route for route in ROUTES if "{" not in route.path}
_TEMPLATED = tuple(route for route in ROUTES if "{" in route.path)

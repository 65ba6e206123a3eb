"""Access to the route groups that change what the xApp forecasts (``controls.api``): model
control (reload) and history writes, each open, behind a key, or off. The key comes from the
environment (the chart's from a Kubernetes Secret): it is never in the descriptor, so
/ric/v1/config and the logs never show it, and it is compared in constant time.

A refusal is a 403 with a JSON reason, given at the boundary before the body is read, and
counted by group.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Mapping

from fastapi.responses import JSONResponse

from kpi_forecast.xapp.descriptor.controls import API_KEY_ENV, API_KEY_HEADER, Api
from kpi_forecast.xapp.http.routes import Route
from kpi_forecast.xapp.metrics import Metrics

HEADER = API_KEY_HEADER.lower().encode()


class Access:
    def __init__(self, controls: Callable[[], Api], metrics: Metrics,
                 environ: Mapping[str, str] = os.environ) -> None:
        self._controls = controls
        self._metrics = metrics
        key = environ.get(API_KEY_ENV, "")
        self._key = key.encode() if key else None

    def refusal(self, route: Route, headers: Mapping[bytes, bytes]) -> JSONResponse | None:
        """The 403 for a request to ``route`` with ``headers``, or None when it may go on."""
        if route.group == "read":
            return None
        mode = getattr(self._controls(), route.group)
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


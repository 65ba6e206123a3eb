"""Registration with the RIC's application manager (appmgr), as O-RAN SC xApps do.

``controls.registration.enabled``: true, false, or auto, which registers where RMR takes its
routes from the routing manager ($RMR_RTG_SVC set and not -1: both the onboarder's chart and
this project's set it so on a RIC), since the routing manager routes E2 and A1 messages only
to the xApps appmgr knows. Registration retries with backoff until it succeeds and is never
fatal: the xApp serves forecasts whether or not appmgr is reachable. Deregistration on
shutdown is tried once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from kpi_forecast.xapp.descriptor.config_file import Descriptor
from kpi_forecast.xapp.descriptor.controls import Registration
from kpi_forecast.xapp.failures import describe, log_retry

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0


def wanted(settings: Registration, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to register: as set, or for auto whether the routing manager gives the routes."""
    if settings.enabled != "auto":
        return settings.enabled
    routing_manager = environ.get("RMR_RTG_SVC", "").strip()
    on_a_ric = routing_manager not in ("", "-1")
    log.info("appmgr registration %s: RMR_RTG_SVC is %s (registration.enabled auto)",
             "on" if on_a_ric else "off", repr(routing_manager) if routing_manager else "unset")
    return on_a_ric


def endpoints(descriptor: Descriptor) -> tuple[str, str]:
    """The Kubernetes Service names the chart creates for this xApp (HTTP, RMR data)."""
    namespace = os.environ.get("POD_NAMESPACE", "ricxapp")
    ports = {p.get("name"): p.get("port") for p in descriptor.raw["messaging"]["ports"]}
    base = f"service-ricxapp-{descriptor.name}"
    return (f"{base}-http.{namespace}:{ports.get('http', 8080)}",
            f"{base}-rmr.{namespace}:{ports.get('rmr-data', 4560)}")


def register_body(descriptor: Descriptor) -> dict:
    http, rmr = endpoints(descriptor)
    return {
        "appName": descriptor.name,
        "appVersion": descriptor.version,
        "configPath": "",
        "appInstanceName": descriptor.name,
        "httpEndpoint": http,
        "rmrEndpoint": rmr,
        "config": json.dumps(descriptor.raw),
    }


def deregister_url(register_url: str) -> str:
    return register_url.rsplit("/", 1)[0] + "/deregister"


async def register(descriptor: Descriptor, transport: httpx.AsyncBaseTransport | None = None
                   ) -> None:
    """POST the registration until appmgr accepts it; runs as a background task."""
    settings = descriptor.controls.registration
    retrying = AsyncRetrying(
        wait=wait_exponential(multiplier=0.5, max=settings.retry_seconds),
        retry=retry_if_exception_type(httpx.HTTPError),
        before_sleep=log_retry(log, f"appmgr registration at {settings.appmgr_url}"),
    )
    async with httpx.AsyncClient(timeout=TIMEOUT_S, transport=transport) as client:
        async for attempt in retrying:
            with attempt:
                response = await client.post(settings.appmgr_url, json=register_body(descriptor))
                response.raise_for_status()
    log.info("registered with appmgr at %s", settings.appmgr_url)


async def deregister(descriptor: Descriptor, transport: httpx.AsyncBaseTransport | None = None,
                     timeout_s: float = TIMEOUT_S) -> None:
    settings = descriptor.controls.registration
    url = deregister_url(settings.appmgr_url)
    try:
        async with (asyncio.timeout(timeout_s),  # the whole call, not each of its phases
                    httpx.AsyncClient(timeout=timeout_s, transport=transport) as client):
            response = await client.post(url, json={"appName": descriptor.name,
                                                    "appInstanceName": descriptor.name})
            response.raise_for_status()
        log.info("deregistered from appmgr at %s", url)
    except httpx.HTTPError as exc:
        log.warning("appmgr deregistration at %s failed: %s", url, describe(exc))
    except TimeoutError:
        log.warning("appmgr deregistration at %s failed: timeout, no answer within %.1f s",
                    url, timeout_s)

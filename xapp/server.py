"""The xApp process of `kpi-forecast serve` (uvicorn, one worker, graceful SIGTERM); ``run``
serves the mock E2 node the same way."""

from __future__ import annotations

import gc
import logging
import signal
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.descriptor.config_file import descriptor_path, load_descriptor
from kpi_forecast.xapp.http.connections import READ_TIMEOUT_S, BoundedHttpProtocol

log = logging.getLogger(__name__)

# Kubernetes sends SIGTERM, waits terminationGracePeriodSeconds (30 s by default), then kills:
# in-flight requests get most of that to finish.
GRACEFUL_SHUTDOWN_S = 20


def serve(model: str | None, config: str | None, host: str, port: int,
          submgr: str | None = None, e2_port: int | None = None, a1: bool = False,
          e2_client_host: str | None = None, e2mgr: str | None = None,
          models: str | None = None) -> None:
    path = descriptor_path(config)
    overrides: dict = {}
    if model:
        overrides.update(model_dir=str(Path(model).resolve()), model_repository=None,
                         models=None, default_model=None)
    if models:  # in place of the file's modelDir
        overrides.update(model_repository=str(Path(models).resolve()), model_dir=None,
                         model_url=None)
    e2: dict = {}
    if submgr or e2_port is not None:
        e2["enabled"] = True  # either flag turns E2 on; the rest of e2 comes from the file
    if submgr:
        e2["submgr_url"] = submgr
    if e2mgr:
        e2["e2mgr_url"] = e2mgr
    if e2_port is not None:
        e2["port"] = e2_port
    if e2_client_host:
        e2["client_host"] = e2_client_host
    if e2:
        overrides["e2"] = e2
    if a1:
        overrides["a1"] = {"enabled": True}
    descriptor = load_descriptor(path, overrides or None)
    log.info("config %s (%s %s)", path, descriptor.name, descriptor.version)
    run(create_app(descriptor, overrides=overrides or None, http_port=port), host, port)


def run(app: ASGIApp, host: str, port: int, graceful_s: float = GRACEFUL_SHUTDOWN_S) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then stop and return: the process exits 0.

    uvicorn stops accepting on either signal, lets in-flight requests finish (for at most
    ``graceful_s``), then runs the lifespan shutdown. It then re-raises the signal to whatever
    handler was there before: make those no-ops, so that a drained, finished process exits
    with status 0 rather than as killed (or with a KeyboardInterrupt's traceback).
    """
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: None)
    # What is built before serving (the modules, the app, its routes and schemas) lives as long
    # as the process: frozen out of the cycle collector, whose older generations would otherwise
    # walk it again and again as the hot paths (an E2 indication, a request) allocate.
    gc.freeze()
    # Connections bounded in number and in the time a request takes to arrive (connections.py);
    # between requests, a kept-alive connection waits READ_TIMEOUT_S as well.
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=graceful_s, lifespan="on", http=BoundedHttpProtocol,
                timeout_keep_alive=int(READ_TIMEOUT_S))
    log.info("stopped")

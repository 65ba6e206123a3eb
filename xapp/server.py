"""`kpi-forecast serve`: the xApp process (uvicorn, one worker, graceful SIGTERM)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import uvicorn

from xapp.api import create_app
from xapp.config import descriptor_path, load_descriptor

log = logging.getLogger(__name__)

# Kubernetes sends SIGTERM, waits terminationGracePeriodSeconds (30 s by default), then kills:
# in-flight requests get most of that to finish.
GRACEFUL_SHUTDOWN_S = 20


def serve(model: str | None, config: str | None, host: str, port: int) -> None:
    path = descriptor_path(config)
    overrides = {"model_dir": str(Path(model).resolve())} if model else None
    descriptor = load_descriptor(path, overrides)
    log.info("config %s (%s %s)", path, descriptor.name, descriptor.version)
    app = create_app(descriptor, overrides=overrides)
    # uvicorn stops accepting on SIGTERM, lets in-flight requests finish, then runs the
    # lifespan shutdown (which drains the batcher). It then re-raises the signal to whatever
    # handler was there before: make that one a no-op, so that a drained, finished process
    # exits with status 0 rather than as killed.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(
        app, host=host, port=port, log_level="warning", access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, lifespan="on",
    )
    log.info("stopped")

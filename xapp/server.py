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


def serve(model: str | None, config: str | None, host: str, port: int,
          submgr: str | None = None, e2_port: int | None = None) -> None:
    path = descriptor_path(config)
    overrides: dict = {"model_dir": str(Path(model).resolve())} if model else {}
    if submgr or e2_port is not None:
        # Either flag turns E2 on; the rest of the e2 controls come from the file.
        e2 = load_descriptor(path).controls.e2.model_dump()
        e2.update(enabled=True)
        if submgr:
            e2.update(submgr_url=submgr)
        if e2_port is not None:
            e2.update(port=e2_port)
        overrides["e2"] = e2
    descriptor = load_descriptor(path, overrides or None)
    log.info("config %s (%s %s)", path, descriptor.name, descriptor.version)
    app = create_app(descriptor, overrides=overrides or None, http_port=port)
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

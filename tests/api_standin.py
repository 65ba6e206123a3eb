"""A local stand-in of the Kubernetes API server for the `kpi-forecast k8s` tests: a FastAPI app
on a free loopback port, and a kubeconfig that points the kubernetes client at it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import uvicorn
import yaml
from fastapi import FastAPI

from tests.waiting import until


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "standin",
        "clusters": [{"name": "standin", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "me"}}],
    }))
    return path


@contextlib.contextmanager
def serving(app: FastAPI, tmp_path: Path) -> Iterator[Path]:
    """Serve ``app`` until the block ends; yields the kubeconfig file that reaches it."""
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    until(lambda: http.started, 10, "the stand-in API server started")
    port = http.servers[0].sockets[0].getsockname()[1]
    try:
        yield kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    finally:
        http.should_exit = True
        thread.join(5)

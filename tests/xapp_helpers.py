"""Shared by the xApp tests: a model directory, descriptors with chosen controls, a running app."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from kpi_forecast.cli.mock_submgr import MockSubmgr
from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.components import TransportFactory, rmr_transport
from kpi_forecast.xapp.descriptor.config_file import (
    CONFIG_FILE_NAME,
    DEFAULT_DIR,
    Descriptor,
    load_descriptor,
)
from kpi_forecast.xapp.descriptor.controls import KpiSource
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import CellHistory
from tests.exported_model import exported_copy

CONTEXT, HORIZON = 168, 24


def make_model(path: Path, version: str = "test", seed: int = 0, target: str | None = None
               ) -> Path:
    """A model directory at ``path`` (a copy of the process's one export of weights drawn
    from ``seed``), as ``version``, of the KPI ``target`` (default: the export's)."""
    exported_copy(path, CONTEXT, HORIZON, seed)
    meta = json.loads((path / "metadata.json").read_text())
    meta["model_version"] = version
    if target is not None:
        meta["target"] = target
    (path / "metadata.json").write_text(json.dumps(meta))
    return path


# The route groups behind the API key by default open, for the tests of everything else (the
# access tests set their own).
OPEN_API = {"modelControl": "open", "historyWrites": "open"}


def make_repository(root: Path, kpis: dict[str, str], seed: int = 0) -> Path:
    """A model repository at ``root``: a model per name, of the KPI given, each its own version
    (the name; the weights of one export, drawn from ``seed``)."""
    for name, kpi in kpis.items():
        make_model(root / name, version=name, seed=seed, target=kpi)
    return root


def write_descriptor(directory: Path, model_dir: Path | None, **controls: object) -> Path:
    """A config-file.json like the packaged one, with ``controls`` (camelCase) replaced; the
    restricted route groups open unless ``api`` is given. No ``model_dir``: the controls name
    a modelRepository instead."""
    raw = json.loads((DEFAULT_DIR / CONFIG_FILE_NAME).read_text())
    raw["controls"] = {**raw["controls"], "modelDir": str(model_dir), "api": OPEN_API,
                       **controls}
    if model_dir is None:
        del raw["controls"]["modelDir"]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CONFIG_FILE_NAME
    path.write_text(json.dumps(raw, indent=2))
    return path


def descriptor(tmp: Path, model_dir: Path | None, **controls: object) -> Descriptor:
    """A descriptor for tests: a 5 s budget unless given, so that a busy test machine (two
    cores shared with other work: a 1 s stall of the event loop has been seen) does not turn a
    contract test into a latency test."""
    controls.setdefault("latencyBudgetMs", 5000)
    return load_descriptor(write_descriptor(tmp / "config", model_dir, **controls))


@contextlib.asynccontextmanager
async def running(desc: Descriptor, wait_ready: bool = True, watch: bool = False,
                  appmgr: httpx.AsyncBaseTransport | None = None,
                  e2_transport: TransportFactory = rmr_transport,
                  submgr: MockSubmgr | None = None, first_posts_fail: bool = False,
                  ) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its background tasks running, and an async client on it (no sockets);
    ``submgr``'s outcomes are posted to it (with ``first_posts_fail``, each outcome's first
    try fails to connect)."""
    app = create_app(desc, watch_config=watch, appmgr_transport=appmgr,
                     e2_transport=e2_transport)
    if submgr is not None:
        to_app = httpx.ASGITransport(app=app)
        submgr.notify_transport = FirstPostsFail(to_app) if first_posts_fail else to_app
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://xapp") as client:
            if wait_ready:
                for _ in range(400):
                    if (await client.get("/ric/v1/health/ready")).status_code == 200:
                        break
                    await asyncio.sleep(0.025)
                else:
                    raise AssertionError("the model never became ready")
            client.app = app  # type: ignore[attr-defined]
            yield client


class FirstPostsFail(httpx.AsyncBaseTransport):
    """Each distinct request fails to connect the first time, then goes to ``inner``."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.tried: set[bytes] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        if body not in self.tried:
            self.tried.add(body)
            raise httpx.ConnectError("connection refused (the first try, failed on purpose)",
                                     request=request)
        return await self.inner.handle_async_request(request)


def serving_state(history: CellHistory | None = None, kpi_source: KpiSource | None = None,
                  model: object = None) -> ServingState:
    """The packaged descriptor's controls with ``history``, the measurement ``kpi_source`` as
    the default model's KPI and ``model`` (None, or what stands in for one), as the parts
    tested read them."""
    state = ServingState(load_descriptor(DEFAULT_DIR / CONFIG_FILE_NAME).controls)
    state.swap(state.default, history=history, kpi_source=kpi_source)
    if model is not None:  # a stand-in: its KPI is not looked up
        state.swap(state.default, model=model, kpi_source=kpi_source)
    return state

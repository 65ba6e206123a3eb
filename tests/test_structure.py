"""The serving core's shape, measured: how many project modules one forecast request runs code
in, how many entries the serving package has at its top, how its parts are wired, and how long
the modules are."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import numpy as np

from kpi_forecast.model.recalibration import Recalibration
from kpi_forecast.xapp.serving.recalibrator import Offsets
from tests.xapp_helpers import descriptor, make_model, running

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("cli", "data", "model", "training", "xapp")
MAX_MODULES_PER_FORECAST = 13
MAX_XAPP_ENTRIES = 12
MAX_MODULE_LINES = 400


def forecast_body() -> dict:
    values = [float(10 + (i % 24)) for i in range(24 * 14)]
    return {"cell_id": "c1", "start": "2026-03-01T00:00:00Z", "freq": "1h", "values": values,
            "horizon": 24}


def project_module(filename: str) -> str | None:
    path = Path(filename)
    if not path.is_relative_to(ROOT) or path.suffix != ".py":
        return None
    relative = path.relative_to(ROOT)
    return str(relative) if relative.parts[0] in SHIPPED else None


def below_http(module: str | None) -> bool:
    return module is not None and module.startswith("xapp/") and not module.startswith(
        ("xapp/http/", "xapp/app.py", "xapp/server.py"))


def test_one_forecast_request_runs_code_in_few_modules_and_crosses_http_once(
        tmp_path: Path) -> None:
    """Traced in the running app, its worker threads included, between the request's start
    and its answer (a first request before, so nothing is loaded or warmed up on the way),
    with recalibration offsets in force that blend the median with every simple forecast:
    the modules it runs code in (the route's handler, the serving core's answer with its
    admission, the model) and every call from below ``http/`` back up into it (none: the
    handler calls the serving core, which answers without calling up)."""
    modules: set[str] = set()
    upward: set[tuple[str, str]] = set()
    tracing = threading.Event()

    def profile(frame, event, arg) -> None:
        if tracing.is_set() and event == "call":
            module = project_module(frame.f_code.co_filename)
            if module is not None:
                modules.add(module)
                caller = frame.f_back and project_module(frame.f_back.f_code.co_filename)
                if module.startswith("xapp/http/") and below_http(caller):
                    upward.add((caller, module))

    async def go() -> None:
        async with running(descriptor(tmp_path, make_model(tmp_path / "model"))) as client:
            service = client.app.state.components
            model = service.state.now.model
            fitted = Recalibration(np.array([-0.1, 0.0, 0.2], np.float32), 1, 7, 500,
                                   shares=(0.5, 0.2, 0.2, 0.1), steps_per_day=24)
            service.default.recalibrator.offsets = Offsets(model.metadata.model_version, fitted, 10,
                                                   time.time())
            service.default.recalibrator.put_in_force(model)
            assert service.state.now.recalibration is fitted
            assert (await client.post("/v1/forecast", json=forecast_body())).status_code == 200
            tracing.set()
            try:
                answer = await client.post("/v1/forecast", json=forecast_body())
            finally:
                tracing.clear()
            assert answer.status_code == 200

    threading.setprofile(profile)  # the threads the app starts, as the batcher's worker
    sys.setprofile(profile)
    try:
        asyncio.run(go())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    # The trace saw the model's call, in the batcher's thread, and its recalibration.
    assert {"xapp/serving/batcher.py", "model/recalibration.py", "model/naive.py"} <= modules
    assert len(modules) <= MAX_MODULES_PER_FORECAST, " ".join(sorted(modules))
    assert "xapp/serving/forecasting.py" in modules and not upward, upward


def test_the_serving_package_has_few_entries_at_its_top() -> None:
    entries = [p.name for p in (ROOT / "xapp").iterdir()
               if p.name != "__pycache__" and not p.name.startswith(".")]
    assert len(entries) <= MAX_XAPP_ENTRIES, sorted(entries)


def test_no_shipped_module_is_longer_than_one_sitting() -> None:
    long = {str(path.relative_to(ROOT)): n for folder in SHIPPED
            for path in (ROOT / folder).rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_the_serving_package_wires_its_parts_without_late_binding_getters() -> None:
    getters = [f"{path.relative_to(ROOT)}:{number}" for path in (ROOT / "xapp").rglob("*.py")
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if "lambda: self." in line]
    assert not getters, getters

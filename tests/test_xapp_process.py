"""`kpi-forecast serve` as a real process: torch-free, reloads its config file, drains on
SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.ports import free_port
from kpi_forecast.xapp.smoke import wait_ready
from tests.xapp_helpers import CONTEXT, make_model, write_descriptor

ROOT = Path(__file__).resolve().parents[1]
NO_TORCH = (
    "import sys\n"
    "class NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'torch':\n"
    "            raise ImportError('no torch in the serving image')\n"
    "sys.meta_path.insert(0, NoTorch())\n"
    "from kpi_forecast.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)



@pytest.mark.slow
def test_serve_without_torch_reloads_config_and_stops_cleanly(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    config = write_descriptor(tmp_path / "config", model_dir, latencyBudgetMs=250)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-c", NO_TORCH, "serve", "--config", str(config), "--host",
         "127.0.0.1", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_ready(url, process), "the xApp never became ready"
        request = {"cell_id": "c1", "start": "2024-01-01T00:00:00+00:00", "freq": "1h",
                   "values": [float(i % 24) for i in range(CONTEXT)]}
        assert httpx.post(f"{url}/v1/forecast", json=request).json()["source"] == "model"

        # A ConfigMap update: a valid change is applied without a restart...
        raw = json.loads(config.read_text())
        raw["controls"]["latencyBudgetMs"] = 40
        config.write_text(json.dumps(raw))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            controls = httpx.get(f"{url}/ric/v1/config").json()[0]["config"]["controls"]
            if controls["latencyBudgetMs"] == 40:
                break
            time.sleep(0.2)
        assert controls["latencyBudgetMs"] == 40
        assert "kpi_forecast_latency_budget_seconds 0.04" in httpx.get(
            f"{url}/ric/v1/metrics").text
        # ...an invalid one is rejected and the old config stays.
        raw["controls"]["latencyBudgetMs"] = -5
        config.write_text(json.dumps(raw))
        time.sleep(2.5)
        controls = httpx.get(f"{url}/ric/v1/config").json()[0]["config"]["controls"]
        assert controls["latencyBudgetMs"] == 40

        # SIGTERM while a request is in flight: it completes, then the process exits 0.
        raw["controls"]["latencyBudgetMs"] = 5000
        config.write_text(json.dumps(raw))
        time.sleep(2.5)
        payload = json.dumps(request).encode()

        def slow_upload() -> Iterator[bytes]:
            yield payload[:20]
            time.sleep(0.6)  # the signal comes while the body is on its way
            yield payload[20:]

        answers: list[httpx.Response] = []
        inflight = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{url}/v1/forecast", content=slow_upload(), timeout=10,
            headers={"content-type": "application/json"})))
        inflight.start()
        time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        inflight.join(10)
        assert process.wait(timeout=30) == 0
        assert answers and answers[0].status_code == 200
        assert answers[0].json()["source"] == "model"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    errors = process.stderr.read()
    assert "Traceback" not in errors, errors
    assert "latencyBudgetMs" in errors  # the rejected change was logged, naming the field

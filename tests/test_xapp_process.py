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
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.xapp.descriptor.config_file import WATCH_INTERVAL_S
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



def read_by_server(port: int) -> bool:
    """A connection to ``port`` is open and the server has read all that arrived on it (the
    kernel holds nothing in its receive queue)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        established = fields[3] == "01"
        if local_port == port and established and int(fields[4].split(":")[1], 16) == 0:
            return True
    return False


@pytest.mark.slow
def test_serve_without_torch_reloads_config_and_stops_cleanly(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    config = write_descriptor(tmp_path / "config", model_dir, latencyBudgetMs=250)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "xapp.log"
    process = subprocess.Popen(
        [sys.executable, "-c", NO_TORCH, "serve", "--config", str(config), "--host",
         "127.0.0.1", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True,
    )

    def until(condition, what: str) -> None:
        """The watcher reads the file every second: a few of its rounds at most."""
        deadline = time.monotonic() + 5 * WATCH_INTERVAL_S
        while not condition():
            assert time.monotonic() < deadline, f"{what}: {log.read_text()[-2000:]}"
            time.sleep(0.05)

    def budget_ms() -> float:
        return httpx.get(f"{url}/ric/v1/config").json()[0]["config"]["controls"][
            "latencyBudgetMs"]

    try:
        assert wait_ready(url, process), "the xApp never became ready"
        request = {"cell_id": "c1", "start": "2024-01-01T00:00:00+00:00", "freq": "1h",
                   "values": [float(i % 24) for i in range(CONTEXT)]}
        assert httpx.post(f"{url}/v1/forecast", json=request).json()["source"] == "model"

        # A ConfigMap update: a valid change is applied without a restart...
        raw = json.loads(config.read_text())
        raw["controls"]["latencyBudgetMs"] = 40
        config.write_text(json.dumps(raw))
        until(lambda: budget_ms() == 40, "the valid change not applied")
        assert [line.split()[-1] for line in httpx.get(f"{url}/ric/v1/metrics").text.splitlines()
                if line.startswith("kpi_forecast_latency_budget_seconds{")] == ["0.04"]
        # ...an invalid one is rejected and the old config stays.
        raw["controls"]["latencyBudgetMs"] = -5
        config.write_text(json.dumps(raw))
        until(lambda: "configuration change rejected" in log.read_text(), "no rejection logged")
        assert budget_ms() == 40

        # SIGTERM while a request is in flight: it completes, then the process exits 0.
        raw["controls"]["latencyBudgetMs"] = 5000
        config.write_text(json.dumps(raw))
        until(lambda: budget_ms() == 5000, "the valid change not applied")
        payload = json.dumps(request).encode()
        sent_first, signalled = threading.Event(), threading.Event()

        def slow_upload() -> Iterator[bytes]:
            yield payload[:20]
            sent_first.set()
            assert signalled.wait(10)  # the signal comes while the body is on its way
            yield payload[20:]

        answers: list[httpx.Response] = []
        inflight = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{url}/v1/forecast", content=slow_upload(), timeout=10,
            headers={"content-type": "application/json"})))
        inflight.start()
        assert sent_first.wait(10)
        # Its headers and first bytes read: the server holds the request (uvicorn's shutdown
        # closes only the connections that hold none).
        until(lambda: read_by_server(port), "the request's first bytes never read")
        process.send_signal(signal.SIGTERM)
        signalled.set()
        inflight.join(10)
        assert process.wait(timeout=30) == 0
        assert answers and answers[0].status_code == 200
        assert answers[0].json()["source"] == "model"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    errors = log.read_text()
    assert "Traceback" not in errors, errors
    assert "latencyBudgetMs" in errors  # the rejected change was logged, naming the field

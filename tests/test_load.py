"""A real load generator (hey) against a running xApp: under more load than it can serve, every
answer is a forecast (200) or a refusal with Retry-After (503), never an error."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from tests.processes import BIN, answers, running
from tests.system_tools import system_tool
from tests.xapp_helpers import CONTEXT, make_model, write_descriptor


@pytest.mark.slow
def test_under_load_every_answer_is_a_forecast_or_a_503(tmp_path: Path) -> None:
    hey = system_tool("hey")
    config = write_descriptor(tmp_path / "config", make_model(tmp_path / "model"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"cell_id": "c1", "start": "2024-03-01T00:00:00Z", "freq": "1h",
                                "values": [float(10 + h % 24) for h in range(CONTEXT)]}))
    serve = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host", "127.0.0.1",
             "--port", str(port)]
    with running(serve, answers(f"{url}/ric/v1/health/ready"), tmp_path / "xapp.log") as xapp:
        done = subprocess.run([hey, "-z", "3s", "-c", "32", "-m", "POST", "-T",
                               "application/json", "-D", str(body), f"{url}/v1/forecast"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    codes = {int(code): int(count) for code, count in
             re.findall(r"\[(\d{3})\]\s+(\d+) responses", done.stdout)}
    assert codes.get(200, 0) > 0 and set(codes) <= {200, 503}, done.stdout
    assert "Error distribution" not in done.stdout, done.stdout  # no connection failed
    assert "Traceback" not in xapp.log, xapp.log[-3000:]

"""Every long-running command exits 0 within STOP_WITHIN_S of SIGTERM, also while what it talks
to is down or silent; and what it retried meanwhile was logged with its type and reason.

(A plain `serve` is stopped so in test_xapp_process.py, with a request in flight, and the
README's servers at the end of each of its blocks.)"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.ports import free_port
from tests.processes import BIN, Server, answers, running
from tests.xapp_helpers import make_model, write_descriptor

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data/sample/cells_hourly.csv.gz"
UNRESOLVABLE = "service-ricxapp-kpi-forecast-rmr.ricxapp"  # an in-cluster name, off-cluster


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sigterm")
    # The test model's KPI is "kpi": the E2 controls say which measurement feeds it.
    return write_descriptor(root / "config", make_model(root / "model"),
                            e2={"kpis": {"kpi": {"measurement": "RRU.PrbUsedDl"}}})


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers on them."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def serve(config: Path, port: int, *extra: str) -> list[str]:
    return [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host", "127.0.0.1",
            "--port", str(port), *extra]


def logged(server, text: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while text not in server.log:
        assert time.monotonic() < deadline, f"never logged {text!r}:\n{server.log[-3000:]}"
        time.sleep(0.1)


def test_serve_stops_while_its_e2_manager_is_silent(
        config: Path, tmp_path: Path, silent_port: int, rmr_library: Path) -> None:
    port = free_port()
    e2mgr = f"http://127.0.0.1:{silent_port}/v1"
    command = serve(config, port, "--submgr", "http://127.0.0.1:9/ric/v1", "--e2mgr", e2mgr,
                    "--e2-port", str(free_port()))
    with running(command, answers(f"http://127.0.0.1:{port}/ric/v1/health/ready"),
                 tmp_path / "serve.log") as xapp:
        logged(xapp, f"e2: E2 Manager at {e2mgr}: ReadTimeout: timeout, no answer within 5 s "
                     f"for GET {e2mgr}/nodeb/states; attempt 1 failed")


def test_serve_says_why_the_e2_manager_is_unreachable(
        config: Path, tmp_path: Path, rmr_library: Path) -> None:
    port, closed = free_port(), free_port()
    e2mgr = f"http://127.0.0.1:{closed}/v1"
    command = serve(config, port, "--submgr", "http://127.0.0.1:9/ric/v1", "--e2mgr", e2mgr,
                    "--e2-port", str(free_port()))
    with running(command, answers(f"http://127.0.0.1:{port}/ric/v1/health/ready"),
                 tmp_path / "serve.log") as xapp:
        logged(xapp, f"e2: E2 Manager at {e2mgr}: ConnectError: ")


def test_e2sim_answers_at_once_and_stops_while_the_subscriber_is_unreachable(
        tmp_path: Path, rmr_library: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(BIN / "kpi-forecast"), "e2sim", "--data", str(SAMPLE), "--kpi",
               "traffic_mb=DRB.PdcpSduVolumeDL", "--listen", f"127.0.0.1:{port}", "--cells", "2",
               "--rmr-port", str(free_port())]
    with running(command, answers(f"{url}/v1/nodeb/states"), tmp_path / "e2sim.log") as node:
        gnb = httpx.get(f"{url}/v1/nodeb/gnb-000").json()["gnb"]
        cell = gnb["servedNrCells"][0]["servedNrCellInformation"]
        request = {"ClientEndpoint": {"Host": UNRESOLVABLE, "HTTPPort": 8080, "RMRPort": 4560},
                   "Meid": "gnb-000",
                   "RANFunctionID": gnb["ranFunctions"][0]["ranFunctionId"],
                   "SubscriptionDetails": [{"XappEventInstanceId": 1, "EventTriggers": [0],
                                            "ActionToBeSetupList": [{
                                                "ActionID": 1, "ActionType": "report",
                                                "ActionDefinition": [0]}]}]}
        started = time.monotonic()
        response = httpx.post(f"{url}/ric/v1/subscriptions", json=request, timeout=5)
        assert response.status_code == 201, response.text
        assert time.monotonic() - started < 2.0  # answered, not held while it tries to send
        assert cell["cellId"] == "00f110:0000000000"
        # The outcome is posted to the subscriber (tried again 5 s later, as submgr does).
        logged(node, f"submgr: notifying http://{UNRESOLVABLE}:8080/ric/v1/subscriptions/"
                     "response: ConnectError: ")
        bad = httpx.post(f"{url}/ric/v1/subscriptions", json={"Meid": "gnb-000"}, timeout=5)
        assert bad.status_code == 400  # a malformed request is the client's error, not a 500


def test_serve_says_why_it_does_not_subscribe(tmp_path: Path, rmr_library: Path) -> None:
    config = write_descriptor(tmp_path / "config", make_model(tmp_path / "model"))
    port = free_port()
    command = serve(config, port, "--submgr", "http://127.0.0.1:9", "--e2-port", str(free_port()))
    with running(command, answers(f"http://127.0.0.1:{port}/ric/v1/health/ready"),
                 tmp_path / "serve.log") as xapp:
        logged(xapp, "e2: not subscribing for model model: its KPI 'kpi' has no measurement "
                     "in controls.e2.kpis (prb_util, dl_throughput_mbps, active_ues, traffic_mb)")


def test_train_stops_on_sigterm_and_writes_the_model_it_has(tmp_path: Path) -> None:
    out = tmp_path / "model"
    command = [str(BIN / "kpi-forecast"), "train", "--data", str(SAMPLE), "--target",
               "traffic_mb", "--out", str(out), "--max-minutes", "5", "--quiet"]
    trainer = Server(command, tmp_path / "train.log", ROOT, None)
    trainer.wait_until(lambda: "training windows" in trainer.log, 120)  # training begins
    # Longer than a server: the epoch's validation, the calibration, writing the weights into
    # the graphs traced before training (both: the float16 one was traced before the signal)
    # and the report still run: 4.9 s, measured with a second test run on the machine.
    trainer.stop(within_s=10)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["training"]["stopped_by"] == "signal", meta["training"]
    assert (out / "model.onnx").is_file() and (out / "report.md").is_file()
    assert (out / "model.fp16.onnx").is_file() and "float16" in meta["onnx"]
    assert "SIGTERM: stopping after the step under way" in trainer.log

"""Model reloads and descriptor writes under real HTTP load, between two models of different
weights: concurrent reloads, a ConfigMap change racing them, valid and invalid writes, a bad
model. No 5xx, and every answer's numbers are those of the version it names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks.ports import free_port
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME
from tests.faults.conftest import Report
from tests.processes import BIN, answers, running
from tests.system_tools import system_tool
from tests.tolerance import answer_tolerance
from tests.xapp_helpers import CONTEXT, HORIZON, make_model, write_descriptor

pytestmark = [pytest.mark.faults, pytest.mark.slow]

LOAD_S = 6
BODY = {"cell_id": "c1", "start": "2024-03-01T00:00:00Z", "freq": "1h",
        "values": [float(10 + h % 24 + (h // 24) % 3) for h in range(CONTEXT)]}


def quantiles(answer: dict) -> np.ndarray:
    return np.array([[step[q] for q in ("p10", "p50", "p90")] for step in answer["forecasts"]])


def replace(path: Path, text: str) -> None:
    """As a ConfigMap update lands: the new file swapped in at once."""
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def test_reloads_and_descriptor_writes_under_load_answer_each_version_with_its_numbers(
        tmp_path: Path, report: Report) -> None:
    hey = system_tool("hey")
    root = tmp_path / "models"
    models = {"weights-a": make_model(root / "a", "weights-a", seed=0),
              "weights-b": make_model(root / "b", "weights-b", seed=1)}
    broken = make_model(root / "broken", "broken")
    (broken / "model.onnx").write_bytes((broken / "model.onnx").read_bytes()[:1000])
    controls = {"modelRoot": str(root), "latencyBudgetMs": 1000,
                "recalibration": {"everySeconds": 0}}
    config = write_descriptor(tmp_path / "config", models["weights-a"], **controls)
    descriptor = json.loads(config.read_text())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    body = tmp_path / "request.json"
    body.write_text(json.dumps(BODY))
    serve = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host", "127.0.0.1",
             "--port", str(port)]
    with running(serve, answers(f"{url}/ric/v1/health/ready"), tmp_path / "xapp.log") as xapp:
        client = httpx.Client(base_url=url, timeout=30)

        def reload(model_dir: Path) -> httpx.Response:
            return client.post("/v1/model/reload", json={"model_dir": str(model_dir)})

        # Each version's answer, calm: what every answer under load is held to.
        reference = {}
        for version, model_dir in reversed(models.items()):
            assert reload(model_dir).json()["model_version"] == version
            answer = client.post("/v1/forecast", json=BODY).json()
            assert (answer["source"], answer["model_version"]) == ("model", version)
            reference[version] = quantiles(answer)
        within = answer_tolerance(ModelConfig(CONTEXT, HORIZON), max(BODY["values"]))
        assert np.abs(reference["weights-a"] - reference["weights-b"]).max() > 100 * within

        stop = threading.Event()
        seen: list[dict] = []
        reloads: list[tuple[int, float]] = []
        writes = {"valid": 0, "invalid": 0}
        errors: list[BaseException] = []

        def guarded(work):
            def run() -> None:
                try:
                    work()
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    errors.append(exc)
            return threading.Thread(target=run)

        def ask() -> None:
            with httpx.Client(base_url=url, timeout=30) as own:
                while not stop.is_set():
                    response = own.post("/v1/forecast", json=BODY)
                    assert response.status_code == 200, response.text
                    seen.append(response.json())

        def reloader(order: list[Path]) -> None:
            with httpx.Client(base_url=url, timeout=60) as own:
                turn = 0
                while not stop.is_set():
                    model_dir = order[turn % len(order)]
                    started = time.monotonic()
                    response = own.post("/v1/model/reload", json={"model_dir": str(model_dir)})
                    reloads.append((response.status_code, time.monotonic() - started))
                    expected = 422 if model_dir == broken else 200
                    assert response.status_code == expected, response.text
                    turn += 1

        name = client.get("/v1/model").json()["name"]
        decisions: list[tuple[str, int]] = []

        def shadower(order: list[Path]) -> None:
            """Shadow a version, promote it, roll back, again and again: beside the reloads,
            each may find the candidate gone (409) or the version already served (422)."""
            with httpx.Client(base_url=f"{url}/v1/models/{name}", timeout=60) as own:
                turn = 0
                while not stop.is_set():
                    calls = (("candidate", {"model_dir": str(order[turn % len(order)])}),
                             ("promote", None), ("rollback", None))
                    for action, body in calls:
                        response = own.post(f"/{action}", json=body)
                        decisions.append((action, response.status_code))
                        assert response.status_code in (200, 409, 422), response.text
                    turn += 1

        def write_descriptors() -> None:
            path = config.parent / CONFIG_FILE_NAME
            turn = 0
            while not stop.is_set():
                changed = json.loads(json.dumps(descriptor))
                if turn % 3 == 2:  # refused by the schema: logged, the old one stays
                    changed["controls"]["latencyBudgetMs"] = -5
                    writes["invalid"] += 1
                else:  # a ConfigMap naming the other model: reloaded as the REST calls race
                    changed["controls"]["modelDir"] = str(list(models.values())[turn % 2])
                    writes["valid"] += 1
                replace(path, json.dumps(changed, indent=2))
                turn += 1
                stop.wait(0.7)

        a, b = models.values()
        workers = [guarded(ask), guarded(lambda: reloader([a, b])),
                   guarded(lambda: reloader([b, broken, a])), guarded(write_descriptors),
                   guarded(lambda: shadower([a, b]))]
        for worker in workers:
            worker.start()
        load = subprocess.run([hey, "-z", f"{LOAD_S}s", "-c", "2", "-q", "20", "-m", "POST",
                               "-T", "application/json", "-D", str(body), f"{url}/v1/forecast"],
                              capture_output=True, text=True, timeout=LOAD_S + 60)
        stop.set()
        for worker in workers:
            worker.join(60)
        assert not errors, errors
        assert load.returncode == 0, load.stderr
        codes = {int(code): int(count) for code, count in
                 re.findall(r"\[(\d{3})\]\s+(\d+) responses", load.stdout)}
        assert codes.get(200, 0) > 0 and set(codes) == {200}, load.stdout
        assert "Error distribution" not in load.stdout, load.stdout

        from_model = [answer for answer in seen if answer["source"] == "model"]
        versions = {answer["model_version"] for answer in from_model}
        assert versions == set(models), versions  # both served while the checker asked
        for answer in from_model:
            np.testing.assert_allclose(quantiles(answer), reference[answer["model_version"]],
                                       rtol=0, atol=within)
        assert sum(code == 200 for code, _ in reloads) >= 4
        assert any(code == 422 for code, _ in reloads)
        assert writes["valid"] and writes["invalid"]
        assert ("promote", 200) in decisions and ("rollback", 200) in decisions, decisions
        assert "configuration change rejected" in xapp.log
        assert client.get("/ric/v1/health/ready").status_code == 200
        assert client.get("/v1/model").json()["model_version"] in models
        client.close()
    report.row(fault="Model reloads and descriptor writes under load",
               injected=f"{len(reloads)} reloads from two clients at once between two models of "
               f"different weights (a truncated model among them), {sum(writes.values())} "
               f"descriptor writes ({writes['invalid']} invalid) and {len(decisions)} candidate, "
               "promotion and rollback calls racing them",
               load=f"hey, 2 connections x 20 requests/s for {LOAD_S} s, and a client checking "
               "every answer", lost=f"nothing: {codes[200]} answers, all 200; each of "
               f"{len(from_model)} checked answers the numbers of the version it names",
               recovery_s=max(seconds for code, seconds in reloads if code == 200),
               recovered="the longest reload (load, verify, warm up, swap)")

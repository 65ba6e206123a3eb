"""Stateless replicas: per-cell history in a real redis-server shared by xApp replicas, fed by
the mock E2 node; what a replica does while Redis is away."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks.ports import free_port
from kpi_forecast.cli.mock_e2_node import cell_id
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import generate
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.xapp.descriptor.controls import Controls
from tests.redis_server import redis_server
from tests.test_xapp_process import NO_TORCH
from tests.tolerance import answer_tolerance
from tests.waiting import unready_saying
from tests.xapp_helpers import (
    CONTEXT,
    HORIZON,
    descriptor,
    make_model,
    running,
    write_descriptor,
)

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENT = "RRU.PrbUsedDl"
START = "2024-03-04T00:00:00+00:00"


def redis_store(port: int, namespace: str = "kpi-forecast") -> dict:
    return {"backend": "redis", "host": "127.0.0.1", "port": port, "namespace": namespace,
            "timeoutMs": 300}


def series(n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [round(float(v), 3) for v in 30 + 10 * np.sin(np.arange(n) / 4) + rng.normal(0, 1, n)]


def serve(config: Path, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", NO_TORCH, "serve", "--config", str(config), "--host",
         "127.0.0.1", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("a"))


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(30)


def answers(url: str, cells: list[str]) -> list[dict]:
    """Every cell's forecast from one replica, without the latency (which differs)."""
    response = httpx.post(f"{url}/v1/cells/forecast", json={"cell_ids": cells}, timeout=30)
    assert response.status_code == 200, response.text
    return [{k: v for k, v in item.items() if k != "latency_ms"}
            for item in response.json()["items"]]


def counter(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/ric/v1/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def eventually(check, seconds: float = 60.0, what=lambda: ""):
    """``check()``'s first true result within ``seconds``; a process not yet listening (the
    mock E2 node may still be starting when the replicas are ready) counts as not yet."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except httpx.ConnectError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what()}")


@pytest.mark.slow
def test_two_replicas_share_history_fed_to_one_and_a_restart_serves_at_once(
        tmp_path: Path, rmr_library: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    data = tmp_path / "cells.csv"
    generate(n_cells=6, days=9, seed=1, start="2024-03-04", tz="UTC",
             missing=False).to_csv(data, index=False)
    panel = load_panel(data, "prb_util")
    cells = [cell_id(row) for row in range(panel.n_cells)]  # as e2mgr names them
    logs = tmp_path / "xapp.log"
    with redis_server(tmp_path) as redis_port:
        node_port, port_a, port_b = free_port(), free_port(), free_port()
        node = subprocess.Popen(
            [sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", str(data), "--kpi",
             f"prb_util={MEASUREMENT}", "--listen", f"127.0.0.1:{node_port}", "--speed", "0",
             "--rmr-port", str(free_port()), "--cells-per-node", "3",
             "--faults", "duplicate=0.1,late=0.1"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=logs.open("a"))
        e2 = {"enabled": True, "port": free_port(),
              "submgrUrl": f"http://127.0.0.1:{node_port}/ric/v1",
              "e2mgrUrl": f"http://127.0.0.1:{node_port}/v1",
              "kpis": {"kpi": {"measurement": MEASUREMENT}}}
        config_a = write_descriptor(tmp_path / "a", model_dir, e2=e2,
                                    historyStore=redis_store(redis_port))
        config_b = write_descriptor(tmp_path / "b", model_dir,
                                    historyStore=redis_store(redis_port))
        url_a, url_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
        replica_a = serve(config_a, port_a, logs)
        replica_b = serve(config_b, port_b, logs)
        try:
            assert wait_ready(url_a, replica_a) and wait_ready(url_b, replica_b), \
                logs.read_text()[-3000:]

            def replayed(replays: int, before: int = 0) -> dict | None:
                """The node's counts once it has replayed ``replays`` times and replica A has
                taken every frame of the replays since it started (``before`` were earlier)."""
                sent = httpx.get(f"http://127.0.0.1:{node_port}/stats").json()
                taken = sent.get("indications", 0) + sent.get("duplicates", 0) - before
                done = sent.get("replays_done") == replays
                return sent if done and counter(url_a, "kpi_forecast_e2_indications_total") \
                    == taken else None

            def state() -> str:
                rejected = [line for line in httpx.get(f"{url_a}/ric/v1/metrics").text
                            .splitlines() if line.startswith("kpi_forecast_e2_indications")]
                stats = httpx.get(f"http://127.0.0.1:{node_port}/stats").json()
                return f"node {stats}, replica A {rejected}, log {logs.read_text()[-2000:]}"

            sent = eventually(lambda: replayed(2), what=state)
            assert sent["duplicates"] > 0 and sent["late"] > 0
            assert sent["indications"] == len(cells) * len(panel.index)  # one per step

            # Both replicas hold the same history and give the same forecasts, although only
            # replica A ingested anything, once each has taken up the quantile recalibration
            # the first of them made (replicas look for it every second).
            def recalibrated() -> dict | None:
                a, b = (httpx.get(f"{url}/v1/model").json()["recalibration"]
                        for url in (url_a, url_b))
                return a if a["refreshed_at"] and a == b else None

            eventually(recalibrated)
            held = httpx.get(f"{url_b}/v1/cells").json()
            assert held == httpx.get(f"{url_a}/v1/cells").json()
            assert held["count"] == len(cells)
            assert {c["steps_held"] for c in held["cells"]} == {len(panel.index)}
            before = answers(url_b, cells)
            assert before == answers(url_a, cells)
            assert {item["source"] for item in before} == {"model"}
            assert counter(url_b, "kpi_forecast_e2_indications_total") == 0
            # ...and those forecasts are the model's on the file's own history, given as the
            # store holds it (its whole length, empty before the first report): the simple
            # forecasts the median is blended with read all of it.
            held_steps = Controls.model_fields["history_length"].default
            direct = httpx.post(f"{url_b}/v1/forecast", json={
                "cell_id": cells[0], "freq": "1h",
                "start": (panel.index[-1] - (held_steps - 1) * panel.step).isoformat(),
                "values": [None] * (held_steps - len(panel.index))
                + [None if np.isnan(v) else float(v) for v in panel.values[0]]}).json()
            within = answer_tolerance(ModelConfig(CONTEXT, HORIZON),
                                      np.nanmax(panel.values[0, -CONTEXT:]))
            for a, b in zip(before[0]["forecasts"], direct["forecasts"], strict=True):
                assert a["p50"] == pytest.approx(b["p50"], abs=within)

            # A restarted replica serves every cell at once: nothing to re-ingest.
            stop(replica_b)
            replica_b = serve(config_b, port_b, logs)
            assert wait_ready(url_b, replica_b)
            assert answers(url_b, cells) == before
            assert counter(url_b, "kpi_forecast_e2_indications_total") == 0

            # Restarting the ingesting replica makes the node replay everything again:
            # the same reports a second time change nothing.
            stop(replica_a)
            replica_a = serve(config_a, port_a, logs)
            assert wait_ready(url_a, replica_a)
            first = sent["indications"] + sent["duplicates"]
            again = eventually(lambda: replayed(4, before=first), what=state)
            assert again["indications"] == 2 * sent["indications"]
            assert answers(url_b, cells) == before
            assert httpx.get(f"{url_a}/v1/cells").json() == held
        finally:
            for process in (replica_a, replica_b, node):
                if process.poll() is None:
                    stop(process)


def test_while_redis_is_away_cell_routes_answer_503_and_the_rest_keeps_serving(
        tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    port = free_port()
    desc = descriptor(tmp_path, model_dir, historyStore=redis_store(port, "outage"))
    history = {"start": START, "freq": "1h", "values": series(CONTEXT, 0)}
    direct = {"cell_id": "c1", **history}

    async def go() -> None:
        async with running(desc, wait_ready=False) as client:
            # Redis is not up yet: the xApp waits for it, unready, as xApps wait for the SDL,
            # and its readiness says so once its first try has failed.
            await unready_saying(client, "waiting for the history store", 10)
            with redis_server(tmp_path, port):
                for _ in range(200):
                    if (await client.get("/ric/v1/health/ready")).status_code == 200:
                        break
                    await asyncio.sleep(0.05)
                assert (await client.get("/ric/v1/health/ready")).status_code == 200
                put = await client.post("/v1/cells/c1/history", json=history)
                assert put.json()["kept"] == CONTEXT
                assert (await client.get("/v1/cells/c1/forecast")).status_code == 200
            # Redis went away.
            for route in ("/v1/cells/c1/forecast", "/v1/cells"):
                away = await client.get(route)
                assert away.status_code == 503, away.text
                assert away.json()["reason"] == "history_store"
                assert "history store" in away.json()["error"]
            assert (await client.post("/v1/cells/c1/history", json=history)).status_code == 503
            assert (await client.post("/v1/forecast", json=direct)).status_code == 200
            metrics = (await client.get("/ric/v1/metrics")).text
            assert 'kpi_forecast_cells_held{model="model"} NaN' in metrics
            assert 'kpi_forecast_shed_requests_total{reason="history_store"} 3.0' in metrics
            with redis_server(tmp_path, port):  # back (empty: it kept nothing on disk)
                assert (await client.post("/v1/cells/c1/history", json=history)).json()[
                    "kept"] == CONTEXT
                assert (await client.get("/v1/cells/c1/forecast")).status_code == 200

    asyncio.run(go())


def test_held_cells_beyond_the_limit_get_a_422_and_the_store_cannot_change_live(
        tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")

    async def go() -> None:
        with redis_server(tmp_path) as port:
            store = {**redis_store(port, "limit"), "maxRestCells": 1}
            desc = descriptor(tmp_path, model_dir, historyStore=store)
            async with running(desc) as client:
                history = {"start": START, "freq": "1h", "values": series(CONTEXT, 0)}
                assert (await client.post("/v1/cells/c1/history", json=history)).status_code \
                    == 200
                refused = await client.post("/v1/cells/c2/history", json=history)
                assert refused.status_code == 422
                assert "already holding 1 cells written over REST" in refused.json()["error"]
                many = await client.post("/v1/cells/history", json={"items": [
                    {"cell_id": cell, **history} for cell in ("c1", "c3")]})
                assert many.status_code == 422
                assert many.json()["error"].startswith("1 of 2 cells refused, the others were")
                service = client.app.state.components
                other = descriptor(tmp_path / "other", model_dir,
                                   historyStore={**store, "namespace": "elsewhere"})
                with pytest.raises(ValueError, match="historyStore.namespace changes take effect"):
                    service.apply_descriptor(other)
                assert service.state.now.controls.history_store.namespace == "limit"

    asyncio.run(go())

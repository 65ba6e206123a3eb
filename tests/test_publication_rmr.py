"""Forecasts over RMR: a consumer built on O-RAN SC's Python xApp framework (the example in
examples/forecast_consumer, in the examples' environment) takes the KPI_FORECAST messages the
route table sends it, only for the cells that meet a model's trigger, and acknowledges each;
a consumer that never answers costs nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Coroutine
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.ports import free_port
from kpi_forecast.xapp.descriptor.publication import Trigger
from kpi_forecast.xapp.publication.document import Forecasts
from kpi_forecast.xapp.publication.rmr import met
from tests.examples_env import examples_python
from tests.readme import blocks
from tests.test_publication import HOUR, START, STEPS, metric
from tests.test_shared_history import series
from tests.xapp_helpers import descriptor, make_model, running

ROOT = Path(__file__).resolve().parents[1]


def route_table(path: Path, msg_type: int, port: int) -> Path:
    path.write_text(f"newrt|start\nmse|{msg_type}|-1|127.0.0.1:{port}\nnewrt|end\n")
    return path


def run_beside(consumer: subprocess.Popen, scenario: Coroutine[None, None, str]
               ) -> tuple[str, list[dict], str]:
    """Run ``scenario`` (the xApp's, answering its metrics) with the consumer up; then the
    metrics, the forecasts the consumer printed and its stderr."""
    try:
        text = asyncio.run(scenario)
    finally:
        # Killed: ricxappframe's own stop deregisters from the appmgr and waits 10 s, which
        # is the framework's to spend, not the test's.
        consumer.kill()
        out, err = consumer.communicate(timeout=30)
    # The framework's own log lines (mdclogpy's JSON) share the consumer's stdout.
    return text, [doc for doc in map(json.loads, out.splitlines()) if "forecasts" in doc], err


def test_met_reads_the_quantile_over_the_first_steps() -> None:
    quantiles = np.zeros((3, 4, 2), np.float32)
    quantiles[:, :, 1] = [[1, 1, 9, 9], [1, 1, 1, 1], [9, 1, 1, 1]]  # p90 of three cells
    forecasts = Forecasts("m", "kpi", "", "v", "model", None, pd.Timestamp(0, tz="UTC"), "1h",
                          ["p10", "p90"], pd.Timestamp(0, tz="UTC").to_pydatetime(),
                          ["a", "b", "c"], quantiles)
    quiet = Trigger(name="quiet", quantile=0.9, below=5, steps=2)
    assert met(forecasts, quiet).tolist() == [True, True, False]
    assert met(forecasts, quiet.model_copy(update={"steps": 4})).tolist() == [False, True,
                                                                                False]
    assert met(forecasts, Trigger(name="peak", quantile=0.9, above=5)).tolist() == [
        False, False, True]
    assert not met(forecasts, Trigger(name="p50", quantile=0.5, above=0)).any()


def test_a_ricxappframe_consumer_takes_the_triggered_forecasts_and_acknowledges_them(
        tmp_path: Path, rmr_library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/consumers.md's block, as printed, with the examples' python first on the PATH.
    [block] = [b for b in blocks(ROOT / "docs" / "consumers.md")
               if b.run_by == "tests/test_publication_rmr.py"]
    consumer_port = int(block.text.split("--rmr-port")[1].split()[0])
    xapp_port = free_port()
    consumer = subprocess.Popen(
        ["bash", "-c", f"exec {block.text.strip()}"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={
            **os.environ, "PATH": f"{examples_python().parent}:{os.environ['PATH']}",
            "RMR_SEED_RT": str(route_table(tmp_path / "consumer.rt", 30201, xapp_port))})
    monkeypatch.setenv("RMR_SEED_RT", str(route_table(tmp_path / "xapp.rt", 30200,
                                                      consumer_port)))
    cells = ["cell-1", "cell-2", "cell-3"]
    desc = descriptor(tmp_path, make_model(tmp_path / "traffic_mb"), e2={"port": xapp_port},
                      publication={"rmr": {"enabled": True, "triggers": {"traffic_mb": [
                          {"name": "quiet", "quantile": 0.9, "below": 1e9, "steps": 6},
                          {"name": "peak", "quantile": 0.5, "above": 1e9}]}}})

    async def scenario() -> str:
        async with running(desc) as client:
            # All cells in one write, twice: two rounds of every cell.
            for start, cell_values in ((START, [series(STEPS, seed) for seed in range(3)]),
                                       (START + STEPS * HOUR, [[30.0]] * 3)):
                response = await client.post("/v1/cells/history", json={"items": [
                    {"cell_id": cell, "start": start.isoformat(), "freq": "1h",
                     "values": values} for cell, values in zip(cells, cell_values, strict=True)]})
                assert response.status_code == 200, response.text
                await asyncio.sleep(1.5)  # the round of this step, before the next step
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                text = (await client.get("/ric/v1/metrics")).text
                if metric(text, "kpi_forecast_publication_acknowledgements_total",
                          model="traffic_mb") >= 6:
                    return text
                await asyncio.sleep(0.1)
            return text

    text, received, err = run_beside(consumer, scenario())
    assert metric(text, "kpi_forecast_publication_failures_total", model="traffic_mb",
                  destination="rmr") == 0, err
    # Two rounds (the first step's end, the next's), each cell meeting "quiet" only.
    assert sorted((doc["cell_id"], doc["trigger"]) for doc in received) == sorted(
        (cell, "quiet") for cell in cells for _ in range(2)), err
    assert metric(text, "kpi_forecast_publication_forecasts_total", model="traffic_mb",
                  destination="rmr") == 6
    assert metric(text, "kpi_forecast_publication_acknowledgements_total",
                  model="traffic_mb") == 6


def test_with_no_consumer_up_the_forecasts_count_unpublished_and_serving_goes_on(
        tmp_path: Path, rmr_library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMR_SEED_RT", str(route_table(tmp_path / "xapp.rt", 30200,
                                                      free_port())))
    desc = descriptor(tmp_path, make_model(tmp_path / "traffic_mb"), e2={"port": free_port()},
                      publication={"rmr": {"enabled": True}})

    async def scenario() -> tuple[str, int]:
        async with running(desc) as client:
            for start, values in ((START, series(STEPS, 0)), (START + STEPS * HOUR, [30.0])):
                response = await client.post("/v1/cells/c1/history", json={
                    "start": start.isoformat(), "freq": "1h", "values": values})
                assert response.status_code == 200, response.text
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                text = (await client.get("/ric/v1/metrics")).text
                if metric(text, "kpi_forecast_publication_failures_total", model="traffic_mb",
                          destination="rmr") >= 1:
                    break
                await asyncio.sleep(0.1)
            return text, (await client.get("/v1/cells/c1/forecast")).status_code

    text, status = asyncio.run(scenario())
    assert metric(text, "kpi_forecast_publication_failures_total", model="traffic_mb",
                  destination="rmr") >= 1
    assert metric(text, "kpi_forecast_publication_forecasts_total", model="traffic_mb",
                  destination="rmr") == 0
    assert status == 200


def test_a_consumer_that_never_acknowledges_delays_nothing(
        tmp_path: Path, rmr_library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer_port, xapp_port = free_port(), free_port()
    consumer = subprocess.Popen(
        [str(examples_python()), "examples/forecast_consumer/consumer.py", "--rmr-port",
         str(consumer_port), "--no-ack"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "RMR_SEED_RT": str(route_table(
            tmp_path / "consumer.rt", 30201, xapp_port))})
    monkeypatch.setenv("RMR_SEED_RT", str(route_table(tmp_path / "xapp.rt", 30200,
                                                      consumer_port)))
    desc = descriptor(tmp_path, make_model(tmp_path / "traffic_mb"), e2={"port": xapp_port},
                      publication={"rmr": {"enabled": True}})

    async def scenario() -> str:
        async with running(desc) as client:
            for step, values in enumerate(([30.0] * STEPS, [31.0], [32.0])):
                start = START if step == 0 else START + (STEPS + step - 1) * HOUR
                response = await client.post("/v1/cells/c1/history", json={
                    "start": start.isoformat(), "freq": "1h", "values": values})
                assert response.status_code == 200, response.text
                await asyncio.sleep(1.5)  # each period's round, unacknowledged
            return (await client.get("/ric/v1/metrics")).text

    text, received, _ = run_beside(consumer, scenario())
    assert [doc["forecasts"][0]["timestamp"] for doc in received] == [
        (START + (STEPS + k - 1) * HOUR).isoformat() for k in range(3)]
    assert metric(text, "kpi_forecast_publication_forecasts_total", model="traffic_mb",
                  destination="rmr") == 3
    assert metric(text, "kpi_forecast_publication_acknowledgements_total",
                  model="traffic_mb") == 0

"""Publication: each held cell's next forecast, after each reporting period, in the RIC's SDL
(a real redis-server), read back with O-RAN SC's SDL library (ricsdl, in the examples'
environment); an SDL that is away costs the forecasts' publication, not serving."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import redis
from prometheus_client.parser import text_string_to_metric_families

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.publication.document import Forecasts, PublishedForecast
from kpi_forecast.xapp.publication.publisher import Delivery, Publisher
from kpi_forecast.xapp.ric.a1.policies import Policies
from kpi_forecast.xapp.ric.a1.policy_type import ForecastPolicy
from kpi_forecast.xapp.store.cell_history import MemoryCellHistory
from kpi_forecast.xapp.store.shared_state import SharedState
from tests.examples_env import examples_python
from tests.readme import blocks
from tests.redis_server import redis_server
from tests.test_shared_history import redis_store, series
from tests.xapp_helpers import HORIZON, descriptor, make_model, running, serving_state

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "kpi-forecast-forecasts"  # the default, as docs/consumers.md reads it
START = pd.Timestamp("2024-03-04T00:00:00Z")
STEPS = 24 * 8
HOUR = pd.Timedelta("1h")
RUN_BY = "tests/test_publication.py"


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in an exposition, 0 where absent."""
    return next((sample.value for family in text_string_to_metric_families(text)
                 for sample in family.samples if sample.name == name
                 and sample.labels == labels), 0.0)


def sdl_env(port: int) -> dict[str, str]:
    """The variables a RIC gives every xApp's pod: where the SDL's Redis is."""
    return {"DBAAS_SERVICE_HOST": "127.0.0.1", "DBAAS_SERVICE_PORT": str(port)}


def read_sdl(port: int, model: str, cells: list[str]) -> list[dict]:
    """The forecasts ricsdl finds, through the example reader."""
    done = subprocess.run(
        [str(examples_python()), "examples/forecast_consumer/read_sdl.py", "--namespace",
         NAMESPACE, "--model", model, *cells], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env={**os.environ, **sdl_env(port)})
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def doc_block_output(port: int) -> list[dict]:
    """What docs/consumers.md's block prints, run as printed with the examples' python."""
    [block] = [b for b in blocks(ROOT / "docs" / "consumers.md") if b.run_by == RUN_BY]
    done = subprocess.run(["bash", "-c", block.text], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **sdl_env(port), "PATH": (
                              f"{examples_python().parent}:{os.environ['PATH']}")})
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


async def published(client, model: str, destination: str, at_least: int) -> str:
    """The metrics once ``at_least`` forecasts of ``model`` went to ``destination``."""
    for _ in range(300):
        text = (await client.get("/ric/v1/metrics")).text
        if metric(text, "kpi_forecast_publication_forecasts_total", model=model,
                  destination=destination) >= at_least:
            return text
        if metric(text, "kpi_forecast_publication_failures_total", model=model,
                  destination=destination) >= at_least:
            return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"no publication of {model}: {text}")


def test_each_cell_forecast_is_in_the_sdl_after_its_period_as_ricsdl_reads_it(
        tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "traffic_mb")
    cells = ["cell-0017", "cell-0018", "cell-0019"]
    with redis_server(tmp_path) as port:
        desc = descriptor(tmp_path, model_dir, historyStore=redis_store(port),
                          publication={"sdl": {"enabled": True, "namespace": NAMESPACE},
                                       "ttlPeriods": 3})

        async def scenario() -> tuple[str, list[dict]]:
            async with running(desc) as client:
                # Three cells' history to the same step: the period before it is over.
                for seed, cell in enumerate(cells):
                    response = await client.post(f"/v1/cells/{cell}/history", json={
                        "start": START.isoformat(), "freq": "1h",
                        "values": series(STEPS, seed)})
                    assert response.status_code == 200, response.text
                first_round = await published(client, "traffic_mb", "sdl", 1)
                before = read_sdl(port, "traffic_mb", cells)
                # One cell's next step: every cell reported in the step before gets a forecast
                # from it.
                response = await client.post(f"/v1/cells/{cells[0]}/history", json={
                    "start": (START + STEPS * HOUR).isoformat(), "freq": "1h",
                    "values": [30.0]})
                assert response.status_code == 200, response.text
                counted = metric(first_round, "kpi_forecast_publication_forecasts_total",
                                 model="traffic_mb", destination="sdl")
                return await published(client, "traffic_mb", "sdl", counted + 3), before

        text, before = asyncio.run(scenario())
        documents = read_sdl(port, "traffic_mb", cells)
        every = read_sdl(port, "traffic_mb", [])
        shown = doc_block_output(port)
        ttl = redis.Redis(port=port).pttl(f"{{{NAMESPACE}}},traffic_mb,cell-0018")

    # The first round's forecasts start at the newest step reported then (still filling).
    assert [doc["cell_id"] for doc in shown] == cells[:2]
    assert before and {doc["forecasts"][0]["timestamp"] for doc in before} == {
        (START + (STEPS - 1) * HOUR).isoformat()}
    assert metric(text, "kpi_forecast_publication_failures_total", model="traffic_mb",
                  destination="sdl") == 0
    assert sorted(doc["cell_id"] for doc in documents) == cells
    assert sorted(doc["cell_id"] for doc in every) == cells
    first = START + STEPS * HOUR  # the newest step reported: the forecasts' first
    for doc in documents:
        PublishedForecast.model_validate(doc)
        assert doc["model"] == "traffic_mb" and doc["model_version"] == "test"
        assert doc["source"] == "model" and doc["freq"] == "1h"
        assert len(doc["forecasts"]) == HORIZON
        stamps = [pd.Timestamp(point["timestamp"]) for point in doc["forecasts"]]
        assert stamps == list(pd.date_range(first, periods=HORIZON, freq="1h"))
        for point in doc["forecasts"]:
            assert point["p10"] <= point["p50"] <= point["p90"]
    # Three periods of an hourly model, less the seconds the test took since.
    assert 3 * 3_600_000 - 120_000 < ttl <= 3 * 3_600_000


def test_an_sdl_away_counts_the_forecasts_unpublished_and_serving_goes_on(
        tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "traffic")
    with redis_server(tmp_path) as port:
        pass  # a port where nothing listens now
    desc = descriptor(tmp_path, model_dir, publication={
        "sdl": {"enabled": True, "namespace": NAMESPACE}},
        historyStore={"host": "127.0.0.1", "port": port, "timeoutMs": 200})

    async def scenario() -> tuple[str, int]:
        async with running(desc) as client:
            for start, values in ((START, series(STEPS, 0)),
                                  (START + STEPS * HOUR, [30.0])):
                response = await client.post("/v1/cells/c1/history", json={
                    "start": start.isoformat(), "freq": "1h", "values": values})
                assert response.status_code == 200, response.text
            text = await published(client, "traffic", "sdl", 1)
            forecast = await client.get("/v1/cells/c1/forecast")
            return text, forecast.status_code

    text, status = asyncio.run(scenario())
    assert metric(text, "kpi_forecast_publication_failures_total", model="traffic",
                  destination="sdl") == 1
    assert metric(text, "kpi_forecast_publication_forecasts_total", model="traffic",
                  destination="sdl") == 0
    assert status == 200


class Captured:
    """A destination that keeps what it is handed."""

    name = "captured"

    def __init__(self) -> None:
        self.rounds: list = []

    async def publish(self, forecasts, ttl_s: float) -> Delivery:
        self.rounds.append(forecasts)
        return Delivery(len(forecasts.cells))

    async def close(self) -> None:
        pass


def test_a_round_leaves_out_cells_not_reported_in_the_last_step_and_those_a1_excludes(
        tmp_path: Path) -> None:
    model = OnnxForecaster(make_model(tmp_path / "traffic"))
    history = MemoryCellHistory("1h", 400)
    state = serving_state(history, model=model)
    policies = Policies()
    policies.replace({"quiet": ForecastPolicy(cells=["excluded"], excluded=True)},
                     {state.default: model})
    captured = Captured()
    publisher = Publisher(state, policies, Metrics([1.0], 8), [captured])
    last = START + (STEPS - 1) * HOUR

    async def scenario() -> None:
        state.swap(shared=SharedState())
        for seed, cell in enumerate(["fresh", "excluded", "stale"]):
            end = last - 2 * HOUR if cell == "stale" else last
            steps = int((end - START) / HOUR) + 1
            await history.put_series(cell, START, series(steps, seed))
        await publisher.tick()
        await publisher.tick()  # the same origin again: nothing more
        state.swap(state.default, guarded="live skill below the guard's")
        await history.put("fresh", last + HOUR, 30.0)
        await publisher.tick()

    asyncio.run(scenario())
    first, guarded = captured.rounds
    assert list(first.cells) == ["fresh"] and first.source == "model"
    assert first.first_step == last and first.quantiles.shape == (1, HORIZON, 3)
    assert list(guarded.cells) == ["fresh"] and guarded.first_step == last + HOUR
    assert (guarded.source, guarded.reason) == ("fallback", "live_skill")
    assert guarded.quantiles.shape == (1, HORIZON, 3)


def test_a_document_is_the_json_of_its_fields() -> None:
    quantiles = np.random.default_rng(0).uniform(0, 1000, (3, 4, 2)).astype(np.float32)
    made = pd.Timestamp("2026-12-07T10:00:02.5Z").to_pydatetime()
    forecasts = Forecasts("prb", "prb_util", "%", "v1", "fallback", "live_skill", START, "1h",
                          ["p10", "p90"], made, ['a"b', "c%s", "ü"], quantiles)
    for cell, row, document in zip(forecasts.cells, quantiles, forecasts.documents,
                                   strict=True):
        assert json.loads(document) == {
            "cell_id": cell, "model": "prb", "kpi": "prb_util", "unit": "%",
            "model_version": "v1", "source": "fallback", "reason": "live_skill",
            "made_at": made.isoformat(), "freq": "1h", "forecasts": [
                {"timestamp": (START + k * HOUR).isoformat(),
                 "p10": round(float(row[k, 0]), 4), "p90": round(float(row[k, 1]), 4)}
                for k in range(4)]}

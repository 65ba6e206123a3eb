"""The xApp's REST contract: routes, forecasts against the runtime, bad input, fallback,
shedding, reload, metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.http import arrow_ipc
from kpi_forecast.xapp.serving.admission import WINDOW_ANSWERS
from tests.tolerance import ANSWER_ROUNDING, answer_tolerance, network_tolerance
from tests.waiting import unready_saying
from tests.xapp_helpers import CONTEXT, HORIZON, descriptor, make_model, running

START = "2013-12-01T00:00:00+01:00"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("xapp") / "model")


CONFIG = ModelConfig(CONTEXT, HORIZON)  # the test model's


def series(n: int = CONTEXT, seed: int = 0) -> list[float | None]:
    rng = np.random.default_rng(seed)
    hours = np.arange(n)
    values = 20 + 10 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 1, n)
    out: list[float | None] = [round(float(v), 3) for v in np.maximum(values, 0)]
    out[5] = None
    return out


def body(**changes: object) -> dict:
    return {"cell_id": "c1", "start": START, "freq": "1h", "values": series(), **changes}


def run(coroutine):
    return asyncio.run(coroutine)


def test_health_config_and_openapi(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            assert (await client.get("/ric/v1/health/alive")).json() == {"status": "alive"}
            ready = (await client.get("/ric/v1/health/ready")).json()
            assert ready == {"status": "ready", "model_version": "test",
                             "models": {"model": {"state": "READY"}}}
            config = (await client.get("/ric/v1/config")).json()
            assert config[0]["metadata"] == {"xappName": "kpi-forecast", "configType": "json"}
            assert config[0]["config"]["controls"]["modelDir"] == str(model_dir)
            ports = {p["name"]: p["port"] for p in config[0]["config"]["messaging"]["ports"]}
            assert ports == {"http": 8080, "rmr-data": 4560, "rmr-route": 4561}
            paths = (await client.get("/openapi.json")).json()["paths"]
            for path in ("/v1/forecast", "/v1/forecast/batch", "/v1/cells", "/v1/cells/forecast",
                         "/v1/cells/{cell_id}/forecast", "/v1/model/reload", "/ric/v1/metrics"):
                assert path in paths
            assert (await client.get("/docs")).status_code == 200

    run(go())


def test_forecast_is_the_models_own(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post("/v1/forecast", json=body(horizon=12))
            assert response.status_code == 200, response.text
            answer = response.json()
            assert answer["cell_id"] == "c1" and answer["source"] == "model"
            assert answer["model_version"] == "test" and answer["reason"] is None
            assert 0 < answer["latency_ms"] < 10_000
            points = answer["forecasts"]
            assert len(points) == 12 and set(points[0]) == {"timestamp", "p10", "p50", "p90"}
            last = pd.Timestamp(START) + (CONTEXT - 1) * pd.Timedelta("1h")
            assert points[0]["timestamp"] == (last + pd.Timedelta("1h")).isoformat()
            assert points[0]["timestamp"].endswith("+01:00")
            values = np.array([np.nan if v is None else v for v in series()], np.float32)
            expected = OnnxForecaster(model_dir).forecast(values[None], pd.DatetimeIndex([last]))
            got = np.array([[p["p10"], p["p50"], p["p90"]] for p in points])
            np.testing.assert_allclose(got, expected[0, :12], rtol=0,
                                       atol=answer_tolerance(CONFIG, np.nanmax(values)))
            assert all(p["p10"] <= p["p50"] <= p["p90"] for p in points)

    run(go())


def test_default_horizon_and_quantile_selection_come_from_controls(
    model_dir: Path, tmp_path: Path
) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, defaultHorizon=6, quantiles=[0.5, 0.9])
        async with running(desc) as client:
            points = (await client.post("/v1/forecast", json=body())).json()["forecasts"]
            assert len(points) == 6 and set(points[0]) == {"timestamp", "p50", "p90"}

    run(go())


@pytest.mark.parametrize(
    ("change", "status", "names"),
    [
        ({"horizon": HORIZON + 1}, 422, "horizon"),
        ({"horizon": 0}, 422, "horizon"),
        ({"values": [1.0, -2.0]}, 422, "values[1]"),
        ({"values": [None, None]}, 422, "no observed value"),
        ({"values": []}, 422, "values"),
        ({"start": "2013-12-01T00:00:00"}, 422, "start"),
        ({"freq": "15min"}, 422, "freq 15min does not match"),
        ({"freq": "fortnightly"}, 422, "fortnightly"),
        ({"cell_id": ""}, 422, "cell_id"),
        ({"unknown": 1}, 422, "unknown"),
    ],
)
def test_bad_requests_get_a_json_4xx_naming_the_problem(
    model_dir: Path, tmp_path: Path, change: dict, status: int, names: str
) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post("/v1/forecast", json=body(**change))
            assert response.status_code == status, response.text
            assert names in response.json()["error"]

    run(go())


def test_non_finite_numbers_malformed_json_and_oversized_bodies(
    model_dir: Path, tmp_path: Path
) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir, maxRequestBytes=4096)) as client:
            headers = {"content-type": "application/json"}
            for token in ("NaN", "Infinity", "-Infinity"):
                text = json.dumps(body(values=[1.0, 2.0])).replace("2.0", token)
                response = await client.post("/v1/forecast", content=text, headers=headers)
                assert response.status_code == 422 and "values[1]" in response.json()["error"]
            response = await client.post("/v1/forecast", content="{not json", headers=headers)
            assert response.status_code == 422 and "error" in response.json()
            big = json.dumps(body(values=[1.0] * 2000))
            response = await client.post("/v1/forecast", content=big, headers=headers)
            assert response.status_code == 413 and "maxRequestBytes" in response.json()["error"]

            async def chunks():  # no Content-Length: the limit holds on the stream too
                for _ in range(10):
                    yield b" " * 1000

            response = await client.post("/v1/forecast", content=chunks(), headers=headers)
            assert response.status_code == 413
            assert (await client.post("/v1/forecast", json=body())).status_code == 200

    run(go())


def test_json_batch_matches_single_calls(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            items = [body(cell_id=f"c{i}", values=series(CONTEXT - 10 * i, seed=i))
                     for i in range(3)]
            response = await client.post("/v1/forecast/batch", json={"items": items})
            assert response.status_code == 200, response.text
            batch = response.json()["items"]
            assert [b["cell_id"] for b in batch] == ["c0", "c1", "c2"]
            for item, answer in zip(items, batch, strict=True):
                single = (await client.post("/v1/forecast", json=item)).json()
                assert single["forecasts"][0]["timestamp"] == answer["forecasts"][0]["timestamp"]
                for a, b in zip(single["forecasts"], answer["forecasts"], strict=True):
                    assert a["p50"] == pytest.approx(b["p50"], abs=answer_tolerance(
                        CONFIG, max(v for v in item["values"] if v is not None)))
            mixed = [items[0], {**items[1], "horizon": 3}]
            response = await client.post("/v1/forecast/batch", json={"items": mixed})
            assert [len(a["forecasts"]) for a in response.json()["items"]] == [HORIZON, 3]

    run(go())


def arrow_body(n_cells: int, lengths: list[int] | None = None) -> bytes:
    lengths = lengths or [CONTEXT] * n_cells
    rng = np.random.default_rng(1)
    return arrow_ipc.write_request(
        [f"cell-{i:04d}" for i in range(n_cells)],
        [pd.Timestamp("2024-03-01", tz="UTC")] * n_cells,
        [list(rng.gamma(2.0, 10.0, n).astype(np.float32)) for n in lengths])


def test_arrow_batch_of_1000_cells(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            payload = arrow_body(1000)
            response = await client.post(
                "/v1/forecast/batch?freq=1h", content=payload,
                headers={"content-type": "application/vnd.apache.arrow.stream"},
            )
            assert response.status_code == 200, response.text
            assert response.headers["x-source"] == "model"
            assert response.headers["x-model-version"] == "test"
            table = pa.ipc.open_stream(response.content).read_all().to_pandas()
            assert len(table) == 1000 * HORIZON
            assert list(table.columns) == ["cell_id", "timestamp", "p10", "p50", "p90"]
            request = pa.ipc.open_stream(payload).read_all()
            values = np.stack([np.asarray(v, np.float32)
                               for v in request.column("values").to_pylist()])
            last = pd.Timestamp("2024-03-01", tz="UTC") + (CONTEXT - 1) * pd.Timedelta("1h")
            expected = OnnxForecaster(model_dir).forecast(
                values, pd.DatetimeIndex([last] * 1000))
            np.testing.assert_allclose(table["p50"].to_numpy().reshape(1000, HORIZON),
                                       expected[:, :, 1], rtol=0,
                                       atol=network_tolerance(CONFIG, np.nanmax(values)))
            assert table["timestamp"].iloc[0] == last + pd.Timedelta("1h")

    run(go())


def test_arrow_series_of_different_lengths_end_where_they_end(model_dir: Path,
                                                              tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post(
                "/v1/forecast/batch?freq=1h&horizon=2", content=arrow_body(2, [CONTEXT, 30]),
                headers={"content-type": "application/vnd.apache.arrow.stream"},
            )
            table = pa.ipc.open_stream(response.content).read_all().to_pandas()
            first = table.groupby("cell_id", observed=True)["timestamp"].min()
            start = pd.Timestamp("2024-03-01", tz="UTC")
            assert first["cell-0000"] == start + CONTEXT * pd.Timedelta("1h")
            assert first["cell-0001"] == start + 30 * pd.Timedelta("1h")

    run(go())


@pytest.mark.parametrize(
    ("payload", "query", "message"),
    [
        (b"not arrow at all", "?freq=1h", "Arrow"),
        (None, "?freq=15min", "freq"),
        ("missing", "?freq=1h", "lacks column"),
    ],
)
def test_bad_arrow_bodies(model_dir: Path, tmp_path: Path, payload, query: str,
                          message: str) -> None:
    if payload is None:
        payload = arrow_body(2)
    elif payload == "missing":
        payload = arrow_ipc.stream(pa.table({"cell_id": ["a"], "values": [[1.0, 2.0]]}))

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post(
                f"/v1/forecast/batch{query}", content=payload,
                headers={"content-type": "application/vnd.apache.arrow.stream"},
            )
            assert response.status_code == 422 and message in response.json()["error"]

    run(go())


def test_cells_held_by_the_xapp(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            assert (await client.get("/v1/cells/c9/forecast")).status_code == 404
            short = {"start": START, "freq": "1h", "values": [3.0] * 5}
            assert (await client.post("/v1/cells/c9/history", json=short)).json()["kept"] == 5
            response = await client.get("/v1/cells/c9/forecast")
            assert response.status_code == 409 and "5 sample(s)" in response.json()["error"]
            full = {"start": START, "freq": "1h", "values": series()}
            await client.post("/v1/cells/c9/history", json=full)
            response = await client.get("/v1/cells/c9/forecast?horizon=3")
            assert response.status_code == 200, response.text
            assert len(response.json()["forecasts"]) == 3
            cells = (await client.get("/v1/cells")).json()
            assert cells["count"] == 1 and cells["freq"] == "1h"
            assert cells["cells"][0]["steps_held"] == CONTEXT - 1  # one null in series()
            last = pd.Timestamp(START) + (CONTEXT - 1) * pd.Timedelta("1h")
            assert cells["cells"][0]["last"] == last.tz_convert("UTC").isoformat()

            # Many held cells in one call: the same answers as one by one.
            seeded = await client.post("/v1/cells/history", json={"items": [
                {"cell_id": "c8", **full, "values": series(seed=1)}]})
            assert seeded.json() == {"items": [{"cell_id": "c8", "kept": CONTEXT - 1}]}
            batch = await client.post("/v1/cells/forecast",
                                      json={"cell_ids": ["c8", "c9"], "horizon": 3})
            assert batch.status_code == 200, batch.text
            for item in batch.json()["items"]:
                one = (await client.get(f"/v1/cells/{item['cell_id']}/forecast?horizon=3")).json()
                assert item["forecasts"] == one["forecasts"] and item["source"] == "model"
            missing = await client.post("/v1/cells/forecast", json={"cell_ids": ["c8", "c7"]})
            assert missing.status_code == 404 and "'c7'" in missing.json()["error"]
            empty = await client.post("/v1/cells/forecast", json={"cell_ids": []})
            assert empty.status_code == 422 and empty.json()["error"].startswith("cell_ids")

    run(go())


def test_metrics_exposition(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            await client.post("/v1/forecast", json=body())
            await client.post("/v1/forecast", json=body(horizon=999))
            response = await client.get("/ric/v1/metrics")
            assert response.headers["content-type"].startswith("text/plain")
            text = response.text
            assert ('kpi_forecast_requests_total{method="POST",route="/v1/forecast",'
                    'status="200"} 1.0') in text
            assert 'route="/v1/forecast",status="422"} 1.0' in text
            assert ('kpi_forecast_request_duration_seconds_count{model="model",'
                    'route="/v1/forecast"} 1.0') in text
            assert "kpi_forecast_inference_duration_seconds_bucket" in text
            assert 'kpi_forecast_model_info{attention="onnx-attention"' in text
            assert 'version="test"' in text
            assert 'kpi_forecast_latency_budget_seconds{model="model"} 5.0' in text  # the tests'
            assert 'kpi_forecast_fallbacks_total{model="model",reason="timeout"} 0.0' in text
            assert 'kpi_forecast_shed_requests_total{reason="queue_full"} 0.0' in text

    run(go())


def slow_down(client: httpx.AsyncClient, seconds: float) -> None:
    """Make every model call of the running app take at least ``seconds``."""
    model = client.app.state.components.state.now.model
    healthy = model.forecast

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return healthy(*args, **kwargs)

    model.forecast = slow


def test_a_late_model_gives_a_flagged_seasonal_naive_fallback(model_dir: Path,
                                                               tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, latencyBudgetMs=50)
        async with running(desc) as client:
            slow_down(client, 0.2)  # a model call longer than the 50 ms budget
            values = series(8 * 24)
            answer = (await client.post("/v1/forecast", json=body(values=values))).json()
            assert answer["source"] == "fallback" and answer["reason"] == "timeout"
            assert answer["model_version"] is None
            assert answer["latency_ms"] < 50
            week_ago = values[-7 * 24 : -7 * 24 + HORIZON]
            # A copy of last week's values, rounded as answers are.
            assert [p["p50"] for p in answer["forecasts"]] == pytest.approx(
                week_ago, abs=ANSWER_ROUNDING)
            metrics = (await client.get("/ric/v1/metrics")).text
            assert 'kpi_forecast_fallbacks_total{model="model",reason="timeout"} 1.0' in metrics

    run(go())


def test_a_queue_too_long_for_the_budget_falls_back_without_waiting(
    model_dir: Path, tmp_path: Path
) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, latencyBudgetMs=60,
                          batching={"maxBatchSize": 1, "maxQueueDelayMs": 0,
                                    "maxQueueSize": 1024})
        async with running(desc) as client:
            slow_down(client, 0.025)  # 25 ms a call: two queued ahead already miss 60 ms
            assert (await client.post("/v1/forecast", json=body())).json()["source"] == "model"
            answers = await asyncio.gather(
                *[client.post("/v1/forecast", json=body(cell_id=f"c{i}")) for i in range(4)])
            reasons = [a.json()["reason"] for a in answers]
            assert reasons[0] is None and "queue_delay" in reasons
            quick = [a.json()["latency_ms"] for a in answers if a.json()["reason"] ==
                     "queue_delay"]
            assert max(quick) < 25  # answered at once, not after waiting for the model

    run(go())


def test_a_failing_model_falls_back_and_keeps_serving(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            model = client.app.state.components.state.now.model

            def broken(*args, **kwargs):
                raise RuntimeError("CUDA error: an illegal memory access")

            model.forecast, healthy = broken, model.forecast
            answer = (await client.post("/v1/forecast", json=body())).json()
            assert answer["source"] == "fallback" and answer["reason"] == "model_error"
            model.forecast = healthy
            answer = (await client.post("/v1/forecast", json=body())).json()
            assert answer["source"] == "model"

    run(go())


def test_requests_that_wait_beyond_the_allowance_are_shed_with_503(model_dir: Path,
                                                                   tmp_path: Path) -> None:
    async def go() -> None:
        # One series per model call of 80 ms or more: a burst of 16 queues up to 1.2 s
        # against a 200 ms budget. The allowance (195 ms less the service time, at least one
        # service time) is then at most about 115 ms of a wait near 195 ms, so each window
        # cuts the limit by a tenth or more. The budget is wide so that the event loop, which
        # the in-process client shares with the app, never runs late by all of it on a busy
        # machine: that would shed for the deadline instead.
        desc = descriptor(tmp_path, model_dir, latencyBudgetMs=200,
                          batching={"maxBatchSize": 1, "maxQueueDelayMs": 0,
                                    "maxQueueSize": 24})
        async with running(desc) as client:
            slow_down(client, 0.08)
            admission = client.app.state.components.limit
            assert admission.limit == 24  # open until requests wait
            shed, waves = None, 0
            while shed is None:
                responses = await asyncio.gather(*[
                    client.post("/v1/forecast", json=body(cell_id=f"w{i}")) for i in range(16)
                ])
                assert {r.status_code for r in responses} <= {200, 503}
                shed = next((r for r in responses if r.status_code == 503
                             and r.json()["reason"] == "overload"), None)
                waves += 1
                assert waves < 100, "the limit did not close"
            assert admission.limit < 16 and admission.delay > 0
            assert shed.headers["retry-after"] == "1"
            metrics = (await client.get("/ric/v1/metrics")).text
            assert f"kpi_forecast_admission_limit {admission.limit}" in metrics
            assert f"kpi_forecast_queueing_delay_seconds {admission.delay}" in metrics
            assert 'kpi_forecast_shed_requests_total{reason="overload"} 0.0' not in metrics
            assert (await client.get("/ric/v1/health/ready")).status_code == 200  # not shed

    run(go())


def test_late_answers_without_waiting_shed_nothing(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, latencyBudgetMs=20,
                          batching={"maxBatchSize": 64, "maxQueueDelayMs": 2,
                                    "maxQueueSize": 64})
        async with running(desc) as client:
            # Every model call late, but one request at a time, each after the call before it
            # has finished: none waits behind another. (The answer leaves at the budget, the
            # call goes on to three times it: a loop stalled past the call's end would find
            # the model's answer first, and a busy machine stalls one for milliseconds, not
            # tens of them. The pause outlasts the call by as much.)
            slow_down(client, 0.06)
            for i in range(WINDOW_ANSWERS + 5):
                answer = await client.post("/v1/forecast", json=body(cell_id=f"s{i}"))
                assert answer.status_code == 200 and answer.json()["reason"] == "timeout"
                await asyncio.sleep(0.06)
            admission = client.app.state.components.limit
            assert admission.limit == 64 and admission.delay < admission.allowance
            metrics = (await client.get("/ric/v1/metrics")).text
            assert 'kpi_forecast_shed_requests_total{reason="overload"} 0.0' in metrics
            assert ('kpi_forecast_goodput_requests_total{model="model",'
                    'route="/v1/forecast"} 0.0') in metrics

    run(go())


def test_a_loop_later_than_the_budget_refuses_before_reading(model_dir: Path,
                                                             tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, latencyBudgetMs=20)
        async with running(desc) as client:
            service = client.app.state.components
            # As if the loop had been a minute late: a request now has waited about as long
            # in its socket. (The probe smooths towards the truth from its next tick.)
            service.loop_lag.seconds = 60.0
            refused = await client.post("/v1/forecast", content=b"not even JSON",
                                        headers={"content-type": "application/json"})
            assert refused.status_code == 503 and refused.json()["reason"] == "deadline"
            assert (await client.get("/ric/v1/health/ready")).status_code == 200
            # The lag is on the dashboard: still tens of seconds after a few ticks' smoothing.
            metrics = (await client.get("/ric/v1/metrics")).text
            lag = next(float(line.split()[1]) for line in metrics.splitlines()
                       if line.startswith("kpi_forecast_event_loop_lag_seconds "))
            assert lag > 1.0
            service.loop_lag.seconds = 0.0
            assert (await client.post("/v1/forecast", json=body())).status_code == 200

    run(go())


def test_a_full_queue_sheds_with_503(model_dir: Path, tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, latencyBudgetMs=3000,
                          batching={"maxBatchSize": 8, "maxQueueDelayMs": 300,
                                    "maxQueueSize": 4})
        async with running(desc) as client:
            slow_down(client, 0.3)
            items = [body(cell_id=f"c{i}") for i in range(5)]
            running_call = asyncio.create_task(client.post("/v1/forecast", json=body()))
            await asyncio.sleep(0.05)  # that one is in the model now; the next one queues
            waiting = asyncio.create_task(client.post("/v1/forecast", json=body(cell_id="w")))
            await asyncio.sleep(0.05)
            response = await client.post("/v1/forecast/batch", json={"items": items})
            assert response.status_code == 503 and response.json()["reason"] == "queue_full"
            assert response.headers["retry-after"] == "3"
            assert (await running_call).status_code == 200
            assert (await waiting).status_code == 200

    run(go())


def test_not_ready_is_503_and_a_bad_reload_keeps_the_old_model(model_dir: Path,
                                                                tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, tmp_path / "nowhere",
                                      modelRoot=str(tmp_path.parent)), wait_ready=False
                           ) as client:
            await unready_saying(client, "model load rejected", 10)  # the load failed
            response = await client.post("/v1/forecast", json=body())
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            response = await client.post("/v1/model/reload", json={"model_dir": str(model_dir)})
            assert response.status_code == 200 and response.json()["model_version"] == "test"
            assert (await client.get("/ric/v1/health/ready")).status_code == 200
            response = await client.post("/v1/model/reload",
                                         json={"model_dir": str(tmp_path / "nowhere")})
            assert response.status_code == 404 and "no such directory" in response.json()["error"]
            (tmp_path / "empty").mkdir()
            response = await client.post("/v1/model/reload",
                                         json={"model_dir": str(tmp_path / "empty")})
            assert response.status_code == 422
            assert "previous one keeps serving" in response.json()["error"]
            assert (await client.post("/v1/forecast", json=body())).json()["source"] == "model"

    run(go())


def test_a_model_of_another_kpi_is_refused_while_history_of_this_one_is_held(
        model_dir: Path, tmp_path: Path) -> None:
    other = make_model(tmp_path / "prb", version="prb")
    meta = json.loads((other / "metadata.json").read_text())
    (other / "metadata.json").write_text(json.dumps({**meta, "target": "prb_util"}))

    async def go() -> None:
        root = str(tmp_path.parent)  # above the two test folders the models are in
        async with running(descriptor(tmp_path, model_dir, modelRoot=root)) as client:
            history = {"start": START, "freq": "1h", "values": [3.0] * 5}
            assert (await client.post("/v1/cells/c9/history", json=history)).status_code == 200
            response = await client.post("/v1/model/reload", json={"model_dir": str(other)})
            assert response.status_code == 422
            error = response.json()["error"]
            assert "model KPI prb_util differs from the kpi history held for 1 cells" in error
            model = (await client.get("/v1/model")).json()
            assert model["model_version"] == "test" and model["holiday_reading"] == "none"

        # With no history held the other KPI's model loads, and its history starts empty.
        async with running(descriptor(tmp_path / "fresh", model_dir, modelRoot=root)) as client:
            response = await client.post("/v1/model/reload", json={"model_dir": str(other)})
            assert response.status_code == 200 and response.json()["model_version"] == "prb"

    run(go())


def test_a_reload_outside_the_model_root_is_refused_before_anything_is_read(
        tmp_path: Path) -> None:
    """Only directories under controls.modelRoot load, symlinks resolved: elsewhere is 403,
    whether the directory exists, holds a model or is reached through a link or ``..``."""
    root = tmp_path / "models"
    served = make_model(root / "v1")
    sibling = make_model(root / "v2", version="v2")
    outside = make_model(tmp_path / "elsewhere", version="elsewhere")
    (root / "link").symlink_to(outside, target_is_directory=True)

    async def go() -> None:
        async with running(descriptor(tmp_path, served, modelRoot=str(root))) as client:
            for named in (outside, root / "link", root / ".." / "elsewhere", tmp_path / "none",
                          "/etc"):
                response = await client.post("/v1/model/reload",
                                             json={"model_dir": str(named)})
                assert response.status_code == 403, (named, response.text)
                assert "outside the model root" in response.json()["error"]
            assert (await client.get("/v1/model")).json()["model_version"] == "test"
            response = await client.post("/v1/model/reload", json={"model_dir": str(sibling)})
            assert response.status_code == 200 and response.json()["model_version"] == "v2"
        # By default the root is the directory holding modelDir.
        async with running(descriptor(tmp_path / "default", served)) as client:
            response = await client.post("/v1/model/reload", json={"model_dir": str(outside)})
            assert response.status_code == 403
            response = await client.post("/v1/model/reload", json={"model_dir": str(sibling)})
            assert response.status_code == 200

    run(go())


def test_reload_under_load_never_fails_a_request(model_dir: Path, tmp_path: Path) -> None:
    newer = make_model(tmp_path / "newer", version="newer")

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir, latencyBudgetMs=5000,
                                      modelRoot=str(tmp_path.parent))) as client:
            async def load() -> list[str]:
                versions = []
                for i in range(30):
                    response = await client.post("/v1/forecast", json=body(cell_id=f"c{i}"))
                    assert response.status_code == 200, response.text
                    versions.append(response.json()["model_version"])
                return versions

            async def swap() -> int:
                await asyncio.sleep(0.05)
                return (await client.post("/v1/model/reload",
                                          json={"model_dir": str(newer)})).status_code

            *streams, status = await asyncio.gather(load(), load(), swap())
            assert status == 200
            seen = {v for stream in streams for v in stream}
            assert seen <= {"test", "newer"}
            assert (await client.get("/v1/model")).json()["model_version"] == "newer"

    run(go())


def test_appmgr_registration_is_retried_and_undone_on_shutdown(model_dir: Path,
                                                               tmp_path: Path) -> None:
    calls: list[tuple[str, dict]] = []

    def appmgr(request: httpx.Request) -> httpx.Response:
        calls.append((request.url.path, json.loads(request.content)))
        if request.url.path.endswith("/register") and len(calls) < 3:
            return httpx.Response(503)  # appmgr not up yet
        return httpx.Response(201)

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, registration={
            "enabled": True, "appmgrUrl": "http://appmgr.ricplt:8080/ric/v1/register",
            "retrySeconds": 0.05})
        async with running(desc, appmgr=httpx.MockTransport(appmgr)) as client:
            for _ in range(100):
                if len(calls) >= 3:
                    break
                await asyncio.sleep(0.02)
            assert (await client.post("/v1/forecast", json=body())).status_code == 200
        paths = [path for path, _ in calls]
        assert paths == ["/ric/v1/register"] * 3 + ["/ric/v1/deregister"]
        registered = calls[2][1]
        assert registered["appName"] == "kpi-forecast"
        assert registered["httpEndpoint"] == "service-ricxapp-kpi-forecast-http.ricxapp:8080"
        assert registered["rmrEndpoint"] == "service-ricxapp-kpi-forecast-rmr.ricxapp:4560"
        assert json.loads(registered["config"])["controls"]["registration"]["enabled"] is True

    run(go())


@pytest.mark.parametrize(("routing_manager", "registers"), [
    ("service-ricplt-rtmgr-rmr.ricplt:4561", True),  # this project's chart on a RIC
    ("4561", True),  # the chart dms_cli builds
    ("-1", False),  # the static route table only
    (None, False),  # not run by a RIC's chart at all
])
def test_auto_registers_where_the_routing_manager_gives_the_routes(
        model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        routing_manager: str | None, registers: bool) -> None:
    if routing_manager is None:
        monkeypatch.delenv("RMR_RTG_SVC", raising=False)
    else:
        monkeypatch.setenv("RMR_RTG_SVC", routing_manager)
    calls: list[str] = []

    def appmgr(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(201)

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, registration={"enabled": "auto"})
        async with running(desc, appmgr=httpx.MockTransport(appmgr)) as client:
            for _ in range(100):
                if calls or not registers:
                    break
                await asyncio.sleep(0.02)
            assert (await client.post("/v1/forecast", json=body())).status_code == 200
        expected = ["/ric/v1/register", "/ric/v1/deregister"] if registers else []
        assert calls == expected

    run(go())


def test_unready_while_rmr_has_no_route_table_and_said_once(
        model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As on a RIC before the routing manager's table arrives (the chart dms_cli builds names
    no static table): the probe answers 503 with the reason, the log says it once."""
    from tests.tcp_transport import TcpTransport

    class Routes(TcpTransport):
        loaded = False

        def ready(self) -> bool:
            return self.loaded

    transports: list[Routes] = []

    def factory(e2, broken) -> Routes:
        transports.append(Routes("127.0.0.1", 0))
        return transports[-1]

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, e2={"enabled": True})
        async with running(desc, wait_ready=False, e2_transport=factory) as client:
            for _ in range(400):  # the model loads first
                answer = await client.get("/ric/v1/health/ready")
                if "RMR" in answer.json()["error"]:
                    break
                await asyncio.sleep(0.025)
            for _ in range(5):  # asked again and again, as a probe does
                answer = await client.get("/ric/v1/health/ready")
            assert answer.status_code == 503
            assert answer.json()["error"].startswith("RMR not ready: no route table yet")
            transports[0].loaded = True
            assert (await client.get("/ric/v1/health/ready")).status_code == 200

    with caplog.at_level(logging.INFO, logger="kpi_forecast.xapp.ric.e2.link"):
        run(go())
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rmr: ")]
    assert len(said) == 2 and said[0].startswith("rmr: no route table yet")
    assert said[1] == "rmr: a route table is loaded: ready for E2 and A1"


def test_an_unreachable_appmgr_is_never_fatal(model_dir: Path, tmp_path: Path) -> None:
    tries: list[httpx.Request] = []

    def down(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, registration={
            "enabled": True, "retrySeconds": 0.05})
        async with running(desc, appmgr=httpx.MockTransport(down)) as client:
            for _ in range(200):  # until registration has failed and been retried
                if len(tries) >= 2:
                    break
                await asyncio.sleep(0.01)
            assert len(tries) >= 2
            assert (await client.post("/v1/forecast", json=body())).status_code == 200

    run(go())

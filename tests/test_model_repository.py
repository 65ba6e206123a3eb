"""A model repository served by one xApp: each model by name, loaded, unloaded and refused on
its own (Triton's model control), the history of each model's KPI apart, and what cannot be
served refused at start in one line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from kpi_forecast.model.errors import UserError
from kpi_forecast.xapp.app import create_app
from tests.test_xapp_api import START, series
from tests.xapp_helpers import descriptor, make_repository, running

KPIS = {"traffic": "traffic_mb", "prb": "prb_util", "cqi": "cqi_mean"}  # cqi_mean: not mapped


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repository(tmp_path_factory.mktemp("repository") / "models", KPIS)


def body(cell_id: str = "c1") -> dict:
    return {"cell_id": cell_id, "start": START, "freq": "1h", "values": series()}


def test_each_model_serves_by_name_and_the_default_answers_the_routes_without_one(
        repository: Path, tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, None, modelRepository=str(repository),
                          defaultModel="prb")
        async with running(desc) as client:
            index = (await client.get("/v1/models")).json()["models"]
            assert [(m["name"], m["state"], m["kpi"], m["version"], m["default"])
                    for m in index] == [("cqi", "READY", "cqi_mean", "cqi", False),
                                        ("prb", "READY", "prb_util", "prb", True),
                                        ("traffic", "READY", "traffic_mb", "traffic", False)]
            # Each model's E2 measurement; one whose KPI none maps is flagged with null.
            assert {m["name"]: m["measurement"] for m in index} == {
                "cqi": None, "prb": "RRU.PrbTotDl", "traffic": "DRB.PdcpSduVolumeDL"}
            for name in KPIS:
                answer = await client.post(f"/v1/models/{name}/forecast", json=body())
                assert answer.status_code == 200, answer.text
                assert answer.json()["model_version"] == name
                assert (await client.get(f"/v1/models/{name}")).json()["target"] == KPIS[name]
            assert (await client.post("/v1/forecast", json=body())).json()[
                "model_version"] == "prb"
            assert (await client.get("/v1/model")).json()["name"] == "prb"
            ready = (await client.get("/ric/v1/health/ready")).json()
            assert ready["models"] == {name: {"state": "READY"} for name in sorted(KPIS)}
            metrics = (await client.get("/ric/v1/metrics")).text
            for name in KPIS:
                assert f'kpi_forecast_model_ready{{model="{name}"}} 1.0' in metrics

    asyncio.run(go())


def test_an_unknown_model_is_a_404_naming_the_models(repository: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, None,
                                      modelRepository=str(repository))) as client:
            for answer in (await client.post("/v1/models/nope/forecast", json=body()),
                           await client.get("/v1/models/nope"),
                           await client.get("/v1/models/nope/cells"),
                           await client.post("/v1/models/nope/load"),
                           await client.post("/v1/models/nope/unload")):
                assert answer.status_code == 404
                assert answer.json() == {"error": "no model 'nope'; the models: cqi, prb, "
                                                  "traffic"}

    asyncio.run(go())


def test_a_model_unloads_and_loads_on_its_own(repository: Path, tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, None, modelRepository=str(repository),
                          models=["traffic", "prb"])
        async with running(desc) as client:
            # Not named to load at start: listed, and loadable by name.
            index = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
            assert (index["cqi"]["state"], index["cqi"]["reason"]) == ("UNAVAILABLE",
                                                                       "not loaded")
            not_loaded = await client.post("/v1/models/cqi/forecast", json=body())
            assert not_loaded.status_code == 404
            assert not_loaded.json()["error"] == ("model 'cqi' is not loaded (POST "
                                                  "/v1/models/cqi/load); served: traffic, prb")
            loaded = await client.post("/v1/models/cqi/load")
            assert loaded.status_code == 200, loaded.text
            assert loaded.json()["name"] == "cqi"
            assert (await client.post("/v1/models/cqi/forecast", json=body())).status_code == 200

            after = (await client.post("/v1/models/prb/unload")).json()["models"]
            assert {m["name"]: (m["state"], m["reason"]) for m in after} == {
                "traffic": ("READY", None), "prb": ("UNAVAILABLE", "unloaded"),
                "cqi": ("READY", None)}
            unloaded = await client.post("/v1/models/prb/forecast", json=body())
            assert unloaded.status_code == 503
            assert "model prb is UNAVAILABLE: unloaded" in (
                await client.get("/v1/models/prb")).json()["error"]
            # The others serve on, and the xApp stays ready.
            assert (await client.post("/v1/forecast", json=body())).status_code == 200
            assert (await client.get("/ric/v1/health/ready")).status_code == 200
            assert (await client.post("/v1/models/prb/load")).status_code == 200
            assert (await client.post("/v1/models/prb/forecast", json=body())).status_code == 200

    asyncio.run(go())


def test_a_bad_model_is_refused_and_the_others_serve(repository: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "models"
    shutil.copytree(repository, root)
    (root / "prb" / "model.onnx").write_bytes(b"not a graph")

    async def go() -> None:
        async with running(descriptor(tmp_path, None, modelRepository=str(root))) as client:
            ready = (await client.get("/ric/v1/health/ready")).json()
            assert ready["models"]["prb"]["state"] == "UNAVAILABLE"
            assert "model load rejected" in ready["models"]["prb"]["reason"]
            assert ready["models"]["traffic"] == {"state": "READY"}
            refused = await client.post("/v1/models/prb/load")
            assert refused.status_code == 422
            assert "model rejected" in refused.json()["error"]
            answer = await client.post("/v1/models/traffic/forecast", json=body())
            assert answer.status_code == 200

    asyncio.run(go())


def test_each_kpi_has_its_history_and_a_cell_gets_every_kpis_forecast(
        repository: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, None, modelRepository=str(repository),
                                      models=["traffic", "prb"])) as client:
            history = {"start": START, "freq": "1h", "values": series()}
            written = await client.post("/v1/models/prb/cells/c7/history", json=history)
            assert written.status_code == 200, written.text
            assert [c["cell_id"] for c in (await client.get("/v1/models/prb/cells")).json()[
                "cells"]] == ["c7"]
            assert (await client.get("/v1/models/traffic/cells")).json()["count"] == 0
            # The traffic model has no history of c7: named among the errors.
            both = (await client.get("/v1/cells/c7/forecasts")).json()
            assert list(both["forecasts"]) == ["prb"]
            assert both["forecasts"]["prb"]["model_version"] == "prb"
            assert "no history held for cell 'c7'" in both["errors"]["traffic"]
            await client.post("/v1/models/traffic/cells/history", json={
                "items": [{"cell_id": "c7", **history}]})
            both = (await client.get("/v1/cells/c7/forecasts")).json()
            assert sorted(both["forecasts"]) == ["prb", "traffic"]
            assert both["errors"] == {}
            one = await client.get("/v1/models/traffic/cells/c7/forecast")
            assert one.json()["model_version"] == "traffic"
            missing = await client.get("/v1/cells/c8/forecasts")
            assert missing.status_code == 404

    asyncio.run(go())


@pytest.mark.parametrize(("kpis", "problem"), [
    ({}, "holds no model (no subdirectory with metadata.json"),
    ({"a": "prb_util", "b": "prb_util"}, "models a and b both forecast KPI prb_util: serve "
                                         "one model per KPI"),
])
def test_a_repository_that_cannot_be_served_is_refused_at_start(
        tmp_path: Path, kpis: dict, problem: str) -> None:
    root = make_repository(tmp_path / "models", kpis)
    root.mkdir(exist_ok=True)
    desc = descriptor(tmp_path, None, modelRepository=str(root))
    with pytest.raises(UserError, match=problem.replace("(", r"\(")):
        create_app(desc)
    # From the command line: one line, no traceback, a non-zero exit.
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", "serve", "--models",
                           str(root), "--config", str(desc.path), "--port", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if "error" in line]
    assert error.startswith("kpi-forecast: error: ") and problem in error


def test_a_model_named_that_the_repository_lacks_is_refused(repository: Path,
                                                            tmp_path: Path) -> None:
    desc = descriptor(tmp_path, None, modelRepository=str(repository), models=["prb", "dl"])
    with pytest.raises(UserError, match="holds no model dl; it holds cqi, prb, traffic"):
        create_app(desc)


def test_a_repository_folder_that_is_not_there_is_refused(tmp_path: Path) -> None:
    desc = descriptor(tmp_path, None, modelRepository=str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=f"modelRepository {tmp_path / 'nowhere'}: .*No such"):
        create_app(desc)


def gauge(metrics: str, name: str, model: str) -> float:
    [line] = [line for line in metrics.splitlines()
              if line.startswith(f'{name}{{model="{model}"}} ')]
    return float(line.split()[-1])


def test_a_model_has_its_own_budget_batching_and_defaults(repository: Path,
                                                          tmp_path: Path) -> None:
    """controls.perModel: prb is held to a budget no forecast can meet (so it answers 503
    while traffic, under the controls' budget, answers), batched by its own largest batch,
    and forecasts its own default horizon; a config reload moves its budget."""
    async def go() -> None:
        desc = descriptor(tmp_path, None, modelRepository=str(repository),
                          models=["traffic", "prb"], perModel={
                              "prb": {"latencyBudgetMs": 0.001, "defaultHorizon": 6,
                                      "batching": {"maxBatchSize": 3}}})
        async with running(desc) as client:
            service = client.app.state.components  # type: ignore[attr-defined]
            metrics = (await client.get("/ric/v1/metrics")).text
            budget = "kpi_forecast_latency_budget_seconds"
            assert gauge(metrics, budget, "traffic") == 5.0  # the tests' controls
            assert gauge(metrics, budget, "prb") == 0.001 / 1000.0
            assert service.models["prb"].batcher.max_batch_size == 3
            assert service.models["traffic"].batcher.max_batch_size == 64  # the controls'
            # maxQueueDelayMs, not given for prb, stays the controls'.
            assert service.state.models["prb"].controls.batching.max_queue_delay_ms == (
                service.state.controls.batching.max_queue_delay_ms)

            late = await client.post("/v1/models/prb/forecast", json=body())
            assert late.status_code == 503, late.text
            assert late.json()["reason"] == "deadline"
            answer = await client.post("/v1/models/traffic/forecast", json=body())
            assert answer.status_code == 200, answer.text
            assert len(answer.json()["forecasts"]) == 24  # the model's horizon

            reloaded = descriptor(tmp_path / "reload", None, modelRepository=str(repository),
                                  models=["traffic", "prb"], perModel={
                                      "prb": {"defaultHorizon": 6}})
            service.apply_descriptor(reloaded)
            metrics = (await client.get("/ric/v1/metrics")).text
            assert gauge(metrics, budget, "prb") == 5.0
            assert service.models["prb"].batcher.max_batch_size == 64
            answer = await client.post("/v1/models/prb/forecast", json=body())
            assert answer.status_code == 200, answer.text
            assert len(answer.json()["forecasts"]) == 6

    asyncio.run(go())


@pytest.mark.parametrize(("per_model", "problem"), [
    ({"dl": {"latencyBudgetMs": 50}}, "modelRepository .* holds no model dl"),
    ({"prb": {"batching": {"admission": "off"}}}, "admission is the server's"),
])
def test_settings_of_a_model_that_cannot_be_are_refused_at_start(
        repository: Path, tmp_path: Path, per_model: dict, problem: str) -> None:
    with pytest.raises((UserError, ValueError), match=problem):
        create_app(descriptor(tmp_path, None, modelRepository=str(repository),
                              perModel=per_model))


def test_a_model_whose_own_default_horizon_it_cannot_give_is_refused_alone(
        repository: Path, tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, None, modelRepository=str(repository),
                          models=["traffic", "prb"], perModel={"prb": {"defaultHorizon": 48}})
        async with running(desc) as client:
            ready = (await client.get("/ric/v1/health/ready")).json()
            assert ready["models"]["traffic"] == {"state": "READY"}
            assert ready["models"]["prb"]["state"] == "UNAVAILABLE"
            assert "defaultHorizon 48 exceeds the model's horizon 24" in (
                ready["models"]["prb"]["reason"])

    asyncio.run(go())

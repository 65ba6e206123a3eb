"""A1 policies over the real librmr: an A1 mediator stand-in (an RMR endpoint of its own,
speaking the O-RAN SC mediator's southbound messages) creates, updates and deletes instances
of the forecaster's policy type, answers the xApp's query at start-up, and the forecasts
follow; replicas on one Redis steer alike."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import jsonschema
import pytest

from benchmarks.ports import free_port
from kpi_forecast.cli.schema_files import A1_POLICY_TYPE
from kpi_forecast.xapp.ric.a1.policy_type import (
    A1_POLICY_QUERY,
    POLICY_TYPE_ID,
)
from tests.a1_mediator import Mediator
from tests.processes import ROOT
from tests.redis_server import redis_server
from tests.xapp_helpers import CONTEXT, HORIZON, descriptor, make_model, running, serving_state

STEP = dt.timedelta(hours=1)


@contextlib.asynccontextmanager
async def xapp(tmp: Path, model_dir: Path, rmr_port: int, **controls: object
               ) -> AsyncIterator[httpx.AsyncClient]:
    desc = descriptor(tmp, model_dir, a1={"enabled": True},
                      e2={"enabled": False, "port": rmr_port}, **controls)
    async with running(desc) as client:
        yield client


async def forecast(client: httpx.AsyncClient, cell_id: str) -> httpx.Response:
    start = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    return await client.post("/v1/forecast", json={
        "cell_id": cell_id, "start": start.isoformat(), "freq": "1h",
        "values": [float(10 + i % 24) for i in range(CONTEXT)]})


def gauge(client: httpx.AsyncClient, name: str, instance: str) -> float | None:
    registry = client.app.state.components.metrics.registry  # type: ignore[attr-defined]
    return registry.get_sample_value(name, {"policy_instance": instance})


def test_the_policy_type_shipped_in_the_chart_holds_what_the_xapp_takes() -> None:
    shipped = json.loads((ROOT / A1_POLICY_TYPE).read_text())
    assert shipped["policy_type_id"] == POLICY_TYPE_ID
    schema = shipped["create_schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    validator.validate({"cells": ["c1"], "horizon": 6, "quantiles": [0.5],
                        "latencyBudgetMs": 50, "excluded": False})
    for wrong in ({"cells": []}, {"cells": ["c1"], "horizon": 0}, {"cells": ["c1", "c1"]},
                  {"cells": ["c1"], "colour": "red"}, {"cells": ["a/b"]}):
        assert not validator.is_valid(wrong), wrong
    descriptor_file = json.loads((ROOT / "xapp/descriptor/config-file.json").read_text())
    rmr_data = next(p for p in descriptor_file["messaging"]["ports"] if p["name"] == "rmr-data")
    assert rmr_data["policies"] == [POLICY_TYPE_ID]
    assert "A1_POLICY_REQ" in rmr_data["rxMessages"]
    assert {"A1_POLICY_RESP", "A1_POLICY_QUERY"} <= set(rmr_data["txMessages"])


@pytest.mark.slow
def test_a1_create_update_delete_and_query_over_rmr_change_what_the_forecasts_use(
        mediator_routes: int, tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    rmr_port = free_port()

    async def go() -> None:
        mediator = Mediator(mediator_routes)
        await mediator.start()
        async with xapp(tmp_path, model_dir, rmr_port) as client:
            # Once a model is served the xApp asks for the instances that exist; the mediator
            # answers with a CREATE for each, as it does.
            assert await mediator.next(A1_POLICY_QUERY) == {"policy_type_id": POLICY_TYPE_ID}
            answer = await mediator.request(rmr_port, "CREATE", "stadium",
                                            {"cells": ["c1"], "horizon": 6, "quantiles": [0.5]})
            assert answer == {"policy_type_id": POLICY_TYPE_ID, "policy_instance_id": "stadium",
                              "handler_id": answer["handler_id"], "status": "OK"}
            steered = (await forecast(client, "c1")).json()["forecasts"]
            assert len(steered) == 6 and set(steered[0]) == {"timestamp", "p50"}
            other = (await forecast(client, "c2")).json()["forecasts"]
            assert len(other) == HORIZON and set(other[0]) == {"timestamp", "p10", "p50", "p90"}
            # The steered cell's forecast is the unsteered one's, cut to what it asks.
            same = (await forecast(client, "c1-copy")).json()["forecasts"]
            assert [p["p50"] for p in steered] == [p["p50"] for p in same[:6]]

            answer = await mediator.request(rmr_port, "UPDATE", "stadium",
                                            {"cells": ["c1"], "horizon": 3,
                                             "latencyBudgetMs": 400}, as_contract=True)
            assert answer["status"] == "OK"
            assert len((await forecast(client, "c1")).json()["forecasts"]) == 3
            assert gauge(client, "kpi_forecast_a1_policy_horizon_steps", "stadium") == 3.0
            assert gauge(client, "kpi_forecast_a1_policy_latency_budget_seconds",
                         "stadium") == 0.4

            answer = await mediator.request(rmr_port, "CREATE", "maintenance",
                                            {"cells": ["c2", "c3"], "excluded": True})
            assert answer["status"] == "OK"
            refused = await forecast(client, "c2")
            assert refused.status_code == 409
            assert "excluded from forecasting by A1 policy instance 'maintenance'" in \
                refused.json()["error"]
            many = await client.post("/v1/forecast/batch", json={"items": [
                {"cell_id": "c1", "start": "2024-03-01T00:00:00+00:00", "freq": "1h",
                 "values": [1.0] * CONTEXT},
                {"cell_id": "c4", "start": "2024-03-01T00:00:00+00:00", "freq": "1h",
                 "values": [1.0] * CONTEXT}]})
            assert [len(item["forecasts"]) for item in many.json()["items"]] == [3, HORIZON]

            # Refused, with the reason, and nothing changes.
            refusals = {
                "empty": ({"cells": []}, "cells"),
                "quantile": ({"cells": ["c5"], "quantiles": [0.33]}, "not among"),
                "horizon": ({"cells": ["c5"], "horizon": HORIZON + 1}, "exceeds"),
                "overlap": ({"cells": ["c5", "c1"]}, "steered by instance 'stadium'"),
            }
            for instance_id, (payload, reason) in refusals.items():
                answer = await mediator.request(rmr_port, "CREATE", instance_id, payload)
                assert answer["status"] == "ERROR" and reason in answer["reason"], answer
            answer = await mediator.request(rmr_port, "CREATE", "other-type", {"cells": ["c5"]},
                                            type_id=POLICY_TYPE_ID + 1)
            assert answer["status"] == "ERROR" and "not handled" in answer["reason"]
            for garbage in (b"\xff\x00", b"[1, 2]", b'{"operation": "CREATE"}'):
                await mediator.send(rmr_port, garbage)
            # Readable ids: the mediator is told why.
            await mediator.send(rmr_port, json.dumps({
                "operation": "CREATE", "policy_type_id": str(POLICY_TYPE_ID),
                "policy_instance_id": "torn", "payload": '{"cells": ['}).encode())
            answer = await mediator.answer()
            assert answer["policy_instance_id"] == "torn" and answer["status"] == "ERROR"
            assert "not JSON" in answer["reason"], answer
            # The instance's budget is the one its cells' requests are held to: one spent
            # before the request is read is shed, as the controls' would be.
            answer = await mediator.request(rmr_port, "UPDATE", "stadium",
                                            {"cells": ["c1"], "latencyBudgetMs": 0.001})
            assert answer["status"] == "OK"
            late = await forecast(client, "c1")
            assert late.status_code == 503 and "budget" in late.json()["error"], late.text
            assert (await forecast(client, "c4")).status_code == 200
            answer = await mediator.request(rmr_port, "DELETE", "stadium")
            assert answer["status"] == "DELETED"
            assert len((await forecast(client, "c1")).json()["forecasts"]) == HORIZON
            registry = client.app.state.components.metrics.registry  # type: ignore[attr-defined]
            assert registry.get_sample_value("kpi_forecast_a1_policy_requests_total", {
                "operation": "unknown", "status": "ERROR"}) == 4.0
            assert registry.get_sample_value("kpi_forecast_a1_policy_requests_total", {
                "operation": "CREATE", "status": "ERROR"}) == 5.0
            assert client.app.state.components.policies.in_force() == ["maintenance"]
            assert gauge(client, "kpi_forecast_a1_policy_cells", "stadium") is None
            assert gauge(client, "kpi_forecast_a1_policy_excluded", "maintenance") == 1.0
            # The RMR endpoint is made at start: turning A1 off is for the next start.
            service = client.app.state.components  # type: ignore[attr-defined]
            off = descriptor(tmp_path / "off", model_dir, a1={"enabled": False},
                             e2={"enabled": False, "port": rmr_port})
            with pytest.raises(ValueError, match="controls.a1.enabled changes take effect"):
                service.apply_descriptor(off)
            assert service.state.now.controls.a1.enabled
        await mediator.transport.close()

    asyncio.run(go())


@pytest.mark.slow
def test_replicas_on_one_redis_steer_alike_and_a_restarted_one_at_once(
        mediator_routes: int, tmp_path: Path) -> None:
    """The RIC sends an instance to one replica; the other follows from the store, and a
    replica started later steers before the mediator has answered its query."""
    model_dir = make_model(tmp_path / "model")

    async def go(redis_port: int) -> None:
        store = {"backend": "redis", "host": "127.0.0.1", "port": redis_port}
        mediator = Mediator(mediator_routes)
        await mediator.start()
        port_a, port_b, port_c = free_port(), free_port(), free_port()
        async with (xapp(tmp_path / "a", model_dir, port_a, historyStore=store) as a,
                    xapp(tmp_path / "b", model_dir, port_b, historyStore=store) as b):
            answer = await mediator.request(port_a, "CREATE", "stadium",
                                            {"cells": ["c1"], "horizon": 5})
            assert answer["status"] == "OK"
            for _ in range(100):
                if len((await forecast(b, "c1")).json()["forecasts"]) == 5:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("replica B never took the instance replica A stored")
            async with xapp(tmp_path / "c", model_dir, port_c, historyStore=store) as c:
                assert len((await forecast(c, "c1")).json()["forecasts"]) == 5
            answer = await mediator.request(port_b, "DELETE", "stadium")
            assert answer["status"] == "DELETED"
            for _ in range(100):
                if len((await forecast(a, "c1")).json()["forecasts"]) == HORIZON:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("replica A never dropped the instance B deleted")
        await mediator.transport.close()

    with redis_server(tmp_path) as redis_port:
        asyncio.run(go(redis_port))


def test_the_instances_in_force_stay_when_a_model_on_another_grid_gets_its_history() -> None:
    """The instances live in the shared state, apart from the cells' history: a model on
    another grid, which gets a history of its own, keeps them in force; one another replica
    deletes goes."""
    from kpi_forecast.xapp.metrics import Metrics
    from kpi_forecast.xapp.ric.a1.handler import PolicyHandler
    from kpi_forecast.xapp.ric.a1.policies import Policies
    from kpi_forecast.xapp.store.cell_history import MemoryCellHistory
    from kpi_forecast.xapp.store.shared_state import SharedState

    async def go() -> None:
        shared = SharedState()
        await shared.put_policy("stadium", b'{"cells":["c1"],"horizon":5}')
        # What the instances are checked against: a model's horizon and quantiles.
        model = SimpleNamespace(metadata=SimpleNamespace(horizon=24, quantiles=[0.1, 0.5, 0.9]))
        state = serving_state(MemoryCellHistory("1h", 24), model=model)
        state.swap(shared=shared)
        handler = PolicyHandler(Policies(), None, state, Metrics([0.1], 64),  # type: ignore[arg-type]
                                handler_id="test")
        await handler.take_stored(state.now.shared)
        assert handler.policies.for_cells(["c1"], state.default)[0].horizon == 5
        state.swap(state.default, history=MemoryCellHistory("15min", 96))
        await handler.take_stored(state.now.shared)
        assert handler.policies.for_cells(["c1"], state.default)[0].horizon == 5
        await shared.delete_policy("stadium")  # deleted by another replica
        await handler.take_stored(state.now.shared)
        assert handler.policies.for_cells(["c1"], state.default)[0].horizon is None

    asyncio.run(go())


def test_an_instance_steers_the_model_it_names_or_every_model() -> None:
    from kpi_forecast.xapp.ric.a1.policies import Policies
    from kpi_forecast.xapp.ric.a1.policy_type import ForecastPolicy
    from kpi_forecast.xapp.serving.errors import Excluded

    def model(horizon: int, quantiles: list[float]) -> SimpleNamespace:
        return SimpleNamespace(metadata=SimpleNamespace(horizon=horizon, quantiles=quantiles))

    both = {"prb": model(24, [0.1, 0.5, 0.9]), "traffic": model(12, [0.5])}
    instances = {
        "prb-only": ForecastPolicy(cells=["c1"], model="prb", horizon=18),
        "every": ForecastPolicy(cells=["c2"], horizon=6),
        "too-long": ForecastPolicy(cells=["c3"], horizon=18),  # beyond traffic's 12 steps
        "nobody": ForecastPolicy(cells=["c4"], model="dl"),
        "quiet": ForecastPolicy(cells=["c5"], model="traffic", excluded=True),
    }
    policies = Policies()
    policies.replace(instances, both)  # type: ignore[arg-type]
    assert policies.held == {"too-long": "horizon 18 exceeds model traffic's 12",
                             "nobody": "model 'dl' is not served (served: prb, traffic)"}
    assert [s.horizon for s in policies.for_cells(["c1", "c2", "c3"], "prb")] == [18, 6, None]
    assert [s.horizon for s in policies.for_cells(["c1", "c2", "c3"], "traffic")] == [
        None, 6, None]
    with pytest.raises(Excluded, match="excluded from forecasting by A1 policy instance "
                                          "'quiet'"):
        policies.for_cells(["c5"], "traffic")
    assert policies.for_cells(["c5"], "prb")[0].instance_id is None

    # A cell is steered by one instance at most for each model.
    assert policies.conflict("c1-traffic", ForecastPolicy(cells=["c1"], model="traffic")) is None
    assert "steered by instance 'prb-only' already" in policies.conflict(
        "c1-every", ForecastPolicy(cells=["c1"]))

    # traffic unloaded: what only it could not give is in force for prb.
    policies.replace(instances, {"prb": both["prb"]})  # type: ignore[arg-type]
    assert set(policies.held) == {"nobody", "quiet"}
    assert policies.for_cells(["c3"], "prb")[0].horizon == 18

"""The subscription flow as O-RAN SC's submgr and xapp-frame run it for a REST subscriber: the
201 with null instances, each cell's outcome posted over HTTP (retried, possibly before the
201), the list check by E2 instance id at the RMR endpoint submgr makes of the client's host,
a subscription made again deleting the one it replaces, and a predecessor's subscriptions at
the same endpoint deleted at start. Against the xApp's own parts, then the running xApp
against the mock subscription manager (``cli/mock_submgr.py``), which follows submgr's
source."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import httpx
import pytest

from kpi_forecast.cli.mock_e2_node import MockE2Node
from kpi_forecast.cli.mock_ric import create_app
from kpi_forecast.cli.mock_submgr import MockSubmgr
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import generate
from kpi_forecast.xapp.descriptor.controls import E2
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2.discovery import Cell, E2Node, parse_cell_id
from kpi_forecast.xapp.ric.e2.ingest import Ingestor
from kpi_forecast.xapp.ric.e2.link import CHECK_ROUNDS
from kpi_forecast.xapp.ric.e2.ownership import ROUND_S
from kpi_forecast.xapp.ric.e2.submgr_api import ClientEndpoint, SubscriptionResponse
from kpi_forecast.xapp.ric.e2.subscription import Subscriber
from tests.waiting import until_async
from tests.xapp_helpers import descriptor, make_model, running, serving_state

MEASUREMENT = "RRU.PrbUsedDl"
SUBMGR = "http://submgr/ric/v1"
CELLS = [f"00f110:{row << 4:010x}" for row in range(2)]
NODE = E2Node("gnb-000", 2, tuple(Cell(c, parse_cell_id(c)) for c in CELLS), (MEASUREMENT,))


def subscriber(handler, host: str = "127.0.0.1") -> tuple[Subscriber, Ingestor, Metrics]:
    metrics = Metrics([0.1], 8)
    ingestor = Ingestor(serving_state(), metrics)
    return (Subscriber(SUBMGR, host, 4560, 8080, ingestor, metrics,
                       transport=httpx.MockTransport(handler)), ingestor, metrics)


def outcome(subscription_id: str, event_id: int, e2_instance: int, **error: str
            ) -> SubscriptionResponse:
    """What submgr posts for one detail (its instance id is 0 when refused)."""
    return SubscriptionResponse.model_validate({
        "SubscriptionId": subscription_id, "SubscriptionInstances": [
            {"XappEventInstanceId": event_id, "E2EventInstanceId": e2_instance, **error}]})


@pytest.mark.parametrize("instances", [None, []])
def test_the_201_with_no_instances_is_taken_once(instances: list | None) -> None:
    posts: list[httpx.Request] = []

    def submgr(request: httpx.Request) -> httpx.Response:
        posts.append(request)
        return httpx.Response(201, json={"SubscriptionId": "2ATPmaZnL3zv5Q0Ez1qF0Zg3KXb",
                                         "SubscriptionInstances": instances})

    async def go() -> None:
        sub, _, _ = subscriber(submgr)
        await sub.subscribe(NODE, 3_600_000, attempts=3)
        assert sub.subscription_ids == {"gnb-000": "2ATPmaZnL3zv5Q0Ez1qF0Zg3KXb"}
        await sub.close()

    asyncio.run(go())
    assert len(posts) == 1


def test_outcomes_route_cells_by_e2_instance_id_and_count_refusals_by_cause(
        caplog: pytest.LogCaptureFixture) -> None:
    created = httpx.Response(201, json={"SubscriptionId": "rest-1",
                                        "SubscriptionInstances": None})

    async def go() -> None:
        sub, ingestor, metrics = subscriber(lambda request: created)
        await sub.subscribe(NODE, 3_600_000)
        refusal = {"ErrorCause": "RICSubscriptionFailure. E2NodeCause: (Cause:1, Value 1)",
                   "ErrorSource": "E2Node"}
        taken = sub.take_outcome(outcome("rest-1", 1, 17))
        assert (taken.routed, taken.unknown) == (1, 0)
        taken = sub.take_outcome(outcome("rest-1", 2, 0, **refusal))
        assert (taken.refused, dict(taken.causes)) == (1, {"E2Node": 1})
        # The cell's indications carry the E2 instance id (and submgr's requestor id).
        assert {key: route.cell_id for key, route in ingestor.routes.items()} == {
            (17, 1): CELLS[0]}
        # submgr retries until it gets a 200: a repeat changes nothing.
        for repeat in (outcome("rest-1", 1, 17), outcome("rest-1", 2, 0, **refusal)):
            assert sub.take_outcome(repeat).repeated == 1
        # An outcome of a subscription this replica does not hold, or of an event it waits
        # for nothing of: counted, nothing else.
        for stray in (outcome("rest-9", 1, 18), outcome("rest-1", 40, 19)):
            assert sub.take_outcome(stray).unknown == 1
        assert list(ingestor.routes) == [(17, 1)]
        value = metrics.registry.get_sample_value
        assert value("kpi_forecast_e2_subscriptions_refused_total", {"cause": "E2Node"}) == 1
        assert value("kpi_forecast_e2_indications_rejected_total",
                     {"reason": "subscription-outcome"}) == 2
        await sub.close()

    with caplog.at_level(logging.WARNING, logger="kpi_forecast.xapp.ric.e2.subscription"):
        asyncio.run(go())
    assert (f"e2: subscription for cell {CELLS[1]} of gnb-000 refused (E2Node): "
            "RICSubscriptionFailure. E2NodeCause: (Cause:1, Value 1)") in caplog.text


def test_an_outcome_posted_before_the_201_arrives_is_taken() -> None:
    """submgr answers the 201 and posts the outcomes from another goroutine: the first can
    come before the answer is read."""
    async def go() -> None:
        early = []

        def submgr(request: httpx.Request) -> httpx.Response:
            early.append(sub.take_outcome(outcome("rest-1", 1, 30)))
            return httpx.Response(201, json={"SubscriptionId": "rest-1",
                                             "SubscriptionInstances": None})

        sub, ingestor, _ = subscriber(submgr)
        await sub.subscribe(NODE, 3_600_000)
        assert early[0].routed == 1 and (30, 1) in ingestor.routes
        assert sub.take_outcome(outcome("rest-1", 2, 31)).routed == 1
        await sub.close()

    asyncio.run(go())


def test_the_client_host_is_the_http_service_and_submgr_makes_the_rmr_endpoint() -> None:
    host = E2(submgr_url="http://service-ricplt-submgr-http.ricplt:8088/ric/v1").endpoint_host()
    assert host == "service-ricxapp-kpi-forecast-http.ricxapp"
    assert ClientEndpoint(host=host, http_port=8080, rmr_port=4560).rmr_endpoint() == (
        "service-ricxapp-kpi-forecast-rmr.ricxapp:4560")
    assert ClientEndpoint(host="10.0.0.7", rmr_port=4560).rmr_endpoint() == "10.0.0.7:4560"


def test_the_list_check_matches_e2_instance_ids_at_submgrs_endpoint() -> None:
    """submgr lists each E2 subscription under its instance id, with the RMR endpoints it
    reports to: what is listed there is kept; a node whose instances are gone is deleted
    (submgr may still hold its REST side) and made again."""
    listed = [{"SubscriptionId": 17, "Meid": "gnb-000",
               "ClientEndpoint": ["service-ricxapp-kpi-forecast-rmr.ricxapp:4560"],
               "SubscriptionInstances": None}]
    deleted: list[str] = []

    def submgr(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(201, json={"SubscriptionId": "rest-1",
                                             "SubscriptionInstances": None})
        if request.method == "DELETE":
            deleted.append(request.url.path.rsplit("/", 1)[1])
            return httpx.Response(204)
        return httpx.Response(200, json=listed)

    async def go() -> None:
        sub, ingestor, metrics = subscriber(submgr, "service-ricxapp-kpi-forecast-http.ricxapp")
        await sub.subscribe(E2Node("gnb-000", 2, NODE.cells[:1], (MEASUREMENT,)), 3_600_000)
        sub.take_outcome(outcome("rest-1", 1, 17))
        assert await sub.lost() == {} and deleted == []
        listed[0]["ClientEndpoint"] = ["10.0.0.9:4560"]  # another xApp's, not this one's
        assert await sub.lost() == {"gnb-000": "rest-1"}
        assert deleted == ["rest-1"] and sub.subscription_ids == {} and not ingestor.routes
        assert metrics.registry.get_sample_value("kpi_forecast_e2_subscriptions_deleted_total",
                                                 {"reason": "replaced"}) == 1
        await sub.close()

    asyncio.run(go())


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("subscription") / "cells.csv"
    generate(n_cells=4, days=2, seed=1, start="2024-03-04", tz="UTC").to_csv(path, index=False)
    return path


class Quiet:
    """A transport for a mock node whose reports nobody reads here."""

    port = 0

    async def start(self, handler) -> None:
        pass

    async def send_many(self, host, port, frames):
        return len(frames), None

    async def close(self) -> None:
        pass


def test_a_predecessors_subscriptions_at_the_same_endpoint_are_deleted_at_start(
        data: Path) -> None:
    """A replica SIGKILLed leaves its subscriptions at submgr; the one started at the same
    address deletes them before subscribing (an equal request would merge into them), and
    ends with one subscription per node, its own."""
    node = MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, Quiet(), cells_per_node=2,
                      end=1)
    submgr = MockSubmgr(node, notify_transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json={})))
    app = create_app(node, submgr)
    cells = [Cell(c, parse_cell_id(c)) for c in node.cell_ids]

    async def go() -> None:
        replicas = []
        for _ in range(2):
            metrics = Metrics([0.1], 8)
            replicas.append(Subscriber("http://submgr/ric/v1", "127.0.0.1", 4560, 8080,
                                       Ingestor(serving_state(), metrics), metrics,
                                       transport=httpx.ASGITransport(app=app)))
        killed, restarted = replicas
        for meid, rows in node.nodes.items():
            await killed.subscribe(E2Node(meid, 2, tuple(cells[r] for r in rows),
                                          (MEASUREMENT,)), 3_600_000)
        await until_async(lambda: len(submgr.e2) == 4, 10, "the first replica's 4 cells")
        assert await restarted.delete_strays() == 2
        assert submgr.rest == {} and submgr.e2 == {} and node.streams == {}
        assert await restarted.delete_strays() == 0
        for meid, rows in node.nodes.items():
            await restarted.subscribe(E2Node(meid, 2, tuple(cells[r] for r in rows),
                                             (MEASUREMENT,)), 3_600_000)
        assert submgr.subscribers() == {"gnb-000": ["127.0.0.1:4560"],
                                        "gnb-001": ["127.0.0.1:4560"]}
        for replica in replicas:
            await replica.close()
        await submgr.close()

    asyncio.run(go())


def test_the_outcome_route_takes_only_submgrs_answers(tmp_path: Path) -> None:
    """A body that is not a SubscriptionResponse is a 4xx with a reason; where E2 is off
    there is nothing to take: 404."""
    async def go() -> None:
        async with running(descriptor(tmp_path, make_model(tmp_path / "model"))) as client:
            route = "/ric/v1/subscriptions/response"
            off = await client.post(route, json={"SubscriptionId": "rest-1",
                                                 "SubscriptionInstances": None})
            assert off.status_code == 404 and "no E2 subscriptions" in off.json()["error"]
            for body in ({"SubscriptionInstances": []}, [1, 2], "not json"):
                answer = await client.post(route, content=json.dumps(body))
                assert 400 <= answer.status_code < 500, answer.text
                assert answer.json()

    asyncio.run(go())


@pytest.mark.slow
def test_the_running_xapp_takes_outcomes_over_http_and_subscribes_once(
        tmp_path: Path, data: Path, rmr_library: Path) -> None:
    """Against the mock subscription manager: the outcomes come over HTTP, the first try of
    each failing (submgr retries), one cell refused by its node; every other cell's history
    is held, each node is subscribed to once over several list checks, and a submgr that
    restarts without its data is found out by the next check and subscribed to again once."""
    from benchmarks.ports import free_port
    from tests.rmr_library import rmr_transport
    from tests.test_e2_end_to_end import metric, serve_node

    port = free_port()
    panel = load_panel(data, "prb_util")

    async def go() -> None:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(), cells_per_node=2, speed=3600.0,
                          refuse={3})
        submgr = MockSubmgr(node, notify_delay_s=0.05)
        server, serving = await serve_node(node, port, submgr)
        desc = descriptor(tmp_path, make_model(tmp_path / "model"), e2={
            "enabled": True, "port": free_port(), "submgrUrl": f"http://127.0.0.1:{port}/ric/v1",
            "e2mgrUrl": f"http://127.0.0.1:{port}/v1", "kpis": {"kpi": {"measurement":
                                                                         MEASUREMENT}}},
            recalibration={"everySeconds": 0, "maxCells": 256})
        async with running(desc, submgr=submgr, first_posts_fail=True) as client:
            held = "/v1/cells"
            await until_async(lambda: len(node.streams) == 3, 20, "3 cells subscribed")

            async def cells() -> int:
                return (await client.get(held)).json()["count"]

            for _ in range(200):
                if await cells() == 3:
                    break
                await asyncio.sleep(0.05)
            assert await cells() == 3
            text = (await client.get("/ric/v1/metrics")).text
            assert metric(text, 'kpi_forecast_e2_subscriptions_refused_total{cause="E2Node"}'
                          ) == 1
            assert submgr.counts["notifications"] == 8  # 4 outcomes, each tried twice
            await asyncio.sleep((CHECK_ROUNDS + 1) * ROUND_S)  # a list check at least
            assert submgr.counts["subscriptions"] == 2  # one per node, never again
            lost = 'kpi_forecast_e2_subscriptions_lost_total'
            assert metric((await client.get("/ric/v1/metrics")).text, lost) == 0
            # submgr and the node restart without their subscriptions: found at the next
            # check, each node's old one deleted and made again, once.
            for rest_id in list(submgr.rest):
                submgr.delete(rest_id)
            await until_async(lambda: submgr.counts["subscriptions"] == 4,
                              (CHECK_ROUNDS + 2) * ROUND_S, "both nodes subscribed again")
            await asyncio.sleep(2 * ROUND_S)
            assert submgr.counts["subscriptions"] == 4 and len(submgr.rest) == 2
            assert metric((await client.get("/ric/v1/metrics")).text, lost) == 2
        server.should_exit = True
        await serving

    asyncio.run(go())

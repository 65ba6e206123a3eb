"""E2 nodes shared out across replicas: two `kpi-forecast serve` processes on one real
redis-server, subscribing through the mock E2 node over the real librmr. Each node is owned by
one replica; a replica killed without a word (SIGKILL: no unsubscription, no lease given back)
has its nodes taken over by the other once its leases run out."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.ports import free_port
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.data.synthetic import generate
from kpi_forecast.xapp.ric.e2.ownership import TAKEOVER_BOUND_S
from tests.redis_server import redis_server
from tests.test_shared_history import MEASUREMENT, counter, eventually, redis_store, serve
from tests.xapp_helpers import make_model, write_descriptor

ROOT = Path(__file__).resolve().parents[1]
NODES = 4


@pytest.mark.slow
def test_each_node_is_owned_by_one_replica_and_a_killed_ones_are_taken_over(
        tmp_path: Path, rmr_library: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    data = tmp_path / "cells.csv"
    generate(n_cells=3 * NODES, days=9, seed=2, start="2024-03-04", tz="UTC",
             missing=False).to_csv(data, index=False)
    logs = tmp_path / "xapp.log"
    with redis_server(tmp_path) as redis_port:
        node_port = free_port()
        node = subprocess.Popen(
            [sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", str(data), "--kpi",
             f"prb_util={MEASUREMENT}", "--listen", f"127.0.0.1:{node_port}",
             # Ten hours a second: the replay outlasts the handover, whose new owner joins the
             # node's E2 subscriptions (submgr merges equal requests) and gets the rest.
             "--speed", "36000", "--rmr-port", str(free_port()), "--cells-per-node", "3"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=logs.open("a"))
        replicas, urls, endpoints = [], [], []
        for name in ("a", "b"):
            rmr_port, http_port = free_port(), free_port()
            e2 = {"enabled": True, "port": rmr_port,
                  "submgrUrl": f"http://127.0.0.1:{node_port}/ric/v1",
                  "e2mgrUrl": f"http://127.0.0.1:{node_port}/v1",
                  "kpis": {"kpi": {"measurement": MEASUREMENT}}}
            config = write_descriptor(tmp_path / name, model_dir, e2=e2,
                                      historyStore=redis_store(redis_port))
            replicas.append(serve(config, http_port, logs))
            urls.append(f"http://127.0.0.1:{http_port}")
            endpoints.append(f"127.0.0.1:{rmr_port}")
        try:
            for url, replica in zip(urls, replicas, strict=True):
                assert wait_ready(url, replica), logs.read_text()[-3000:]

            def subscribers() -> dict[str, list[str]]:
                return httpx.get(f"http://127.0.0.1:{node_port}/stats").json()["subscribers"]

            def shared_out() -> dict | None:
                held = subscribers()
                owned = [counter(url, "kpi_forecast_e2_nodes_owned") for url in urls]
                return held if (len(held) == NODES and owned == [NODES / 2] * 2 and all(
                    len(ends) == 1 for ends in held.values())) else None

            held = eventually(shared_out, what=lambda: f"{subscribers()} "
                              f"{logs.read_text()[-2000:]}")
            # Each node once, each replica half: whichever started first took everything,
            # then gave half to the other (counted on both sides).
            assert sorted(end for ends in held.values() for end in ends) == sorted(
                endpoints * (NODES // 2))
            given = sum(counter(u, 'kpi_forecast_e2_handovers_total{direction="given"}')
                        for u in urls)
            taken = sum(counter(u, 'kpi_forecast_e2_handovers_total{direction="taken"}')
                        for u in urls)
            assert given == taken == NODES / 2
            assert all(counter(u, "kpi_forecast_e2_indications_total") > 0 for u in urls)

            replicas[0].kill()  # no unsubscription, no lease given back
            replicas[0].wait(10)
            killed = time.monotonic()

            def taken_over() -> bool:
                return all(endpoints[1] in ends for ends in subscribers().values()) and \
                    counter(urls[1], "kpi_forecast_e2_nodes_owned") == NODES

            eventually(taken_over, seconds=TAKEOVER_BOUND_S + 30,
                       what=lambda: f"{subscribers()} {logs.read_text()[-2000:]}")
            # Not before the dead replica's leases ran out: until then they were its own.
            assert time.monotonic() - killed > TAKEOVER_BOUND_S / 2
        finally:
            for process in (*replicas, node):
                process.terminate()
                process.wait(30)


def test_subscription_event_ids_wrap_at_16_bits_and_skip_those_waiting() -> None:
    from kpi_forecast.xapp.ric.e2.discovery import Cell, parse_cell_id
    from kpi_forecast.xapp.ric.e2.subscription import MAX_EVENT_ID, Pending, Subscriber

    subscriber = Subscriber("http://127.0.0.1:1", "127.0.0.1", 4560, 8080, ingestor=None,
                            metrics=None)
    subscriber._last_event = MAX_EVENT_ID - 1
    cell = "00f110:0000000010"
    subscriber._pending[1] = Pending(Cell(cell, parse_cell_id(cell)), 1000, "gnb-000")
    assert [subscriber._event_id() for _ in range(2)] == [MAX_EVENT_ID, 2]


def test_a_subscription_the_manager_no_longer_lists_for_this_endpoint_is_made_again() -> None:
    """Each routed E2 instance listed with this replica's endpoint: kept. One gone, listed for
    another endpoint or under another node (a restarted manager numbers from 1 again):
    forgotten and deleted, to be made again."""
    import asyncio

    from kpi_forecast.xapp.metrics import Metrics
    from kpi_forecast.xapp.ric.e2.ingest import Ingestor
    from kpi_forecast.xapp.ric.e2.subscription import Subscriber
    from tests.xapp_helpers import serving_state

    listed = [
        {"SubscriptionId": 1, "Meid": "gnb-a", "ClientEndpoint": ["10.0.0.5:4560"]},
        {"SubscriptionId": 2, "Meid": "gnb-b", "ClientEndpoint": ["10.0.0.9:4560"]},
        {"SubscriptionId": 3, "Meid": "gnb-x", "ClientEndpoint": ["10.0.0.5:4560"]},
        {"SubscriptionId": 5, "Meid": "gnb-d", "ClientEndpoint": ["10.0.0.5:4560"]},
    ]
    deleted = []

    def submgr(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            deleted.append(request.url.path)
            return httpx.Response(204)
        assert (request.method, request.url.path) == ("GET", "/ric/v1/subscriptions")
        return httpx.Response(200, json=listed)

    metrics = Metrics([0.1], 8)
    subscriber = Subscriber("http://submgr/ric/v1", "10.0.0.5", 4560, 8080,
                            Ingestor(serving_state(), metrics), metrics,
                            transport=httpx.MockTransport(submgr))
    subscriber.subscription_ids.update({"gnb-a": "ra", "gnb-b": "rb", "gnb-c": "rc",
                                        "gnb-d": "rd"})
    subscriber._routes.update({"gnb-a": {1}, "gnb-b": {2}, "gnb-c": {3}, "gnb-d": {5, 6}})
    assert asyncio.run(subscriber.lost()) == {"gnb-b": "rb", "gnb-c": "rc", "gnb-d": "rd"}
    assert subscriber.subscription_ids == {"gnb-a": "ra"}
    assert sorted(deleted) == [f"/ric/v1/subscriptions/r{n}" for n in "bcd"]

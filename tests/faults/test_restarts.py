"""Restarts: Redis with its data, the xApp killed mid-replay, the E2 node and subscription
manager losing every subscription. Nothing the shared history kept is lost; what the RIC
loses is made again within the xApp's own bounds."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis

from kpi_forecast.data.synthetic import generate
from kpi_forecast.xapp.ric.e2.link import RESUBSCRIBE_BOUND_S
from kpi_forecast.xapp.ric.e2.ownership import ROUND_S, TAKEOVER_BOUND_S
from kpi_forecast.xapp.store.shared_state import POLICIES_KEY, RECALIBRATION_KEY
from tests.a1_mediator import Mediator
from tests.faults.conftest import Report
from tests.faults.ric import NAMESPACE, Ric, held, the_file, wait_for
from tests.redis_server import RedisServer
from tests.xapp_helpers import HORIZON, make_model

pytestmark = [pytest.mark.faults, pytest.mark.slow]

# What a value read back may differ from the file by: the KPI file is read as float32.
VALUE_RTOL = float(np.finfo(np.float32).eps)


def cells_file(tmp_path: Path, cells: int = 6, days: int = 9, seed: int = 3) -> Path:
    data = tmp_path / "cells.csv"
    generate(n_cells=cells, days=days, seed=seed, start="2024-03-04", tz="UTC",
             missing=False).to_csv(data, index=False)
    return data


def replayed(ric: Ric, replicas: int = 1) -> bool:
    """Every subscription's replay sent, and all of it taken by the replicas."""
    stats = ric.node_stats()
    subscriptions = sum(len(ends) for ends in stats["subscribers"].values())
    taken = sum(r.metric("kpi_forecast_e2_indications_total") for r in ric.replicas[-replicas:])
    return bool(subscriptions) and stats.get("replays_done", 0) == subscriptions and \
        taken == stats.get("indications", 0)


def replay_bound_s(ric: Ric, speed: float) -> float:
    """A replay's own length at ``speed``, with room for a busy machine, plus the rounds it
    takes a replica to find the nodes and subscribe."""
    panel, _ = the_file(ric.data)
    return 3 * panel.n_steps * panel.step.total_seconds() / speed + 5 * ROUND_S


def whole(ric: Ric, speed: float) -> np.ndarray:
    """The shared history once it holds every step of the file (within a replay's bound),
    checked equal to the file."""
    panel, cells = the_file(ric.data)
    wait_for(lambda: not np.isnan(held(ric.redis.port, panel, cells, ric.kpi)).any(),
             replay_bound_s(ric, speed), ric.tail)
    history = held(ric.redis.port, panel, cells, ric.kpi)
    np.testing.assert_allclose(history, panel.values, rtol=VALUE_RTOL)
    return history


def keyspace(port: int) -> dict[str, object]:
    """Every key of the namespace and its value, as Redis holds it (leases with their TTL
    left out: a renewal moves it)."""
    client = redis.Redis(host="127.0.0.1", port=port)
    found: dict[str, object] = {}
    for key in client.scan_iter(f"{{{NAMESPACE}}},*"):
        kind = client.type(key).decode()
        value = {"string": client.get, "set": client.smembers, "hash": client.hgetall,
                 "zset": lambda k: client.zrange(k, 0, -1, withscores=True)}[kind](key)
        found[key.decode()] = value
    client.close()
    return found


def offsets(blob: bytes) -> dict:
    """The shared recalibration without when it was made: a refresh of the same history
    makes the same offsets."""
    raw = json.loads(blob)
    return {k: v for k, v in raw.items() if k not in ("refreshed_at", "read_at")}


def test_redis_restarted_with_its_data_keeps_history_offsets_policies_and_leases(
        tmp_path: Path, mediator_routes: int, report: Report) -> None:
    speed = 3600 * 200
    ric = Ric(tmp_path, cells_file(tmp_path), make_model(tmp_path / "model"),
              RedisServer(tmp_path, persistence=True).start())
    try:
        ric.start_node("--speed", str(speed), "--cells-per-node", "3")
        replica = ric.add_replica("a", a1={"enabled": True},
                                  recalibration={"everySeconds": 3})
        wait_for(lambda: replayed(ric), replay_bound_s(ric, speed), ric.tail)
        panel, cells = the_file(ric.data)

        async def steer() -> dict:
            mediator = Mediator(mediator_routes)
            await mediator.start()
            try:
                return await mediator.request(replica.rmr_port, "CREATE", "stadium",
                                              {"cells": [cells[0]], "horizon": 5})
            finally:
                await mediator.transport.close()

        assert asyncio.run(steer())["status"] == "OK"

        def forecast(cell: str) -> httpx.Response:
            return httpx.get(f"{replica.url}/v1/cells/{cell}/forecast", timeout=5)

        assert len(forecast(cells[0]).json()["forecasts"]) == 5  # the policy's horizon
        shared = f"{{{NAMESPACE}}},{RECALIBRATION_KEY}:model"  # the one model's
        wait_for(lambda: json.loads(keyspace(ric.redis.port).get(shared) or b"{}").get(
            "windows"), 30, ric.tail)
        # And live scoring's last round, at the replay's last origin (a step past it, the
        # grid's horizon): its records and summary are written by then.
        step = panel.index[1] - panel.index[0]
        last_origin = (int((panel.index[-1] - step).value // step.value) // HORIZON * HORIZON
                       * step.value / 1e9)
        wait_for(lambda: replica.metric(
            'kpi_forecast_live_scored_until_timestamp_seconds{model="model",role="served"}')
            == last_origin, 30, ric.tail)
        handovers = replica.metric('kpi_forecast_e2_handovers_total{direction="taken"}')
        before = keyspace(ric.redis.port)
        # The live replicas' sets, scored by when each was last seen: moved by every round.
        replicas = before.pop(f"{{{NAMESPACE}}},e2-replicas")
        reporting = before.pop(f"{{{NAMESPACE}}},model-replicas-alive")
        leases = {k: v for k, v in before.items() if ",e2-lease:" in k}
        assert len(leases) == 2 and set(leases.values()) == {next(iter(leases.values()))}
        assert before[f"{{{NAMESPACE}}},{POLICIES_KEY}"]

        ric.redis.stop()
        down = time.monotonic()
        assert forecast(cells[1]).status_code == 503  # the cells' history is away
        ric.redis.start()
        after = keyspace(ric.redis.port)  # before the replica has written again
        assert [m for m, _ in after.pop(f"{{{NAMESPACE}}},e2-replicas")] == \
            [m for m, _ in replicas]
        assert [m for m, _ in after.pop(f"{{{NAMESPACE}}},model-replicas-alive")] == \
            [m for m, _ in reporting]
        for key, value in before.items():
            if key == shared:
                assert offsets(after[key]) == offsets(value)
            else:
                assert after.get(key) == value, key

        # The replica serves the cells again at once (a request reconnects), and keeps its
        # nodes: the leases outlived the restart, no node changed hands.
        wait_for(lambda: forecast(cells[1]).status_code == 200, ROUND_S, ric.tail)
        recovered = time.monotonic() - down
        assert len(forecast(cells[0]).json()["forecasts"]) == 5
        np.testing.assert_allclose(held(ric.redis.port, panel, cells, ric.kpi), panel.values,
                                   rtol=VALUE_RTOL)
        time.sleep(2 * ROUND_S)  # two lease rounds on the restarted Redis
        assert replica.metric('kpi_forecast_e2_handovers_total{direction="taken"}') == handovers
        assert replica.metric("kpi_forecast_e2_nodes_owned") == 2
        assert {k: v for k, v in keyspace(ric.redis.port).items()
                if ",e2-lease:" in k} == leases
        report.row(fault="Redis restarted with its data", injected="SIGTERM to redis-server "
                   "(append-only file, fsync always), started again on its files",
                   load="one replica holding 6 cells, 2 E2 node leases, an A1 policy and "
                   "shared offsets", lost="nothing: every key as before", recovery_s=recovered,
                   recovered="cell forecasts answered again, from Redis stopping")
        replica.stop()
    finally:
        ric.close()


def test_an_xapp_killed_mid_replay_loses_nothing_it_kept_and_subscribes_again(
        tmp_path: Path, rmr_library: Path, report: Report) -> None:
    speed = 3600 * 40  # 216 steps in about 5 s: the kill lands mid-replay
    ric = Ric(tmp_path, cells_file(tmp_path), make_model(tmp_path / "model"),
              RedisServer(tmp_path).start())
    try:
        ric.start_node("--speed", str(speed), "--cells-per-node", "3")
        replica = ric.add_replica("a")
        panel, cells = the_file(ric.data)
        total = panel.n_cells * panel.n_steps
        wait_for(lambda: replica.metric("kpi_forecast_e2_indications_total") >= total / 3,
                 replay_bound_s(ric, speed), ric.tail)
        replica.kill()  # no unsubscription, nothing flushed
        killed = time.monotonic()
        kept = held(ric.redis.port, panel, cells, ric.kpi)
        assert 0 < np.count_nonzero(~np.isnan(kept)) < total, "the kill was not mid-replay"

        # The same ports: the dead one's subscriptions, which nobody deleted, still send
        # there. The new process (another replica name) deletes them at once (they report
        # to its own endpoint, and it made none), owns the nodes once the dead one's leases
        # run out, and subscribes again: one subscription of each node, its own.
        replica.start()
        wait_for(lambda: replica.metric(
            'kpi_forecast_e2_subscriptions_deleted_total{reason="stray"}') == 2, 2 * ROUND_S,
            ric.tail)
        wait_for(lambda: [len(ends) for ends in ric.node_stats()["subscribers"].values()]
                 == [1, 1], TAKEOVER_BOUND_S + 2 * ROUND_S, ric.tail)
        resubscribed = time.monotonic() - killed
        assert ric.node_stats()["subscriptions"] == 4  # two before the kill, two after

        # The new subscriptions replay the file from its start: the history ends up whole,
        # and what was kept before the kill is there unchanged.
        after = whole(ric, speed)
        np.testing.assert_allclose(after[~np.isnan(kept)], kept[~np.isnan(kept)],
                                   rtol=VALUE_RTOL)
        report.row(fault="xApp killed mid-replay", injected="SIGKILL to the only replica, "
                   "restarted on its ports", load="E2 replay of 6 cells into Redis",
                   lost="nothing kept before the kill; the history whole after the new "
                   "subscriptions' replay", recovery_s=resubscribed,
                   recovered="subscribed again, from the kill (the dead one's leases run "
                   "out); the dead one's subscriptions deleted")
        replica.stop()
    finally:
        ric.close()


def test_a_replica_killed_for_good_leaves_no_subscription_behind(
        tmp_path: Path, rmr_library: Path, report: Report) -> None:
    """Two replicas share the nodes; one is SIGKILLed and never comes back (a pod gone with
    its address). The other takes its nodes once its leases run out and, before subscribing
    to each, deletes the dead one's subscriptions from the shared record: every node ends
    with one subscription, the survivor's."""
    speed = 3600.0  # an hour a second: the replays outlast the takeover
    ric = Ric(tmp_path, cells_file(tmp_path, cells=12, days=4), make_model(tmp_path / "model"),
              RedisServer(tmp_path).start())
    try:
        ric.start_node("--speed", str(speed), "--cells-per-node", "3")
        survivor, doomed = ric.add_replica("a"), ric.add_replica("b")

        def endpoints() -> dict[str, list[str]]:
            return ric.node_stats()["subscribers"]

        wait_for(lambda: len(endpoints()) == 4 and {e for ends in endpoints().values()
                                                    for e in ends} == {survivor.endpoint,
                                                                       doomed.endpoint}
                 and all(len(ends) == 1 for ends in endpoints().values()),
                 TAKEOVER_BOUND_S + 4 * ROUND_S, ric.tail)
        doomed.kill()
        killed = time.monotonic()
        wait_for(lambda: all(ends == [survivor.endpoint] for ends in endpoints().values())
                 and len(endpoints()) == 4, TAKEOVER_BOUND_S + 3 * ROUND_S, ric.tail)
        recovered = time.monotonic() - killed
        orphaned = survivor.metric(
            'kpi_forecast_e2_subscriptions_deleted_total{reason="orphaned"}')
        assert orphaned == 2, ric.tail()
        report.row(fault="a replica killed for good", injected="SIGKILL to one of two "
                   "replicas, not restarted (its address gone)", load="E2 replay of 12 cells",
                   lost="nothing the survivor takes over; the dead one's subscriptions "
                   "deleted, none left reporting to its address",
                   recovery_s=recovered, recovered="its nodes taken and its subscriptions "
                   "deleted by the survivor")
        survivor.stop()
    finally:
        ric.close()


def test_a_restarted_e2_node_and_subscription_manager_are_subscribed_to_again(
        tmp_path: Path, rmr_library: Path, report: Report) -> None:
    speed = 3600 * 40  # 336 steps in about 8 s: the replay outlasts the restart
    ric = Ric(tmp_path, cells_file(tmp_path, days=14), make_model(tmp_path / "model"),
              RedisServer(tmp_path).start())
    try:
        ric.start_node("--speed", str(speed), "--cells-per-node", "3")
        replica = ric.add_replica("a")
        wait_for(lambda: replica.metric("kpi_forecast_e2_indications_total") > 0,
                 replay_bound_s(ric, speed), ric.tail)
        ric.stop_node()  # every subscription lost with it
        ric.start_node("--speed", str(speed), "--cells-per-node", "3")
        back = time.monotonic()
        assert ric.node_stats()["subscribers"] == {}
        wait_for(lambda: {e for ends in ric.node_stats()["subscribers"].values()
                          for e in ends} == {replica.endpoint}
                 and len(ric.node_stats()["subscribers"]) == 2,
                 RESUBSCRIBE_BOUND_S + ROUND_S, ric.tail)
        resubscribed = time.monotonic() - back
        assert replica.metric("kpi_forecast_e2_subscriptions_lost_total") == 2
        assert "no longer lists the E2 subscriptions" in ric.log.read_text()
        # The restarted node replays its file from the start: the history ends up whole.
        whole(ric, speed)
        report.row(fault="E2 node and subscription manager restarted",
                   injected="the mock E2 node (its E2 Manager and subscription manager) "
                   "stopped and started: every subscription lost", load="E2 replay of 6 cells",
                   lost="nothing: the node replays its file from the start (repeats kept "
                   "once)",
                   recovery_s=resubscribed,
                   recovered="subscribed again, from the node's return")
        replica.stop()
    finally:
        ric.close()

"""Per-cell history: one contract, kept by the in-memory store and by the shared Redis store
(a real redis-server on loopback), so that replicas on Redis behave as one process would."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.ric.e2.ownership import ROUND_S
from kpi_forecast.xapp.store.cell_history import (
    CellHistory,
    CellInfo,
    HistoryError,
    HistoryUnavailable,
    MemoryCellHistory,
)
from kpi_forecast.xapp.store.sdl import RedisCellHistory, address
from kpi_forecast.xapp.store.shared_state import Leases, RedisSharedState, SharedState
from tests.redis_server import redis_server
from tests.tolerance import UNIT_ROUNDOFF_32

T0 = pd.Timestamp("2024-03-30 22:00", tz="UTC")
HOUR = pd.Timedelta("1h")

Opener = Callable[..., "contextlib.AbstractAsyncContextManager[CellHistory]"]


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory):
    with redis_server(tmp_path_factory.mktemp("redis")) as port:
        yield port


_namespaces = iter(range(10**6))


def settings(port: int, **extra: object) -> HistoryStore:
    return HistoryStore(backend="redis", host="127.0.0.1", port=port, **extra)


@pytest.fixture(params=["memory", "redis"])
def opener(request: pytest.FixtureRequest) -> Opener:
    """Opens a store of the parametrised kind; each Redis store gets a namespace of its own."""
    if request.param == "memory":
        @contextlib.asynccontextmanager
        async def memory(freq: str, length: int, max_cells: int = 100_000,
                         aggregate: str = "mean", max_rest_cells: int = 10_000
                         ) -> AsyncIterator[CellHistory]:
            yield MemoryCellHistory(freq, length, max_cells, aggregate,
                                max_rest_cells=max_rest_cells)
        return memory
    port = request.getfixturevalue("redis_port")
    namespace = f"test-{request.node.name}-{next(_namespaces)}"

    @contextlib.asynccontextmanager
    async def shared(freq: str, length: int, max_cells: int = 100_000,
                     aggregate: str = "mean", max_rest_cells: int = 10_000
                     ) -> AsyncIterator[CellHistory]:
        store = await RedisCellHistory.open(settings(port, namespace=namespace,
                                                 max_cells=max_cells,
                                                 max_rest_cells=max_rest_cells),
                                        freq, length, aggregate)
        try:
            yield store
        finally:
            await store.close()
    return shared


def test_history_slides_marks_gaps_and_is_idempotent_per_slot(opener: Opener) -> None:
    async def go() -> None:
        async with opener("1h", 4) as store:
            for k, value in enumerate([1.0, 2.0, 3.0]):
                await store.put("a", T0 + k * HOUR, value)
            await store.put("a", T0 + 5 * HOUR, 6.0)  # skips steps 3 and 4
            values, last = await store.window("a")
            assert last == T0 + 5 * HOUR
            np.testing.assert_array_equal(values, [3.0, np.nan, np.nan, 6.0])
            assert await store.put("a", T0 + 3 * HOUR + pd.Timedelta("20min"), 4.0)  # late
            np.testing.assert_array_equal((await store.window("a"))[0], [3.0, 4.0, np.nan, 6.0])
            assert not await store.put("a", T0, 9.0)  # older than the window
            await store.put("a", T0 + 100 * HOUR, 1.0)  # far ahead: everything before is gone
            np.testing.assert_array_equal((await store.window("a"))[0],
                                          [np.nan, np.nan, np.nan, 1.0])
            assert await store.window("b") is None

    asyncio.run(go())


def test_the_most_recently_reported_cells_come_first_and_agree_with_the_listing(
        opener: Opener) -> None:
    async def go() -> None:
        async with opener("1h", 4) as store:
            for cell, hours in (("a", 2), ("b", 5), ("c", 5), ("d", 1), ("e", 9)):
                await store.put(cell, T0 + hours * HOUR, 1.0)
            assert await store.recent(3) == ["e", "b", "c"]  # a tie goes by cell id
            everything = await store.recent(100)
            listed = sorted(await store.cells(), key=lambda c: c.last, reverse=True)
            assert everything == [info.cell_id for info in listed]
            assert await store.recent(0) == []

    asyncio.run(go())


@pytest.mark.parametrize(("aggregate", "expected"), [("mean", 3.0), ("sum", 6.0)])
def test_reports_within_a_step_aggregate_and_repeats_count_once(
        opener: Opener, aggregate: str, expected: float) -> None:
    async def go() -> None:
        async with opener("1h", 3, aggregate=aggregate) as store:
            quarter = pd.Timedelta("15min")
            assert await store.put("a", T0, 2.0)
            assert await store.put("a", T0 + quarter, 4.0)
            assert not await store.put("a", T0 + quarter, 4.0)  # the same report (a replay)
            assert await store.put("a", T0 + HOUR, 1.0)
            assert not await store.put("a", T0, 2.0)  # a late repeat of an older report
            np.testing.assert_array_equal((await store.window("a"))[0],
                                          [np.nan, expected, 1.0])

    asyncio.run(go())


def test_history_refuses_what_is_not_a_kpi_and_bounds_cells(opener: Opener) -> None:
    async def go() -> None:
        async with opener("1h", 4, max_cells=1) as store:
            with pytest.raises(HistoryError, match="not a KPI"):
                await store.put("a", T0, -1.0)
            with pytest.raises(HistoryError, match="time zone"):
                await store.put("a", pd.Timestamp("2024-01-01"), 1.0)
            # A batch with one bad report is refused whole.
            with pytest.raises(HistoryError, match="not a KPI"):
                await store.put_many("a", [(T0, 1.0), (T0 + HOUR, float("nan"))])
            assert await store.count() == 0
            await store.put("a", T0, 1.0)
            with pytest.raises(HistoryError, match="already holding 1"):
                await store.put("b", T0, 1.0)
            [info] = await store.cells()
            assert (info.cell_id, info.steps_held, info.last) == ("a", 1, T0)
            assert info.first == T0 - 3 * HOUR
            assert await store.count() == 1

    asyncio.run(go())


def test_a_flood_of_rest_written_cells_never_takes_the_room_of_e2s(opener: Opener) -> None:
    """REST-written cells have a room of their own: once it is full a REST write of a new cell
    is refused, and the cells E2 reports still come in, up to their own room."""
    async def go() -> None:
        async with opener("1h", 4, max_cells=3, max_rest_cells=2) as store:
            flood = await store.put_cells([(f"rest-{i}", [(T0, 1.0)]) for i in range(50)],
                                          "rest")
            assert [k for k in flood if not isinstance(k, HistoryError)] == [1, 1]
            assert "written over REST (historyStore.maxRestCells)" in str(flood[-1])
            reported = await store.put_cells([(f"e2-{i}", [(T0, 2.0)]) for i in range(4)])
            assert reported[:3] == [1, 1, 1]
            assert "already holding 3 cells" in str(reported[3])  # E2's own room, full
            # A cell keeps its kind: a REST write into a cell E2 reports is no new REST cell.
            assert await store.put_series("e2-0", T0 + HOUR, [3.0], "rest") == 1
            assert await store.count() == 5

    asyncio.run(go())


def test_history_across_a_dst_switch_in_local_time(opener: Opener) -> None:
    async def go() -> None:
        async with opener("1h", 6) as store:
            local = pd.date_range("2024-03-31 00:00", periods=5, freq="1h", tz="Europe/Paris")
            # 02:00 does not exist that night: no gap, no duplicate.
            assert await store.put_many("a", [(t, float(k)) for k, t in enumerate(local)]) == 5
            np.testing.assert_array_equal((await store.window("a"))[0], [np.nan, 0, 1, 2, 3, 4])

    asyncio.run(go())


def test_random_streams_with_replays_read_the_same_from_both_stores(redis_port: int) -> None:
    """Many cells, reports out of order, repeated and late, several per step: the Redis store
    reads exactly as the in-memory one."""
    rng = np.random.default_rng(3)
    quarter = pd.Timedelta("15min")
    writes = []
    for cell in range(20):
        for k in range(300):
            # Quarter-hour reports, and some at any second: two of those within the same
            # 64th of a step count once in both stores.
            stamp = (T0 + int(rng.integers(0, 60 * 4)) * quarter if k % 2 else
                     T0 + int(rng.integers(0, 60 * 3600)) * pd.Timedelta("1s"))
            writes.append((f"c{cell}", stamp, float(np.round(rng.uniform(0, 100), 3))))
    writes += [writes[i] for i in rng.integers(0, len(writes), 200)]  # replays

    async def go() -> None:
        for aggregate in ("mean", "sum"):
            memory = MemoryCellHistory("1h", 24, aggregate=aggregate)
            shared = await RedisCellHistory.open(
                settings(redis_port, namespace=f"random-{aggregate}"), "1h", 24, aggregate)
            kept = [(await memory.put(*w), await shared.put(*w)) for w in writes]
            assert all(a == b for a, b in kept) and sum(a for a, _ in kept) > 0
            cells = [f"c{cell}" for cell in range(20)]
            for (a, last_a), (b, last_b) in zip(await memory.windows(cells),
                                                await shared.windows(cells), strict=True):
                assert last_a == last_b
                # The same float64 sums, each stored as float32: one rounding apart at most.
                np.testing.assert_allclose(a, b, rtol=2 * UNIT_ROUNDOFF_32)
            assert by_id(await memory.cells()) == by_id(await shared.cells())
            await shared.close()

    asyncio.run(go())


def test_batches_of_many_cells_with_repeats_write_as_one_at_a_time(redis_port: int) -> None:
    """E2 ingestion writes whatever is queued as one batch: many cells, a cell more than once,
    several reports each; Redis takes a batch in one script call and keeps what the in-memory
    store keeps, report for report."""
    rng = np.random.default_rng(5)
    writes = [(f"c{int(rng.integers(0, 30))}",
               [(T0 + int(rng.integers(0, 48 * 64)) * pd.Timedelta("1h") / 64,
                 float(np.round(rng.uniform(0, 100), 3))) for _ in range(int(rng.integers(1, 4)))])
              for _ in range(3000)]
    writes += [writes[i] for i in rng.integers(0, len(writes), 300)]  # replays
    bounds = np.cumsum(rng.integers(1, 200, len(writes)))
    batches = [writes[a:b] for a, b in zip([0, *bounds], bounds, strict=False) if a < len(writes)]

    async def go() -> None:
        memory = MemoryCellHistory("1h", 24, max_cells=25)
        # The 30 cells' last five to come are refused in both.
        shared = await RedisCellHistory.open(
            settings(redis_port, namespace="batches", max_cells=25), "1h", 24)
        for batch in batches:
            kept = await memory.put_cells(batch), await shared.put_cells(batch)
            assert [str(k) for k in kept[0]] == [str(k) for k in kept[1]]
        cells = [f"c{cell}" for cell in range(30)]
        for a, b in zip(await memory.windows(cells), await shared.windows(cells), strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert a[1] == b[1]
                np.testing.assert_allclose(a[0], b[0], rtol=2 * UNIT_ROUNDOFF_32)
        await shared.close()

    asyncio.run(go())


def by_id(infos: list[CellInfo]) -> list[CellInfo]:
    return sorted(infos, key=lambda info: info.cell_id)


def test_redis_keys_follow_sdl_namespacing_and_a_second_grid_is_refused(redis_port: int) -> None:
    import redis

    async def go() -> None:
        store = await RedisCellHistory.open(settings(redis_port, namespace="sdl-keys"), "1h", 4)
        await store.put("cell-7", T0, 5.0)
        await store.close()
        # Another grid while cells are held: refused, naming both steps.
        with pytest.raises(HistoryError, match="holds 1 cells on a 0 days 01:00:00 grid"):
            await RedisCellHistory.open(settings(redis_port, namespace="sdl-keys"), "15min", 4)

    asyncio.run(go())
    keys = sorted(k.decode() for k in redis.Redis(port=redis_port).keys("{sdl-keys},*"))
    assert keys == ["{sdl-keys},cell:cell-7", "{sdl-keys},cells", "{sdl-keys},grid"]


def test_redis_keeps_each_kpis_history_under_keys_of_its_own(redis_port: int) -> None:
    import redis

    async def go() -> None:
        namespace = settings(redis_port, namespace="sdl-kpi")
        traffic = await RedisCellHistory.open(namespace, "1h", 4, kpi="traffic")
        await traffic.put("cell-7", T0, 5.0)
        # Another KPI in the same namespace, even on another grid: a history of its own.
        prb = await RedisCellHistory.open(namespace, "15min", 4, kpi="prb_util")
        await prb.put("cell-7", T0, 0.25)
        await prb.put("cell-8", T0, 0.5)
        assert (await traffic.count(), await prb.count()) == (1, 2)
        [(values, _)] = await traffic.windows(["cell-7"])
        assert values[-1] == 5.0  # the traffic value, not prb_util's
        await prb.close()
        # The same KPI (a restart, another replica) shares the cells.
        again = await RedisCellHistory.open(namespace, "1h", 4, kpi="traffic")
        assert await again.count() == 1
        await again.close()
        await traffic.close()

    asyncio.run(go())
    keys = sorted(k.decode() for k in redis.Redis(port=redis_port).keys("{sdl-kpi},*"))
    assert keys == ["{sdl-kpi},kpi:prb_util,cell:cell-7", "{sdl-kpi},kpi:prb_util,cell:cell-8",
                    "{sdl-kpi},kpi:prb_util,cells", "{sdl-kpi},kpi:prb_util,grid",
                    "{sdl-kpi},kpi:traffic,cell:cell-7", "{sdl-kpi},kpi:traffic,cells",
                    "{sdl-kpi},kpi:traffic,grid"]


def test_redis_address_comes_from_the_dbaas_variables_and_an_absent_server_is_unavailable(
        tmp_path: Path) -> None:
    unset = HistoryStore(backend="redis")
    assert address(unset, {"DBAAS_SERVICE_HOST": "dbaas", "DBAAS_SERVICE_PORT": "6380"}) == (
        "dbaas", 6380)
    assert address(unset, {"DBAAS_SERVICE_HOST": "dbaas"}) == ("dbaas", 6379)
    assert address(settings(7000), {"DBAAS_SERVICE_HOST": "dbaas"}) == ("127.0.0.1", 7000)
    with pytest.raises(HistoryError, match="DBAAS_SERVICE_HOST"):
        address(unset, {})
    with pytest.raises(HistoryError, match="not a port"):
        address(unset, {"DBAAS_SERVICE_HOST": "dbaas", "DBAAS_SERVICE_PORT": "x"})

    import socket
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(HistoryUnavailable, match="opening the history failed"):
        asyncio.run(RedisCellHistory.open(settings(port, timeout_ms=200), "1h", 4))


def test_replicas_with_other_history_lengths_read_the_same_ring(redis_port: int) -> None:
    async def go() -> list[np.ndarray]:
        ring = settings(redis_port, namespace="lengths")
        writer = await RedisCellHistory.open(ring, "1h", 4)
        await writer.put_series("a", T0, [1.0, 2.0, 3.0, 4.0, 5.0])  # the first leaves
        windows = []
        for length in (6, 4, 2):
            reader = await RedisCellHistory.open(ring, "1h", length)
            windows.append((await reader.window("a"))[0])
            await reader.close()
        await writer.close()
        return windows

    longer, same, shorter = asyncio.run(go())
    np.testing.assert_array_equal(longer, [np.nan, np.nan, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(same, [2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(shorter, [4.0, 5.0])


# --- E2 node leases ------------------------------------------------------------------------------


def test_each_e2_node_has_one_owner_shares_follow_the_replicas_and_a_silent_one_is_replaced(
        redis_port: int) -> None:
    nodes = [f"gnb-{k:03d}" for k in range(7)]
    ttl = ROUND_S  # long beside the milliseconds a round takes here, short enough to wait out

    async def go() -> None:
        store = RedisSharedState.open(settings(redis_port, namespace="leases"))
        try:
            async def owners(*replicas: str) -> dict[str, list[str]]:
                return {r: (await store.lease_round(r, nodes, ttl)).owned for r in replicas}

            assert await owners("a") == {"a": nodes}  # alone: every node
            # b joins: a holds everything until its next round gives up what is beyond its
            # share (7 over 2, rounded up), then b takes the rest. Never one node twice.
            first = await owners("b")
            assert first == {"b": []}
            held = await owners("a", "b")
            assert sorted(held["a"] + held["b"]) == nodes
            assert (len(held["a"]), len(held["b"])) == (4, 3)
            assert await owners("a", "b") == held  # a steady state renews, moves nothing
            renewed = time.monotonic()
            # a stops calling (a killed pod): its nodes are free once its leases run out.
            assert await owners("b") == {"b": held["b"]}  # a's leases still hold
            while sorted((await owners("b"))["b"]) != nodes:
                assert time.monotonic() - renewed < 2 * ttl, "a's leases never ran out"
                await asyncio.sleep(0.02)
            assert time.monotonic() - renewed >= ttl  # not before
        finally:
            await store.close()

    asyncio.run(go())


def test_a_node_given_up_is_handed_over_once_its_new_owner_has_subscribed(
        redis_port: int) -> None:
    """Make before break: the replica that gives a node up is told to unsubscribe only once
    the new owner has said, in a round, that it is subscribed to it."""
    nodes = ["gnb-0", "gnb-1"]

    async def go() -> None:
        store = RedisSharedState.open(settings(redis_port, namespace="handover"))
        try:
            a = await store.lease_round("a", nodes, 5.0, subscribed=())
            assert a == Leases(nodes, [])
            a = await store.lease_round("a", nodes, 5.0, subscribed=nodes)  # says so
            await store.lease_round("b", nodes, 5.0)  # b joins: nothing free yet
            a = await store.lease_round("a", nodes, 5.0, subscribed=nodes)
            assert a == Leases(["gnb-0"], [])  # gave gnb-1 up, keeps its subscription
            b = await store.lease_round("b", nodes, 5.0)  # takes it, not yet subscribed
            assert b == Leases(["gnb-1"], [])
            a = await store.lease_round("a", nodes, 5.0, subscribed=nodes)
            assert a == Leases(["gnb-0"], [])  # still nobody else receives gnb-1
            await store.lease_round("b", nodes, 5.0, subscribed=["gnb-1"])
            a = await store.lease_round("a", nodes, 5.0, subscribed=nodes)
            assert a == Leases(["gnb-0"], ["gnb-1"])  # now a may let go
            a = await store.lease_round("a", nodes, 5.0, subscribed=["gnb-0"])
            assert a == Leases(["gnb-0"], [])
        finally:
            await store.close()

    asyncio.run(go())


def test_the_subscriptions_a_replica_no_longer_alive_made_are_orphaned(redis_port: int) -> None:
    """The record of which replica made which subscription to a node: those of a replica
    whose liveness ran out (a crash) are the next owner's to delete; a live one's, and the
    asker's own, are not."""
    ttl = ROUND_S

    async def go() -> None:
        store = RedisSharedState.open(settings(redis_port, namespace="orphans"))
        try:
            for replica in ("a", "b"):
                await store.lease_round(replica, ["gnb-0"], ttl)
            await store.record_subscription("gnb-0", "rest-a", "a")
            await store.record_subscription("gnb-0", "rest-b", "b")
            await store.record_subscription("gnb-0", "rest-z", "z")  # never alive here
            assert sorted(await store.orphaned_subscriptions("gnb-0", "b")) == ["rest-z"]
            renewed = time.monotonic()
            while await store.orphaned_subscriptions("gnb-0", "b") != ["rest-a", "rest-z"]:
                assert time.monotonic() - renewed < 2 * ttl, "a was never found dead"
                await store.lease_round("b", ["gnb-0"], ttl)  # b stays alive, a does not
                await asyncio.sleep(0.05)
            assert time.monotonic() - renewed >= ttl
            await store.forget_subscription("gnb-0", "rest-a")
            assert await store.orphaned_subscriptions("gnb-0", "b") == ["rest-z"]
            assert await store.orphaned_subscriptions("gnb-1", "b") == []
        finally:
            await store.close()

    asyncio.run(go())


def test_a_memory_store_is_one_replica_owning_every_node() -> None:
    store = SharedState()
    assert asyncio.run(store.lease_round("a", ["n1", "n2"], 1.0)) == Leases(["n1", "n2"], [])

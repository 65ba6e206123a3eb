"""Per-cell history in the RIC's Shared Data Layer: Redis, with SDL-style namespaced keys.

O-RAN SC xApps keep their state in the platform's Redis (the DBAAS service, found through
``DBAAS_SERVICE_HOST`` and ``DBAAS_SERVICE_PORT``), under keys ``{namespace},key`` as the SDL
libraries write them; the braces are a Redis Cluster hash tag, so one namespace lives in one
slot and the scripts below may touch all of its keys. With the history here, replicas hold no
state: any of them serves any cell, and a restarted one serves at once.

Each cell is one key, ``{ns},cell:<id>``: a ring of ``length`` steps as a binary string, a
16-byte header (newest slot as a double, ring length as an int32) and 16 bytes per step (the
sum of its reports as a double, then the 64-bit mask of the parts of the step they came in,
as two int32). Reading a cell is one GET and a numpy view, however long its history; the
ring is the in-memory store's, so the two read the same. ``{ns},cells`` is the set of cells
(``{ns},rest-cells`` those first written over REST, which have a quota of their own) and
``{ns},grid`` the grid step, so that a replica serving a model on another grid is refused
instead of misreading the history. A write is one Lua script, atomic in Redis: two replicas
ingesting the same indication, or a replay after a restart, change nothing. ``{ns},shared:<name>``
holds what replicas share besides the history (the quantile recalibration), and the hash
``{ns},map:<name>`` what they share entry by entry (A1 policy instances). ``{ns},e2-lease:<node>``
names the replica that owns an E2 node for now, ``{ns},e2-subscribed:<node>`` the owner once
it has subscribed to the node, and ``{ns},e2-replicas`` the replicas alive (``lease_round``).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.store.history import (
    Aggregate,
    CellInfo,
    History,
    HistoryError,
    HistoryUnavailable,
    Leases,
    Origin,
    aggregated,
    locate,
)

DEFAULT_PORT = 6379

HEADER = struct.Struct("<di4x")  # newest slot, ring length, padding to 16 bytes
RECORD = np.dtype([("sum", "<f8"), ("low", "<u4"), ("high", "<u4")])  # 16 bytes per step

# KEYS: the set of cells, the set of those first written over REST, then each written cell's
# ring. ARGV: the limit of the writer's kind, the writer's kind ("rest" or "e2"), the ring
# length for a new cell, then per cell its id and its reports packed as little-endian doubles
# (slot, part of the step 0-63, value: 24 bytes each). Returns per cell the reports kept, or
# -1 when the cell would be one too many of its kind. One call writes a whole batch of cells:
# a script call per cell cost the ingesting replica more CPU in building and parsing commands
# than the decoding. Reports are taken in order, as the in-memory ring takes them: one older
# than the window so far is dropped, a newer one moves the window on and the steps it skips
# become gaps.
_WRITE = """
local cells, rest = KEYS[1], KEYS[2]
local limit, origin, new_length = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local HEADER, RECORD, REPORT = 16, 16, 24
local empty = string.rep('\\0', RECORD)

local function write(ring, cell, reports)
  local length, newest
  if redis.call('EXISTS', ring) == 0 then
    if redis.call('SISMEMBER', cells, cell) == 0 then
      if origin == 'rest' then
        if redis.call('SCARD', rest) >= limit then return -1 end
        redis.call('SADD', rest, cell)
      elseif redis.call('SCARD', cells) - redis.call('SCARD', rest) >= limit then
        return -1
      end
      redis.call('SADD', cells, cell)
    end
    length, newest = new_length, struct.unpack('<d', reports)
    redis.call('SET', ring, struct.pack('<di4i4', newest, length, 0)
               .. string.rep('\\0', RECORD * length))
  else
    newest, length = struct.unpack('<di4', redis.call('GETRANGE', ring, 0, 11))
  end
  local kept = 0
  for at = 1, #reports, REPORT do
    local slot, part, value = struct.unpack('<ddd', reports, at)
    if slot > newest then
      if slot - newest >= length then
        redis.call('SETRANGE', ring, HEADER, string.rep('\\0', RECORD * length))
      else
        for gap = newest + 1, slot do
          redis.call('SETRANGE', ring, HEADER + (gap % length) * RECORD, empty)
        end
      end
      newest = slot
      redis.call('SETRANGE', ring, 0, struct.pack('<d', newest))
    end
    if slot > newest - length then
      local where = HEADER + (slot % length) * RECORD
      local sum, low, high = struct.unpack('<di4i4', redis.call('GETRANGE', ring, where,
                                                                 where + 15))
      local flag = bit.lshift(1, part % 32)
      if bit.band(part < 32 and low or high, flag) == 0 then
        if part < 32 then low = bit.bor(low, flag) else high = bit.bor(high, flag) end
        redis.call('SETRANGE', ring, where, struct.pack('<di4i4', sum + value, low, high))
        kept = kept + 1
      end
    end
  end
  return kept
end

local results = {}
for k = 3, #KEYS do
  results[k - 2] = write(KEYS[k], ARGV[2 * k - 2], ARGV[2 * k - 1])
end
return results
"""


# KEYS: the sorted set of live replicas (member: replica id, score: when it expires, in ms of
# Redis's clock), then one lease key per node, then one "subscribed by" key per node. ARGV:
# the replica id, the lease's life in ms, the node names in the order of their keys, then per
# node "1" where the replica is subscribed to it. Returns the nodes the replica owns after
# the round, and those it is subscribed to but another owns and has subscribed to. Atomic, so
# two replicas never take one node; Redis's clock, so the replicas' clocks need not agree.
_LEASE_ROUND = """
local n = (#KEYS - 1) / 2
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local me, ttl = ARGV[1], tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local share = math.ceil(n / redis.call('ZCARD', KEYS[1]))
local mine, free = {}, {}
for i = 2, n + 1 do
  local holder = redis.call('GET', KEYS[i])
  if holder == me then table.insert(mine, i) elseif not holder then table.insert(free, i) end
end
while #mine > share do redis.call('DEL', KEYS[table.remove(mine)]) end
for _, i in ipairs(mine) do redis.call('PEXPIRE', KEYS[i], ttl) end
for _, i in ipairs(free) do
  if #mine >= share then break end
  redis.call('SET', KEYS[i], me, 'PX', ttl)
  table.insert(mine, i)
end
local owned, handed, is_mine = {}, {}, {}
for _, i in ipairs(mine) do
  is_mine[i] = true
  table.insert(owned, ARGV[i + 1])
end
for i = 2, n + 1 do
  if ARGV[n + 1 + i] == '1' then
    if is_mine[i] then
      redis.call('SET', KEYS[n + i], me, 'PX', ttl)
    else
      local by = redis.call('GET', KEYS[n + i])
      if by and by ~= me then table.insert(handed, ARGV[i + 1]) end
    end
  end
end
return {owned, handed}
"""


def address(settings: HistoryStore, environ: Mapping[str, str] = os.environ) -> tuple[str, int]:
    """Where Redis is: the controls' host and port, else the RIC's DBAAS service variables."""
    host = settings.host or environ.get("DBAAS_SERVICE_HOST")
    if not host:
        raise HistoryError("historyStore.backend is redis but neither historyStore.host nor "
                           "DBAAS_SERVICE_HOST says where Redis is")
    port = settings.port or environ.get("DBAAS_SERVICE_PORT") or DEFAULT_PORT
    try:
        return host, int(port)
    except ValueError:
        raise HistoryError(f"DBAAS_SERVICE_PORT {port!r} is not a port number") from None


@dataclass
class _Window:
    newest: int  # slot
    sums: np.ndarray  # [length] float64
    seen: np.ndarray  # [length] uint64 masks


class RedisHistory(History):
    """The shared store: the same contract as ``MemoryHistory``, held in Redis."""

    def __init__(self, client: aioredis.Redis, namespace: str, freq: str, length: int,
                 max_cells: int = 100_000, aggregate: Aggregate = "mean",
                 kpi: str | None = None, max_rest_cells: int = 10_000) -> None:
        super().__init__(freq, length, max_cells, aggregate, kpi, max_rest_cells)
        self._redis = client
        self._prefix = f"{{{namespace}}},"
        self._script = client.register_script(_WRITE)
        self._lease_round = client.register_script(_LEASE_ROUND)

    @classmethod
    async def open(cls, settings: HistoryStore, freq: str, length: int,
                   aggregate: Aggregate = "mean", kpi: str | None = None,
                   environ: Mapping[str, str] = os.environ) -> RedisHistory:
        """Connect and claim the namespace's grid and KPI; HistoryError when it holds cells
        on another grid or of another KPI, HistoryUnavailable when Redis does not answer."""
        host, port = address(settings, environ)
        timeout = settings.timeout_ms / 1000.0
        client = aioredis.Redis(
            host=host, port=port, db=settings.db, socket_timeout=timeout,
            socket_connect_timeout=timeout, health_check_interval=30,
            # A dropped connection is retried; a Redis that stays away is the caller's 503.
            retry=Retry(ExponentialBackoff(cap=timeout, base=0.01), retries=2),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )
        store = cls(client, settings.namespace, freq, length, settings.max_cells, aggregate, kpi,
                    settings.max_rest_cells)
        try:
            await store._claim_grid()
        except BaseException:
            await client.aclose()
            raise
        return store

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _cell_key(self, cell_id: str) -> str:
        return self._key(f"cell:{cell_id}")

    async def _claim_grid(self) -> None:
        step = str(self.step.value)
        async with self._errors("opening the history"):
            grid = self._key("grid")
            held_step, held_kpi = await self._redis.hmget(grid, ["step_ns", "kpi"])
            other_step = held_step is not None and held_step.decode() != step
            other_kpi = (held_kpi is not None and self.kpi is not None
                         and held_kpi.decode() != self.kpi)
            cells = await self._redis.scard(self._key("cells")) if other_step or other_kpi else 0
            if cells and other_step:
                other = pd.Timedelta(int(held_step))
                raise HistoryError(
                    f"the shared history {self._prefix[:-1]} holds {cells} cells on a "
                    f"{other} grid, not {self.step}: serve a model with that step, or use "
                    "another historyStore.namespace")
            if cells and other_kpi:
                raise HistoryError(
                    f"the shared history {self._prefix[:-1]} holds {cells} cells of "
                    f"{held_kpi.decode()}, not {self.kpi}: serve a model of that KPI, or use "
                    "another historyStore.namespace")
            claim = {"step_ns": step} | ({"kpi": self.kpi} if self.kpi is not None else {})
            await self._redis.hset(grid, mapping=claim)

    async def _write_cells(self, items: list[tuple[str, list[tuple[int, float]]]],
                           origin: Origin) -> list[int | HistoryError]:
        step = self.step.value
        writes = [(cell_id, reports) for cell_id, reports in items if reports]
        counts: list[int] = []
        if writes:
            keys = [self._key("cells"), self._key("rest-cells")]
            args: list[object] = [self.limit(origin), origin, self.length]
            for cell_id, reports in writes:
                keys.append(self._cell_key(cell_id))
                packed = np.array([(*locate(report, step), value) for report, value in reports],
                                  dtype="<f8")
                args += [cell_id, packed.tobytes()]
            async with self._errors(f"writing {len(writes)} cell(s)"):
                counts = await self._script(keys=keys, args=args)
        results = iter(counts)
        kept: list[int | HistoryError] = []
        for cell_id, reports in items:
            count = next(results) if reports else 0
            kept.append(self.full(cell_id, origin) if count < 0 else int(count))
        return kept

    async def windows(self, cell_ids: Sequence[str]
                      ) -> list[tuple[np.ndarray, pd.Timestamp] | None]:
        rings = await self._rings(cell_ids)
        return [None if ring is None else (
            aggregated(ring.sums, ring.seen, self.aggregate),
            pd.Timestamp(ring.newest * self.step.value, tz="UTC")) for ring in rings]

    async def _rings(self, cell_ids: Sequence[str]) -> list[_Window | None]:
        async with (self._errors(f"reading {len(cell_ids)} cell(s)"),
                    self._redis.pipeline(transaction=False) as pipe):
            for cell_id in cell_ids:
                pipe.get(self._cell_key(cell_id))
            blobs = await pipe.execute()
        return [None if blob is None else self._unpack(blob) for blob in blobs]

    def _unpack(self, blob: bytes) -> _Window:
        """A ring as this replica's window: ``length`` steps, oldest first."""
        newest, held = HEADER.unpack_from(blob)
        newest = int(newest)
        records = np.frombuffer(blob, RECORD, count=held, offset=HEADER.size)
        slots = np.arange(newest - self.length + 1, newest + 1)
        inside = slots > newest - held  # a ring shorter than this window: the rest is missing
        position = slots[inside] % held
        sums = np.zeros(self.length)
        seen = np.zeros(self.length, np.uint64)
        sums[inside] = records["sum"][position]
        seen[inside] = (records["high"][position].astype(np.uint64) << np.uint64(32)
                        | records["low"][position])
        return _Window(newest, sums, seen)

    async def cells(self) -> list[CellInfo]:
        async with self._errors("listing the cells"):
            ids = sorted(m.decode() for m in await self._redis.smembers(self._key("cells")))
        infos = []
        for first in range(0, len(ids), 1000):  # a bounded pipeline, however many cells
            chunk = ids[first:first + 1000]
            for cell_id, ring in zip(chunk, await self._rings(chunk), strict=True):
                if ring is not None:
                    infos.append(CellInfo(cell_id, int(np.count_nonzero(ring.seen)),
                                          *self._span(ring.newest)))
        return infos

    async def count(self) -> int:
        async with self._errors("counting the cells"):
            return int(await self._redis.scard(self._key("cells")))

    async def shared(self, name: str) -> bytes | None:
        async with self._errors(f"reading {name}"):
            return await self._redis.get(self._key(f"shared:{name}"))

    async def share(self, name: str, value: bytes) -> None:
        async with self._errors(f"writing {name}"):
            await self._redis.set(self._key(f"shared:{name}"), value)

    async def entries(self, name: str) -> dict[str, bytes]:
        async with self._errors(f"reading {name}"):
            held = await self._redis.hgetall(self._key(f"map:{name}"))
        return {key.decode(): value for key, value in held.items()}

    async def put_entry(self, name: str, key: str, value: bytes) -> None:
        async with self._errors(f"writing {name} {key}"):
            await self._redis.hset(self._key(f"map:{name}"), key, value)

    async def delete_entry(self, name: str, key: str) -> None:
        async with self._errors(f"deleting {name} {key}"):
            await self._redis.hdel(self._key(f"map:{name}"), key)

    async def lease_round(self, replica: str, nodes: Sequence[str], ttl_s: float,
                          subscribed: Collection[str] = ()) -> Leases:
        ordered = sorted(nodes)
        keys = [self._key("e2-replicas"), *(self._key(f"e2-lease:{n}") for n in ordered),
                *(self._key(f"e2-subscribed:{n}") for n in ordered)]
        flags = ["1" if node in subscribed else "0" for node in ordered]
        async with self._errors("renewing the E2 node leases"):
            owned, handed = await self._lease_round(
                keys=keys, args=[replica, round(ttl_s * 1000), *ordered, *flags])
        return Leases([node.decode() for node in owned], [node.decode() for node in handed])

    async def close(self) -> None:
        await self._redis.aclose()

    @contextlib.asynccontextmanager
    async def _errors(self, doing: str) -> AsyncIterator[None]:
        """Redis's errors become HistoryUnavailable, naming what was being done."""
        try:
            yield
        except RedisError as exc:
            raise HistoryUnavailable(f"history store: {doing} failed: {exc}") from exc

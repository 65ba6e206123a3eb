"""Per-cell history in the RIC's Shared Data Layer: Redis, with SDL-style namespaced keys.

O-RAN SC xApps keep their state in the platform's Redis (the DBAAS service, found through
``DBAAS_SERVICE_HOST`` and ``DBAAS_SERVICE_PORT``), under keys ``{namespace},key`` as the SDL
libraries write them; the braces are a Redis Cluster hash tag, so one namespace lives in one
slot and the scripts below may touch all of its keys. With the history here, replicas hold no
state: any of them serves any cell, and a restarted one serves at once.

Each KPI's history has keys of its own, ``{ns},kpi:<kpi>,...``, so that the models of several
KPIs share a namespace. Each cell is one key, ``{ns},kpi:<kpi>,cell:<id>``: a ring of ``length``
steps as a binary string, a 16-byte header (newest slot as a double, ring length as an int32)
and 16 bytes per step (the sum of its reports as a double, then the 64-bit mask of the parts of
the step they came in, as two int32). Reading a cell is one GET and a numpy view, however long
its history; the ring is the in-memory store's, so the two read the same.
``{ns},kpi:<kpi>,cells`` is the set of cells (``...,rest-cells`` those first written over REST,
which have a quota of their own) and ``...,grid`` the grid step, so that a replica serving a
model on another grid is refused instead of misreading the history. A write is one Lua script,
atomic in Redis: two replicas ingesting the same indication, or a replay after a restart, change
nothing. What replicas share besides the cells lives in the same namespace
(``shared_state.RedisSharedState``)."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import AsyncIterator, Mapping, Sequence
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
from kpi_forecast.xapp.store.cell_history import (
    Aggregate,
    CellHistory,
    CellInfo,
    HistoryError,
    HistoryUnavailable,
    Origin,
    aggregated,
    locate,
    newest_first,
)

DEFAULT_PORT = 6379

HEADER = struct.Struct("<di4x")  # newest slot, ring length, padding to 16 bytes
NEWEST = struct.Struct("<d")  # the header's first field
CELLS_PER_CALL = 1000  # of a listing: its calls bounded, however many cells
RECORD = np.dtype([("sum", "<f8"), ("low", "<u4"), ("high", "<u4")])  # 16 bytes per step

# KEYS: the set of cells, the set of those first written over REST, then each written cell's
# ring. ARGV: the limit of the writer's kind, the writer's kind ("rest" or "e2"), the ring
# length for a new cell, the length of the ring keys' prefix (what precedes a cell's id), then
# every cell's reports as one string of little-endian doubles (per cell: the count, then per
# report its slot, its part of the step 0-63 and its value). Returns per cell the reports kept,
# or -1 when the cell would be one too many of its kind. One call writes a whole batch of
# cells, its reports in one argument: building and parsing a command per cell, or an argument
# per cell, cost the ingesting replica more CPU than the decoding. Reports are taken in order,
# as the in-memory ring takes them: one older than the window so far is dropped, a newer one
# moves the window on and the steps it skips become gaps. Redis's CPU goes on commands, so the
# usual report (a cell's next step) costs three: the header read, its step's record written
# whole (the step is new, so nothing is read or cleared first), and the header's newest slot,
# written once per cell.
_WRITE = """
local cells, rest = KEYS[1], KEYS[2]
local limit, origin, new_length = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local skip, reports = tonumber(ARGV[4]), ARGV[5]
local HEADER, RECORD, REPORT = 16, 16, 24
local empty = string.rep('\\0', RECORD)

local function write(ring, at, count)
  local length, newest
  local head = redis.call('GETRANGE', ring, 0, 11)
  if #head == 0 then
    local cell = string.sub(ring, skip + 1)
    if redis.call('SISMEMBER', cells, cell) == 0 then
      if origin == 'rest' then
        if redis.call('SCARD', rest) >= limit then return -1 end
        redis.call('SADD', rest, cell)
      elseif redis.call('SCARD', cells) - redis.call('SCARD', rest) >= limit then
        return -1
      end
      redis.call('SADD', cells, cell)
    end
    length, newest = new_length, struct.unpack('<d', reports, at)
    redis.call('SET', ring, struct.pack('<di4i4', newest, length, 0)
               .. string.rep('\\0', RECORD * length))
  else
    newest, length = struct.unpack('<di4', head)
  end
  local kept, moved = 0, false
  for _ = 1, count do
    local slot, part, value
    slot, part, value, at = struct.unpack('<ddd', reports, at)
    local cleared = false  -- the step's record is known to be empty
    if slot > newest then
      if slot - newest >= length then
        redis.call('SETRANGE', ring, HEADER, string.rep('\\0', RECORD * length))
      else
        for gap = newest + 1, slot - 1 do
          redis.call('SETRANGE', ring, HEADER + (gap % length) * RECORD, empty)
        end
      end
      newest, moved, cleared = slot, true, true
    end
    if slot > newest - length then
      local where = HEADER + (slot % length) * RECORD
      local sum, low, high = 0, 0, 0
      if not cleared then
        sum, low, high = struct.unpack('<di4i4', redis.call('GETRANGE', ring, where,
                                                             where + 15))
      end
      local flag = bit.lshift(1, part % 32)
      if bit.band(part < 32 and low or high, flag) == 0 then
        if part < 32 then low = bit.bor(low, flag) else high = bit.bor(high, flag) end
        redis.call('SETRANGE', ring, where, struct.pack('<di4i4', sum + value, low, high))
        kept = kept + 1
      end
    end
  end
  if moved then
    redis.call('SETRANGE', ring, 0, struct.pack('<d', newest))
  end
  return kept
end

local results, at = {}, 1
for k = 3, #KEYS do
  local count
  count, at = struct.unpack('<d', reports, at)
  results[k - 2] = write(KEYS[k], at, count)
  at = at + REPORT * count
end
return results
"""

# KEYS: cells' rings. Returns each ring's newest slot (the header's first 8 bytes; empty for a
# cell with no ring): one command for many cells, where a pipeline of GETRANGEs cost the
# event loop tens of microseconds a cell to build and to parse.
_NEWEST = """
local heads = {}
for k = 1, #KEYS do
  heads[k] = redis.call('GETRANGE', KEYS[k], 0, 7)
end
return heads
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


class RedisCellHistory(CellHistory):
    """The shared store: the same contract as ``MemoryCellHistory``, held in Redis."""

    def __init__(self, client: aioredis.Redis, namespace: str, freq: str, length: int,
                 max_cells: int = 100_000, aggregate: Aggregate = "mean",
                 kpi: str | None = None, max_rest_cells: int = 10_000) -> None:
        super().__init__(freq, length, max_cells, aggregate, kpi, max_rest_cells)
        self._redis = client
        # A caller that names no KPI (a test of the store alone) gets the namespace's own keys.
        self._prefix = f"{{{namespace}}},kpi:{kpi}," if kpi else f"{{{namespace}}},"
        self._script = client.register_script(_WRITE)
        self._newest = client.register_script(_NEWEST)

    @classmethod
    async def open(cls, settings: HistoryStore, freq: str, length: int,
                   aggregate: Aggregate = "mean", kpi: str | None = None,
                   environ: Mapping[str, str] = os.environ) -> RedisCellHistory:
        """Connect and claim the KPI's grid; HistoryError when it holds cells on another
        grid, HistoryUnavailable when Redis does not answer."""
        client = connect(settings, environ)
        store = cls(client, settings.namespace, freq, length, settings.max_cells, aggregate, kpi,
                    settings.max_rest_cells)
        try:
            await store._claim_grid()
        except BaseException:
            await client.aclose()
            raise
        return store

    @classmethod
    async def existing(cls, settings: HistoryStore, kpi: str, length: int,
                       aggregate: Aggregate = "mean", environ: Mapping[str, str] = os.environ
                       ) -> RedisCellHistory:
        """The KPI's history as replicas left it, on the grid it holds, to read (nothing is
        claimed); HistoryError where the namespace holds no history of ``kpi``."""
        client = connect(settings, environ)
        try:
            async with errors("opening the history"):
                step = await client.hget(f"{{{settings.namespace}}},kpi:{kpi},grid", "step_ns")
        except BaseException:
            await client.aclose()
            raise
        if step is None:
            await client.aclose()
            raise HistoryError(f"namespace {settings.namespace} holds no history of KPI {kpi}")
        freq = pd.tseries.frequencies.to_offset(pd.Timedelta(int(step))).freqstr
        return cls(client, settings.namespace, freq, length, settings.max_cells, aggregate, kpi,
                   settings.max_rest_cells)

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _cell_key(self, cell_id: str) -> str:
        return self._key(f"cell:{cell_id}")

    async def _claim_grid(self) -> None:
        step = str(self.step.value)
        async with errors("opening the history"):
            grid = self._key("grid")
            held_step = await self._redis.hget(grid, "step_ns")
            other_step = held_step is not None and held_step.decode() != step
            cells = await self._redis.scard(self._key("cells")) if other_step else 0
            if cells and other_step:
                other = pd.Timedelta(int(held_step))
                raise HistoryError(
                    f"the shared history {self._prefix[:-1]} holds {cells} cells on a "
                    f"{other} grid, not {self.step}: serve a model with that step, or use "
                    "another historyStore.namespace")
            await self._redis.hset(grid, "step_ns", step)

    async def _write_cells(self, items: list[tuple[str, list[tuple[int, float]]]],
                           origin: Origin) -> list[int | HistoryError]:
        step = self.step.value
        writes = [(cell_id, reports) for cell_id, reports in items if reports]
        counts: list[int] = []
        if writes:
            keys = [self._key("cells"), self._key("rest-cells")]
            flat: list[float] = []  # per cell: its count of reports, then (slot, part, value)
            for cell_id, reports in writes:
                keys.append(self._cell_key(cell_id))
                flat.append(len(reports))
                for report, value in reports:
                    flat += (*locate(report, step), value)
            packed = struct.pack(f"<{len(flat)}d", *flat)
            async with errors(f"writing {len(writes)} cell(s)"):
                counts = await self._script(keys=keys, args=[
                    self.limit(origin), origin, self.length, len(self._cell_key("")), packed])
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
        # One MGET (the keys share the namespace's hash slot): a pipeline of GETs cost the event
        # loop tens of microseconds a cell to build and to parse.
        if not cell_ids:
            return []
        async with errors(f"reading {len(cell_ids)} cell(s)"):
            blobs = await self._redis.mget([self._cell_key(c) for c in cell_ids])
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
        async with errors("listing the cells"):
            ids = sorted(m.decode() for m in await self._redis.smembers(self._key("cells")))
        infos = []
        for first in range(0, len(ids), CELLS_PER_CALL):  # bounded, however many cells
            chunk = ids[first:first + CELLS_PER_CALL]
            for cell_id, ring in zip(chunk, await self._rings(chunk), strict=True):
                if ring is not None:
                    infos.append(CellInfo(cell_id, int(np.count_nonzero(ring.seen)),
                                          *self._span(ring.newest)))
        return infos

    async def recent(self, limit: int) -> list[str]:
        # Each ring's newest slot only, a bounded number of cells a call: a full read of every
        # ring moves the whole history and decodes it on the event loop, in the way of the
        # requests' own reads.
        async with errors("listing the cells"):
            ids = [m.decode() for m in await self._redis.smembers(self._key("cells"))]
        ends = []
        for first in range(0, len(ids), CELLS_PER_CALL):
            chunk = ids[first:first + CELLS_PER_CALL]
            async with errors(f"reading {len(chunk)} cell(s)"):
                heads = await self._newest(keys=[self._cell_key(c) for c in chunk])
            ends += [(int(NEWEST.unpack(head)[0]), cell_id)
                     for cell_id, head in zip(chunk, heads, strict=True) if head]
        return newest_first(ends, limit)

    async def count(self) -> int:
        async with errors("counting the cells"):
            return int(await self._redis.scard(self._key("cells")))

    async def close(self) -> None:
        await self._redis.aclose()


def connect(settings: HistoryStore, environ: Mapping[str, str] = os.environ) -> aioredis.Redis:
    """A client of the Redis the settings (or the RIC's DBAAS variables) name."""
    host, port = address(settings, environ)
    timeout = settings.timeout_ms / 1000.0
    return aioredis.Redis(
        host=host, port=port, db=settings.db, socket_timeout=timeout,
        socket_connect_timeout=timeout, health_check_interval=30,
        # A dropped connection is retried; a Redis that stays away is the caller's 503.
        retry=Retry(ExponentialBackoff(cap=timeout, base=0.01), retries=2),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )


@contextlib.asynccontextmanager
async def errors(doing: str) -> AsyncIterator[None]:
    """Redis's errors become HistoryUnavailable, naming what was being done."""
    try:
        yield
    except RedisError as exc:
        raise HistoryUnavailable(f"history store: {doing} failed: {exc}") from exc

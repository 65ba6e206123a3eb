"""Per-cell KPI history on the model's grid: the contract every cell store keeps, and the
in-memory store, which holds each cell in a fixed-size ring buffer.

E2 ingestion (and `POST /v1/cells/{id}/history`) writes reports; the cell forecast routes read
each cell's latest window. Several reports within one grid step are aggregated as the KPI
requires (a mean for utilisation, throughput or UE counts, a sum for volumes); a late report
lands in its own step; a report seen before (same cell, same time) changes nothing, so a
replay or a second replica ingesting the same report is harmless. A cell holds ``length``
steps ending at its newest report, and a store at most ``max_cells`` cells that E2 wrote first
and ``max_rest_cells`` that REST callers did.

The in-memory store is the single-node default; ``sdl.RedisCellHistory`` keeps the same
contract in the RIC's shared Redis, so that replicas are stateless. The methods are coroutines
because the shared store does network I/O on the event loop. What replicas share besides the
cells (recalibration offsets, A1 policy instances, E2 node leases) is ``shared_state.py``'s.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from kpi_forecast.model.kpi import kpi_problem

Aggregate = Literal["mean", "sum"]
# Who writes a cell first: E2 ingestion, or a caller over REST. Each kind has its own room
# (max_cells, max_rest_cells), so REST writes can never take the room of the cells E2 reports.
Origin = Literal["e2", "rest"]
Reports = Sequence[tuple[pd.Timestamp, float]]  # (report time, value) of one cell
# Each step is cut in this many parts: reports in different parts of a step are aggregated, a
# second report in the same part is a repeat and counts once (1-minute reports into hourly
# steps each have their own part). Both stores keep this rule, so they read the same.
SUBSLOTS = 64


class HistoryError(ValueError):
    """A write the store refuses; the message says why."""


class HistoryUnavailable(RuntimeError):
    """The store cannot be reached (a shared store's server is down or slow)."""


@dataclass(frozen=True)
class CellInfo:
    cell_id: str
    steps_held: int  # observed samples inside the buffer
    first: pd.Timestamp  # first grid step the buffer covers
    last: pd.Timestamp  # last grid step the buffer covers (the newest sample)


def newest_first(ends: list[tuple[int, str]], limit: int) -> list[str]:
    """The cell ids of the ``limit`` newest (slot, cell id) pairs, newest first, ties by id."""
    return [cell_id for _, cell_id in heapq.nsmallest(limit, ends, key=lambda e: (-e[0], e[1]))]


def locate(report_ns: int, step: int) -> tuple[int, int]:
    """A report's grid slot (UTC ns // step) and its part of that step, 0 to SUBSLOTS - 1."""
    slot, offset = divmod(report_ns, step)
    return slot, offset * SUBSLOTS // step


def aggregated(sums: np.ndarray, seen: np.ndarray, aggregate: Aggregate) -> np.ndarray:
    """Per step: the mean or sum of its reports, NaN where none; ``seen`` are the bit masks."""
    counts = np.bitwise_count(seen)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = sums / counts if aggregate == "mean" else sums.copy()
    out[counts == 0] = np.nan
    return out.astype(np.float32)


class _Ring:
    """One cell: ``length`` steps ending at slot ``end``, slot ``k`` kept at ``k % length``
    (a step forward clears one position, not a copy of the window); per step the sum of its
    reports and a bit mask of the parts of the step they came in."""

    def __init__(self, length: int, end: int) -> None:
        self.sums = np.zeros(length, np.float64)
        self.seen = np.zeros(length, np.uint64)
        self.end = end

    def write(self, slot: int, part: int, value: float) -> bool:
        sums, seen = self.sums, self.seen
        length = len(sums)
        ahead = slot - self.end
        if ahead > 0:
            # Newer than anything held: the steps skipped become gaps, the oldest go.
            if ahead >= length:
                sums[:] = 0.0
                seen[:] = 0
            else:
                first = (self.end + 1) % length
                stop = first + ahead
                sums[first:stop] = 0.0
                seen[first:stop] = 0
                if stop > length:
                    sums[: stop - length] = 0.0
                    seen[: stop - length] = 0
            self.end = slot
        elif ahead <= -length:
            return False  # older than the window
        position = slot % length
        mask, bit = int(seen[position]), 1 << part
        if mask & bit:
            return False  # counted already
        seen[position] = mask | bit
        sums[position] += value
        return True

    def ordered(self, aggregate: Aggregate) -> np.ndarray:
        """The window, oldest step first (see ``aggregated``)."""
        oldest = (self.end + 1) % len(self.sums)
        return np.roll(aggregated(self.sums, self.seen, aggregate), -oldest)


class CellHistory:
    """What every store does, on one grid: ``freq`` steps, ``length`` steps per cell, of one
    ``kpi`` (the served model's target; None where the caller names none)."""

    def __init__(self, freq: str, length: int, max_cells: int = 100_000,
                 aggregate: Aggregate = "mean", kpi: str | None = None,
                 max_rest_cells: int = 10_000) -> None:
        self.step = pd.Timedelta(pd.tseries.frequencies.to_offset(freq))
        self.freq = freq
        self.length = length
        self.max_cells = max_cells
        self.max_rest_cells = max_rest_cells
        self.aggregate = aggregate
        self.kpi = kpi
        # The newest report this process has written (UTC ns; None: none yet): where the
        # cells' time stands, for the work that follows it (live scoring's rounds).
        self.newest_ns: int | None = None

    def limit(self, origin: Origin) -> int:
        return self.max_rest_cells if origin == "rest" else self.max_cells

    def full(self, cell_id: str, origin: Origin) -> HistoryError:
        """The refusal of a new cell when its kind's room is full."""
        if origin == "rest":
            return HistoryError(f"cell {cell_id}: already holding {self.max_rest_cells} cells "
                                "written over REST (historyStore.maxRestCells)")
        return HistoryError(f"cell {cell_id}: already holding {self.max_cells} cells")

    async def put(self, cell_id: str, timestamp: pd.Timestamp, value: float) -> bool:
        """Store one report; False when it is older than the window or a repeat."""
        return bool(await self.put_many(cell_id, [(timestamp, value)]))

    async def put_series(self, cell_id: str, start: pd.Timestamp,
                         values: list[float | None], origin: Origin = "e2") -> int:
        """Store consecutive samples from ``start``; returns how many were kept."""
        return await self.put_many(cell_id, [
            (start + offset * self.step, value)
            for offset, value in enumerate(values) if value is not None
        ], origin)

    async def put_many(self, cell_id: str, reports: Reports, origin: Origin = "e2") -> int:
        """Store a cell's reports in order, all checked before any is written; returns how
        many were kept (the others were older than the window or repeats)."""
        [kept] = await self.put_cells([(cell_id, reports)], origin)
        if isinstance(kept, HistoryError):
            raise kept
        return kept

    async def put_cells(self, items: Sequence[tuple[str, Reports]], origin: Origin = "e2"
                        ) -> list[int | HistoryError]:
        """Many cells' reports at once (one round trip to a shared store). Each cell gets its
        kept count, or the HistoryError that refused its reports; the others are written. A
        new cell counts against the room of ``origin``'s kind; a cell keeps the kind it was
        first written as."""
        checked: list[tuple[str, list[tuple[int, float]] | HistoryError]] = []
        for cell_id, reports in items:
            try:
                checked.append((cell_id, [self._checked(cell_id, t, v) for t, v in reports]))
            except HistoryError as exc:
                checked.append((cell_id, exc))
        written = iter(await self.put_checked(
            [(cell_id, held) for cell_id, held in checked if not isinstance(held, HistoryError)],
            origin))
        return [held if isinstance(held, HistoryError) else next(written)
                for _, held in checked]

    async def put_checked(self, items: list[tuple[str, list[tuple[int, float]]]],
                          origin: Origin = "e2") -> list[int | HistoryError]:
        """``put_cells`` for reports already checked: (UTC ns, a KPI value) each, as E2
        ingestion makes them without a Timestamp per report."""
        written = await self._write_cells(items, origin)
        newest = max((report for _, reports in items for report, _ in reports), default=None)
        if newest is not None and (self.newest_ns is None or newest > self.newest_ns):
            self.newest_ns = newest
        return written

    def _checked(self, cell_id: str, timestamp: pd.Timestamp, value: float) -> tuple[int, float]:
        """(report time in UTC nanoseconds, value), or HistoryError."""
        if timestamp.tzinfo is None:
            raise HistoryError(f"cell {cell_id}: timestamp {timestamp} has no time zone")
        problem = "not a number" if np.isnan(value) else kpi_problem(value)
        if problem:
            raise HistoryError(f"cell {cell_id}: value {value} at {timestamp} is not a KPI: "
                               f"{problem}")
        return timestamp.tz_convert("UTC").value, float(value)

    def _span(self, end: int) -> tuple[pd.Timestamp, pd.Timestamp]:
        """The first and last step of a window ending at slot ``end``."""
        last = pd.Timestamp(end * self.step.value, tz="UTC")
        return last - (self.length - 1) * self.step, last

    async def _write_cells(self, items: list[tuple[str, list[tuple[int, float]]]],
                           origin: Origin) -> list[int | HistoryError]:
        """Checked reports (UTC ns, value) per cell -> kept count or refusal, per cell."""
        raise NotImplementedError

    async def window(self, cell_id: str) -> tuple[np.ndarray, pd.Timestamp] | None:
        """The cell's window (oldest first, NaN = missing) and its last step; None if unknown."""
        return (await self.windows([cell_id]))[0]

    async def windows(self, cell_ids: Sequence[str]
                      ) -> list[tuple[np.ndarray, pd.Timestamp] | None]:
        raise NotImplementedError

    async def cells(self) -> list[CellInfo]:
        raise NotImplementedError

    async def recent(self, limit: int) -> list[str]:
        """The ``limit`` cells reported most recently, newest first (ties by cell id): what a
        recalibration reads, found without reading every cell's window."""
        raise NotImplementedError

    async def count(self) -> int:
        raise NotImplementedError

    async def held(self, cells_per_read: int = 1000) -> pd.DataFrame:
        """Every cell's observed steps, as the training reads its input (``data.ingest``):
        columns ``timestamp`` (UTC), ``cell_id`` and the KPI's (``value`` where the store
        names none), by cell, oldest first; a bounded number of cells a read."""
        ids = sorted(info.cell_id for info in await self.cells())
        frames = []
        for first in range(0, len(ids), cells_per_read):
            chunk = ids[first:first + cells_per_read]
            for cell_id, window in zip(chunk, await self.windows(chunk), strict=True):
                if window is None:
                    continue
                values, last = window
                stamps = pd.date_range(end=last, periods=len(values), freq=self.step)
                observed = ~np.isnan(values)
                frames.append(pd.DataFrame({"timestamp": stamps[observed],
                                            "cell_id": cell_id, "value": values[observed]}))
        frame = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            {"timestamp": pd.DatetimeIndex([], tz="UTC"), "cell_id": [], "value": []}))
        return frame.rename(columns={"value": self.kpi or "value"})

    async def close(self) -> None:
        """Release connections; the history itself stays where it is."""


class MemoryCellHistory(CellHistory):
    """The single-node store. Thread-safe: ingestion and the REST routes run concurrently."""

    def __init__(self, freq: str, length: int, max_cells: int = 100_000,
                 aggregate: Aggregate = "mean", kpi: str | None = None,
                 max_rest_cells: int = 10_000) -> None:
        super().__init__(freq, length, max_cells, aggregate, kpi, max_rest_cells)
        self._cells: dict[str, _Ring] = {}
        self._rest: set[str] = set()  # the cells first written over REST
        self._lock = threading.Lock()

    async def _write_cells(self, items: list[tuple[str, list[tuple[int, float]]]],
                           origin: Origin) -> list[int | HistoryError]:
        with self._lock:
            return [self._write(cell_id, reports, origin) for cell_id, reports in items]

    def _write(self, cell_id: str, reports: list[tuple[int, float]],
               origin: Origin) -> int | HistoryError:
        step = self.step.value
        ring = self._cells.get(cell_id)
        if ring is None and reports:
            held = len(self._rest) if origin == "rest" else len(self._cells) - len(self._rest)
            if held >= self.limit(origin):
                return self.full(cell_id, origin)
            if origin == "rest":
                self._rest.add(cell_id)
            ring = self._cells[cell_id] = _Ring(self.length, reports[0][0] // step)
        return sum(ring.write(*locate(report, step), value) for report, value in reports)

    async def windows(self, cell_ids: Sequence[str]
                      ) -> list[tuple[np.ndarray, pd.Timestamp] | None]:
        with self._lock:
            rings = [self._cells.get(cell_id) for cell_id in cell_ids]
            return [None if ring is None else
                    (ring.ordered(self.aggregate),
                     pd.Timestamp(ring.end * self.step.value, tz="UTC"))
                    for ring in rings]

    async def cells(self) -> list[CellInfo]:
        with self._lock:
            held = [(cell_id, ring.end, int(np.count_nonzero(ring.seen)))
                    for cell_id, ring in self._cells.items()]
        return [CellInfo(cell_id, steps, *self._span(end)) for cell_id, end, steps in held]

    async def recent(self, limit: int) -> list[str]:
        with self._lock:
            ends = [(ring.end, cell_id) for cell_id, ring in self._cells.items()]
        return newest_first(ends, limit)

    async def count(self) -> int:
        return len(self._cells)

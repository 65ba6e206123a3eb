"""Per-cell KPI history on the model's grid, held in fixed-size ring buffers.

E2 ingestion (and `POST /v1/cells/{id}/history`) writes reports; the cell forecast route reads
each cell's latest window. Several reports within one grid step are aggregated as the KPI
requires (a mean for utilisation, throughput or UE counts, a sum for volumes); a late report
lands in its own step; a report seen before (same cell, same time) changes nothing, so a
replay or a second replica ingesting the same report is harmless. Memory is bounded by
``length`` steps per cell and ``max_cells``.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

Aggregate = Literal["mean", "sum"]
SEEN_PER_STEP = 64  # report times remembered per step for de-duplication (1-min reports/h)


class HistoryError(ValueError):
    """A write the store refuses; the message says why."""


@dataclass(frozen=True)
class CellInfo:
    cell_id: str
    steps_held: int  # observed samples inside the buffer
    first: pd.Timestamp  # first grid step the buffer covers
    last: pd.Timestamp  # last grid step the buffer covers (the newest sample)


class _Ring:
    """One cell: ``length`` steps ending at grid step ``end`` (UTC nanoseconds)."""

    def __init__(self, length: int, end: int) -> None:
        self.sums = np.zeros(length, np.float64)
        self.counts = np.zeros(length, np.int32)
        self.end = end
        # Report times already counted, oldest first; bounded, so memory stays flat.
        self.seen: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.max_seen = SEEN_PER_STEP * length

    def write(self, report_ns: int, value: float, step: int) -> bool:
        slot_ns = report_ns // step * step
        length = len(self.sums)
        ahead = (slot_ns - self.end) // step
        if ahead > 0:
            # Newer than anything held: slide the window, the skipped steps become gaps.
            keep = max(length - ahead, 0)
            if keep:
                self.sums[:keep] = self.sums[length - keep :]
                self.counts[:keep] = self.counts[length - keep :]
            self.sums[keep:] = 0.0
            self.counts[keep:] = 0
            self.end = slot_ns
        position = length - 1 - (self.end - slot_ns) // step
        if position < 0 or report_ns in self.seen:
            return False  # older than the window, or counted already
        self.seen[report_ns] = None
        if len(self.seen) > self.max_seen:
            self.seen.popitem(last=False)
        self.sums[position] += value
        self.counts[position] += 1
        return True

    def values(self, aggregate: Aggregate) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            out = self.sums / self.counts if aggregate == "mean" else self.sums.copy()
        out[self.counts == 0] = np.nan
        return out.astype(np.float32)


class MemoryHistory:
    """The single-node store. Thread-safe: ingestion and the REST routes run concurrently."""

    def __init__(self, freq: str, length: int, max_cells: int = 100_000,
                 aggregate: Aggregate = "mean") -> None:
        self.step = pd.Timedelta(pd.tseries.frequencies.to_offset(freq))
        self.freq = freq
        self.length = length
        self.max_cells = max_cells
        self.aggregate = aggregate
        self._cells: dict[str, _Ring] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._cells)

    def put(self, cell_id: str, timestamp: pd.Timestamp, value: float) -> bool:
        """Store one report; False when it is older than the window or a repeat."""
        if timestamp.tzinfo is None:
            raise HistoryError(f"cell {cell_id}: timestamp {timestamp} has no time zone")
        if not np.isfinite(value) or value < 0:
            raise HistoryError(f"cell {cell_id}: value {value} at {timestamp} is not a KPI")
        step = self.step.value
        report = timestamp.tz_convert("UTC").value
        with self._lock:
            ring = self._cells.get(cell_id)
            if ring is None:
                if len(self._cells) >= self.max_cells:
                    raise HistoryError(f"cell {cell_id}: already holding {self.max_cells} cells")
                ring = self._cells[cell_id] = _Ring(self.length, report // step * step)
            return ring.write(report, float(value), step)

    def put_series(self, cell_id: str, start: pd.Timestamp, values: list[float | None]) -> int:
        """Store consecutive samples from ``start``; returns how many were kept."""
        kept = 0
        for offset, value in enumerate(values):
            if value is not None:
                kept += self.put(cell_id, start + offset * self.step, value)
        return kept

    def window(self, cell_id: str) -> tuple[np.ndarray, pd.Timestamp] | None:
        """The cell's buffer (oldest first, NaN = missing) and its last step; None if unknown."""
        with self._lock:
            ring = self._cells.get(cell_id)
            if ring is None:
                return None
            return ring.values(self.aggregate), pd.Timestamp(ring.end, tz="UTC")

    def cells(self) -> list[CellInfo]:
        with self._lock:
            held = [(cell_id, ring.end, int((ring.counts > 0).sum()))
                    for cell_id, ring in self._cells.items()]
        span = (self.length - 1) * self.step
        return [
            CellInfo(cell_id, steps, pd.Timestamp(end, tz="UTC") - span,
                     pd.Timestamp(end, tz="UTC"))
            for cell_id, end, steps in held
        ]

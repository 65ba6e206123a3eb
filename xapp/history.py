"""Per-cell KPI history on the model's grid, held in fixed-size ring buffers.

E2 ingestion (and `POST /v1/cells/{id}/history`) writes samples; the cell forecast route reads
each cell's latest window. A write is idempotent per (cell, grid slot): a replayed or duplicated
report changes nothing. Memory is bounded by ``length`` steps per cell and ``max_cells``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pandas as pd


class HistoryError(ValueError):
    """A write the store refuses; the message says why."""


@dataclass(frozen=True)
class CellInfo:
    cell_id: str
    steps_held: int  # observed samples inside the buffer
    first: pd.Timestamp  # first grid step the buffer covers
    last: pd.Timestamp  # last grid step the buffer covers (the newest sample)


class _Ring:
    """One cell: ``length`` slots ending at grid step ``end`` (UTC nanoseconds)."""

    def __init__(self, length: int, end: int) -> None:
        self.values = np.full(length, np.nan, np.float32)
        self.end = end

    def write(self, slot_ns: int, value: float, step: int) -> bool:
        length = len(self.values)
        ahead = (slot_ns - self.end) // step
        if ahead > 0:
            # Newer than anything held: slide the window, the skipped steps become gaps.
            keep = max(length - ahead, 0)
            if keep:
                self.values[:keep] = self.values[length - keep :]
            self.values[keep:] = np.nan
            self.end = slot_ns
        position = length - 1 - (self.end - slot_ns) // step
        if position < 0:
            return False  # older than the window: nothing to keep it for
        self.values[position] = value
        return True


class MemoryHistory:
    """The single-node store. Thread-safe: ingestion and the REST routes run concurrently."""

    def __init__(self, freq: str, length: int, max_cells: int = 100_000) -> None:
        self.step = pd.Timedelta(pd.tseries.frequencies.to_offset(freq))
        self.freq = freq
        self.length = length
        self.max_cells = max_cells
        self._cells: dict[str, _Ring] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._cells)

    def put(self, cell_id: str, timestamp: pd.Timestamp, value: float) -> bool:
        """Store one sample; False when it is older than the window held for the cell."""
        if timestamp.tzinfo is None:
            raise HistoryError(f"cell {cell_id}: timestamp {timestamp} has no time zone")
        if not np.isfinite(value) or value < 0:
            raise HistoryError(f"cell {cell_id}: value {value} at {timestamp} is not a KPI")
        step = self.step.value
        slot = timestamp.tz_convert("UTC").value // step * step  # the grid step it falls in
        with self._lock:
            ring = self._cells.get(cell_id)
            if ring is None:
                if len(self._cells) >= self.max_cells:
                    raise HistoryError(f"cell {cell_id}: already holding {self.max_cells} cells")
                ring = self._cells[cell_id] = _Ring(self.length, slot)
            return ring.write(slot, float(value), step)

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
            return ring.values.copy(), pd.Timestamp(ring.end, tz="UTC")

    def cells(self) -> list[CellInfo]:
        with self._lock:
            held = [(cell_id, ring.end, int((~np.isnan(ring.values)).sum()))
                    for cell_id, ring in self._cells.items()]
        span = (self.length - 1) * self.step
        return [
            CellInfo(cell_id, steps, pd.Timestamp(end, tz="UTC") - span,
                     pd.Timestamp(end, tz="UTC"))
            for cell_id, end, steps in held
        ]

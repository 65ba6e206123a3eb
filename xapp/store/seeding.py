"""Seeding a new history store from a KPI source (``controls.historyStore.seedFrom``): a file,
a Parquet dataset or the RIC's InfluxDB, read as ``kpi-forecast train --data`` reads it, so
that a model forecasts its cells from its first request rather than once E2 has reported a
context's worth. Cells the store already holds (another replica's, a restarted one's) keep
their own history."""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.xapp.store.cell_history import CellHistory

log = logging.getLogger(__name__)

CELLS_PER_WRITE = 1000  # cells written to the store at a time


async def seed(history: CellHistory, source: str) -> int:
    """Write each cell's last ``history.length`` steps of ``history.kpi`` in ``source`` that
    the store does not hold yet; the cells written. Raises DataError (one line) for a source
    that cannot be read, HistoryUnavailable for a store that cannot be written."""
    assert history.kpi is not None
    panel = await asyncio.to_thread(load_panel, source, history.kpi, freq=history.freq,
                                    recent=history.length)
    held = set(await history.recent(history.max_cells + history.max_rest_cells))
    stamps = panel.index[-history.length:]
    values = panel.values[:, -history.length:]
    items = [(cell, [(stamps[k], float(row[k])) for k in np.flatnonzero(~np.isnan(row))])
             for cell, row in zip(panel.cell_ids, values, strict=True) if cell not in held]
    for first in range(0, len(items), CELLS_PER_WRITE):
        await history.put_cells(items[first:first + CELLS_PER_WRITE], "e2")
    log.info("%s: seeded the history of %d cells from %s (%d held already)", history.kpi,
             len(items), source, len(held))
    return len(items)

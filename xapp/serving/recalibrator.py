"""The served model's quantiles, recalibrated on the recent history of the cells held.

`kpi-forecast predict` and `backtest` recalibrate the quantiles on the week before each origin
(``model.recalibration``). The xApp does the same in the background: when the offsets in force
are older than ``controls.recalibration.everySeconds``, it takes the most recently reported
cells of its history (at most ``maxCells``), forecasts the last week of horizons of each, and
keeps the offsets that make the quantiles hold there; the serving state then carries them
with the model (``ModelView.recalibration``) and a forecast only applies them, so the latency
budget pays nothing. The offsets are kept in the shared state beside the history, so replicas
sharing the RIC's Redis apply the same ones (a replica takes up another's refresh within a
second) and a restarted replica does not recompute them. Offsets belong to one model: a new
model starts with its own calibration and gets its offsets at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.model.recalibration import Recalibration, recalibration, week_of_windows
from kpi_forecast.model.runtime import InputError, OnnxForecaster
from kpi_forecast.xapp.failures import describe, keep_ticking
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from kpi_forecast.xapp.store.shared_state import SharedState

log = logging.getLogger(__name__)

TICK_S = 1.0  # how often the loop looks for another replica's refresh, or a due one
RETRY_S = 60.0  # after a failed or empty refresh (at most everySeconds)
WINDOWS_PER_READ = 64  # cells' windows a refresh reads at a time


@dataclass(frozen=True)
class Offsets:
    """One refresh, as every replica on the same history reads it."""

    model_version: str
    recalibration: Recalibration
    cells: int  # read for it
    refreshed_at: float  # Unix time

    def to_json(self) -> bytes:
        r = self.recalibration
        return json.dumps({
            "model_version": self.model_version, "offsets": r.offsets.tolist(),
            "median": r.median, "windows": r.windows, "residuals": r.residuals,
            "shares": list(r.shares), "steps_per_day": r.steps_per_day,
            "blend_windows": r.blend_windows, "read_at": list(r.read_at),
            "flat_offsets": r.flat_offsets.tolist(),
            "cells": self.cells, "refreshed_at": self.refreshed_at,
        }).encode()

    @classmethod
    def from_json(cls, blob: bytes) -> Offsets:
        """Offsets as ``to_json`` wrote them; ValueError for anything else."""
        try:
            raw = json.loads(blob)
            fitted = Recalibration(np.asarray(raw["offsets"], np.float32), raw["median"],
                                   raw["windows"], raw["residuals"], tuple(raw["shares"]),
                                   raw["steps_per_day"], raw["blend_windows"],
                                   tuple(raw["read_at"]),
                                   np.asarray(raw["flat_offsets"], np.float32))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not offsets as this xApp writes them ({describe(exc)})") from exc
        return cls(raw["model_version"], fitted, raw["cells"], raw["refreshed_at"])


class Recalibrator:
    """Refreshes the offsets of the model ``name`` and puts those in force into ``state``."""

    def __init__(self, state: ServingState, metrics: Metrics, name: str) -> None:
        self._state = state
        self.metrics = metrics
        self.name = name
        self.offsets: Offsets | None = None
        self._offset_names: list[str] = []  # the quantiles on the offset gauge
        self._retry_at = 0.0

    def _for(self, model: OnnxForecaster) -> Offsets | None:
        offsets = self.offsets
        if (offsets is None or offsets.model_version != model.metadata.model_version
                or self._state.view(self.name).controls.recalibration.every_seconds == 0):
            return None
        return offsets

    def describe(self, model: OnnxForecaster) -> dict:
        """What ``model``'s forecasts get now, for GET /v1/models/{name} (the fields of
        ``http.schemas.RecalibrationOut``)."""
        offsets = self._for(model)
        applied = Recalibration() if offsets is None else offsets.recalibration
        names = model.metadata.quantile_names()
        values = applied.offsets if applied.windows else np.zeros(len(names))
        return dict(
            model_weight=applied.weight, naive_weights=applied.naive_shares(),
            offsets={n: round(float(k), 6) for n, k in zip(names, values, strict=True)},
            read_at=dict(zip(names, applied.read_at or model.metadata.quantiles, strict=True)),
            zero_width_offsets=({n: round(float(k), 6) for n, k in
                                 zip(names, applied.flat_offsets, strict=True)}
                                if applied.flat_offsets.size else {}),
            windows=applied.windows, residuals=applied.residuals,
            cells=offsets.cells if offsets and applied.windows else 0,
            refreshed_at=(pd.Timestamp(offsets.refreshed_at, unit="s", tz="UTC").isoformat()
                          if offsets else None),
        )

    async def refresh(self) -> Recalibration:
        """Recompute the offsets from the store now and share them; keeps the old ones (and
        raises) if it cannot."""
        served = self._state.view(self.name)
        model, store = served.model, served.history
        if model is None or store is None or served.shared is None:
            return Recalibration()
        started = time.monotonic()
        chosen = await store.recent(served.controls.recalibration.max_cells)
        held = []
        # A few windows a read: requests' own reads and answers go on between them.
        for first in range(0, len(chosen), WINDOWS_PER_READ):
            held += [w for w in await store.windows(chosen[first:first + WINDOWS_PER_READ])
                     if w is not None]
        fitted = Recalibration()
        if held:
            history = np.stack([values for values, _ in held])
            last = pd.DatetimeIndex([stamp for _, stamp in held])
            windows = week_of_windows(model.metadata.horizon, model.step)
            # controls.recalibration.maxCells has chosen the cells: all of them are fitted.
            fitted = await asyncio.to_thread(recalibration, model, history, last, windows, None)
        offsets = Offsets(model.metadata.model_version, fitted, len(held), time.time())
        await served.shared.put_recalibration(self.name, offsets.to_json())
        self._adopt(model, offsets)
        self.metrics.recalibration_seconds.labels(model=self.name).set(
            time.monotonic() - started)
        log.info("%s: quantiles %s (%d cells)", self.name,
                 fitted.describe(model.metadata.quantile_names()), len(held))
        return fitted

    def _adopt(self, model: OnnxForecaster, offsets: Offsets) -> None:
        self.offsets = offsets
        self.metrics.recalibration_time.labels(model=self.name).set(offsets.refreshed_at)
        self.put_in_force(model)

    def put_in_force(self, model: OnnxForecaster) -> None:
        """Put what ``model``'s forecasts get now into the serving state, where ``model`` is
        the one served (a model about to be swapped in gets them with the swap), and on the
        gauges. After a reload or a config change they would otherwise go on showing offsets
        that no longer apply, and the quantiles of a model no longer served."""
        offsets = self._for(model)
        if self._state.view(self.name).model is model:
            self._state.swap(self.name, recalibration=None if offsets is None
                             else offsets.recalibration)
        m, applied = self.metrics, Recalibration() if offsets is None else offsets.recalibration
        m.recalibration_windows.labels(model=self.name).set(applied.windows)
        m.recalibration_weight.labels(model=self.name).set(applied.weight)
        for name, share in applied.naive_shares().items():
            m.recalibration_naive_weight.labels(model=self.name, naive=name).set(share)
        values = applied.offsets if applied.windows else np.zeros(len(model.metadata.quantiles))
        for name in self._offset_names:  # the quantiles of a model no longer served go
            m.recalibration_offset.remove(self.name, name)
        self._offset_names = model.metadata.quantile_names()
        for name, offset in zip(self._offset_names, values, strict=True):
            m.recalibration_offset.labels(model=self.name, quantile=name).set(float(offset))

    async def take_shared(self, model: OnnxForecaster, shared: SharedState) -> Offsets | None:
        """Adopt the refresh ``shared`` holds for ``model``; the offsets in force for ``model``
        afterwards. The shared one is in force even when ours is newer: two replicas
        refreshing at once keep whichever was written last, and so agree."""
        mine = self._for(model)
        blob = await shared.recalibration(self.name)
        try:
            shared = Offsets.from_json(blob) if blob else None
        except ValueError as exc:  # written by another build: this replica's own stand
            log.warning("shared recalibration offsets: %s", exc)
            shared = None
        if (shared is not None and shared.model_version == model.metadata.model_version
                and (mine is None or shared.refreshed_at != mine.refreshed_at)):
            self._adopt(model, shared)
            return shared
        return mine

    async def tick(self) -> None:
        """Take up the refresh the store holds; refresh when it is not fresh. One that
        found no recent week to fit (a new deployment, history still arriving) is retried like
        a failed one, not kept for ``everySeconds``."""
        served = self._state.view(self.name)
        model, shared = served.model, served.shared
        every = served.controls.recalibration.every_seconds
        if model is None or shared is None or every == 0:
            return
        mine = await self.take_shared(model, shared)
        now = time.time()
        fresh_for = every if mine is not None and mine.recalibration.windows else \
            min(every, RETRY_S)
        if (mine is None or now - mine.refreshed_at >= fresh_for) and now >= self._retry_at:
            self._retry_at = now + min(every, RETRY_S)
            await self.refresh()

    async def run(self) -> None:
        """``tick`` every second until cancelled; the offsets in force stay through a
        failure."""
        await keep_ticking(self.tick, TICK_S, log, f"recalibration of {self.name}",
                           (HistoryUnavailable, InputError, ValueError, KeyError),
                           "the offsets in force stay")

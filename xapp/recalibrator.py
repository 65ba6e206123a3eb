"""The served model's quantiles, recalibrated on the recent history of the cells held.

`kpi-forecast predict` and `backtest` recalibrate the quantiles on the week before each origin
(``model.recalibration``). The xApp does the same in the background: every
``controls.recalibration.everySeconds`` it takes the most recently reported cells of its history
store (at most ``maxCells``), forecasts the last week of horizons of each, and keeps the offsets
that make the quantiles hold there; a forecast then only applies them, so the latency budget
pays nothing. Offsets belong to one model: after a reload they wait for the next refresh, which
comes at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from model.recalibration import Recalibration, recalibration, week_of_windows
from model.runtime import InputError, OnnxForecaster
from xapp.config import RecalibrationControls
from xapp.history import History, HistoryUnavailable
from xapp.metrics import Metrics
from xapp.schemas import RecalibrationOut

log = logging.getLogger(__name__)

TICK_S = 1.0  # how often the loop looks at the clock, the model and the controls


class Recalibrator:
    def __init__(self, model: Callable[[], OnnxForecaster | None],
                 history: Callable[[], History | None],
                 controls: Callable[[], RecalibrationControls], metrics: Metrics) -> None:
        self._model, self._history, self._controls = model, history, controls
        self.metrics = metrics
        self.current = Recalibration()
        self.model_version: str | None = None  # the model the offsets belong to
        self.refreshed_at: pd.Timestamp | None = None
        self.cells = 0  # read by the last refresh
        self._last_try = -float("inf")
        self._tried_version: str | None = None

    def for_model(self, model: OnnxForecaster) -> Recalibration:
        """The offsets to apply to ``model``'s forecasts: none if they belong to another."""
        if (self.model_version != model.metadata.model_version
                or self._controls().every_seconds == 0):
            return Recalibration()
        return self.current

    async def refresh(self) -> Recalibration:
        """Recompute the offsets from the store now; keeps the old ones if it cannot."""
        model, store = self._model(), self._history()
        if model is None or store is None:
            return self.current
        started = time.monotonic()
        cells = sorted(await store.cells(), key=lambda c: c.last, reverse=True)
        chosen = [c.cell_id for c in cells[: self._controls().max_cells]]
        held = [w for w in await store.windows(chosen) if w is not None]
        fitted = Recalibration()
        if held:
            history = np.stack([values for values, _ in held])
            last = pd.DatetimeIndex([stamp for _, stamp in held])
            windows = week_of_windows(model.metadata.horizon, model.step)
            fitted = await asyncio.to_thread(recalibration, model, history, last, windows)
        self.current, self.model_version = fitted, model.metadata.model_version
        self.refreshed_at, self.cells = pd.Timestamp.now(tz="UTC"), len(held)
        self._export(model, fitted, time.monotonic() - started)
        log.info("quantiles %s (%d cells)",
                 fitted.describe(model.metadata.quantile_names()), len(held))
        return fitted

    def describe(self, model: OnnxForecaster) -> RecalibrationOut:
        """What ``model``'s forecasts get now, for GET /v1/model."""
        applied = self.for_model(model)
        names = model.metadata.quantile_names()
        offsets = applied.offsets if applied.windows else np.zeros(len(names))
        return RecalibrationOut(
            offsets={n: round(float(k), 6) for n, k in zip(names, offsets, strict=True)},
            windows=applied.windows, residuals=applied.residuals,
            cells=self.cells if applied.windows else 0,
            refreshed_at=self.refreshed_at.isoformat() if applied.windows else None,
        )

    def _export(self, model: OnnxForecaster, fitted: Recalibration, seconds: float) -> None:
        m = self.metrics
        m.recalibration_seconds.set(seconds)
        m.recalibration_windows.set(fitted.windows)
        m.recalibration_time.set(time.time())
        offsets = fitted.offsets if fitted.windows else np.zeros(len(model.metadata.quantiles))
        for name, offset in zip(model.metadata.quantile_names(), offsets, strict=True):
            m.recalibration_offset.labels(quantile=name).set(float(offset))

    def due(self) -> bool:
        every = self._controls().every_seconds
        model = self._model()
        if every == 0 or model is None:
            return False
        new_model = self._tried_version != model.metadata.model_version
        return new_model or time.monotonic() - self._last_try >= every

    async def run(self) -> None:
        """Refresh when due until cancelled; a failed refresh is logged and retried at the
        next interval, and the offsets in force stay."""
        while True:
            if self.due():
                self._last_try = time.monotonic()
                self._tried_version = self._model().metadata.model_version
                try:
                    await self.refresh()
                except (HistoryUnavailable, InputError) as exc:
                    log.warning("recalibration skipped, the previous offsets stay: %s", exc)
                except Exception:  # a bug here must not end the task or stop serving
                    log.exception("recalibration failed, the previous offsets stay")
            await asyncio.sleep(TICK_S)

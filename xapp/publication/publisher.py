"""Publication: after each reporting period, each held cell's next forecast by each model,
handed to the destinations enabled (``Destination``: the SDL, RMR).

A model's period is over when this replica's history of its KPI first holds a report of a later
step (``CellHistory.newest_ns``); that step is the round's origin, and one replica takes the
round on (``SharedState.claim_round``). For each cell reported in the step before the origin
(among the ``maxCells`` most recently reported), the forecast of the model's horizon from the
origin is made from the history before it as a request is answered: the served model with the
recalibration in force, the seasonal-naive fallback while the model's guard holds or where the
model fails; cells an A1 policy excludes are left out. A destination that fails counts its
forecasts as not published; the others, and serving, go on."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from kpi_forecast.model.runtime import InputError, OnnxForecaster
from kpi_forecast.xapp.failures import describe, keep_ticking
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.publication.document import Forecasts
from kpi_forecast.xapp.ric.a1.policies import Policies
from kpi_forecast.xapp.serving.fallback import fallback_forecast
from kpi_forecast.xapp.serving.forecasting import quantile_name
from kpi_forecast.xapp.serving.scoring import take_slots
from kpi_forecast.xapp.serving.state import ModelView, ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable

log = logging.getLogger(__name__)

TICK_S = 1.0  # how often the loop looks for a period that is over
CELLS_PER_READ = 1000  # cells a round reads, forecasts and hands on at a time


@dataclass(frozen=True)
class Delivery:
    """What a destination did with a round: forecasts (or messages) delivered, those not,
    and why not."""

    delivered: int
    failed: int = 0
    reason: str | None = None


class Destination(Protocol):
    """Where a round's forecasts go; ``publish`` raises HistoryUnavailable (or OSError) where
    none could be delivered."""

    name: str

    async def publish(self, forecasts: Forecasts, ttl_s: float) -> Delivery: ...

    async def close(self) -> None: ...


def forecast_round(served: ModelView, model: OnnxForecaster, origin: int, cells: list[str],
                   windows: np.ndarray, last_slots: np.ndarray) -> Forecasts:
    """The forecasts of ``cells`` from slot ``origin``, made from their ``windows`` [B, n]
    (each ending at its ``last_slots``) before the origin."""
    meta, step = model.metadata, model.step
    horizon = min(served.controls.default_horizon or meta.horizon, meta.horizon)
    history = take_slots(windows, last_slots, origin - windows.shape[1] + np.arange(
        windows.shape[1]))
    source, reason = "model", None if served.guarded is None else "live_skill"
    quantiles = None
    if reason is None:
        ends = pd.DatetimeIndex(np.full(len(history), (origin - 1) * step.value), tz="UTC")
        try:
            quantiles = model.forecast(history, ends, served.recalibration)[:, :horizon]
        except InputError as exc:
            log.warning("publication of %s: the model failed, the fallback answers: %s",
                        served.name, exc)
            reason = "model_error"
    if quantiles is None:
        source = "fallback"
        quantiles = fallback_forecast(history, horizon, list(meta.quantiles),
                                      max(1, pd.Timedelta("1D") // step))
    unit = served.kpi_source.unit if served.kpi_source is not None else ""
    forecasts = Forecasts(served.name, meta.target, unit, meta.model_version, source, reason,
                          pd.Timestamp(origin * step.value, tz="UTC"), served.history.freq,
                          [quantile_name(q) for q in meta.quantiles], dt.datetime.now(dt.UTC),
                          cells, quantiles)
    forecasts.documents  # noqa: B018 - built here, in the round's thread, not on the event loop
    return forecasts


class Publisher:
    """Publishes every model's forecasts of each period to ``destinations``."""

    def __init__(self, state: ServingState, policies: Policies, metrics: Metrics,
                 destinations: Sequence[Destination]) -> None:
        self._state = state
        self._policies = policies
        self.metrics = metrics
        self.destinations = list(destinations)
        self._origins: dict[str, int] = {}  # model -> the last origin looked at

    async def tick(self) -> None:
        for name in list(self._state.models):
            served = self._state.view(name)
            model, history, shared = served.model, served.history, served.shared
            if model is None or history is None or shared is None or history.newest_ns is None:
                continue
            origin = history.newest_ns // model.step.value
            if origin <= self._origins.get(name, -1):
                continue
            self._origins[name] = origin
            ttl_s = served.controls.publication.ttl_periods * model.step.total_seconds()
            if await shared.claim_round("publication", name, model.metadata.model_version,
                                        origin, ttl_s):
                await self.publish_round(served, model, origin, ttl_s)

    async def publish_round(self, served: ModelView, model: OnnxForecaster, origin: int,
                            ttl_s: float) -> None:
        """Forecast the cells of ``served`` from ``origin`` and hand them on, a chunk at a
        time."""
        history, name = served.history, served.name
        assert history is not None
        started = time.monotonic()
        excluded = self._policies.excluded_cells(name)
        chosen = [cell for cell in await history.recent(served.controls.publication.max_cells)
                  if cell not in excluded]
        failed: dict[str, str] = {}
        published = 0
        for first in range(0, len(chosen), CELLS_PER_READ):
            cells = chosen[first:first + CELLS_PER_READ]
            held = [(cell, window) for cell, window in zip(
                cells, await history.windows(cells), strict=True) if window is not None
                and window[1].value // model.step.value >= origin - 1]
            if not held:
                continue
            forecasts = await asyncio.to_thread(
                forecast_round, served, model, origin, [cell for cell, _ in held],
                np.stack([window[0] for _, window in held]),
                np.array([window[1].value // model.step.value for _, window in held]))
            published += len(held)
            for destination in self.destinations:
                try:
                    delivery = await destination.publish(forecasts, ttl_s)
                except (HistoryUnavailable, OSError) as exc:
                    delivery = Delivery(0, len(held), describe(exc))
                labels = {"model": name, "destination": destination.name}
                self.metrics.published.labels(**labels).inc(delivery.delivered)
                self.metrics.publication_failed.labels(**labels).inc(delivery.failed)
                if delivery.reason is not None:
                    failed.setdefault(destination.name, delivery.reason)
        self.metrics.publication_seconds.labels(model=name).set(time.monotonic() - started)
        for destination, why in failed.items():
            log.warning("publication of %s to %s: not published: %s; serving goes on", name,
                        destination, why)
        log.info("%s: published the forecasts of %d cells from %s", name, published,
                 pd.Timestamp(origin * model.step.value, tz="UTC").isoformat())

    async def run(self) -> None:
        """``tick`` every second until cancelled."""
        await keep_ticking(self.tick, TICK_S, log, "publication",
                           (HistoryUnavailable, InputError, ValueError), "it is tried again")

    async def close(self) -> None:
        for destination in self.destinations:
            await destination.close()

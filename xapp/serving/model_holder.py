"""Loading one model to serve, with the per-cell history on its grid: they change together.

A new model is loaded, verified and warmed up off the event loop, given a history store on
its grid and of its KPI (the state replicas share is opened with the first model), and only
then swapped into the serving state (its view, one assignment), so a request always sees a
whole model; on any failure the current one keeps serving. Each model of the repository has a
holder of its own (``repository.ModelSlot``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from kpi_forecast.data.panel import DataError
from kpi_forecast.model.artifact import ArtifactError
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions
from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.failures import describe, log_retry
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving import model_source
from kpi_forecast.xapp.serving.scoring import Grid
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import (
    Aggregate,
    CellHistory,
    HistoryError,
    HistoryUnavailable,
    MemoryCellHistory,
)
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from kpi_forecast.xapp.store.seeding import seed
from kpi_forecast.xapp.store.shared_state import SharedState, open_shared

log = logging.getLogger(__name__)


class ModelHolder:
    """Swaps the model ``name`` (and its history) into ``state``; ``prepare`` runs on a new
    model with the shared state before it serves, ``swapped`` once it does."""

    def __init__(self, state: ServingState, metrics: Metrics, name: str,
                 prepare: Callable[[OnnxForecaster, SharedState], Awaitable[None]],
                 swapped: Callable[[OnnxForecaster], None]) -> None:
        self._state = state
        self._metrics = metrics
        self.name = name
        self._prepare = prepare
        self._swapped = swapped
        self.load_seconds = 0.0
        # Why no model serves yet, while there is none: the readiness probe's answer says it.
        self.problem: str | None = None
        self.loading = False  # a load is under way
        self.first_loading = False  # the start-up load (fetch, retries) is under way
        self._lock = asyncio.Lock()

    @property
    def directory(self) -> str:
        """Where the model is, as the controls in force say."""
        return str(self._state.controls.directory_of(self.name))

    def _load(self, model_dir: str) -> tuple[OnnxForecaster, float]:
        started = time.monotonic()
        controls = self._state.controls
        options = RuntimeOptions(provider=controls.execution_provider,
                                 precision=controls.precision,
                                 intra_op_threads=controls.intra_op_threads)
        forecaster = OnnxForecaster(model_dir, options)  # verifies, then warms up
        check_controls(controls.for_model(self.name), forecaster)
        return forecaster, time.monotonic() - started

    async def reload(self, model_dir: str | None = None, expect_version: str | None = None,
                     loaded: OnnxForecaster | None = None) -> OnnxForecaster:
        """Load, verify and warm up a model directory (or serve ``loaded``, a candidate's
        model), then swap it in; on any failure the current model keeps serving and the error
        propagates. ``expect_version``: refuse a directory holding another version."""
        model_dir = model_dir or self.directory
        async with self._lock:
            loading, self.loading = self.loading, True
            try:
                if loaded is None:
                    forecaster, seconds = await asyncio.to_thread(self._load, model_dir)
                else:
                    check_controls(self._state.controls.for_model(self.name), loaded)
                    forecaster, seconds = loaded, 0.0
                check_version(model_dir, forecaster, expect_version)
                self._check_kpi(model_dir, forecaster)
                history = await self._history_for(model_dir, forecaster)
                if self._state.now.shared is None:  # the first model's load opens it
                    self._state.swap(shared=open_shared(self._state.controls.history_store))
                shared = self._state.now.shared
                await self._prepare(forecaster, shared)
                old = self._state.view(self.name).history
                candidate = self._state.view(self.name).candidate
                if candidate is not None and (candidate is forecaster or (
                        candidate.metadata.freq, candidate.metadata.target) != (
                        forecaster.metadata.freq, forecaster.metadata.target)):
                    candidate = None  # promoted, or no longer the served model's like
                # One view: a request sees the old model with its history or the new with its.
                self._state.swap(self.name, model=forecaster, history=history,
                                 recalibration=None, guarded=None, candidate=candidate)
                self.load_seconds = seconds
                self._swapped(forecaster)
                self.problem = None
            except (ArtifactError, ValueError, OSError) as exc:
                if self._state.view(self.name).model is None:  # why it stays unavailable
                    self.problem = f"model load rejected: {describe(exc)}"
                raise
            finally:
                self.loading = loading
        if old is not None and old is not history:
            await old.close()
        meta = forecaster.metadata
        self._metrics.model.labels(model=self.name).info({
            "version": meta.model_version, "provider": forecaster.provider,
            "attention": str(meta.onnx.get("attention")), "target": meta.target,
            "precision": forecaster.precision,
        })
        self._metrics.model_load.labels(model=self.name).set(seconds)
        self._metrics.model_ready.labels(model=self.name).set(1)
        log.info("serving %s %s from %s on %s (loaded in %.2f s)", self.name,
                 meta.model_version, model_dir, forecaster.provider, seconds)
        return forecaster

    def _check_kpi(self, model_dir: str, model: OnnxForecaster) -> None:
        """A model of a KPI another model serves is refused: E2 fills one history per KPI."""
        kpi = model.metadata.target
        for name, served in self._state.models.items():
            if name != self.name and served.model is not None and (
                    served.model.metadata.target == kpi):
                raise ArtifactError(f"{model_dir}: model {name} already forecasts KPI {kpi}; "
                                    "serve one model per KPI")

    async def unload(self) -> None:
        """Stop serving the model: its requests get 503 until it is loaded again; its history
        (in memory: dropped; in Redis: kept for the next load) is closed."""
        async with self._lock:
            old = self._state.view(self.name).history
            self._state.swap(self.name, model=None, history=None, recalibration=None,
                             guarded=None, candidate=None)
            self.problem = "unloaded"
        if old is not None:
            await old.close()
        self._metrics.model_ready.labels(model=self.name).set(0)
        log.info("unloaded %s", self.name)

    async def load_candidate(self, model_dir: str, expect_version: str | None = None
                             ) -> OnnxForecaster:
        """Load, verify and warm up a candidate version of the model and shadow it: it must
        forecast the served model's KPI on its grid, and be another version (ArtifactError)."""
        async with self._lock:
            served = self._state.view(self.name).model
            if served is None:
                raise ArtifactError(f"{model_dir}: model {self.name} serves no version to "
                                    "shadow a candidate beside; load it first")
            candidate, _ = await asyncio.to_thread(self._load, model_dir)
            check_version(model_dir, candidate, expect_version)
            meta, own = candidate.metadata, served.metadata
            if meta.target != own.target:
                raise ArtifactError(f"{model_dir}: candidate KPI {meta.target} differs from "
                                    f"model {self.name}'s {own.target}")
            if meta.freq != own.freq:
                raise ArtifactError(f"{model_dir}: candidate frequency {meta.freq} differs "
                                    f"from model {self.name}'s {own.freq}")
            if meta.model_version == own.model_version:
                raise ArtifactError(f"{model_dir}: candidate version {meta.model_version} is "
                                    f"the one model {self.name} serves")
            self._state.swap(self.name, candidate=candidate)
        log.info("%s: shadowing candidate %s from %s beside %s", self.name, meta.model_version,
                 model_dir, own.model_version)
        return candidate

    def drop_candidate(self) -> None:
        """Stop shadowing the candidate."""
        if self._state.view(self.name).candidate is not None:
            self._state.swap(self.name, candidate=None)
            log.info("%s: the candidate is no longer shadowed", self.name)

    async def _history_for(self, model_dir: str, model: OnnxForecaster) -> CellHistory:
        """The history held if it is on the model's grid and of its KPI, else a new one that
        is; refuse the model (ArtifactError) when history is held on another grid or of
        another KPI: forecasting one KPI from another's values would be silently wrong."""
        freq, kpi = model.metadata.freq, model.metadata.target
        held = self._state.view(self.name).history
        if held is not None and held.freq == freq and held.kpi == kpi:
            return held
        if held is not None and (cells := await held.count()):
            if held.freq != freq:
                raise ArtifactError(f"{model_dir}: model frequency {freq} differs from the "
                                    f"{held.freq} history held for {cells} cells")
            raise ArtifactError(f"{model_dir}: model KPI {kpi} differs from the {held.kpi} "
                                f"history held for {cells} cells")
        controls = self._state.controls
        source = controls.e2.kpis.get(kpi)
        try:
            history = await open_history(controls, freq, source.aggregate if source else "mean",
                                         kpi)
        except HistoryError as exc:
            raise ArtifactError(f"{model_dir}: {exc}") from None
        seed_from = controls.history_store.seed_from
        if seed_from is not None:
            try:
                await seed(history, seed_from)
            except (DataError, HistoryError) as exc:  # served unseeded: E2 fills the history
                log.warning("%s: history not seeded: %s", self.name, exc)
        return history

    async def reload_logged(self) -> None:
        """A reload that a config change asked for: a failure is logged, not raised."""
        try:
            await self.reload()
        except (ArtifactError, ValueError, OSError, HistoryUnavailable) as exc:
            log.error("%s: model reload rejected, the previous model keeps serving: %s",
                      self.name, describe(exc))

    async def first_load(self) -> None:
        """The start-up load, after fetching the model where controls.modelUrl names one;
        while the model cannot be fetched or the shared history cannot be reached it is
        retried, and the xApp stays unready (``problem`` says why), as O-RAN SC xApps wait
        for their SDL."""
        controls = self._state.controls
        self.loading = self.first_loading = True
        if controls.model_url and model_source.fetched_from(self.directory) != (
                controls.model_url):
            self.problem = f"fetching the model from {controls.model_url}"
            async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type((httpx.HTTPError, OSError, ArtifactError)),
                    wait=wait_exponential(min=0.5, max=30),
                    before_sleep=log_retry(log, self.problem)):
                with attempt:
                    await model_source.fetch(controls.model_url, self.directory)
        try:
            async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(HistoryUnavailable),
                    wait=wait_exponential(min=0.2, max=10),
                    before_sleep=self._waiting_for_history):
                with attempt:
                    await self.reload()
            self.problem = None
        except (ArtifactError, ValueError, OSError) as exc:
            self.problem = f"model load rejected: {describe(exc)}"
            log.error("%s: %s; it stays unavailable", self.name, self.problem)
        finally:
            self.loading = self.first_loading = False

    def _waiting_for_history(self, state: RetryCallState) -> None:
        self.problem = "waiting for the history store"
        log_retry(log, self.problem)(state)

    async def close(self) -> None:
        """Close the model's history (the shared state is the service's to close)."""
        history = self._state.view(self.name).history
        if history is not None:
            await history.close()


async def open_history(controls: Controls, freq: str, aggregate: Aggregate,
                       kpi: str) -> CellHistory:
    """The store the controls pick, on the model's grid, for the model's KPI."""
    settings = controls.history_store
    if settings.backend == "memory":
        return MemoryCellHistory(freq, controls.history_length, settings.max_cells, aggregate,
                                 kpi, settings.max_rest_cells)
    return await RedisCellHistory.open(settings, freq, controls.history_length, aggregate, kpi)


def check_version(model_dir: str, model: OnnxForecaster, expected: str | None) -> None:
    """ArtifactError where ``model_dir`` holds another version than the one decided."""
    if expected is not None and model.metadata.model_version != expected:
        raise ArtifactError(f"{model_dir} holds version {model.metadata.model_version}, not "
                            f"{expected} as decided: the directory changed since")


def check_controls(controls: Controls, model: OnnxForecaster) -> None:
    """Controls that only make sense for some models: reject the pair, with the reason."""
    meta = model.metadata
    missing = [q for q in controls.quantiles or [] if q not in meta.quantiles]
    if missing:
        raise ValueError(f"controls.quantiles {missing} are not among the model's "
                         f"{meta.quantiles}")
    if controls.default_horizon and controls.default_horizon > meta.horizon:
        raise ValueError(f"controls.defaultHorizon {controls.default_horizon} exceeds the "
                         f"model's horizon {meta.horizon}")
    grid = Grid.of(model)
    reason = controls.promotion.never_met(grid.steps_kept, grid.steps_per_day,
                                          controls.scoring.max_cells)
    if reason:
        raise ValueError(f"controls.{reason}")

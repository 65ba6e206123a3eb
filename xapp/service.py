"""The xApp's state and decisions, apart from HTTP: the model being served, per-cell history,
the batcher, and what to answer when the model cannot answer within the latency budget."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from kpi_forecast.model.artifact import ArtifactError
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions
from kpi_forecast.xapp.batcher import DynamicBatcher, ModelUnavailable, QueueFull
from kpi_forecast.xapp.config import Descriptor, model_fields_changed
from kpi_forecast.xapp.controls import Controls, KpiSource
from kpi_forecast.xapp.e2.ingest import Ingestor
from kpi_forecast.xapp.e2.subscription import Subscriber
from kpi_forecast.xapp.e2.transport import Frame, TcpTransport
from kpi_forecast.xapp.failures import describe, log_retry
from kpi_forecast.xapp.fallback import seasonal_naive
from kpi_forecast.xapp.history import (
    Aggregate,
    History,
    HistoryError,
    HistoryUnavailable,
    MemoryHistory,
)
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.overload import ConcurrencyLimit, LoopLag
from kpi_forecast.xapp.recalibrator import Recalibrator
from kpi_forecast.xapp.sdl import RedisHistory

log = logging.getLogger(__name__)

# Each step of the shutdown (deregistration, unsubscribing, writing what E2 delivered,
# finishing queued forecasts) is cut off after this long: four of them stay within the 5 s
# every command gets from SIGTERM to its exit.
STOP_STEP_S = 1.0



class ClientError(Exception):
    """A request the client got wrong: answered with ``status`` and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Shed(Exception):
    """Refused to protect the budget: 503 with Retry-After."""

    def __init__(self, reason: str, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


# Routes of one series per request: their answers steer the admission limit (batch calls are
# slower by design).
SINGLE_ROUTES = ("/v1/forecast", "/v1/cells/{cell_id}/forecast")


@dataclass
class Answer:
    quantiles: np.ndarray  # [rows, horizon, Q]
    names: list[str]  # pNN name of each quantile column
    model_version: str | None
    source: str  # "model" or "fallback"
    reason: str | None
    # Seconds from arrival to its model call; for a fallback, what it waited or would have.
    waited: float


def quantile_name(q: float) -> str:
    return f"p{round(q * 100, 6):g}"


@functools.lru_cache(maxsize=64)
def parse_step(freq: str) -> pd.Timedelta | None:
    """The step of a frequency string, None when it is not one; cached, because pandas'
    parser cost a tenth of a single-cell request, and callers send the same few strings."""
    try:
        return pd.Timedelta(pd.tseries.frequencies.to_offset(freq))
    except ValueError:
        return None


class Service:
    def __init__(self, descriptor: Descriptor, http_port: int = 8080) -> None:
        self.descriptor = descriptor
        self.http_port = http_port
        self.subscriber: Subscriber | None = None
        controls = descriptor.controls
        self.metrics = Metrics(controls.latency_budget_ms / 1000.0,
                               controls.batching.max_batch_size)
        self.model: OnnxForecaster | None = None
        self.load_seconds = 0.0
        self.history: History | None = None
        self._reload_lock = asyncio.Lock()
        self.loop_lag = LoopLag()
        self.ingestor = Ingestor(lambda: self.history, self.metrics, self.kpi_source)
        self.recalibrator = Recalibrator(lambda: self.model, lambda: self.history,
                                         lambda: self.controls.recalibration, self.metrics)
        self.batcher = DynamicBatcher(
            lambda: self.model, self.recalibrator.for_model, self.metrics,
            controls.batching.max_batch_size, controls.batching.max_queue_delay_ms / 1000.0,
            controls.batching.max_queue_size,
        )
        self.e2_transport: TcpTransport | None = None
        # At most the queue's bound; "off" admits everything (the queue's bound still holds).
        self.admission = ConcurrencyLimit(maximum=controls.batching.max_queue_size,
                                          enabled=controls.batching.admission == "adaptive")

    @property
    def controls(self) -> Controls:
        return self.descriptor.controls

    @property
    def budget_s(self) -> float:
        return self.controls.latency_budget_ms / 1000.0

    @property
    def fallback_reserve_s(self) -> float:
        """The slice of a single forecast's budget kept back to answer from the fallback,
        should the model be late."""
        return min(0.1 * self.budget_s, 0.005)

    def budget_for(self, rows: int) -> float:
        """A batch call of many series is held to the budget of the model calls it needs."""
        return self.budget_s * max(1.0, rows / self.controls.batching.max_batch_size)

    # --- the model -------------------------------------------------------------------------

    def _load(self, model_dir: str) -> tuple[OnnxForecaster, float]:
        started = time.monotonic()
        controls = self.controls
        options = RuntimeOptions(provider=controls.execution_provider,
                                 intra_op_threads=controls.intra_op_threads)
        forecaster = OnnxForecaster(model_dir, options)  # verifies, then warms up
        check_controls(controls, forecaster)
        return forecaster, time.monotonic() - started

    async def reload(self, model_dir: str | None = None) -> OnnxForecaster:
        """Load, verify and warm up a model directory, then swap it in; on any failure the
        current model keeps serving and the error propagates."""
        model_dir = model_dir or self.controls.model_dir
        async with self._reload_lock:
            forecaster, seconds = await asyncio.to_thread(self._load, model_dir)
            await self._history_for(model_dir, forecaster)
            await self._shared_offsets(forecaster)
            self.model, self.load_seconds = forecaster, seconds  # one assignment: atomic
            self.recalibrator.show(forecaster)
        meta = forecaster.metadata
        self.metrics.model.info({
            "version": meta.model_version, "provider": forecaster.provider,
            "attention": str(meta.onnx.get("attention")), "target": meta.target,
        })
        self.metrics.model_load.set(seconds)
        self.metrics.model_ready.set(1)
        log.info("serving %s from %s on %s (loaded in %.2f s)", meta.model_version, model_dir,
                 forecaster.provider, seconds)
        return forecaster

    async def _history_for(self, model_dir: str, model: OnnxForecaster) -> None:
        """Keep the history if it is on the model's grid and of its KPI, else open one that
        is; refuse the model (ArtifactError) when history is held on another grid or of
        another KPI: forecasting one KPI from another's values would be silently wrong."""
        freq, kpi = model.metadata.freq, model.metadata.target
        held = self.history
        if held is not None and held.freq == freq and held.kpi == kpi:
            return
        if held is not None and (cells := await held.count()):
            if held.freq != freq:
                raise ArtifactError(f"{model_dir}: model frequency {freq} differs from the "
                                    f"{held.freq} history held for {cells} cells")
            raise ArtifactError(f"{model_dir}: model KPI {kpi} differs from the {held.kpi} "
                                f"history held for {cells} cells")
        source = self.controls.e2.kpis.get(kpi)
        try:
            store = await open_history(self.controls, freq,
                                       source.aggregate if source else "mean", kpi)
        except HistoryError as exc:
            raise ArtifactError(f"{model_dir}: {exc}") from None
        old, self.history = self.history, store
        if old is not None:
            await old.close()

    async def _shared_offsets(self, model: OnnxForecaster) -> None:
        """Take the recalibration other replicas keep for ``model`` before serving it, so a
        restarted replica answers as they do from its first request."""
        try:
            await self.recalibrator.take_shared(model)
        except (HistoryUnavailable, ValueError, KeyError) as exc:
            log.warning("recalibration: the shared offsets cannot be read yet: %s",
                        describe(exc))

    def kpi_source(self) -> KpiSource | None:
        """The E2 measurement behind the served model's KPI (None: not mapped, or no model)."""
        if self.model is None:
            return None
        return self.controls.e2.kpis.get(self.model.metadata.target)

    def apply_descriptor(self, new: Descriptor) -> None:
        """A config reload: raise ValueError to reject it (the old one stays)."""
        if self.model is not None:
            check_controls(new.controls, self.model)
        old = self.controls
        if new.controls.history_store != old.history_store:
            raise ValueError("controls.historyStore changes take effect at the next start: "
                             "restart the xApp (the chart's rollOnConfigChange does it)")
        self.descriptor = new
        batching = new.controls.batching
        self.batcher.configure(batching.max_batch_size, batching.max_queue_delay_ms / 1000.0,
                               batching.max_queue_size)
        self.admission.configure(batching.max_queue_size, batching.admission == "adaptive")
        self.metrics.budget.set(self.budget_s)
        if self.model is not None:  # recalibration turned on or off
            self.recalibrator.show(self.model)
        changed = model_fields_changed(old, new.controls)
        if changed:
            log.info("config: %s changed, reloading the model", ", ".join(changed))
            asyncio.get_running_loop().create_task(self._reload_logged())

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except (ArtifactError, ValueError, OSError, HistoryUnavailable) as exc:
            log.error("model reload rejected, the previous model keeps serving: %s",
                      describe(exc))

    async def _first_load(self) -> None:
        """The start-up load; while the shared history cannot be reached it is retried, and
        the xApp stays unready, as O-RAN SC xApps wait for their SDL."""
        try:
            async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(HistoryUnavailable),
                    wait=wait_exponential(min=0.2, max=10),
                    before_sleep=log_retry(log, "waiting for the history store")):
                with attempt:
                    await self.reload()
        except (ArtifactError, ValueError, OSError) as exc:
            log.error("model load rejected, the xApp stays unready: %s", describe(exc))

    # --- forecasts -------------------------------------------------------------------------

    def admit(self) -> None:
        """Take an in-flight slot for a forecast request, or refuse it before it is read:
        when the limit is reached, or when the event loop runs later than the budget (the
        request has waited in the socket for about as long: it could only be answered late).
        """
        admission = self.admission
        if admission.enabled and self.loop_lag.seconds > self.budget_s - self.fallback_reserve_s:
            self.metrics.shed.labels(reason="deadline").inc()
            raise Shed("deadline", f"the event loop runs {self.loop_lag.seconds * 1000:.1f} ms "
                       "late: the request could not be answered within the budget",
                       retry_after_s=1.0)
        if not admission.try_acquire():
            self.metrics.shed.labels(reason="overload").inc()
            raise Shed("overload", f"{admission.in_flight} forecasts in flight: the limit "
                       "at which requests wait no longer than the budget allows",
                       retry_after_s=1.0)

    def show_admission(self) -> None:
        """The admission's state on its gauges (NaN until single forecasts have measured it);
        set when scraped, so the hot path pays nothing for them."""
        admission, metrics = self.admission, self.metrics
        metrics.admission_limit.set(admission.limit)
        metrics.queueing_delay.set(admission.delay)
        metrics.queueing_allowance.set(admission.allowance)
        metrics.service_time.set(admission.service)

    def served(self) -> OnnxForecaster:
        """The model in force, or a Shed while none is loaded."""
        if self.model is None:
            self.metrics.shed.labels(reason="not_ready").inc()
            raise Shed("not_ready", "no model loaded yet", retry_after_s=1.0)
        return self.model

    def check_request(self, freq: str, horizon: int | None) -> tuple[OnnxForecaster, int]:
        model = self.served()
        meta = model.metadata
        step = parse_step(freq)
        if step is None:
            raise ClientError(422, f"freq {freq!r} is not a frequency such as 1h or 15min")
        if step != model.step:
            raise ClientError(422, f"freq {freq} does not match the model's {meta.freq}")
        horizon = horizon or self.controls.default_horizon or meta.horizon
        if horizon > meta.horizon:
            raise ClientError(422, f"horizon {horizon} exceeds the model's {meta.horizon}")
        return model, horizon

    def selected(self, model: OnnxForecaster) -> tuple[list[int], list[str]]:
        quantiles = model.metadata.quantiles
        wanted = self.controls.quantiles or quantiles
        columns = [quantiles.index(q) for q in wanted]
        return columns, [quantile_name(q) for q in wanted]

    async def forecast(
        self, history: np.ndarray, last: pd.DatetimeIndex, horizon: int | None, arrival: float,
        freq: str,
    ) -> Answer:
        """Forecasts for the rows of ``history`` [B, n]; the model within the budget, else the
        fallback, else a Shed."""
        model, horizon = self.check_request(freq, horizon)
        if np.isnan(history).all(axis=1).any():
            row = int(np.isnan(history).all(axis=1).argmax())
            raise ClientError(422, f"series {row} has no observed value")
        deadline = arrival + self.budget_for(len(history))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self.metrics.shed.labels(reason="deadline").inc()
            raise Shed("deadline", "the latency budget was spent before the request was read")
        reserve = self.fallback_reserve_s if len(history) == 1 else 0.0
        # With a full batch or more already waiting, the wait can be told in advance; short
        # of that the request joins the next batch and the timeout below guards it.
        if (len(history) == 1 and self.batcher.depth >= self.batcher.max_batch_size
                and (wait := self.batcher.expected_wait()) > remaining - reserve):
            # It counts the wait it was spared.
            return self._fallback(model, history, horizon, "queue_delay",
                                  time.monotonic() - arrival + wait)
        try:
            future = self.batcher.submit(history, last)
        except QueueFull as exc:
            self.metrics.shed.labels(reason="queue_full").inc()
            raise Shed("queue_full", str(exc), retry_after_s=max(self.budget_s, 0.1)) from None
        try:
            if len(history) == 1:
                result = await asyncio.wait_for(future, remaining - reserve)
            else:
                result = await future  # a batch call has no cheaper answer: it waits its turn
        except TimeoutError:
            return self._fallback(model, history, horizon, "timeout", (
                self.batcher.call_started(future) or time.monotonic()) - arrival)
        except ModelUnavailable:
            return self._fallback(model, history, horizon, "model_error",
                                  time.monotonic() - arrival)
        columns, names = self.selected(result.model)
        return Answer(result.quantiles[:, :horizon, columns], names,
                      result.model.metadata.model_version, "model", None,
                      result.started - arrival)

    def _fallback(self, model: OnnxForecaster, history: np.ndarray, horizon: int,
                  reason: str, waited: float) -> Answer:
        self.metrics.fallbacks.labels(reason=reason).inc(len(history))
        columns, names = self.selected(model)
        quantiles = [model.metadata.quantiles[c] for c in columns]
        steps_per_day = int(pd.Timedelta("1D") // model.step)
        forecast = np.stack([
            seasonal_naive(row, horizon, quantiles, steps_per_day) for row in history
        ])
        return Answer(forecast, names, None, "fallback", reason, waited)

    def observe(self, route: str, arrival: float, answer: Answer, rows: int = 1) -> float:
        """Record a forecast response's latency and whether it was goodput (the model's answer
        within the budget); a single forecast's wait and latency steer the admission limit.
        Returns the latency in milliseconds."""
        now = time.monotonic()
        seconds = now - arrival
        self.metrics.request_latency.labels(route=route).observe(seconds)
        if seconds > self.budget_for(rows):
            self.metrics.budget_violations.labels(route=route).inc()
        elif answer.source == "model":
            self.metrics.goodput.labels(route=route).inc()
        if route in SINGLE_ROUTES:
            self.admission.record(answer.waited, max(seconds, answer.waited),
                                  self.budget_s - self.fallback_reserve_s, now)
        return seconds * 1000.0

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> list[asyncio.Task]:
        """Start the batcher, the E2 listener if enabled, and load the model in the
        background (alive before ready)."""
        e2 = self.controls.e2
        if e2.enabled:
            self.e2_transport = TcpTransport(
                "0.0.0.0", e2.port,
                on_broken=lambda reason: self.metrics.e2_rejected.labels(reason=reason).inc())
            await self.e2_transport.start(self._on_frame)
            log.info("e2: listening for rmr-data frames on port %d", self.e2_transport.port)
        tasks = []
        if e2.enabled and e2.submgr_url:
            self.subscriber = Subscriber(e2.submgr_url, e2.endpoint_host(), self.e2_transport.port,
                                         self.http_port, self.ingestor)
            tasks.append(asyncio.create_task(self._subscribe_when_ready(), name="e2-subscribe"))
        return tasks + [
            asyncio.create_task(self.ingestor.run(), name="e2-writer"),
            asyncio.create_task(self.batcher.run(), name="batcher"),
            asyncio.create_task(self.loop_lag.run(), name="loop-lag"),
            asyncio.create_task(self.recalibrator.run(), name="recalibration"),
            asyncio.create_task(self._first_load(), name="initial-model-load"),
        ]

    async def _on_frame(self, frame: Frame) -> None:
        if self.subscriber is not None and await self.subscriber.handle(frame):
            return
        await self.ingestor.handle(frame)

    async def _subscribe_when_ready(self) -> None:
        """Subscribe once a model says which KPI, and at which step, to ask for; a model whose
        KPI no measurement feeds (controls.e2.kpis) is said once, then waited out."""
        told = None
        while (source := self.kpi_source()) is None:
            if self.model is not None and self.model.metadata.model_version != told:
                told = self.model.metadata.model_version
                log.warning("e2: not subscribing: the model's KPI %r has no measurement in "
                            "controls.e2.kpis (%s); waiting for a model or config that maps it",
                            self.model.metadata.target, ", ".join(self.controls.e2.kpis))
            await asyncio.sleep(0.1)
        step_ms = int(self.model.step / pd.Timedelta("1ms"))
        period = self.controls.e2.reporting_period_ms or step_ms
        await self.subscriber.subscribe(source.measurement, period)

    async def stop(self, tasks: list[asyncio.Task]) -> None:
        """Unsubscribe, write what E2 delivered, finish queued forecasts, close: each step
        bounded, so that the process exits within seconds of SIGTERM whatever is down."""
        if self.subscriber is not None:
            await self.subscriber.unsubscribe(within_s=STOP_STEP_S)
        if self.e2_transport is not None:
            await self.e2_transport.close()
        try:  # what was received is written, if it can be
            await asyncio.wait_for(self.ingestor.flush(), STOP_STEP_S)
        except TimeoutError:
            log.warning("e2: stopping with indications unwritten: the history store did not "
                        "take them within %.0f s", STOP_STEP_S)
        await self.batcher.drain(STOP_STEP_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.batcher.close()
        if self.history is not None:
            await self.history.close()


async def open_history(controls: Controls, freq: str, aggregate: Aggregate,
                       kpi: str) -> History:
    """The store the controls pick, on the model's grid, for the model's KPI."""
    settings = controls.history_store
    if settings.backend == "memory":
        return MemoryHistory(freq, controls.history_length, settings.max_cells, aggregate, kpi)
    return await RedisHistory.open(settings, freq, controls.history_length, aggregate, kpi)


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

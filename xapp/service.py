"""The xApp's parts wired together, apart from HTTP: the serving state (``serving.state``: the
controls, the model and its stores, as one snapshot) and everyone who reads it, the model
holder that swaps models into it, the batcher, the decision of what to answer, admission, the
background recalibration, E2 and A1 (``ric``) and the metrics; their start and orderly stop,
and a new descriptor handed to each."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.descriptor.config_file import Descriptor, model_fields_changed
from kpi_forecast.xapp.descriptor.controls import E2, Controls
from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.a1.handler import PolicyHandler
from kpi_forecast.xapp.ric.a1.policies import Policies
from kpi_forecast.xapp.ric.e2.ingest import Ingestor
from kpi_forecast.xapp.ric.e2.link import E2Link
from kpi_forecast.xapp.ric.e2.ownership import Ownership
from kpi_forecast.xapp.ric.e2.rmr import RmrTransport
from kpi_forecast.xapp.ric.e2.transport import Transport
from kpi_forecast.xapp.serving.batcher import DynamicBatcher
from kpi_forecast.xapp.serving.budget import (
    Admission,
    ConcurrencyLimit,
    Decider,
    LoopLag,
    latency_budget_s,
)
from kpi_forecast.xapp.serving.model_holder import ModelHolder, check_controls
from kpi_forecast.xapp.serving.recalibrator import Recalibrator
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from kpi_forecast.xapp.store.shared_state import SharedState

log = logging.getLogger(__name__)

# Each step of the shutdown (deregistration, unsubscribing, writing what E2 delivered,
# finishing queued forecasts) is cut off after this long: four of them stay within the 5 s
# every command gets from SIGTERM to its exit.
STOP_STEP_S = 1.0


# Builds the rmr-data transport from the E2 controls and a counter of broken messages (by
# reason): librmr's, unless another is handed over (the benchmarks' TCP baseline).
TransportFactory = Callable[[E2, Callable[[str], None]], Transport]


def rmr_transport(e2: E2, broken: Callable[[str], None]) -> Transport:
    return RmrTransport(e2.port, on_broken=broken)


class Service:
    def __init__(self, descriptor: Descriptor, http_port: int = 8080,
                 e2_transport: TransportFactory = rmr_transport) -> None:
        self.descriptor = descriptor
        controls = descriptor.controls
        self.state = ServingState(controls)
        self.metrics = Metrics(controls.latency_budget_ms / 1000.0,
                               controls.batching.max_batch_size)
        self.recalibrator = Recalibrator(self.state, self.metrics)
        self.holder = ModelHolder(self.state, self.metrics, self._prepare, self._swapped)
        self.batcher = DynamicBatcher(
            self.state, self.metrics, controls.batching.max_batch_size,
            controls.batching.max_queue_delay_ms / 1000.0, controls.batching.max_queue_size)
        self.decider = Decider(self.batcher, self.metrics)
        self.loop_lag = LoopLag()
        # At most the queue's bound; "off" admits everything (the queue's bound still holds).
        self.limit = ConcurrencyLimit(maximum=controls.batching.max_queue_size,
                                      enabled=controls.batching.admission == "adaptive")
        self.admission = Admission(self.limit, self.loop_lag, self.state, self.metrics)
        self.ingestor = Ingestor(self.state, self.metrics)
        # One RMR endpoint carries E2 and A1 alike.
        transport = (e2_transport(controls.e2, self._broken)
                     if controls.e2.enabled or controls.a1.enabled else None)
        self.policies = Policies()
        self.a1 = (PolicyHandler(self.policies, transport, self.state, self.metrics)
                   if controls.a1.enabled and transport is not None else None)
        self.e2 = E2Link(self.state, transport, self.ingestor, http_port, Ownership(self.state),
                         self.metrics, self.a1)

    def _broken(self, reason: str) -> None:
        self.metrics.e2_rejected.labels(reason=reason).inc()

    async def _prepare(self, model: OnnxForecaster, shared: SharedState) -> None:
        """Take the recalibration and the A1 instances other replicas keep before serving
        ``model``, so a restarted replica answers as they do from its first request."""
        try:
            await self.recalibrator.take_shared(model, shared)
        except (HistoryUnavailable, ValueError, KeyError) as exc:
            log.warning("recalibration: the shared offsets cannot be read yet: %s",
                        describe(exc))
        if self.a1 is not None:
            try:  # the A1 instances other replicas took, in force from the first request
                await self.a1.take_stored(shared)
            except HistoryUnavailable as exc:
                log.warning("a1: the stored instances cannot be read yet: %s", describe(exc))

    def _swapped(self, model: OnnxForecaster) -> None:
        self.recalibrator.put_in_force(model)
        if self.a1 is not None:
            self.a1.model_swapped()

    def apply_descriptor(self, new: Descriptor) -> None:
        """A config reload: raise ValueError to reject it (the old one stays)."""
        served = self.state.now
        if served.model is not None:
            check_controls(new.controls, served.model)
        old = served.controls
        for name in ("history_store", "a1", "model_url"):
            if getattr(new.controls, name) != getattr(old, name):
                alias = Controls.model_fields[name].alias
                raise ValueError(f"controls.{alias} changes take effect at the next start: "
                                 "restart the xApp (the chart's rollOnConfigChange does it)")
        self.descriptor = new
        self.state.swap(controls=new.controls)
        batching = new.controls.batching
        self.batcher.configure(batching.max_batch_size, batching.max_queue_delay_ms / 1000.0,
                               batching.max_queue_size)
        self.limit.configure(batching.max_queue_size, batching.admission == "adaptive")
        self.metrics.budget.set(latency_budget_s(new.controls))
        if served.model is not None:  # recalibration turned on or off
            self.recalibrator.put_in_force(served.model)
        changed = model_fields_changed(old, new.controls)
        if changed:
            log.info("config: %s changed, reloading the model", ", ".join(changed))
            asyncio.get_running_loop().create_task(self.holder.reload_logged())

    async def start(self) -> list[asyncio.Task]:
        """Start E2 if enabled, the batcher and the probes, and load the model in the
        background (alive before ready)."""
        a1 = [] if self.a1 is None else [asyncio.create_task(self.a1.run(), name="a1")]
        return [*await self.e2.start(), *a1,
                asyncio.create_task(self.batcher.run(), name="batcher"),
                asyncio.create_task(self.loop_lag.run(), name="loop-lag"),
                asyncio.create_task(self.recalibrator.run(), name="recalibration"),
                asyncio.create_task(self.holder.first_load(), name="initial-model-load")]

    async def stop(self, tasks: list[asyncio.Task]) -> None:
        """Stop E2, finish queued forecasts, close: each step bounded, so that the process
        exits within seconds of SIGTERM whatever is down."""
        await self.e2.stop(STOP_STEP_S)
        await self.batcher.drain(STOP_STEP_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.batcher.close()
        await self.holder.close()

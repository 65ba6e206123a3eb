"""The xApp's components wired together, apart from HTTP: the serving state
(``serving.state``: the controls, each model and its stores, as one snapshot) and everyone who
reads it, each model's parts (``serving.repository.ModelSlot``: the holder that swaps it in,
its batcher, its background recalibration and live scoring), the answering of forecasts
(``serving.forecasting``), admission, E2 and A1 (``ric``), the publication of each period's
forecasts (``publication``) and the metrics; their start and
orderly stop, models loaded and unloaded by name, and a new descriptor handed to each."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kpi_forecast.xapp.descriptor.config_file import Descriptor
from kpi_forecast.xapp.descriptor.controls import E2, Controls
from kpi_forecast.xapp.descriptor.fields import changed
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.publication.influx import InfluxForecasts
from kpi_forecast.xapp.publication.publisher import Destination, Publisher
from kpi_forecast.xapp.publication.rmr import RmrForecasts
from kpi_forecast.xapp.publication.sdl import SdlForecasts
from kpi_forecast.xapp.ric.a1.handler import PolicyHandler
from kpi_forecast.xapp.ric.a1.policies import Policies
from kpi_forecast.xapp.ric.e2.ingest import Ingestor
from kpi_forecast.xapp.ric.e2.link import E2Link
from kpi_forecast.xapp.ric.e2.ownership import Ownership, replica_name
from kpi_forecast.xapp.ric.rmr import RmrTransport
from kpi_forecast.xapp.ric.transport import Transport
from kpi_forecast.xapp.serving import repository
from kpi_forecast.xapp.serving.admission import (
    Admission,
    ConcurrencyLimit,
    LoopLag,
    latency_budget_s,
)
from kpi_forecast.xapp.serving.forecasting import Forecasting
from kpi_forecast.xapp.serving.lifecycle import Lifecycle
from kpi_forecast.xapp.serving.model_holder import check_controls
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.serving.state import ServingState

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


def destinations(controls: Controls, rmr: RmrForecasts | None) -> list[Destination]:
    """Where the forecasts of each period go (controls.publication)."""
    sdl, influx = controls.publication.sdl, controls.publication.influx
    return [*([SdlForecasts.open(controls.history_store, sdl.namespace)] if sdl.enabled
              else []), *([rmr] if rmr is not None else []),
            *([InfluxForecasts(influx.url)] if influx.url is not None else [])]


class Components:
    def __init__(self, descriptor: Descriptor, http_port: int = 8080,
                 e2_transport: TransportFactory = rmr_transport) -> None:
        self.descriptor = descriptor
        controls = descriptor.controls
        names, default = repository.at_start(controls)  # RepositoryError: refused at start
        self.state = ServingState(controls, names, default)
        every = [controls, *(controls.for_model(name) for name in controls.per_model)]
        self.metrics = Metrics({latency_budget_s(each) for each in every},
                               max(each.batching.max_batch_size for each in every))
        self.loop_lag = LoopLag()
        # At most the queue's bound; "off" admits everything (the queue's bound still holds).
        self.limit = ConcurrencyLimit(maximum=controls.batching.max_queue_size,
                                      enabled=controls.batching.admission == "adaptive")
        self.admission = Admission(self.limit, self.loop_lag, self.state, self.metrics)
        self.ingestor = Ingestor(self.state, self.metrics)
        # One RMR endpoint carries E2, A1 and the forecasts published alike.
        rmr_publication = controls.publication.rmr
        transport = (e2_transport(controls.e2, self._broken)
                     if controls.e2.enabled or controls.a1.enabled or rmr_publication.enabled
                     else None)
        rmr = (RmrForecasts(transport, rmr_publication.triggers, self.metrics)
               if rmr_publication.enabled and transport is not None else None)
        self.policies = Policies()
        self.a1 = (PolicyHandler(self.policies, transport, self.state, self.metrics)
                   if controls.a1.enabled and transport is not None else None)
        self.forecasting = Forecasting(self.state, self.policies, self.admission, self.metrics)
        self.publisher = Publisher(self.state, self.policies, self.metrics,
                                   destinations(controls, rmr))
        replica = replica_name()
        self.e2 = E2Link(self.state, transport, self.ingestor, http_port,
                         Ownership(self.state, replica), self.metrics, self.a1,
                         None if rmr is None else rmr.acknowledged)
        # Each model's serving parts, by name.
        self.models: dict[str, ModelSlot] = {name: self._slot(name) for name in names}
        self.lifecycle = Lifecycle(self.state, self.metrics, self.models, replica)
        # The parts of the model the routes without a model name answer for.
        self.default = self.models[default]
        self._tasks: dict[str, list[asyncio.Task]] = {}

    def _slot(self, name: str) -> ModelSlot:
        return ModelSlot(name, self.state, self.metrics, self.a1)

    def slot(self, name: str) -> ModelSlot:
        """The parts of the model ``name``; UnknownModel names those there are."""
        try:
            return self.models[name]
        except KeyError:
            raise repository.unknown(name, self.state, self.state.controls) from None

    def _broken(self, reason: str) -> None:
        self.metrics.e2_rejected.labels(reason=reason).inc()

    async def load(self, name: str, model_dir: str | None = None) -> ModelSlot:
        """Load (or reload) the model ``name`` of the repository, from ``model_dir`` where
        given, as the deployment's decision; a model not served before gets its parts. Raises
        what ``Lifecycle.decide`` raises, and UnknownModel for a name the repository does not
        hold."""
        slot = self.models.get(name)
        if slot is None:
            if name not in repository.listed(self.state.controls):
                raise repository.unknown(name, self.state, self.state.controls)
            self.state.add(name)
            slot = self.models[name] = self._slot(name)
            self._tasks[name] = self._start_slot(slot, first_load=False)
        await self.lifecycle.decide(name, "load", model_dir)
        return slot

    async def unload(self, name: str) -> None:
        self.slot(name)  # UnknownModel
        await self.lifecycle.decide(name, "unload")
        if self.a1 is not None:
            self.a1.models_changed()

    def apply_descriptor(self, new: Descriptor) -> None:
        """A config reload: raise ValueError to reject it (the old one stays)."""
        for name, served in self.state.models.items():
            if served.model is not None:
                try:
                    check_controls(new.controls.for_model(name), served.model)
                except ValueError as exc:
                    raise ValueError(f"{exc} (model {name})") from None
        unheld = set(new.controls.per_model) - set(repository.listed(new.controls))
        if unheld:
            raise ValueError(f"controls.perModel names {', '.join(sorted(unheld))}, which the "
                             "repository does not hold")
        old = self.state.controls
        at_start = changed(old, new.controls, "restart")
        if at_start:
            raise ValueError(f"controls.{at_start[0]} changes take effect at the next start: "
                             "restart the xApp (the chart's rollOnConfigChange does it)")
        self.descriptor = new
        self.state.swap(controls=new.controls)
        for name, slot in self.models.items():
            controls = self.state.view(name).controls
            slot.batcher.configure(controls.batching.max_batch_size,
                                   controls.batching.max_queue_delay_ms / 1000.0,
                                   controls.batching.max_queue_size)
            self.metrics.budget.labels(model=name).set(latency_budget_s(controls))
        batching = new.controls.batching
        self.limit.configure(batching.max_queue_size, batching.admission == "adaptive")
        for name, served in self.state.models.items():
            if served.model is not None:  # recalibration turned on or off
                self.models[name].recalibrator.put_in_force(served.model)
        on_reload = changed(old, new.controls, "reload")
        if on_reload:
            log.info("config: %s changed, reloading the models", ", ".join(on_reload))
            for slot in self.models.values():
                asyncio.get_running_loop().create_task(slot.holder.reload_logged())

    def _start_slot(self, slot: ModelSlot, first_load: bool = True) -> list[asyncio.Task]:
        name = slot.name
        tasks = [asyncio.create_task(slot.batcher.run(), name=f"batcher-{name}"),
                 asyncio.create_task(slot.recalibrator.run(), name=f"recalibration-{name}"),
                 asyncio.create_task(slot.scorer.run(), name=f"scoring-{name}"),
                 asyncio.create_task(slot.candidate_scorer.run(),
                                     name=f"scoring-candidate-{name}")]
        if first_load:
            tasks.append(asyncio.create_task(slot.holder.first_load(), name=f"load-{name}"))
        return tasks

    async def start(self) -> list[asyncio.Task]:
        """Start E2 if enabled and the probes, each model's batcher and recalibration, and
        load the models in the background (alive before ready)."""
        a1 = [] if self.a1 is None else [asyncio.create_task(self.a1.run(), name="a1")]
        self._tasks = {name: self._start_slot(slot) for name, slot in self.models.items()}
        publication = ([asyncio.create_task(self.publisher.run(), name="publication")]
                       if self.publisher.destinations else [])
        return [*await self.e2.start(), *a1, *publication,
                asyncio.create_task(self.loop_lag.run(), name="loop-lag"),
                asyncio.create_task(self.lifecycle.run(), name="lifecycle")]

    async def stop(self, tasks: list[asyncio.Task]) -> None:
        """Stop E2, finish queued forecasts, close: each step bounded, so that the process
        exits within seconds of SIGTERM whatever is down."""
        await self.e2.stop(STOP_STEP_S)
        await asyncio.gather(*(slot.batcher.drain(STOP_STEP_S)
                               for slot in self.models.values()))
        every = [*tasks, *(task for each in self._tasks.values() for task in each)]
        for task in every:
            task.cancel()
        await asyncio.gather(*every, return_exceptions=True)
        for slot in self.models.values():
            slot.batcher.close()
            await slot.holder.close()
        await self.publisher.close()
        shared = self.state.now.shared
        if shared is not None:
            await shared.close()

"""From RIC Indication frames to per-cell history.

Each subscription action the xApp holds reports one cell's measurements; the subscription
layer records that as a route, (RIC request instance id, action id) -> cell and measurement.
An indication is decoded (E2AP, then the KPM header and message) and the values of each
measurement are put on the grid of the model whose KPI it is behind (one value per granularity
period from the collection start time), for that KPI's history. The writes
queue up and one writer task takes them to the history in batches, so that a shared store
costs one round trip per batch rather than per indication, and decoding never waits on it;
the history aggregates several reports within one step and counts repeats once.

Anything wrong with a frame is counted by reason and dropped; it is logged at most once a
minute per reason, so a misbehaving node cannot flood the log or stop ingestion.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from kpi_forecast.model.kpi import kpi_problem
from kpi_forecast.xapp.descriptor.controls import Ratio
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2 import fast_indication, kpm
from kpi_forecast.xapp.ric.transport import MESSAGE_TYPES, Frame
from kpi_forecast.xapp.serving.state import ModelView, ServingState
from kpi_forecast.xapp.store.cell_history import HistoryError, HistoryUnavailable

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Route:
    cell_id: str
    granularity_ms: int  # what the action definition asked for, when a report omits it


@dataclass(frozen=True)
class _Sources:
    """What the models served read from a report."""

    direct: dict[str, ModelView]  # measurement -> the model whose KPI it is
    ratios: tuple[tuple[ModelView, Ratio], ...]  # KPIs that may come as two measurements
    names: list[str]  # every measurement read


@dataclass(frozen=True)
class _Write:
    model: str  # whose KPI's history the values go to
    cell_id: str
    reports: list[tuple[int, float]]  # (UTC ns, value), checked KPI values
    collected_ns: int  # the end of the indication's last reporting period, UTC ns
    first: bool  # the first of its indication's writes: it counts the indication


class Ingestor:
    """Indications into the models' histories (``state.models``): the values of the
    measurement behind each model's KPI into that KPI's history."""

    def __init__(self, state: ServingState, metrics: Metrics, max_batch: int = 512,
                 max_pending: int = 10_000) -> None:
        self._state = state
        self._metrics = metrics
        self.routes: dict[tuple[int, int], Route] = {}
        self._last_logged: dict[str, float] = {}
        self._max_batch = max_batch
        # Bounded: when the store falls behind, handle() waits, and so does the E2 link. An
        # item is one indication's writes, a write per measurement.
        self._pending: asyncio.Queue[list[_Write]] = asyncio.Queue(max_pending)
        # What the served models read, worked out once per set of models served.
        self._sources: tuple[object, _Sources] = (None, _Sources({}, (), []))

    def add_route(self, instance_id: int, action_id: int, route: Route) -> None:
        self.routes[(instance_id, action_id)] = route

    async def handle(self, frame: Frame) -> None:
        """The handler of RIC indications: queue the indication's values for the writer, or
        count the frame as rejected; never raise."""
        try:
            writes = self._decode(frame)
        except _Rejected as rejected:
            self.reject(rejected.reason, str(rejected))
            return
        if self._pending.full():  # the store is behind: wait for it
            await self._pending.put(writes)
        else:
            self._pending.put_nowait(writes)

    async def run(self) -> None:
        """The writer: everything queued so far (up to max_batch indications) goes in one
        store call per model's history."""
        while True:
            indications = [await self._pending.get()]
            while len(indications) < self._max_batch and not self._pending.empty():
                indications.append(self._pending.get_nowait())
            try:
                await self._write([write for writes in indications for write in writes])
            finally:
                for _ in indications:
                    self._pending.task_done()

    async def flush(self) -> None:
        """Return once every indication queued so far is written (or counted as rejected)."""
        await self._pending.join()

    async def _write(self, batch: list[_Write]) -> None:
        """The batch's writes, one store call per model's history."""
        by_model: dict[str, list[_Write]] = {}
        for write in batch:
            by_model.setdefault(write.model, []).append(write)
        written = not_kept = 0
        for name, writes in by_model.items():
            served = self._state.models.get(name)
            store = served.history if served is not None else None
            if store is None:  # unloaded meanwhile
                for _ in writes:
                    self.reject("not-ready", f"no history of model {name}'s KPI now")
                continue
            try:
                results = await store.put_checked([(w.cell_id, w.reports) for w in writes])
            except HistoryUnavailable as exc:
                for _ in writes:
                    self.reject("history-store", str(exc))
                continue
            now_ns = time.time_ns()
            lag = self._metrics.e2_ingest_lag
            for write, result in zip(writes, results, strict=True):
                if isinstance(result, HistoryError):
                    self.reject("history", str(result))
                else:
                    written += write.first
                    not_kept += len(write.reports) - result
                    if write.first:
                        lag.observe((now_ns - write.collected_ns) / 1e9)
        # Once per batch: a counter's update takes its lock, as long as the arithmetic.
        self._metrics.e2_indications.inc(written)
        self._metrics.e2_reports_not_kept.inc(not_kept)

    async def refuse(self, frame: Frame) -> None:
        """The handler of every message type no other handles: counted as rejected."""
        kind = MESSAGE_TYPES.get(frame.msg_type, str(frame.msg_type))
        self.reject("msg-type", f"a {kind} frame, which nothing here takes")

    def _decode(self, frame: Frame) -> list[_Write]:
        try:
            pdu = fast_indication.decode_e2ap(frame.payload)
        except kpm.DecodeError as exc:
            raise _Rejected(exc.reason, str(exc)) from None
        if pdu.kind != "indication":
            raise _Rejected("e2ap-kind", f"an E2AP {pdu.kind} on the indication path")
        route = self.routes.get((pdu.instance_id, pdu.action_id))
        if route is None:
            raise _Rejected("unknown-subscription", f"no subscription with instance "
                            f"{pdu.instance_id}, action {pdu.action_id}")
        sources = self._by_measurement()
        if not sources.direct:
            raise _Rejected("not-ready", "no model (or no measurement for its KPI) yet")
        try:
            start_us = fast_indication.decode_header_us(pdu.header)
            message = fast_indication.decode_message(pdu.message, subscribed=sources.names)
        except kpm.DecodeError as exc:
            raise _Rejected(exc.reason, str(exc)) from None
        direct = sources.direct
        reported = [(served, m.values, served.kpi_source.scale)
                    for m in message.measurements if (served := direct.get(m.name))]
        if sources.ratios:
            self._add_ratios(sources.ratios, message.measurements, reported)
        if not reported:
            raise _Rejected("measurement-missing", f"none of {', '.join(sources.names)} in "
                            "the report")
        granularity_ns = (message.granularity_ms or route.granularity_ms) * 1_000_000
        start_ns = start_us * 1000
        end_ns = start_ns + max(len(values) for _, values, _ in reported) * granularity_ns
        writes = []
        for served, values, scale in reported:
            bad = [(v, problem) for v in values if v is not None and (
                problem := "not a number" if math.isnan(v) else kpi_problem(v * scale))]
            if bad:  # checked before writing anything: a report is taken whole or not at all
                value, problem = bad[0]
                raise _Rejected("value", f"{served.kpi_source.measurement} = {value}: "
                                f"{problem}")
            # noValue / incomplete period: the step stays missing
            writes.append(_Write(served.name, route.cell_id,
                                 [(start_ns + period * granularity_ns, value * scale)
                                  for period, value in enumerate(values) if value is not None],
                                 end_ns, first=not writes))
        return writes

    @staticmethod
    def _add_ratios(ratios: tuple[tuple[ModelView, Ratio], ...],
                    measurements: list[kpm.Measurement],
                    reported: list[tuple[ModelView, list[float | None], float]]) -> None:
        """The KPIs a report carries as two measurements instead of their own: per period,
        numerator / denominator (no value where either has none or the denominator is 0)."""
        by_name = {m.name: m.values for m in measurements}
        for served, ratio in ratios:
            numerators = by_name.get(ratio.numerator)
            denominators = by_name.get(ratio.denominator)
            if served.kpi_source.measurement in by_name or numerators is None or (
                    denominators is None):
                continue
            reported.append((served, [
                None if a is None or not b else a / b
                for a, b in zip(numerators, denominators, strict=False)], ratio.scale))

    def _by_measurement(self) -> _Sources:
        """The measurement behind each served model's KPI (one model per KPI: checked at
        start), and the KPIs that may come as a ratio of two, worked out again only when the
        models served change."""
        models = self._state.models
        held, sources = self._sources
        if held is not models:
            served = [s for s in models.values()
                      if s.kpi_source is not None and s.history is not None]
            ratios = tuple((s, s.kpi_source.ratio) for s in served
                           if s.kpi_source.ratio is not None)
            direct = {s.kpi_source.measurement: s for s in served}
            names = list(dict.fromkeys([*direct, *(name for _, r in ratios
                                                   for name in (r.numerator, r.denominator))]))
            sources = _Sources(direct, ratios, names)
            self._sources = (models, sources)
        return sources

    def reject(self, reason: str, detail: str) -> None:
        """Count a dropped E2 message by reason; log it at most once a minute per reason."""
        self._metrics.e2_rejected.labels(reason=reason).inc()
        now = time.monotonic()
        if now - self._last_logged.get(reason, -math.inf) >= LOG_EVERY_S:
            self._last_logged[reason] = now
            log.warning("e2: message dropped (%s): %s; further ones with this reason are "
                        "counted in kpi_forecast_e2_indications_rejected_total", reason, detail)


class _Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason

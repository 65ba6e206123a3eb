"""Answering a forecast: the one operation behind every forecast route and KServe's
(``Forecasting``), for series a client sends (``given``, ``given_table``) or cells whose
history the xApp holds (``held``). In order: the A1 policies steer each cell (its horizon,
quantiles and budget, or its exclusion); the request is checked against the model once; a held
cell's history is read within the budget; the model answers within the budget, else the
seasonal-naive fallback, else the request is shed; admission records the answer. The HTTP
layer parses before and formats after, and maps the errors (``serving.errors``) to status
codes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from kpi_forecast.model.features import calendar_zone
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.a1.policies import UNSTEERED, Policies, Steering, request_budget
from kpi_forecast.xapp.serving.admission import (
    Admission,
    RouteFacts,
    budget_for_rows,
    fallback_reserve,
    latency_budget_s,
)
from kpi_forecast.xapp.serving.batcher import ModelUnavailable, QueueFull
from kpi_forecast.xapp.serving.errors import InvalidRequest, NotHeld, Shed, TooLittleHistory
from kpi_forecast.xapp.serving.fallback import fallback_forecast
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.serving.state import ModelView, ServingState
from kpi_forecast.xapp.store.cell_history import CellHistory, HistoryUnavailable

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MICROSECOND = dt.timedelta(microseconds=1)
LAST_NS = pd.Timestamp.max.value  # the last timestamp there is (April 2262), read once


class SeriesIn(Protocol):
    """One series a client sent (``http.schemas.ForecastRequest`` is one)."""

    cell_id: str
    start: dt.datetime  # aware
    freq: str
    values: Sequence[float | None]  # None: a missing step
    horizon: int | None


@dataclass
class Answer:
    quantiles: np.ndarray  # [rows, horizon, Q]
    names: list[str]  # pNN name of each quantile column
    model_version: str | None
    source: str  # "model" or "fallback"
    reason: str | None
    # Seconds from arrival to its model call; for a fallback, what it waited or would have.
    waited: float
    model: str  # the name of the model whose request it answers (the metrics' label)


@dataclass(frozen=True)
class Forecast:
    """A request's answer, row by row, before any HTTP: the answer's quantiles for each row's
    ``horizons[row]`` steps after ``last_ns[row]``, its quantiles ``names[row]`` (None: all the
    answer holds)."""

    answer: Answer
    last_ns: np.ndarray  # int64 ns since 1970 UTC
    step: pd.Timedelta
    horizons: list[int]
    names: list[tuple[str, ...] | None]
    latency_ms: float
    zones: Sequence[dt.tzinfo] | dt.tzinfo  # each row's (a series' own), or one for all

    def last_steps(self) -> list[dt.datetime]:
        """Each row's last step, in its zone: what its answer's timestamps follow."""
        if isinstance(self.zones, dt.tzinfo):
            return pd.DatetimeIndex(self.last_ns, tz="UTC").tz_convert(
                self.zones).to_pydatetime().tolist()
        return [(EPOCH + dt.timedelta(microseconds=int(ns) // 1000)).astimezone(zone)
                for ns, zone in zip(self.last_ns, self.zones, strict=True)]


@dataclass(frozen=True)
class _Plan:
    """What a request gets, row by row, once the A1 policies have had their say."""

    horizons: list[int]
    quantiles: tuple[float, ...] | None  # asked of the model: every row's (None: controls')
    names: list[tuple[str, ...] | None]  # each row's quantiles (None: all that are answered)
    budget_s: float | None  # the smallest of the rows' budgets (None: the controls')


@functools.lru_cache(maxsize=64)
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


def check_step(model: OnnxForecaster, freq: str) -> None:
    """A grid step other than the model's is the client's error."""
    step = parse_step(freq)
    if step is None:
        raise InvalidRequest(f"freq {freq!r} is not a frequency such as 1h or 15min")
    if step != model.step:
        raise InvalidRequest(f"freq {freq} does not match the model's {model.metadata.freq}")


def fits(start_ns: int | np.ndarray, steps: int | np.ndarray, step_ns: int) -> bool | np.ndarray:
    """Whether ``steps`` steps after ``start_ns`` (ns since 1970, not before it) are still a
    timestamp; arranged so that int64 arrays do not overflow on the way."""
    return steps <= (LAST_NS - start_ns) // step_ns


def check_end(start: dt.datetime, steps: int, freq: str, model: OnnxForecaster) -> int:
    """The nanoseconds since 1970 UTC of ``start``; a series of ``steps`` steps whose forecast
    would end past what timestamps hold (April 2262) is the client's error, not an overflow
    inside."""
    start_ns = (start - EPOCH) // MICROSECOND * 1000  # a Timestamp cost more than the rest
    if not fits(start_ns, steps - 1 + model.metadata.horizon, model.step.value):
        raise InvalidRequest(f"values: {steps} steps of {freq} from {start.isoformat()}, and "
                             f"the model's horizon after them, end past "
                             f"{pd.Timestamp.max.date()}")
    return start_ns


def held_store(served: ModelView) -> CellHistory:
    """The cell history, or a Shed while no model has said on which grid."""
    if served.history is None:
        raise Shed("not_ready", "no model loaded yet: the history grid is not known")
    return served.history


def wanted(served: ModelView, model: OnnxForecaster,
           quantiles: tuple[float, ...] | None = None) -> list[float]:
    """The quantiles answered: those asked for (an A1 policy's), else the controls', else all
    the model has."""
    return list(quantiles or served.controls.quantiles or model.metadata.quantiles)


@dataclass(frozen=True)
class Forecasting:
    """Answers forecast requests for every model; each call names the model's parts."""

    state: ServingState
    policies: Policies
    admission: Admission
    metrics: Metrics

    def model(self, served: ModelView) -> OnnxForecaster:
        """The model in force, or a Shed while none is loaded."""
        if served.model is None:
            self.metrics.shed.labels(reason="not_ready").inc()
            raise Shed("not_ready", "no model loaded yet", retry_after_s=1.0)
        return served.model

    async def given(self, parts: ModelSlot, items: Sequence[SeriesIn], arrival: float,
                    route: RouteFacts, horizon: int | None = None, freq: str | None = None,
                    quantiles: tuple[float, ...] | None = None) -> Forecast:
        """Forecasts of series a client sent, each at its own horizon (else ``horizon``, else
        its policy's); ``freq``: the request's grid step besides the series' own, where it
        gives one. ``quantiles``: asked by the request itself (KServe's), whose series are
        not cells: no A1 policy steers them."""
        served = self.state.models[parts.name]
        model = self.model(served)
        for spelling in {item.freq for item in items} | ({freq} if freq is not None else set()):
            check_step(model, spelling)
        cells = [item.cell_id for item in items]
        plan = self._plan(served, model, cells, [item.horizon or horizon for item in items],
                          quantiles)
        step_ns = model.step.value
        starts = [check_end(item.start, len(item.values), item.freq, model) for item in items]
        last_ns = np.array([start + (len(item.values) - 1) * step_ns
                            for start, item in zip(starts, items, strict=True)], np.int64)
        longest = max(len(item.values) for item in items)
        values = np.full((len(items), longest), np.nan, np.float32)
        for row, item in enumerate(items):  # a shorter series padded with missing steps
            values[row, longest - len(item.values):] = np.array(item.values, np.float32)
        answer = await self._decide(parts, served, model, values, last_ns, plan, arrival)
        return self._recorded(route, arrival, answer, model, last_ns, plan,
                              [item.start.tzinfo for item in items])

    async def given_table(self, parts: ModelSlot, cells: Sequence[str],
                          start: pd.DatetimeIndex, values: np.ndarray, lengths: np.ndarray,
                          freq: str | None, horizon: int | None, arrival: float,
                          route: RouteFacts) -> Forecast:
        """Forecasts of a table of series (an Arrow body: ``values`` [rows, longest], each
        row's ``lengths`` steps from ``start``), at one horizon and one set of quantiles for
        every row: A1 policies have their say in the cells they exclude and the budget."""
        served = self.state.models[parts.name]
        model = self.model(served)
        check_step(model, model.metadata.freq if freq is None else freq)
        start_ns = start.as_unit("ns").asi8
        late = ~fits(start_ns, lengths - 1 + model.metadata.horizon, model.step.value)
        if late.any():
            row = int(np.argmax(late))
            raise InvalidRequest(f"series {row} ({cells[row]}): {lengths[row]} steps from "
                                 f"{start[row].isoformat()}, and the model's horizon after "
                                 f"them, end past {pd.Timestamp.max.date()}")
        horizon = self._horizon(served, model, horizon)
        budget_s = request_budget(self.policies.for_cells(cells, served.name),
                                  latency_budget_s(served.controls))
        plan = _Plan([horizon] * len(cells), None, [None] * len(cells), budget_s)
        last_ns = start_ns + (lengths - 1) * model.step.value
        answer = await self._decide(parts, served, model, values, last_ns, plan, arrival)
        return self._recorded(route, arrival, answer, model, last_ns, plan, dt.UTC)

    async def held(self, parts: ModelSlot, cells: Sequence[str], horizon: int | None,
                   arrival: float, route: RouteFacts) -> Forecast:
        """Forecasts of cells whose history the xApp holds, at ``horizon`` (else each cell's
        policy's); their answers in the model's calendar zone."""
        served = self.state.models[parts.name]
        store = held_store(served)
        model = self.model(served)
        check_step(model, store.freq)
        plan = self._plan(served, model, cells, [horizon] * len(cells))
        deadline = arrival + budget_for_rows(served.controls, len(cells), plan.budget_s)
        values, last_ns = await _read_held(store, model, cells, deadline)
        answer = await self._decide(parts, served, model, values, last_ns, plan, arrival)
        return self._recorded(route, arrival, answer, model, last_ns, plan,
                              calendar_zone(model.metadata.calendar_tz))

    @staticmethod
    def _horizon(served: ModelView, model: OnnxForecaster, asked: int | None) -> int:
        horizon = asked or served.controls.default_horizon or model.metadata.horizon
        if horizon > model.metadata.horizon:
            raise InvalidRequest(f"horizon {horizon} exceeds the model's "
                                 f"{model.metadata.horizon}")
        return horizon

    def _plan(self, served: ModelView, model: OnnxForecaster, cells: Sequence[str],
              asked: Sequence[int | None], quantiles: tuple[float, ...] | None = None
              ) -> _Plan:
        """Each row's horizon (asked, else its policy's, else the controls') and quantiles;
        Excluded for a cell no forecast may be given."""
        steering: list[Steering] = (self.policies.for_cells(cells, served.name)
                                    if quantiles is None else [UNSTEERED] * len(cells))
        # Each distinct horizon checked once, not once per row of up to 10^5.
        chosen = [a or s.horizon for a, s in zip(asked, steering, strict=True)]
        resolved = {h: self._horizon(served, model, h) for h in set(chosen)}
        horizons = [resolved[h] for h in chosen]
        budget_s = request_budget(steering, latency_budget_s(served.controls))
        if quantiles is not None:
            return _Plan(horizons, quantiles, [None] * len(cells), budget_s)
        asked_quantiles = {s.quantiles for s in steering}
        if asked_quantiles == {None}:
            return _Plan(horizons, None, [None] * len(cells), budget_s)
        per_set = {q: wanted(served, model, q) for q in asked_quantiles}
        union = set().union(*per_set.values())
        names = {q: tuple(quantile_name(v) for v in chosen) for q, chosen in per_set.items()}
        return _Plan(horizons, tuple(q for q in model.metadata.quantiles if q in union),
                     [names[s.quantiles] for s in steering], budget_s)

    async def _decide(self, parts: ModelSlot, served: ModelView, model: OnnxForecaster,
                      history: np.ndarray, last_ns: np.ndarray, plan: _Plan, arrival: float
                      ) -> Answer:
        """The model's forecasts of the rows of ``history`` [B, n] within the budget, else the
        fallback's, else a Shed."""
        empty = np.isnan(history).all(axis=1)
        if empty.any():
            raise InvalidRequest(f"series {int(empty.argmax())} has no observed value")
        if served.guarded is not None:  # its live skill is below its guard's threshold
            return self._fallback(served, model, history, max(plan.horizons), plan.quantiles,
                                  "live_skill", time.monotonic() - arrival)
        batcher, controls, rows = parts.batcher, served.controls, len(history)
        horizon, quantiles, budget_s = max(plan.horizons), plan.quantiles, plan.budget_s
        deadline = arrival + budget_for_rows(controls, rows, budget_s)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self.metrics.shed.labels(reason="deadline").inc()
            raise Shed("deadline", "the latency budget was spent before the request was read")
        reserve = fallback_reserve(budget_s or latency_budget_s(controls)) if rows == 1 else 0.0
        # With a full batch or more already waiting, the wait can be told in advance; short
        # of that the request joins the next batch and the timeout below guards it.
        if (rows == 1 and batcher.depth >= batcher.max_batch_size
                and (wait := batcher.expected_wait()) > remaining - reserve):
            # It counts the wait it was spared.
            return self._fallback(served, model, history, horizon, quantiles, "queue_delay",
                                  time.monotonic() - arrival + wait)
        try:
            future = batcher.submit(history, last_ns)
        except QueueFull as exc:
            self.metrics.shed.labels(reason="queue_full").inc()
            raise Shed("queue_full", str(exc),
                       retry_after_s=max(latency_budget_s(controls), 0.1)) from None
        try:
            if rows == 1:
                result = await asyncio.wait_for(future, remaining - reserve)
            else:
                result = await future  # a batch call has no cheaper answer: it waits its turn
        except TimeoutError:
            return self._fallback(served, model, history, horizon, quantiles, "timeout", (
                batcher.call_started(future) or time.monotonic()) - arrival)
        except ModelUnavailable:
            return self._fallback(served, model, history, horizon, quantiles, "model_error",
                                  time.monotonic() - arrival)
        chosen = wanted(served, result.model, quantiles)
        columns = [result.model.metadata.quantiles.index(q) for q in chosen]
        return Answer(result.quantiles[:, :horizon, columns],
                      [quantile_name(q) for q in chosen], result.model.metadata.model_version,
                      "model", None, result.started - arrival, served.name)

    def _fallback(self, served: ModelView, model: OnnxForecaster, history: np.ndarray,
                  horizon: int, asked: tuple[float, ...] | None, reason: str, waited: float
                  ) -> Answer:
        self.metrics.fallbacks.labels(model=served.name, reason=reason).inc(len(history))
        chosen = wanted(served, model, asked)
        forecast = fallback_forecast(history, horizon, chosen,
                                     int(pd.Timedelta("1D") // model.step))
        return Answer(forecast, [quantile_name(q) for q in chosen], None, "fallback", reason,
                      waited, served.name)

    def _recorded(self, route: RouteFacts, arrival: float, answer: Answer,
                  model: OnnxForecaster, last_ns: np.ndarray, plan: _Plan,
                  zones: Sequence[dt.tzinfo] | dt.tzinfo) -> Forecast:
        latency = self.admission.observe(route, arrival, answer, len(last_ns), plan.budget_s)
        return Forecast(answer, last_ns, model.step, plan.horizons, plan.names, latency, zones)


async def _read_held(store: CellHistory, model: OnnxForecaster, cells: Sequence[str],
                     deadline: float) -> tuple[np.ndarray, np.ndarray]:
    """The cells' windows [cells, length] and last steps (ns since 1970 UTC): NotHeld for a
    cell not held, TooLittleHistory for one with less than a patch of samples. A store that
    has not answered by ``deadline`` (``time.monotonic``: the request's latency budget) is
    HistoryUnavailable: a hung Redis holds no request past its budget."""
    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            windows = await store.windows(list(cells))
    except TimeoutError:
        windows = None
    # An answer at the deadline itself (a store back from a hang) leaves the request no time
    # either: the store is still the reason it is refused.
    if windows is None or time.monotonic() >= deadline:
        raise HistoryUnavailable("history store: no answer within the request's latency "
                                 "budget")
    needed = model.metadata.config.patch_len
    for cell_id, held in zip(cells, windows, strict=True):
        if held is None:
            raise NotHeld(f"no history held for cell {cell_id!r}")
        observed = int((~np.isnan(held[0])).sum())
        if observed < needed:
            raise TooLittleHistory(f"cell {cell_id!r}: {observed} sample(s) held, at least "
                                   f"{needed} needed (one patch of the model) before a "
                                   "forecast")
    return (np.stack([values for values, _ in windows]),
            pd.DatetimeIndex([last for _, last in windows]).as_unit("ns").asi8)

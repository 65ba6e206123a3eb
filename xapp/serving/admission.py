"""Admission control: a forecast request admitted before its body is read, or shed; and the
latency budgets every forecast is held to.

Admission control decides how many forecast requests may be in flight before new ones are shed.
Under overload, queueing anywhere (in the socket, the event loop, the batcher) only makes every
answer late, so the excess is refused before its body is read. How much is excess is not fixed
in advance, nor a share of the budget: it follows the queueing delay, as Netflix's
concurrency-limits (Gradient2) and Envoy's adaptive concurrency filter do.

Each single forecast's latency splits in two, both measured by the xApp on every request:

- its **queueing delay**: arrival to the start of its model call, plus the event loop's own
  lateness (the time a request waits in the socket before the app reads it is invisible to
  per-request timers, and grows with the loop's lag). A request answered by the fallback
  waited all its time;
- its **service time**: the model call and the answer, what it takes once nothing is ahead of
  it (the no-load latency at the batch size the load makes).

The **allowance** is how long a request may wait and still be answered by the model within the
budget: the budget, less the slice kept back for the fallback, less the service time (and never
less than one service time: waiting for the call in progress is how batching works). After each
window of answers the limit moves by the gradient allowance / queueing delay (the window's 99th
percentiles; bounded to [1/2, 2] and smoothed). It grows while requests wait less than the
allowance, so it never sheds while requests are not waiting: fast while they wait less than half
of it, by at most one request per window nearer to it. Once they wait longer it shrinks from the
concurrency the window actually had. The
fixed point is the largest concurrency whose answers still fit the budget, on a slow machine and
a fast one alike, since every term is measured where it runs.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Protocol

from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.errors import Shed
from kpi_forecast.xapp.serving.state import ServingState

# The slice of a single forecast's budget kept back to answer from the fallback, should the
# model be late: a tenth of the budget, at most this.
MAX_FALLBACK_RESERVE_S = 0.005


def latency_budget_s(controls: Controls) -> float:
    """The controls' latency budget, in seconds."""
    return controls.latency_budget_ms / 1000.0


def fallback_reserve(seconds: float) -> float:
    """The slice of a single forecast's budget of ``seconds`` kept back for the fallback."""
    return min(0.1 * seconds, MAX_FALLBACK_RESERVE_S)


def budget_for_rows(controls: Controls, rows: int, seconds: float | None = None) -> float:
    """A call of many series is held to the budget of the model calls it needs; ``seconds``:
    the request's own budget (an A1 policy's), else the controls'."""
    seconds = latency_budget_s(controls) if seconds is None else seconds
    return seconds * max(1.0, rows / controls.batching.max_batch_size)


class RouteFacts(Protocol):
    """What admission reads of a forecast route (``http.edge.Route``)."""

    path: str  # the template, as the metrics label it
    series: str  # "one" or "many"


class Answered(Protocol):
    """What admission reads of a forecast's answer (``serving.forecasting.Answer``)."""

    model: str  # the name of the model whose request it answers (the metrics' label)
    source: str  # "model" or "fallback"
    waited: float  # seconds from arrival to its model call


TICK_S = 0.002  # the lag's probe while forecasts are being asked for
# ... and otherwise, for a replica that ingests E2 reports or waits: the fast probe's own
# wake-ups would cost every replica CPU with no request in sight.
IDLE_TICK_S = 0.05
BUSY_S = 1.0  # forecasts are being asked for until this long after the last was admitted
LAG_SMOOTHING = 0.3  # weight of the newest tick: reacts within a few milliseconds
WINDOW_ANSWERS = 100  # answers per window: enough for its 99th percentile to be a real one
DELAY_QUANTILE = 0.99  # the window's delay that must fit the allowance: the p99 in budget
MAX_GRADIENT = 2.0  # per window, at most double the limit (nothing waits) ...
MIN_GRADIENT = 0.5  # ... or halve it (requests wait twice the allowance)
SMOOTHING = 0.2  # weight of the newest window's limit, as in Gradient2
MIN_LIMIT = 2.0


class LoopLag:
    """How late the event loop runs, smoothed over the last few ticks: every ``TICK_S`` while
    forecasts are being asked for (``BUSY_S`` after the last was admitted), every
    ``IDLE_TICK_S`` otherwise."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._busy_until = 0.0

    def busy(self, now: float) -> None:
        """A forecast was admitted at ``now`` (``time.monotonic``)."""
        self._busy_until = now + BUSY_S

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            tick = TICK_S if started < self._busy_until else IDLE_TICK_S
            await asyncio.sleep(tick)
            late = max(time.monotonic() - started - tick, 0.0)
            self.seconds = LAG_SMOOTHING * late + (1.0 - LAG_SMOOTHING) * self.seconds


class ConcurrencyLimit:
    """The in-flight limit for single forecasts; ``enabled=False`` admits everything (it still
    measures, so the metrics tell what the limit would be)."""

    def __init__(self, maximum: float, enabled: bool = True) -> None:
        self.limit = maximum  # start open: the limit only closes once requests wait
        self.maximum = maximum
        self.enabled = enabled
        self.in_flight = 0
        # The last window's 99th percentiles (s); NaN until a window has closed.
        self.delay = math.nan
        self.service = math.nan
        self.allowance = math.nan
        self._waits: list[float] = []
        self._services: list[float] = []
        self._window_started = 0.0
        self._peak = 0  # the most in flight during the window

    def configure(self, maximum: float, enabled: bool) -> None:
        """Apply new controls (a config reload); the limit keeps what it has learnt."""
        self.maximum, self.enabled = maximum, enabled
        self.limit = min(self.limit, maximum)

    def try_acquire(self) -> bool:
        # Rounded up: one window's cut by a fraction of a request sheds nothing yet.
        if self.enabled and self.in_flight >= math.ceil(self.limit):
            return False
        self.in_flight += 1
        self._peak = max(self._peak, self.in_flight)
        return True

    def release(self) -> None:
        self.in_flight -= 1

    def record(self, waited: float, latency: float, budget_left: float, now: float) -> None:
        """A single forecast answered after ``latency`` s, ``waited`` s of them before its
        model call began; ``budget_left`` is how long it could take in all and still be the
        model's answer (the budget less the fallback's slice)."""
        if not self._waits:
            self._window_started = now
        self._waits.append(waited)
        self._services.append(max(latency - waited, 0.0))
        # A window is at least one round: what was admitted when it opened has answered.
        if len(self._waits) >= WINDOW_ANSWERS and now - self._window_started >= latency:
            self._close_window(budget_left)

    def _close_window(self, budget_left: float) -> None:
        self.delay, self.service = quantile(self._waits), quantile(self._services)
        self._waits.clear()
        self._services.clear()
        # Waiting for the model call in progress is the price of batching, not a queue: a
        # request may always wait one service time, even when the service alone is too slow
        # for the budget (shedding would not make it faster).
        self.allowance = max(budget_left - self.service, self.service)
        if self.delay <= 0.0:
            gradient = MAX_GRADIENT
        else:
            gradient = min(MAX_GRADIENT, max(MIN_GRADIENT, self.allowance / self.delay))
        if gradient >= 1.0:
            # Growth is gentle near the fixed point (at most one request per window, as TCP's
            # congestion avoidance probes), fast only while requests wait less than half
            # their allowance.
            grown = self.limit * (1.0 - SMOOTHING + SMOOTHING * gradient)
            self.limit = grown if gradient >= MAX_GRADIENT else min(grown, self.limit + 1.0)
        else:
            # A cut applies to the concurrency there was: a limit far above it (the open
            # start, a quiet spell) would otherwise take many windows to come down to where
            # it bites.
            base = min(self.limit, max(self._peak, MIN_LIMIT))
            self.limit = base * (1.0 - SMOOTHING + SMOOTHING * gradient)
        self.limit = min(self.maximum, max(MIN_LIMIT, self.limit))
        self._peak = self.in_flight


def quantile(samples: list[float]) -> float:
    """The ``DELAY_QUANTILE`` of ``samples`` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(DELAY_QUANTILE * len(ordered)))]


class Admission:
    """Refuses a forecast request before it is read when it could only be answered late, and
    steers the in-flight limit on what the answers took."""

    def __init__(self, limit: ConcurrencyLimit, loop_lag: LoopLag, state: ServingState,
                 metrics: Metrics) -> None:
        self.limit = limit
        self.loop_lag = loop_lag
        self._state = state
        self._metrics = metrics

    def admit(self, model: str | None = None) -> None:
        """Take an in-flight slot for a forecast request, or refuse it before it is read:
        when the limit is reached, or when the event loop runs later than the budget of the
        request's model (``model``; None or unknown: the default's): the request has waited in
        the socket for about as long, and could only be answered late.
        """
        limit, lag = self.limit, self.loop_lag.seconds
        self.loop_lag.busy(time.monotonic())
        state = self._state
        budget = latency_budget_s(state.models.get(model, state.now).controls)
        if limit.enabled and lag > budget - fallback_reserve(budget):
            self._metrics.shed.labels(reason="deadline").inc()
            raise Shed("deadline", f"the event loop runs {lag * 1000:.1f} ms late: the request "
                       "could not be answered within the budget", retry_after_s=1.0)
        if not limit.try_acquire():
            self._metrics.shed.labels(reason="overload").inc()
            raise Shed("overload", f"{limit.in_flight} forecasts in flight: the limit at which "
                       "requests wait no longer than the budget allows", retry_after_s=1.0)

    def release(self) -> None:
        self.limit.release()

    def observe(self, route: RouteFacts, arrival: float, answer: Answered, rows: int = 1,
                budget_s: float | None = None) -> float:
        """Record a forecast response's latency and whether it was goodput (the model's answer
        within the budget: ``budget_s``, the request's own, else the controls'); a single
        forecast's wait and latency steer the limit. Returns the latency in milliseconds."""
        now = time.monotonic()
        seconds = now - arrival
        state = self._state
        metrics, label = self._metrics, route.path
        controls = state.models.get(answer.model, state.now).controls
        metrics.request_latency.labels(route=label, model=answer.model).observe(seconds)
        if seconds > budget_for_rows(controls, rows, budget_s):
            metrics.budget_violations.labels(route=label, model=answer.model).inc()
        elif answer.source == "model":
            metrics.goodput.labels(route=label, model=answer.model).inc()
        if route.series == "one":
            budget = latency_budget_s(controls) if budget_s is None else budget_s
            self.limit.record(answer.waited, max(seconds, answer.waited),
                              budget - fallback_reserve(budget), now)
        return seconds * 1000.0

    def show(self) -> None:
        """The limit's state on its gauges (NaN until single forecasts have measured it); set
        when scraped, so the hot path pays nothing for them."""
        limit, metrics = self.limit, self._metrics
        metrics.admission_limit.set(limit.limit)
        metrics.queueing_delay.set(limit.delay)
        metrics.queueing_allowance.set(limit.allowance)
        metrics.loop_lag.set(self.loop_lag.seconds)
        metrics.service_time.set(limit.service)

"""Admission of forecast requests: refuse one before it is read when it could only be
answered late, and steer the in-flight limit (``overload.py``) on what the answers took."""

from __future__ import annotations

import time

from kpi_forecast.xapp.http.errors import Shed
from kpi_forecast.xapp.http.routes import Route
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.decision import Answer, Budget
from kpi_forecast.xapp.serving.overload import ConcurrencyLimit, LoopLag


class Admission:
    def __init__(self, limit: ConcurrencyLimit, loop_lag: LoopLag, budget: Budget,
                 metrics: Metrics) -> None:
        self.limit = limit
        self.loop_lag = loop_lag
        self._budget = budget
        self._metrics = metrics

    def admit(self) -> None:
        """Take an in-flight slot for a forecast request, or refuse it before it is read:
        when the limit is reached, or when the event loop runs later than the budget (the
        request has waited in the socket for about as long: it could only be answered late).
        """
        limit, lag = self.limit, self.loop_lag.seconds
        if limit.enabled and lag > self._budget.seconds - self._budget.fallback_reserve:
            self._metrics.shed.labels(reason="deadline").inc()
            raise Shed("deadline", f"the event loop runs {lag * 1000:.1f} ms late: the request "
                       "could not be answered within the budget", retry_after_s=1.0)
        if not limit.try_acquire():
            self._metrics.shed.labels(reason="overload").inc()
            raise Shed("overload", f"{limit.in_flight} forecasts in flight: the limit at which "
                       "requests wait no longer than the budget allows", retry_after_s=1.0)

    def release(self) -> None:
        self.limit.release()

    def observe(self, route: Route, arrival: float, answer: Answer, rows: int = 1,
                budget_s: float | None = None) -> float:
        """Record a forecast response's latency and whether it was goodput (the model's answer
        within the budget: ``budget_s``, the request's own, else the controls'); a single
        forecast's wait and latency steer the limit. Returns the latency in milliseconds."""
        now = time.monotonic()
        seconds = now - arrival
        metrics, label = self._metrics, route.path
        metrics.request_latency.labels(route=label).observe(seconds)
        if seconds > self._budget.for_rows(rows, budget_s):
            metrics.budget_violations.labels(route=label).inc()
        elif answer.source == "model":
            metrics.goodput.labels(route=label).inc()
        if route.series == "one":
            budget = self._budget.seconds if budget_s is None else budget_s
            self.limit.record(answer.waited, max(seconds, answer.waited),
                              budget - self._budget.reserve(budget), now)
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

"""Prometheus metrics of the xApp, all prefixed ``kpi_forecast_``.

One registry per app (not the process-global one), so tests and reloads never collide. Latency
buckets are laid out around the latency budgets (the controls' and each model's) at start-up:
Prometheus cannot change a histogram's buckets later, so a new budget from a config reload
takes effect on the ``latency_budget_seconds`` gauge (what alerts compare against) and the
violation counter.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from kpi_forecast.xapp.descriptor.controls import Api

PREFIX = "kpi_forecast"
BUDGET_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0)

FALLBACK_REASONS = ("queue_delay", "timeout", "model_error")
SHED_REASONS = ("queue_full", "deadline", "not_ready", "overload", "history_store")


class Metrics:
    def __init__(self, budgets_seconds: Iterable[float], max_batch_size: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        around_budget = sorted({round(budget * f, 6) for budget in budgets_seconds
                                for f in BUDGET_FRACTIONS})
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_requests", "HTTP requests by route template and status code.",
            ["route", "method", "status"], registry=r,
        )
        self.request_latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Server-side latency of forecast requests, arrival to response.",
            ["route", "model"], buckets=around_budget, registry=r,
        )
        self.inference_latency = Histogram(
            f"{PREFIX}_inference_duration_seconds", "ONNX Runtime time per batch.",
            ["model"], buckets=around_budget, registry=r,
        )
        self.queue_wait = Histogram(
            f"{PREFIX}_queue_wait_seconds", "Time a forecast waits for its batch to start.",
            buckets=around_budget, registry=r,
        )
        batch_buckets = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
                         if b <= max(max_batch_size, 1) * 2] or [1]
        self.batch_size = Histogram(
            f"{PREFIX}_batch_size", "Series per model call.", ["model"], buckets=batch_buckets,
            registry=r,
        )
        self.budget_violations = Counter(
            f"{PREFIX}_budget_violations", "Forecast responses slower than the latency budget.",
            ["route", "model"], registry=r,
        )
        self.fallbacks = Counter(
            f"{PREFIX}_fallbacks", "Forecasts answered by the seasonal-naive fallback.",
            ["model", "reason"], registry=r,
        )
        self.goodput = Counter(
            f"{PREFIX}_goodput_requests",
            "Forecast requests answered by the model within their latency budget.",
            ["route", "model"], registry=r,
        )
        self.shed = Counter(
            f"{PREFIX}_shed_requests", "Requests refused with 503 to protect the budget.",
            ["reason"], registry=r,
        )
        # Series that exist from the start read as 0 rather than absent: rate() over the
        # first requests then sees them begin, and alerts have something to compare with
        # (those of the forecast routes: ``declare_forecast_routes``).
        for reason in SHED_REASONS:
            self.shed.labels(reason=reason)
        self.refused = Counter(
            f"{PREFIX}_refused_requests", "Requests refused with 403: their route group is off "
            "or needs the API key they lack (controls.api).", ["group"], registry=r,
        )
        for group in Api.model_fields:  # the restricted route groups
            self.refused.labels(group=group)
        self.cells_held = Gauge(f"{PREFIX}_cells_held", "Cells with history held, by the model "
                                "whose KPI it is.", ["model"], registry=r)
        self.budget = Gauge(
            f"{PREFIX}_latency_budget_seconds", "The latency budget a model's forecasts are "
            "held to.", ["model"], registry=r,
        )
        self.queue_depth = Gauge(
            f"{PREFIX}_queue_depth", "Forecasts waiting for a model call.", ["model"],
            registry=r,
        )
        self.e2_indications = Counter(
            f"{PREFIX}_e2_indications", "RIC Indications ingested into the cells' history.",
            registry=r,
        )
        self.e2_rejected = Counter(
            f"{PREFIX}_e2_indications_rejected", "E2 frames dropped, by reason.", ["reason"],
            registry=r,
        )
        # A handover's overlap (both owners subscribed for a moment) delivers some reports
        # twice: the history keeps one, and the other is counted here.
        self.e2_reports_not_kept = Counter(
            f"{PREFIX}_e2_reports_not_kept", "Values of ingested RIC Indications the history "
            "did not keep: repeats of a step already reported, or older than its window.",
            registry=r,
        )
        # From a reporting period's end to its values in the history: what a forecast of the
        # cell misses, whatever the period (100 ms to an hour), so seconds to an hour.
        self.e2_ingest_lag = Histogram(
            f"{PREFIX}_e2_ingest_lag_seconds", "Wall clock when a RIC Indication's values "
            "were written, less the end of their last reporting period (E2 node's clock).",
            # Fine about a second, the usual reporting period: the alert and the scale
            # benchmark ask whether the lag stays within it.
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60, 300,
                     900, 3600),
            registry=r,
        )
        self.e2_reporting_period = Gauge(
            f"{PREFIX}_e2_reporting_period_seconds", "The E2SM-KPM reporting period this "
            "replica's subscriptions ask for (NaN before it subscribes).", registry=r,
        )
        self.e2_reporting_period.set(float("nan"))
        self.e2_nodes_owned = Gauge(
            f"{PREFIX}_e2_nodes_owned", "E2 nodes this replica holds a subscription for (with "
            "the shared history, each node is owned by one replica at a time).", registry=r,
        )
        self.e2_cells_skipped = Gauge(
            f"{PREFIX}_e2_cells_skipped", "Cells of the connected E2 nodes that are not "
            "subscribed to, by reason (the log names the nodes).", ["reason"], registry=r,
        )
        self.e2_handovers = Counter(
            f"{PREFIX}_e2_handovers", "E2 nodes given up to, or taken from, other replicas.",
            ["direction"], registry=r,
        )
        for direction in ("given", "taken"):
            self.e2_handovers.labels(direction=direction)
        self.e2_subscriptions_lost = Counter(
            f"{PREFIX}_e2_subscriptions_lost", "Subscriptions the subscription manager no "
            "longer listed (it or the E2 node restarted), made again.", registry=r,
        )
        self.e2_subscriptions_refused = Counter(
            f"{PREFIX}_e2_subscriptions_refused", "Cells whose E2 subscription the subscription "
            "manager reported refused, by its cause (the timeout's kind, else the error's "
            "source: E2Node, SUBMGR, RTMGR, DBAAS, ASN1).", ["cause"], registry=r,
        )
        self.e2_subscriptions_deleted = Counter(
            f"{PREFIX}_e2_subscriptions_deleted", "Subscriptions deleted at the subscription "
            "manager, by reason: a node given up, one made again (replaced), a predecessor's "
            "at this replica's endpoint (stray), one a replica no longer alive made (orphaned), "
            "on stopping.", ["reason"], registry=r,
        )
        for reason in ("given-up", "replaced", "stray", "orphaned", "stopping"):
            self.e2_subscriptions_deleted.labels(reason=reason)
        self.model = Info(f"{PREFIX}_model", "The models being served.", ["model"], registry=r)
        self.model_load = Gauge(
            f"{PREFIX}_model_load_seconds", "Time to load, verify and warm up the model.",
            ["model"], registry=r,
        )
        self.recalibration_offset = Gauge(
            f"{PREFIX}_recalibration_offset",
            "Offset of each quantile, in units of the forecast's outer band, from the recent "
            "history of the cells held (0: none).", ["model", "quantile"], registry=r,
        )
        self.recalibration_windows = Gauge(
            f"{PREFIX}_recalibration_windows",
            "Recent horizons the offsets come from (0: the model's own calibration).",
            ["model"], registry=r,
        )
        self.recalibration_weight = Gauge(
            f"{PREFIX}_recalibration_model_weight",
            "The model's share of the median forecast; the rest is the simple forecasts' "
            "(1: the model alone).", ["model"], registry=r,
        )
        self.recalibration_naive_weight = Gauge(
            f"{PREFIX}_recalibration_naive_weight",
            "Each simple forecast's share of the median forecast (model.naive: last_day, "
            "last_week, weekly_profile).", ["model", "naive"], registry=r,
        )
        self.recalibration_seconds = Gauge(
            f"{PREFIX}_recalibration_duration_seconds", "Time the last recalibration took.",
            ["model"], registry=r,
        )
        self.recalibration_time = Gauge(
            f"{PREFIX}_recalibration_last_timestamp_seconds",
            "Unix time of the last recalibration.", ["model"], registry=r,
        )
        self.model_ready = Gauge(
            f"{PREFIX}_model_ready", "1 when a verified, warmed-up model is serving.", ["model"],
            registry=r,
        )
        self.admission_limit = Gauge(
            f"{PREFIX}_admission_limit",
            "Single forecasts admitted in flight before new ones are shed (adaptive).",
            registry=r,
        )
        self.queueing_delay = Gauge(
            f"{PREFIX}_queueing_delay_seconds",
            "99th percentile of the time single forecasts waited before their model call "
            "(and the event loop's lag), last window.", registry=r,
        )
        self.service_time = Gauge(
            f"{PREFIX}_service_time_seconds",
            "99th percentile of single forecasts' time from their model call to the answer "
            "(the no-load latency at the batch size the load makes), last window.", registry=r,
        )
        self.queueing_allowance = Gauge(
            f"{PREFIX}_queueing_delay_allowance_seconds",
            "How long a single forecast may wait and still be answered by the model within "
            "the budget: the budget, less the fallback's slice, less the service time.",
            registry=r,
        )
        self.loop_lag = Gauge(
            f"{PREFIX}_event_loop_lag_seconds",
            "How late the event loop runs, smoothed over its last ticks: requests waited about "
            "as long in their sockets, and their arrival counts from there.", registry=r,
        )
        self.a1_requests = Counter(
            f"{PREFIX}_a1_policy_requests", "A1 policy requests taken, by operation and the "
            "status answered (unknown: not readable as a request).", ["operation", "status"],
            registry=r,
        )
        self.a1_unanswered = Counter(
            f"{PREFIX}_a1_policy_responses_unsent",
            "A1 policy answers that could not be sent (no route to the A1 mediator).",
            registry=r,
        )
        self.a1_instance_cells = Gauge(
            f"{PREFIX}_a1_policy_cells", "Cells each A1 policy instance steers.",
            ["policy_instance"], registry=r,
        )
        self.a1_instance_in_force = Gauge(
            f"{PREFIX}_a1_policy_in_force", "1 when the instance is in force; 0: held (the "
            "served model cannot give what it asks, or a cell of it is steered already).",
            ["policy_instance"], registry=r,
        )
        self.a1_instance_horizon = Gauge(
            f"{PREFIX}_a1_policy_horizon_steps", "The instance's horizon (absent: the "
            "controls').", ["policy_instance"], registry=r,
        )
        self.a1_instance_budget = Gauge(
            f"{PREFIX}_a1_policy_latency_budget_seconds", "The instance's latency budget "
            "(absent: the controls').", ["policy_instance"], registry=r,
        )
        self.a1_instance_excluded = Gauge(
            f"{PREFIX}_a1_policy_excluded", "1 when the instance's cells are excluded from "
            "forecasting.", ["policy_instance"], registry=r,
        )

    def declare_forecast_routes(self, paths: list[str], models: list[str]) -> None:
        """The series of the forecast routes and of the models, from the start (see above)."""
        for model in models:
            for reason in FALLBACK_REASONS:
                self.fallbacks.labels(model=model, reason=reason)
            for path in paths:
                self.request_latency.labels(route=path, model=model)
                self.budget_violations.labels(route=path, model=model)
                self.goodput.labels(route=path, model=model)

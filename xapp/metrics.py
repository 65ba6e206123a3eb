"""Prometheus metrics of the xApp, all prefixed ``kpi_forecast_``.

One registry per app (not the process-global one), so tests and reloads never collide. Latency
buckets are laid out around the latency budgets (the controls' and each model's) at start-up:
Prometheus cannot change a histogram's buckets later, so a new budget from a config reload
takes effect on the ``latency_budget_seconds`` gauge (what alerts compare against) and the
violation counter.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from kpi_forecast.xapp.descriptor.controls import Api

PREFIX = "kpi_forecast"
BUDGET_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0)

FALLBACK_REASONS = ("queue_delay", "timeout", "model_error", "live_skill")
SHED_REASONS = ("queue_full", "deadline", "not_ready", "overload", "history_store")


class Metrics:
    def __init__(self, budgets_seconds: Iterable[float], max_batch_size: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        around_budget = sorted({round(budget * f, 6) for budget in budgets_seconds
                                for f in BUDGET_FRACTIONS})
        # Every metric is the project's (the prefix) and this app's (its registry).
        counter = partial(Counter, namespace=PREFIX, registry=self.registry)
        gauge = partial(Gauge, namespace=PREFIX, registry=self.registry)
        histogram = partial(Histogram, namespace=PREFIX, registry=self.registry)
        self.requests = counter(
            "requests", "HTTP requests by route template and status code.",
            ["route", "method", "status"])
        self.request_latency = histogram(
            "request_duration_seconds",
            "Server-side latency of forecast requests, arrival to response.",
            ["route", "model"], buckets=around_budget)
        self.inference_latency = histogram(
            "inference_duration_seconds", "ONNX Runtime time per batch.",
            ["model"], buckets=around_budget)
        self.queue_wait = histogram(
            "queue_wait_seconds", "Time a forecast waits for its batch to start.",
            buckets=around_budget)
        batch_buckets = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
                         if b <= max(max_batch_size, 1) * 2] or [1]
        self.batch_size = histogram(
            "batch_size", "Series per model call.", ["model"], buckets=batch_buckets)
        self.budget_violations = counter(
            "budget_violations", "Forecast responses slower than the latency budget.",
            ["route", "model"])
        self.fallbacks = counter(
            "fallbacks", "Forecasts answered by the seasonal-naive fallback.",
            ["model", "reason"])
        self.goodput = counter(
            "goodput_requests",
            "Forecast requests answered by the model within their latency budget.",
            ["route", "model"])
        self.shed = counter(
            "shed_requests", "Requests refused with 503 to protect the budget.",
            ["reason"])
        # Series that exist from the start read as 0 rather than absent: rate() over the
        # first requests then sees them begin, and alerts have something to compare with
        # (those of the forecast routes: ``declare_forecast_routes``).
        for reason in SHED_REASONS:
            self.shed.labels(reason=reason)
        self.refused = counter(
            "refused_requests", "Requests refused with 403: their route group is off "
            "or needs the API key they lack (controls.api).", ["group"])
        for group in Api.model_fields:  # the restricted route groups
            self.refused.labels(group=group)
        self.cells_held = gauge("cells_held", "Cells with history held, by the model "
                                "whose KPI it is.", ["model"])
        self.budget = gauge(
            "latency_budget_seconds", "The latency budget a model's forecasts are "
            "held to.", ["model"])
        self.queue_depth = gauge("queue_depth", "Forecasts waiting for a model call.", ["model"])
        self.e2_indications = counter(
            "e2_indications", "RIC Indications ingested into the cells' history.")
        self.e2_rejected = counter(
            "e2_indications_rejected", "E2 frames dropped, by reason.", ["reason"])
        # A handover's overlap (both owners subscribed for a moment) delivers some reports
        # twice: the history keeps one, and the other is counted here.
        self.e2_reports_not_kept = counter(
            "e2_reports_not_kept", "Values of ingested RIC Indications the history "
            "did not keep: repeats of a step already reported, or older than its window.")
        # From a reporting period's end to its values in the history: what a forecast of the
        # cell misses, whatever the period (100 ms to an hour), so seconds to an hour.
        self.e2_ingest_lag = histogram(
            "e2_ingest_lag_seconds", "Wall clock when a RIC Indication's values "
            "were written, less the end of their last reporting period (E2 node's clock).",
            # Fine about a second, the usual reporting period: the alert and the scale
            # benchmark ask whether the lag stays within it.
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60, 300,
                     900, 3600))
        self.e2_reporting_period = gauge(
            "e2_reporting_period_seconds", "The E2SM-KPM reporting period this "
            "replica's subscriptions ask for (NaN before it subscribes).")
        self.e2_reporting_period.set(float("nan"))
        self.e2_nodes_owned = gauge(
            "e2_nodes_owned", "E2 nodes this replica holds a subscription for (with "
            "the shared history, each node is owned by one replica at a time).")
        self.e2_cells_skipped = gauge(
            "e2_cells_skipped", "Cells of the connected E2 nodes that are not "
            "subscribed to, by reason (the log names the nodes).", ["reason"])
        self.e2_handovers = counter(
            "e2_handovers", "E2 nodes given up to, or taken from, other replicas.",
            ["direction"])
        for direction in ("given", "taken"):
            self.e2_handovers.labels(direction=direction)
        self.e2_subscriptions_lost = counter(
            "e2_subscriptions_lost", "Subscriptions the subscription manager no "
            "longer listed (it or the E2 node restarted), made again.")
        self.e2_subscriptions_refused = counter(
            "e2_subscriptions_refused", "Cells whose E2 subscription the subscription "
            "manager reported refused, by its cause (the timeout's kind, else the error's "
            "source: E2Node, SUBMGR, RTMGR, DBAAS, ASN1).", ["cause"])
        self.e2_subscriptions_deleted = counter(
            "e2_subscriptions_deleted", "Subscriptions deleted at the subscription "
            "manager, by reason: a node given up, one made again (replaced), a predecessor's "
            "at this replica's endpoint (stray), one a replica no longer alive made (orphaned), "
            "on stopping.", ["reason"])
        for reason in ("given-up", "replaced", "stray", "orphaned", "stopping"):
            self.e2_subscriptions_deleted.labels(reason=reason)
        self.model = Info("model", "The models being served.", ["model"], namespace=PREFIX,
                          registry=self.registry)
        self.model_load = gauge(
            "model_load_seconds", "Time to load, verify and warm up the model.",
            ["model"])
        self.recalibration_offset = gauge(
            "recalibration_offset",
            "Offset of each quantile, in units of the forecast's outer band, from the recent "
            "history of the cells held (0: none).", ["model", "quantile"])
        self.recalibration_windows = gauge(
            "recalibration_windows",
            "Recent horizons the offsets come from (0: the model's own calibration).",
            ["model"])
        self.recalibration_weight = gauge(
            "recalibration_model_weight",
            "The model's share of the median forecast; the rest is the simple forecasts' "
            "(1: the model alone).", ["model"])
        self.recalibration_naive_weight = gauge(
            "recalibration_naive_weight",
            "Each simple forecast's share of the median forecast (model.naive: last_day, "
            "last_week, weekly_profile).", ["model", "naive"])
        self.recalibration_seconds = gauge(
            "recalibration_duration_seconds", "Time the last recalibration took.",
            ["model"])
        self.recalibration_time = gauge(
            "recalibration_last_timestamp_seconds",
            "Unix time of the last recalibration.", ["model"])
        # Live scoring (serving.scoring): per model, role (the version served, or the
        # candidate shadowed beside it) and window (day, week), never per cell but for the
        # bounded worst-cell gauge; NaN where nothing is scored yet.
        live = ["model", "role", "window"]
        self.live_points = gauge(
            "live_scored_points", "Points of the model's recorded forecasts scored against "
            "their actuals over the window.", live)
        self.live_mae = gauge(
            "live_mae", "Mean absolute error of the model's recorded forecasts (median) over "
            "the window's scored points.", live)
        self.live_naive_mae = gauge(
            "live_naive_mae", "Mean absolute error of each seasonal naive (last_day, "
            "last_week) on the same points.", [*live, "naive"])
        self.live_skill = gauge(
            "live_skill", "1 - the model's MAE / the better seasonal naive's: below 0, the "
            "model forecast worse than the naive over the window.", live)
        self.live_pinball = gauge(
            "live_pinball_loss", "Mean pinball loss of the model's quantiles over the "
            "window's scored points.", live)
        self.live_coverage = gauge(
            "live_interval_coverage", "Share of the window's actuals inside the recorded "
            "P10-P90 band.", live)
        self.live_worst_skill = gauge(
            "live_worst_cell_skill", "Skill over the week of the cells scoring lowest "
            "(controls.scoring.worstCells of them, by rank).", ["model", "role", "rank", "cell"])
        self.live_origin = gauge(
            "live_scored_until_timestamp_seconds", "Unix time of the last scoring round's "
            "origin: the scores cover the steps before it.", ["model", "role"])
        self.guarded = gauge(
            "guard_active", "1 while the model's forecasts are the fallback's because its "
            "live skill is below its guard's threshold (controls.guard).", ["model"])
        self.scoring_rounds = counter(
            "scoring_rounds", "Scoring rounds this replica took on.", ["model", "role"])
        self.scoring_recorded = counter(
            "scoring_forecasts_recorded", "Forecasts recorded to be scored.",
            ["model", "role"])
        self.scoring_unforecast = counter(
            "scoring_unforecast_actuals", "Actuals of steps no forecast was recorded for "
            "(a cell new since the last round, a model version loaded since): not scored.",
            ["model", "role"])
        self.scoring_seconds = gauge(
            "scoring_round_duration_seconds", "Time the last scoring round took.",
            ["model", "role"])
        self.published = counter(
            "publication_forecasts", "Forecasts published after a reporting period, by "
            "destination (controls.publication): SDL values, RMR messages.",
            ["model", "destination"])
        self.publication_failed = counter(
            "publication_failures", "Forecasts not published: the destination failed (the "
            "SDL away, no RMR route).", ["model", "destination"])
        self.publication_acks = counter(
            "publication_acknowledgements", "KPI_FORECAST_ACK messages consumers sent back "
            "for forecasts published over RMR, by the model they name.", ["model"])
        self.publication_seconds = gauge(
            "publication_round_duration_seconds", "Time the last publication round took.",
            ["model"])
        self.decisions = counter(
            "model_decisions", "The deployment's model decisions this replica made, by "
            "action: load, unload, candidate, drop_candidate, promote, rollback.",
            ["model", "action"])
        self.model_ready = gauge(
            "model_ready", "1 when a verified, warmed-up model is serving.", ["model"])
        self.admission_limit = gauge(
            "admission_limit",
            "Single forecasts admitted in flight before new ones are shed (adaptive).")
        self.queueing_delay = gauge(
            "queueing_delay_seconds",
            "99th percentile of the time single forecasts waited before their model call "
            "(and the event loop's lag), last window.")
        self.service_time = gauge(
            "service_time_seconds",
            "99th percentile of single forecasts' time from their model call to the answer "
            "(the no-load latency at the batch size the load makes), last window.")
        self.queueing_allowance = gauge(
            "queueing_delay_allowance_seconds",
            "How long a single forecast may wait and still be answered by the model within "
            "the budget: the budget, less the fallback's slice, less the service time.")
        self.loop_lag = gauge(
            "event_loop_lag_seconds",
            "How late the event loop runs, smoothed over its last ticks: requests waited about "
            "as long in their sockets, and their arrival counts from there.")
        self.a1_requests = counter(
            "a1_policy_requests", "A1 policy requests taken, by operation and the "
            "status answered (unknown: not readable as a request).", ["operation", "status"])
        self.a1_unanswered = counter(
            "a1_policy_responses_unsent",
            "A1 policy answers that could not be sent (no route to the A1 mediator).")
        self.a1_instance_cells = gauge(
            "a1_policy_cells", "Cells each A1 policy instance steers.",
            ["policy_instance"])
        self.a1_instance_in_force = gauge(
            "a1_policy_in_force", "1 when the instance is in force; 0: held (the "
            "served model cannot give what it asks, or a cell of it is steered already).",
            ["policy_instance"])
        self.a1_instance_horizon = gauge(
            "a1_policy_horizon_steps", "The instance's horizon (absent: the "
            "controls').", ["policy_instance"])
        self.a1_instance_budget = gauge(
            "a1_policy_latency_budget_seconds", "The instance's latency budget "
            "(absent: the controls').", ["policy_instance"])
        self.a1_instance_excluded = gauge(
            "a1_policy_excluded", "1 when the instance's cells are excluded from "
            "forecasting.", ["policy_instance"])

    def declare_forecast_routes(self, paths: list[str], models: list[str]) -> None:
        """The series of the forecast routes and of the models, from the start (see above)."""
        for model in models:
            for reason in FALLBACK_REASONS:
                self.fallbacks.labels(model=model, reason=reason)
            for path in paths:
                self.request_latency.labels(route=path, model=model)
                self.budget_violations.labels(route=path, model=model)
                self.goodput.labels(route=path, model=model)

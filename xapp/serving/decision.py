"""What a forecast request is answered, within its latency budget: the model's forecast, the
seasonal-naive fallback when the model would be late or fails, or a Shed (503)."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.http.errors import ClientError, Shed
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.batcher import DynamicBatcher, ModelUnavailable, QueueFull
from kpi_forecast.xapp.serving.fallback import seasonal_naive
from kpi_forecast.xapp.serving.state import Served


@dataclass
class Answer:
    quantiles: np.ndarray  # [rows, horizon, Q]
    names: list[str]  # pNN name of each quantile column
    model_version: str | None
    source: str  # "model" or "fallback"
    reason: str | None
    # Seconds from arrival to its model call; for a fallback, what it waited or would have.
    waited: float


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


class Decider:
    def __init__(self, batcher: DynamicBatcher, metrics: Metrics) -> None:
        self._batcher = batcher
        self._metrics = metrics

    def served(self, served: Served) -> OnnxForecaster:
        """The model in force, or a Shed while none is loaded."""
        if served.model is None:
            self._metrics.shed.labels(reason="not_ready").inc()
            raise Shed("not_ready", "no model loaded yet", retry_after_s=1.0)
        return served.model

    def check_request(self, served: Served, freq: str, horizon: int | None
                      ) -> tuple[OnnxForecaster, int]:
        """The model and the horizon a request at ``freq`` gets, or the client's error."""
        model = self.served(served)
        meta = model.metadata
        step = parse_step(freq)
        if step is None:
            raise ClientError(422, f"freq {freq!r} is not a frequency such as 1h or 15min")
        if step != model.step:
            raise ClientError(422, f"freq {freq} does not match the model's {meta.freq}")
        horizon = horizon or served.controls.default_horizon or meta.horizon
        if horizon > meta.horizon:
            raise ClientError(422, f"horizon {horizon} exceeds the model's {meta.horizon}")
        return model, horizon

    @staticmethod
    def wanted(served: Served, model: OnnxForecaster,
               quantiles: tuple[float, ...] | None = None) -> list[float]:
        """The quantiles answered: those asked for (an A1 policy's), else the controls', else
        all the model has."""
        return list(quantiles or served.controls.quantiles or model.metadata.quantiles)

    @classmethod
    def selected(cls, served: Served, model: OnnxForecaster,
                 quantiles: tuple[float, ...] | None = None) -> tuple[list[int], list[str]]:
        quantiles, wanted = model.metadata.quantiles, cls.wanted(served, model, quantiles)
        columns = [quantiles.index(q) for q in wanted]
        return columns, [quantile_name(q) for q in wanted]

    async def forecast(
        self, served: Served, history: np.ndarray, last_ns: np.ndarray, horizon: int | None,
        arrival: float, freq: str, quantiles: tuple[float, ...] | None = None,
        budget_s: float | None = None,
    ) -> Answer:
        """Forecasts for the rows of ``history`` [B, n], whose last steps are ``last_ns``
        (int64 ns since 1970 UTC); the model within the budget, else the fallback, else a
        Shed. ``quantiles`` and ``budget_s``: the request's own (an A1 policy's), else the
        controls'."""
        model, horizon = self.check_request(served, freq, horizon)
        if np.isnan(history).all(axis=1).any():
            row = int(np.isnan(history).all(axis=1).argmax())
            raise ClientError(422, f"series {row} has no observed value")
        batcher, controls = self._batcher, served.controls
        deadline = arrival + budget_for_rows(controls, len(history), budget_s)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._metrics.shed.labels(reason="deadline").inc()
            raise Shed("deadline", "the latency budget was spent before the request was read")
        reserve = (fallback_reserve(budget_s or latency_budget_s(controls))
                   if len(history) == 1 else 0.0)
        # With a full batch or more already waiting, the wait can be told in advance; short
        # of that the request joins the next batch and the timeout below guards it.
        if (len(history) == 1 and batcher.depth >= batcher.max_batch_size
                and (wait := batcher.expected_wait()) > remaining - reserve):
            # It counts the wait it was spared.
            return self._fallback(served, model, history, horizon, quantiles, "queue_delay",
                                  time.monotonic() - arrival + wait)
        try:
            future = batcher.submit(history, last_ns)
        except QueueFull as exc:
            self._metrics.shed.labels(reason="queue_full").inc()
            raise Shed("queue_full", str(exc),
                       retry_after_s=max(latency_budget_s(controls), 0.1)) from None
        try:
            if len(history) == 1:
                result = await asyncio.wait_for(future, remaining - reserve)
            else:
                result = await future  # a batch call has no cheaper answer: it waits its turn
        except TimeoutError:
            return self._fallback(served, model, history, horizon, quantiles, "timeout", (
                batcher.call_started(future) or time.monotonic()) - arrival)
        except ModelUnavailable:
            return self._fallback(served, model, history, horizon, quantiles, "model_error",
                                  time.monotonic() - arrival)
        columns, names = self.selected(served, result.model, quantiles)
        return Answer(result.quantiles[:, :horizon, columns], names,
                      result.model.metadata.model_version, "model", None,
                      result.started - arrival)

    def _fallback(self, served: Served, model: OnnxForecaster, history: np.ndarray,
                  horizon: int, asked: tuple[float, ...] | None, reason: str, waited: float
                  ) -> Answer:
        self._metrics.fallbacks.labels(reason=reason).inc(len(history))
        columns, names = self.selected(served, model, asked)
        quantiles = [model.metadata.quantiles[c] for c in columns]
        steps_per_day = int(pd.Timedelta("1D") // model.step)
        forecast = np.stack([
            seasonal_naive(row, horizon, quantiles, steps_per_day) for row in history
        ])
        return Answer(forecast, names, None, "fallback", reason, waited)

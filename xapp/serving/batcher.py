"""Dynamic batching of forecast requests, Triton-style: a batch starts when it is full, when
its first request has waited ``max_queue_delay``, or as soon as no more requests are on their
way, whichever comes first. While a batch runs, newcomers queue and leave together as the next.

Concurrent single-cell requests arrive in bursts. A burst in one model call pays the call's
fixed cost and the hand-off to the worker thread once, not once per request, so that under
load each request waits for one call. The
queue is bounded (a full queue refuses at once rather than queue without bound), the model
runs in one worker thread (ONNX Runtime releases the GIL, so the event loop keeps serving), and
a request whose caller has given up (timed out to the fallback) is skipped, not computed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.model.recalibration import Recalibration
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.state import ServingState

log = logging.getLogger(__name__)

LOOP_PASSES = 2


class QueueFull(Exception):
    """The bounded queue is full: the request must be shed."""


class ModelUnavailable(Exception):
    """No model is loaded yet, or the model failed on this batch."""


@dataclass
class Result:
    quantiles: np.ndarray  # [rows, horizon, Q]
    model: OnnxForecaster  # the model that answered (its metadata names version, quantiles)
    started: float  # monotonic time its model call began: a request's wait ends there


@dataclass
class _Job:
    history: np.ndarray  # [rows, n] float32, NaN = missing
    last_ns: np.ndarray  # [rows] int64: each row's last step, ns since 1970 UTC
    enqueued: float
    future: asyncio.Future[Result]


class DynamicBatcher:
    """Runs each batch on the model ``name`` in force (``state.view(name)``) as the batch
    starts, with that model's recalibration."""

    def __init__(self, state: ServingState, metrics: Metrics, name: str, max_batch_size: int,
                 max_queue_delay_s: float, max_queue_size: int) -> None:
        self._state = state
        self._metrics = metrics
        self.name = name
        self._queue_depth = metrics.queue_depth.labels(model=name)
        self._inference_latency = metrics.inference_latency.labels(model=name)
        self._batch_size = metrics.batch_size.labels(model=name)
        self.max_batch_size = max_batch_size
        self.max_queue_delay_s = max_queue_delay_s
        self.max_queue_size = max_queue_size
        self._queue: collections.deque[_Job] = collections.deque()
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix=f"inference-{name}")
        # Seconds per model call, smoothed: what a new request should expect to wait.
        self.batch_seconds = 0.0
        self._running: list[_Job] = []  # the batch in the model now, and when it began
        self._running_since = 0.0

    def configure(self, max_batch_size: int, max_queue_delay_s: float, max_queue_size: int
                  ) -> None:
        """Apply new batching controls (a config reload) from the next batch on."""
        self.max_batch_size = max_batch_size
        self.max_queue_delay_s = max_queue_delay_s
        self.max_queue_size = max_queue_size

    @property
    def depth(self) -> int:
        return sum(len(job.last_ns) for job in self._queue)

    def expected_wait(self) -> float:
        """Seconds until a request queued now would have its answer."""
        batches_ahead = self.depth // max(self.max_batch_size, 1)
        return (batches_ahead + 1) * self.batch_seconds + self.max_queue_delay_s

    def call_started(self, future: asyncio.Future[Result]) -> float | None:
        """When the model call that holds ``future``'s request began; None while it waits."""
        if any(job.future is future for job in self._running):
            return self._running_since
        return None

    def submit(self, history: np.ndarray, last_ns: np.ndarray) -> asyncio.Future[Result]:
        """Queue ``history`` [rows, n] whose rows end at ``last_ns`` (int64 ns since 1970
        UTC: a DatetimeIndex per request cost more than queueing it)."""
        if self.depth + len(last_ns) > self.max_queue_size and self._queue:
            raise QueueFull(f"{self.depth} series already queued (max {self.max_queue_size})")
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Job(history, last_ns, time.monotonic(), future))
        self._queue_depth.set(self.depth)
        self._arrived.set()
        return future

    async def run(self) -> None:
        """The batching loop; runs until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._queue:
                await self._fill(self._queue[0].enqueued + self.max_queue_delay_s)
                jobs = self._take()
                if jobs:
                    await self._run_batch(loop, jobs)

    async def _fill(self, start_by: float) -> None:
        """Hold the batch open while requests keep joining it, until it is full or its first
        request has waited ``max_queue_delay``. A pass of the event loop that brings no new
        request ends the wait: requests not yet read from their sockets would come too late
        to join, and meanwhile the model would sit idle while callers wait."""
        while self.depth < self.max_batch_size and time.monotonic() < start_by:
            depth = self.depth
            # One pass reads what has reached the sockets, the next runs those requests'
            # handlers up to their submit().
            for _ in range(LOOP_PASSES):
                await asyncio.sleep(0)
            if self.depth == depth:
                return

    def _take(self) -> list[_Job]:
        """Up to ``max_batch_size`` series; a larger single job (a batch call) runs alone."""
        jobs, rows = [], 0
        while self._queue:
            job = self._queue[0]
            if job.future.done():  # its caller gave up and answered from the fallback
                self._queue.popleft()
                continue
            if jobs and rows + len(job.last_ns) > self.max_batch_size:
                break
            jobs.append(self._queue.popleft())
            rows += len(job.last_ns)
        self._queue_depth.set(self.depth)
        return jobs

    async def _run_batch(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        served = self._state.models[self.name]
        model = served.model
        if model is None:
            for job in jobs:
                _fail(job, ModelUnavailable("no model loaded"))
            return
        last_ns = np.concatenate([job.last_ns for job in jobs])
        started = time.monotonic()
        for job in jobs:
            self._metrics.queue_wait.observe(started - job.enqueued)
        self._running, self._running_since = jobs, started
        try:
            quantiles = await loop.run_in_executor(
                self._executor, _forecast, model, [job.history for job in jobs], last_ns,
                served.recalibration)
        except Exception as exc:  # the model failing must not take the loop down with it
            log.exception("model call failed on a batch of %d series", len(last_ns))
            for job in jobs:
                _fail(job, ModelUnavailable(f"model call failed: {exc}"))
            return
        finally:
            self._running = []
        seconds = time.monotonic() - started
        self.batch_seconds = seconds if not self.batch_seconds else (
            0.8 * self.batch_seconds + 0.2 * seconds)
        self._inference_latency.observe(seconds)
        self._batch_size.observe(len(last_ns))
        row = 0
        for job in jobs:
            rows = len(job.last_ns)
            if not job.future.done():
                job.future.set_result(Result(quantiles[row : row + rows], model, started))
            row += rows

    async def drain(self, timeout: float) -> None:
        """Wait (up to ``timeout`` s) for queued work to finish: part of a clean shutdown."""
        deadline = time.monotonic() + timeout
        while self._queue and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def close(self) -> None:
        for job in self._queue:
            _fail(job, ModelUnavailable("shutting down"))
        self._queue.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)


def _forecast(model: OnnxForecaster, blocks: list[np.ndarray], last_ns: np.ndarray,
              recalibration: Recalibration | None) -> np.ndarray:
    """The batch's model call, in the worker thread: the index of its last steps is made
    there, once per batch."""
    return model.forecast(blocks, pd.DatetimeIndex(last_ns, tz="UTC"), recalibration)


def _fail(job: _Job, error: Exception) -> None:
    if not job.future.done():
        job.future.set_exception(error)

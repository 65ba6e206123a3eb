"""The xApp's parts on their own: the fallback, the batcher (the history stores: test_history)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.model.recalibration import Recalibration
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.batcher import DynamicBatcher, QueueFull
from kpi_forecast.xapp.serving.fallback import fallback_forecast
from kpi_forecast.xapp.serving.forecasting import _read_held
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from tests.tolerance import UNIT_ROUNDOFF_32
from tests.xapp_helpers import serving_state

T0 = pd.Timestamp("2024-03-30 22:00", tz="UTC")


def test_fallback_repeats_last_week_with_a_band_from_its_own_errors() -> None:
    rng = np.random.default_rng(0)
    hours = np.arange(21 * 24)
    history = 50 + 20 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 2, hours.size)
    [forecast] = fallback_forecast(history[None], 24, [0.1, 0.5, 0.9], steps_per_day=24)
    # Last week's values, stored as float32: one rounding each.
    np.testing.assert_allclose(forecast[:, 1], history[-168:-144], rtol=2 * UNIT_ROUNDOFF_32)
    assert (forecast[:, 0] < forecast[:, 1]).all() and (forecast[:, 1] < forecast[:, 2]).all()
    width = (forecast[:, 2] - forecast[:, 0]).mean()
    assert 2.0 < width < 12.0  # the week-on-week noise is N(0, 2 * sqrt 2)


def test_fallback_with_short_or_gappy_history() -> None:
    day = np.arange(30, dtype=float)  # longer than a day, shorter than a week
    np.testing.assert_allclose(fallback_forecast(day[None], 3, [0.5], 24)[0, :, 0], day[6:9])
    gappy = np.full((1, 200), np.nan)
    gappy[0, -1] = 7.0
    np.testing.assert_allclose(fallback_forecast(gappy, 4, [0.1, 0.9], 24), 7.0)
    # A value missing a week back is the same hour a week before that (model.naive's rule).
    weeks = np.tile(np.arange(168, dtype=float), 3)[None]
    weeks[0, -168] = np.nan
    np.testing.assert_allclose(fallback_forecast(weeks, 2, [0.5], 24)[0, :, 0], [0.0, 1.0])
    with pytest.raises(ValueError, match="no observed"):
        fallback_forecast(np.vstack([weeks, np.full((1, 504), np.nan)]), 4, [0.5], 24)


def test_a_store_answering_at_the_deadline_is_the_reason_the_request_is_refused() -> None:
    """A store back from a hang whose answer comes at the request's deadline leaves it no
    time: the refusal names the store, not the spent budget."""

    class LateStore:
        async def windows(self, cells: list[str]) -> list:
            time.sleep(0.02)  # holds the loop past the deadline: no timeout cuts it short
            return [(np.ones((1, 48), np.float32), T0) for _ in cells]

    with pytest.raises(HistoryUnavailable, match="history store: no answer within"):
        asyncio.run(_read_held(LateStore(), None, ["c1"], time.monotonic() + 0.01))


class CountingModel:
    """Stands in for OnnxForecaster: records batch sizes, answers row sums."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def forecast(self, blocks: list[np.ndarray], last: pd.DatetimeIndex,
                 recalibration: Recalibration | None) -> np.ndarray:
        history = np.concatenate(blocks)
        self.batches.append(len(history))
        return np.nansum(history, axis=1)[:, None, None].repeat(2, axis=1)


@contextlib.asynccontextmanager
async def batching(queue_delay_s: float, queue_size: int = 100
                   ) -> AsyncIterator[tuple[DynamicBatcher, CountingModel]]:
    """A running batcher (batches of up to 8) over a CountingModel, stopped on exit."""
    model = CountingModel()
    batcher = DynamicBatcher(serving_state(model=model), Metrics([0.1], 8), "default",
                             max_batch_size=8, max_queue_delay_s=queue_delay_s,
                             max_queue_size=queue_size)
    task = asyncio.create_task(batcher.run())
    try:
        yield batcher, model
    finally:
        task.cancel()
        batcher.close()


def test_the_batcher_merges_a_burst_and_answers_each_its_own() -> None:
    async def go() -> None:
        async with batching(0.02) as (batcher, model):
            futures = [batcher.submit(np.full((1, 4), float(i), np.float32),
                                      np.array([T0.value])) for i in range(10)]
            results = await asyncio.gather(*futures)
            assert [float(r.quantiles[0, 0, 0]) for r in results] == [4.0 * i for i in range(10)]
            assert model.batches == [8, 2]

    asyncio.run(go())


def test_a_lone_request_does_not_wait_out_the_queue_delay() -> None:
    async def go() -> None:
        async with batching(5.0) as (batcher, model):
            one = np.ones((1, 4), np.float32)
            await asyncio.wait_for(batcher.submit(one, np.array([T0.value])), 1.0)

            async def trickle() -> list:  # one request per pass of the event loop
                futures = []
                for _ in range(6):
                    futures.append(batcher.submit(one, np.array([T0.value])))
                    await asyncio.sleep(0)
                return await asyncio.gather(*futures)

            await asyncio.wait_for(trickle(), 1.0)
            assert model.batches[0] == 1  # alone: it left at once, not after 5 s
            assert sum(model.batches[1:]) == 6 and len(model.batches) <= 3  # they joined up

    asyncio.run(go())


def test_the_batcher_bounds_its_queue_and_skips_abandoned_requests() -> None:
    async def go() -> None:
        async with batching(0.05, queue_size=3) as (batcher, model):
            one = np.ones((1, 4), np.float32)
            kept = [batcher.submit(one, np.array([T0.value])) for _ in range(3)]
            with pytest.raises(QueueFull):
                batcher.submit(one, np.array([T0.value]))
            kept[0].cancel()  # its caller answered from the fallback
            await asyncio.gather(*kept[1:])
            assert model.batches == [2]

    asyncio.run(go())


def test_the_concurrency_limit_follows_queueing_delay_against_the_allowance() -> None:
    from kpi_forecast.xapp.serving.admission import (
        MAX_GRADIENT,
        MIN_GRADIENT,
        MIN_LIMIT,
        SMOOTHING,
        WINDOW_ANSWERS,
        ConcurrencyLimit,
    )

    def window(limit: ConcurrencyLimit, waited: float, latency: float, now: float,
               concurrency: int = 100) -> float:
        """One window of identical answers over one round, the last arriving at ``now``, with
        ``concurrency`` requests in flight (as many as the limit lets in)."""
        held = sum(limit.try_acquire() for _ in range(concurrency))
        for k in range(WINDOW_ANSWERS):
            limit.record(waited, latency, budget_left=0.010,
                         now=now - latency * (WINDOW_ANSWERS - 1 - k) / (WINDOW_ANSWERS - 1))
        for _ in range(held):
            limit.release()
        return limit.limit

    limit = ConcurrencyLimit(maximum=1000)
    assert limit.limit == 1000  # open until requests wait
    # Waits twice the allowance (10 ms budget - 2 ms service = 8 ms): the gradient's floor,
    # applied to the 100 in flight rather than to the open limit.
    cut = window(limit, waited=0.016, latency=0.018, now=1.0)
    assert cut == pytest.approx(100 * (1 - SMOOTHING + SMOOTHING * MIN_GRADIENT))
    assert (limit.delay, limit.service) == (0.016, 0.018 - 0.016)
    assert limit.allowance == 0.010 - (0.018 - 0.016)
    # Waits of exactly the allowance: the fixed point, the limit stays.
    assert window(limit, waited=0.008, latency=0.010, now=2.0) == pytest.approx(cut)
    # Three quarters of the allowance: near the fixed point, one request more per window.
    assert window(limit, waited=0.006, latency=0.008, now=2.5) == pytest.approx(cut + 1)
    # A third of the allowance (9 ms): the gradient 3, bounded to 2, grows the limit by a
    # fifth (the smoothed doubling).
    grown = window(limit, waited=0.003, latency=0.004, now=3.0)
    assert grown == pytest.approx((cut + 1) * (1 - SMOOTHING + SMOOTHING * MAX_GRADIENT))
    # Nothing waits: it grows as fast, up to the maximum and no further.
    for now in range(4, 30):
        window(limit, waited=0.0, latency=0.001, now=float(now))
    assert limit.limit == 1000
    for now in range(30, 200):  # waits far beyond the allowance: down to the floor, no lower
        window(limit, waited=0.5, latency=0.5, now=float(now), concurrency=1000)
    assert limit.limit == MIN_LIMIT
    # A window lasts one round at least: its answers of 50 ms within no time close none.
    for _ in range(WINDOW_ANSWERS):
        limit.record(0.0, 0.050, budget_left=0.010, now=300.0)
    assert limit.limit == MIN_LIMIT
    limit.record(0.0, 0.050, budget_left=0.010, now=300.05)
    assert limit.limit > MIN_LIMIT
    # A limit cut by part of a request admits as many as before.
    limit.limit = 3.6
    assert [limit.try_acquire() for _ in range(5)] == [True] * 4 + [False]


def test_admission_off_admits_everything_and_still_measures() -> None:
    from kpi_forecast.xapp.serving.admission import WINDOW_ANSWERS, ConcurrencyLimit

    limit = ConcurrencyLimit(maximum=4, enabled=False)
    assert all(limit.try_acquire() for _ in range(50))
    for k in range(WINDOW_ANSWERS):
        limit.record(0.5, 0.5, budget_left=0.010, now=k * 0.5)
    assert limit.limit < 4 and limit.try_acquire()

"""Admission control: how many forecast requests may be in flight before new ones are shed.

Under overload, queueing anywhere (in the socket, the event loop, the batcher) only makes every
answer late. The limit adapts like TCP's congestion window (additive increase, multiplicative
decrease, as in Netflix's concurrency-limits): each answer well within the budget lets the
limit grow by about one per round, a late answer cuts it by a tenth, once per round: answers
late together are late for one cause (a burst, a GC pause) and cut once. The event loop's
own lateness counts towards an answer's latency, because the time a request waits in the
socket before the app reads it is invisible to per-request timers.
"""

from __future__ import annotations

import asyncio
import time

TICK_S = 0.002
LAG_SMOOTHING = 0.3  # weight of the newest tick: reacts within a few milliseconds
# The budget is the caller's, end to end; the xApp sees only its own part of it. The socket
# queues, the network and a busy client take the rest: on two cores shared with the load
# generator, about 3 ms at the 99th percentile. So the limit steers on 60 % of the budget.
LATE_FRACTION = 0.6  # answers later than this share of the budget are late
EARLY_FRACTION = 0.5  # answers earlier than this share are early: they let the limit grow
BACKOFF = 0.9
MIN_LIMIT = 2.0


class LoopLag:
    """How late the event loop runs, smoothed over the last few ticks."""

    def __init__(self) -> None:
        self.seconds = 0.0

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(TICK_S)
            late = max(time.monotonic() - started - TICK_S, 0.0)
            self.seconds = LAG_SMOOTHING * late + (1.0 - LAG_SMOOTHING) * self.seconds


class ConcurrencyLimit:
    def __init__(self, initial: float, maximum: float) -> None:
        self.limit = max(MIN_LIMIT, min(initial, maximum))
        self.maximum = maximum
        self.in_flight = 0
        self.last_cut = float("-inf")

    def try_acquire(self) -> bool:
        if self.in_flight >= int(self.limit):
            return False
        self.in_flight += 1
        return True

    def release(self, arrival: float, seconds: float | None, budget_s: float) -> None:
        """One admitted request done: it arrived at ``arrival`` (monotonic) and took
        ``seconds`` (plus the loop's lateness); None leaves the limit as it is."""
        self.in_flight -= 1
        if seconds is None:
            return
        if seconds < EARLY_FRACTION * budget_s:
            self.limit = min(self.maximum, self.limit + 1.0 / self.limit)
        elif seconds > LATE_FRACTION * budget_s and arrival >= self.last_cut:
            # One cut per round, as TCP does per window: requests already in flight at a cut
            # must not cut again.
            self.limit = max(MIN_LIMIT, self.limit * BACKOFF)
            self.last_cut = arrival + seconds

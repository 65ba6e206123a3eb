"""Background model work (live scoring, publication, recalibration) on one thread of its own,
at the lowest CPU priority in the process, each call on that thread alone: the event loop and
the requests' model calls take the cores first, and background work takes what they leave.

On Linux a thread's niceness is its own (``setpriority`` on its thread id), and within the
process's scheduling group the kernel weighs its threads by it: a background round running
beside requests slows itself, not them. A round's model calls pass ``parallel=False`` so that
none of it runs on the model's worker pool, whose threads run at the requests' priority."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger(__name__)

LOWEST = 19  # the largest niceness: the smallest share of a contended CPU

Result = TypeVar("Result")


def lowest_priority() -> None:
    """Give the calling thread the lowest CPU priority (raising niceness needs no privilege);
    where the system refuses, the work runs at the usual priority and says so."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST)
    except OSError as exc:
        log.warning("background work runs at the requests' priority: niceness %d refused: %s",
                    LOWEST, exc)


class BackgroundWork:
    """Runs background calls one at a time on a thread at the lowest priority."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, "background", initializer=lowest_priority)

    async def run(self, call: Callable[..., Result], *args: object, **kwargs: object
                  ) -> Result:
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(call, *args, **kwargs))

    def close(self) -> None:
        """Stop taking work; a call in progress finishes on its own (its caller is gone)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

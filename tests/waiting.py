"""Waiting for a condition with a bound derived from what is waited for: never a fixed sleep
that a busy machine outlasts, never a loop bounded only by the suite's per-test timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

POLL_S = 0.01


def until(condition: Callable[[], object], bound_s: float, what: str) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound_s:g} s: {what}")
        time.sleep(POLL_S)


async def until_async(condition: Callable[[], object], bound_s: float, what: str) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound_s:g} s: {what}")
        await asyncio.sleep(POLL_S)

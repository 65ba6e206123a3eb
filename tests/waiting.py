"""Waiting for a condition with a bound derived from what is waited for: never a fixed sleep
that a busy machine outlasts, never a loop bounded only by the suite's per-test timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

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


def wait_for(check: Callable[[], object], bound_s: float, what: Callable[[], str]) -> object:
    """``check()``'s first true result, polled until ``bound_s``; a server not answering yet
    counts as not yet."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not within {bound_s:.0f} s: {what()}")


async def unready_saying(client: httpx.AsyncClient, words: str, bound_s: float) -> None:
    """Readiness answers 503 throughout, until its reason holds ``words``."""
    deadline = time.monotonic() + bound_s
    while True:
        ready = await client.get("/ric/v1/health/ready")
        assert ready.status_code == 503, ready.text
        if words in ready.json()["error"]:
            return
        assert time.monotonic() < deadline, f"not within {bound_s:g} s: {ready.text}"
        await asyncio.sleep(POLL_S)

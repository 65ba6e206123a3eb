"""Failures as log lines say them: the exception's type and a reason, never an empty one.

httpx's timeouts, for one, carry no message: a retry loop that logs ``str(exc)`` prints
"subscription manager at http://...: ; retrying" for ever. Every retried or logged failure
goes through ``describe``, and every tenacity retry loop logs through ``log_retry``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
    wait_exponential,
)


def describe(exc: BaseException) -> str:
    """``Type: reason``; a timeout says what it waited for and how long."""
    name = type(exc).__name__
    request = _request(exc)
    if isinstance(exc, httpx.TimeoutException) and request is not None:
        timeouts = request.extensions.get("timeout", {})
        phase = {httpx.ConnectTimeout: "connect", httpx.ReadTimeout: "read",
                 httpx.WriteTimeout: "write", httpx.PoolTimeout: "pool"}.get(type(exc), "read")
        limit = timeouts.get(phase)
        within = f" within {limit:g} s" if limit is not None else ""
        return (f"{name}: timeout, no {'connection' if phase == 'connect' else 'answer'}"
                f"{within} for {request.method} {request.url}")
    # One line: httpx's status errors go on with a link to the status code's documentation.
    reason = str(exc).strip().split("\n", 1)[0] or (
        "timeout" if isinstance(exc, TimeoutError) else "no detail given")
    if isinstance(exc, httpx.TransportError) and request is not None:
        reason += f" ({request.method} {request.url})"
    return f"{name}: {reason}"


def _request(exc: BaseException) -> httpx.Request | None:
    if not isinstance(exc, httpx.RequestError | httpx.HTTPStatusError):
        return None
    try:
        return exc.request
    except RuntimeError:  # raised without a request attached
        return None


def log_retry(log: logging.Logger, what: str | Callable[[], str]
              ) -> Callable[[RetryCallState], None]:
    """A tenacity ``before_sleep``: ``what: Type: reason; attempt N, next in S s``."""
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s: %s; attempt %d failed, retrying in %.1f s",
                    what() if callable(what) else what,
                    describe(exc) if exc else "no outcome", state.attempt_number, wait)
    return before_sleep


def rest_retrying(log: logging.Logger, what: str, retry_max_s: float, attempts: int | None
                  ) -> AsyncRetrying:
    """Retries of a RIC platform's REST call: a failure (HTTP, or an answer that is not the
    API's, a ValueError) is logged through ``log_retry`` and retried with exponential backoff
    up to ``retry_max_s`` apart, ``attempts`` times in all (None: until it succeeds); the last
    one's error is raised."""
    return AsyncRetrying(
        wait=wait_exponential(multiplier=0.5, max=retry_max_s),
        retry=retry_if_exception_type((httpx.HTTPError, ValueError)),
        stop=stop_never if attempts is None else stop_after_attempt(attempts),
        reraise=True,
        before_sleep=log_retry(log, what),
    )


async def keep_ticking(tick: Callable[[], Awaitable[None]], seconds: float,
                       log: logging.Logger, doing: str, expected: tuple[type[Exception], ...],
                       kept: str) -> None:
    """``tick`` every ``seconds`` until cancelled, for background work whose failure must not
    end it: an ``expected`` failure is logged once until the next success ("``doing``: reason;
    ``kept``"), anything else with its traceback."""
    failing = False
    while True:
        try:
            await tick()
            failing = False
        except expected as exc:
            if not failing:
                log.warning("%s: %s; %s", doing, describe(exc), kept)
            failing = True
        except Exception:  # a bug here must not end the task or stop serving
            log.exception("%s failed, %s", doing, kept)
        await asyncio.sleep(seconds)

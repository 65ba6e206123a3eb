"""Logged failures name their type and a reason: a timeout says timeout and what it waited for."""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
import pytest
from tenacity import AsyncRetrying, stop_after_attempt, wait_none

from kpi_forecast.xapp.failures import describe, log_retry


def test_a_read_timeout_says_what_it_waited_for() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/ric/v1/e2nodes"

        async def go() -> httpx.HTTPError:
            async with httpx.AsyncClient(timeout=0.2) as client:
                with pytest.raises(httpx.ReadTimeout) as caught:
                    await client.get(url)
            return caught.value

        error = asyncio.run(go())
    assert str(error) == ""  # what the old log lines printed
    assert describe(error) == f"ReadTimeout: timeout, no answer within 0.2 s for GET {url}"


@pytest.mark.parametrize(("error", "text"), [
    (httpx.ConnectError("All connection attempts failed",
                        request=httpx.Request("POST", "http://submgr/x")),
     "ConnectError: All connection attempts failed (POST http://submgr/x)"),
    (httpx.HTTPStatusError("Server error '503 Service Unavailable' for url 'http://a/b'\n"
                           "For more information check: https://developer.mozilla.org",
                           request=httpx.Request("GET", "http://a/b"),
                           response=httpx.Response(503)),
     "HTTPStatusError: Server error '503 Service Unavailable' for url 'http://a/b'"),
    (TimeoutError(), "TimeoutError: timeout"),
    (socket.gaierror(-2, "Name or service not known"),
     "gaierror: [Errno -2] Name or service not known"),
    (KeyError(), "KeyError: no detail given"),
])
def test_every_failure_is_described_on_one_line(error: BaseException, text: str) -> None:
    assert describe(error) == text


def test_a_retry_is_logged_with_its_reason_attempt_and_wait(caplog) -> None:
    async def go() -> None:
        async for attempt in AsyncRetrying(
                stop=stop_after_attempt(2), wait=wait_none(), reraise=True,
                before_sleep=log_retry(logging.getLogger("test"), "appmgr at http://a")):
            with attempt:
                raise httpx.ConnectError("refused", request=httpx.Request("POST", "http://a"))

    with caplog.at_level(logging.WARNING), pytest.raises(httpx.ConnectError):
        asyncio.run(go())
    assert caplog.messages == ["appmgr at http://a: ConnectError: refused (POST http://a); "
                               "attempt 1 failed, retrying in 0.0 s"]

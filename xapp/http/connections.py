"""The HTTP connections one xApp process holds, bounded: uvicorn's httptools protocol with a
cap on open connections and a deadline to read each request.

uvicorn times out a connection only while it is idle between requests. One that never sends a
request, or sends it a byte at a time (slowloris), it holds for as long as the client likes,
each holding a file descriptor. Here a request, from its connection's opening or its first
byte to the end of its body, must arrive within ``READ_TIMEOUT_S`` (408, then the connection
closes), and a connection past ``max_connections()`` is closed as it opens, so that idle and
slow clients can neither exhaust the descriptors nor keep a fresh client out for long.
"""

from __future__ import annotations

import asyncio
import functools
import resource

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

READ_TIMEOUT_S = 5.0  # a request's headers and body, from its first byte (or the connection)
# Descriptors kept for what is not HTTP: Redis, RMR's sockets, the model's files, the logs.
RESERVED_DESCRIPTORS = 128
UNLIMITED_CONNECTIONS = 65536  # where the process may open descriptors without a limit


@functools.cache
def max_connections() -> int:
    """HTTP connections open at once: the process's descriptor limit (``ulimit -n``, as the
    container runtime sets it) less what the rest of the xApp needs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED_CONNECTIONS
    return max(1, min(UNLIMITED_CONNECTIONS, soft - RESERVED_DESCRIPTORS))

_REASON = f'{{"error": "the request did not arrive within {READ_TIMEOUT_S:g} s"}}\n'.encode()
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
             b"connection: close\r\ncontent-length: " + str(len(_REASON)).encode()
             + b"\r\n\r\n" + _REASON)


class BoundedHttpProtocol(HttpToolsProtocol):
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > max_connections():
            transport.abort()
            return
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(READ_TIMEOUT_S, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle  # the last request's, until this one's headers are read
        if not (cycle and cycle.response_started and not cycle.response_complete):
            self.transport.write(TIMED_OUT)
        self.transport.close()

"""The TCP stand-in for RMR the xApp spoke before it had librmr: the same three things per
message (type, subscription id, payload) in a framing of its own. Kept as the baseline the E2
ingestion benchmark measures RMR against; the xApp takes it only when handed it
(``Service(e2_transport=...)``).

A frame is a 12-byte big-endian header (message type: uint32; subscription id: int32, -1 for
none; payload length: uint32) followed by the payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Sequence

from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.ric.transport import Frame, Handler

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IiI")
MAX_PAYLOAD = 1 << 20  # RMR's own limit is far smaller; anything above is a broken stream
CONNECT_TIMEOUT_S = 5.0


class FrameError(ValueError):
    """The stream cannot be read as frames any more (the connection must be dropped)."""


def encode_frame(frame: Frame) -> bytes:
    return HEADER.pack(frame.msg_type, frame.subscription_id, len(frame.payload)) + frame.payload


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None when the peer closed the stream between frames."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("stream closed inside a frame header") from None
        return None
    msg_type, subscription_id, length = HEADER.unpack(header)
    if length > MAX_PAYLOAD:
        raise FrameError(f"frame of {length} bytes announced (at most {MAX_PAYLOAD})")
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError("stream closed inside a frame payload") from None
    return Frame(msg_type, subscription_id, payload)


class TcpTransport:
    """Listens for frames on ``port``; sends by opening (and reusing) connections to peers."""

    def __init__(self, host: str, port: int,
                 on_broken: Callable[[str], None] | None = None) -> None:
        self.host, self.port = host, port
        self._on_broken = on_broken or (lambda reason: None)
        self._server: asyncio.Server | None = None
        self._peers: dict[tuple[str, int], asyncio.StreamWriter] = {}
        self._inbound: dict[asyncio.Task, asyncio.StreamWriter] = {}

    async def start(self, handler: Handler) -> None:
        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            self._inbound[task] = writer
            try:
                while (frame := await read_frame(reader)) is not None:
                    await handler(frame)
            except FrameError as exc:
                # Framing is lost: nothing after this point can be trusted; the peer
                # reconnects and starts clean.
                self._on_broken("framing")
                log.warning("e2: dropping a connection: %s", describe(exc))
            except ConnectionError:
                self._on_broken("connection")
            finally:
                self._inbound.pop(task, None)
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()

        self._server = await asyncio.start_server(connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]  # port 0 picks a free one

    def ready(self) -> bool:
        return self._server is not None

    async def send(self, host: str, port: int, frame: Frame) -> None:
        writer = self._peers.get((host, port))
        if writer is None or writer.is_closing():
            # A peer that drops SYNs would hold a send for minutes: the caller is told.
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                               CONNECT_TIMEOUT_S)
            self._peers[(host, port)] = writer
        try:
            writer.write(encode_frame(frame))
            await writer.drain()
        except OSError:
            # The peer went away (a restart): forget the connection, the caller retries.
            self._peers.pop((host, port), None)
            writer.close()
            raise

    async def send_many(self, host: str, port: int, frames: Sequence[Frame]
                        ) -> tuple[int, Exception | None]:
        for sent, frame in enumerate(frames):
            try:
                await self.send(host, port, frame)
            except OSError as exc:
                return sent, exc
        return len(frames), None

    async def close(self) -> None:
        for writer in self._peers.values():
            writer.close()
        self._peers.clear()
        if self._server is not None:
            self._server.close()
            # Let each open connection's handler end on its own (its reader sees EOF), so
            # none is left to be cancelled half-closed when the loop stops.
            for writer in list(self._inbound.values()):
                writer.close()
            await asyncio.gather(*self._inbound, return_exceptions=True)
            await self._server.wait_closed()

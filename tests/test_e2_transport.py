"""The TCP stand-in the E2 benchmark measures RMR against: framing, broken streams, a real
TCP round trip."""

from __future__ import annotations

import asyncio

import pytest

from kpi_forecast.xapp.ric.transport import RIC_INDICATION, RIC_SUB_RESP, Frame
from tests.tcp_transport import (
    HEADER,
    MAX_PAYLOAD,
    FrameError,
    TcpTransport,
    encode_frame,
    read_frame,
)


def reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_frames_round_trip_and_eof_between_frames_ends_cleanly() -> None:
    async def go() -> None:
        frames = [Frame(RIC_INDICATION, 7, b"\x01\x02"), Frame(RIC_SUB_RESP, -1, b"")]
        reader = reader_of(b"".join(encode_frame(f) for f in frames))
        assert [await read_frame(reader) for _ in range(3)] == [*frames, None]

    asyncio.run(go())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (encode_frame(Frame(RIC_INDICATION, 1, b"abc"))[:5], "header"),
        (encode_frame(Frame(RIC_INDICATION, 1, b"abcdef"))[:-2], "payload"),
        (HEADER.pack(RIC_INDICATION, 1, MAX_PAYLOAD + 1), "announced"),
    ],
    ids=["cut-header", "cut-payload", "oversized"],
)
def test_broken_streams_are_frame_errors(data: bytes, message: str) -> None:
    async def go() -> None:
        with pytest.raises(FrameError, match=message):
            await read_frame(reader_of(data))

    asyncio.run(go())


def test_tcp_round_trip_and_a_broken_peer_does_not_stop_the_listener() -> None:
    async def go() -> None:
        received: list[Frame] = []
        broken: list[str] = []
        listener = TcpTransport("127.0.0.1", 0, on_broken=broken.append)

        async def handler(frame: Frame) -> None:
            received.append(frame)

        await listener.start(handler)
        sender = TcpTransport("127.0.0.1", 0)
        for k in range(3):
            await sender.send("127.0.0.1", listener.port, Frame(RIC_INDICATION, k, bytes([k])))
        # A peer that sends garbage: its connection is dropped, the listener carries on.
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(HEADER.pack(RIC_INDICATION, 1, MAX_PAYLOAD * 2))
        await writer.drain()
        await sender.send("127.0.0.1", listener.port, Frame(RIC_INDICATION, 9, b"after"))
        for _ in range(100):
            if len(received) == 4 and broken:
                break
            await asyncio.sleep(0.01)
        assert [f.subscription_id for f in received] == [0, 1, 2, 9]
        assert received[-1].payload == b"after" and broken == ["framing"]
        writer.close()
        await sender.close()
        await listener.close()

    asyncio.run(go())

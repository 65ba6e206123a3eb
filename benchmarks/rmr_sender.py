"""The E2 side of the E2 ingestion benchmark as a process of its own: sends the RIC
Indications of a file over librmr to an xApp's rmr-data port, one after the other, as fast as
librmr takes them.

    python -m benchmarks.rmr_sender HOST:PORT FRAMES

FRAMES holds the messages in the TCP stand-in's framing (``tests/tcp_transport.py``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from benchmarks.ports import free_port
from kpi_forecast.xapp.ric.rmr import RmrTransport
from kpi_forecast.xapp.ric.transport import Frame
from tests.tcp_transport import HEADER


def read_frames(path: Path) -> list[Frame]:
    data, frames, at = path.read_bytes(), [], 0
    while at < len(data):
        msg_type, subscription_id, length = HEADER.unpack_from(data, at)
        at += HEADER.size
        frames.append(Frame(msg_type, subscription_id, data[at:at + length]))
        at += length
    return frames


async def send_all(target: str, frames: list[Frame]) -> None:
    host, _, port = target.rpartition(":")
    sender = RmrTransport(free_port())
    await sender.start(lambda frame: asyncio.sleep(0))
    for frame in frames:
        await sender.send(host, int(port), frame)
    await sender.close()


if __name__ == "__main__":
    asyncio.run(send_all(sys.argv[1], read_frames(Path(sys.argv[2]))))

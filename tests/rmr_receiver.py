"""A bare RMR endpoint as a process of its own: prints the sequence number of each RIC
Indication it receives, one per line, until it is killed. librmr closes its connections only
when the process ends, so an xApp that goes away is a process that ends.

    python -m tests.rmr_receiver PORT
"""

from __future__ import annotations

import asyncio
import sys

from kpi_forecast.xapp.ric.e2 import e2ap
from kpi_forecast.xapp.ric.rmr import RmrTransport
from kpi_forecast.xapp.ric.transport import RIC_INDICATION, Frame


async def receive(port: int) -> None:
    async def show(frame: Frame) -> None:
        if frame.msg_type == RIC_INDICATION:
            print(e2ap.decode(frame.payload).sequence_number, flush=True)

    await RmrTransport(port).start(show)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(receive(int(sys.argv[1])))

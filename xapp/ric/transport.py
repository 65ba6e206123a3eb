"""Messages as the RIC message router hands them to an xApp, what the xApp needs of a
transport for them (``Transport``; the RIC's own is ``rmr.RmrTransport``), and the handler of
each message type (``MessageHandlers``): one RMR endpoint carries E2 and A1 alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

RIC_SUB_REQ = 12010
RIC_SUB_RESP = 12011
RIC_SUB_FAILURE = 12012
RIC_SUB_DEL_REQ = 12020
RIC_SUB_DEL_RESP = 12021
RIC_INDICATION = 12050
# This xApp's own, in the range O-RAN SC's xApps use for theirs (traffic steering's 30000s): a
# cell's published forecast (``publication.rmr``), and a consumer's acknowledgement of it.
KPI_FORECAST = 30200
KPI_FORECAST_ACK = 30201
MESSAGE_TYPES = {
    RIC_SUB_REQ: "RIC_SUB_REQ", RIC_SUB_RESP: "RIC_SUB_RESP",
    RIC_SUB_FAILURE: "RIC_SUB_FAILURE", RIC_SUB_DEL_REQ: "RIC_SUB_DEL_REQ",
    RIC_SUB_DEL_RESP: "RIC_SUB_DEL_RESP", RIC_INDICATION: "RIC_INDICATION",
    KPI_FORECAST: "KPI_FORECAST", KPI_FORECAST_ACK: "KPI_FORECAST_ACK",
}


@dataclass(frozen=True)
class Frame:
    """One message: its RMR message type, subscription id (-1 for none) and payload (an E2AP
    PDU in aligned PER, or an A1 policy message's JSON)."""

    msg_type: int
    subscription_id: int
    payload: bytes


Handler = Callable[[Frame], Awaitable[None]]


class MessageHandlers:
    """The handler registered for each message type, as ricxappframe's ``register_callback``
    keeps them, and ``other`` for every type none is registered for; the transport's handler
    (``Transport.start``)."""

    def __init__(self, other: Handler) -> None:
        self._by_type: dict[int, Handler] = {}
        self._other = other

    def register(self, msg_type: int, handler: Handler) -> None:
        self._by_type[msg_type] = handler

    async def __call__(self, frame: Frame) -> None:
        await self._by_type.get(frame.msg_type, self._other)(frame)


class Transport(Protocol):
    """Receive frames on ``port`` once started; send frames to ``host:port``, or by route."""

    port: int

    async def start(self, handler: Handler) -> None: ...

    def ready(self) -> bool:
        """Messages can be taken and answered (RMR: a route table is loaded)."""
        ...

    async def send(self, host: str, port: int, frame: Frame) -> None: ...

    async def send_many(self, host: str, port: int, frames: Sequence[Frame]
                        ) -> tuple[int, Exception | None]:
        """Send in order, stopping at the first frame that cannot be sent: how many went,
        and why the rest did not (None: all went). One hand-off for the lot, as an E2 node
        sends a reporting period's indications."""
        ...

    async def route(self, frame: Frame) -> None:
        """Send to wherever the RIC's route table sends ``frame.msg_type``."""
        ...

    async def route_many(self, frames: Sequence[Frame]) -> tuple[int, Exception | None]:
        """``route`` each, in order, in one hand-off, stopping at the first that cannot be
        sent: how many went, and why the rest did not (None: all went)."""
        ...

    async def close(self) -> None: ...

"""The O-RAN SC A1 mediator's southbound side, for the A1 tests: an RMR endpoint of its own
that sends A1_POLICY_REQ to an xApp and collects what the xApp sends it by route (answers and
queries), and the static route table that sends them there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from kpi_forecast.xapp.ric.a1.policy_type import (
    A1_POLICY_QUERY,
    A1_POLICY_REQ,
    A1_POLICY_RESP,
    POLICY_TYPE_ID,
)
from kpi_forecast.xapp.ric.rmr import RmrTransport
from kpi_forecast.xapp.ric.transport import Frame


class Mediator:
    """The A1 mediator's side of RMR: sends A1_POLICY_REQ to an xApp, collects its answers
    and queries (which the xApp's route table sends here)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.transport = RmrTransport(port)
        self.received: asyncio.Queue[Frame] = asyncio.Queue()

    async def start(self) -> None:
        await self.transport.start(self.received.put)

    async def request(self, xapp_port: int, operation: str, instance_id: str,
                      payload: dict | None = None, type_id: int = POLICY_TYPE_ID,
                      as_contract: bool = False) -> dict:
        """Send one request; the xApp's answer to it. As the mediator of today (ric-plt/a1
        in Go) writes it: every value a string, the payload the instance's JSON text ("" for
        a DELETE); ``as_contract``: as its contract has it (a number, an object)."""
        if as_contract:
            body = {"operation": operation, "policy_type_id": type_id,
                    "policy_instance_id": instance_id, "payload": payload or {}}
        else:
            body = {"operation": operation, "policy_type_id": str(type_id),
                    "policy_instance_id": instance_id,
                    "payload": json.dumps(payload) if payload is not None else ""}
        await self.send(xapp_port, json.dumps(body).encode())
        return await self.answer()

    async def send(self, xapp_port: int, payload: bytes) -> None:
        await self.transport.send("127.0.0.1", xapp_port, Frame(A1_POLICY_REQ, -1, payload))

    async def next(self, msg_type: int) -> dict:
        """The next message of ``msg_type`` (the replicas' queries are passed over when an
        answer is awaited), within 10 s in all: replicas that keep asking must not keep the
        wait open."""
        async with asyncio.timeout(10):
            while True:
                frame = await self.received.get()
                if frame.msg_type == msg_type:
                    return json.loads(frame.payload)
                assert frame.msg_type == A1_POLICY_QUERY, frame

    async def answer(self) -> dict:
        return await self.next(A1_POLICY_RESP)


@pytest.fixture
def mediator_routes(rmr_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A static route table, as the chart renders it without a routing manager: the xApp's
    A1 answers and queries go to the mediator's port (returned)."""
    port = free_port()
    table = tmp_path / "router.txt"
    table.write_text(f"newrt|start\nrte|{A1_POLICY_RESP}|127.0.0.1:{port}\n"
                     f"rte|{A1_POLICY_QUERY}|127.0.0.1:{port}\nnewrt|end\n")
    monkeypatch.setenv("RMR_SEED_RT", str(table))
    return port

"""Subscribing to E2 nodes through the subscription manager, modelled on O-RAN SC's submgr.

1. ``GET {submgr}/ric/v1/e2nodes``: the E2 nodes and the cells each serves (on a real RIC this
   comes from the RNIB through e2mgr; the mock E2 node serves it beside the subscriptions).
2. ``POST {submgr}/ric/v1/subscriptions`` per node, submgr's REST shape: ClientEndpoint (where
   to send this xApp's frames), Meid, RANFunctionID 2, and one SubscriptionDetails entry per
   cell, whose single action's definition (E2SM-KPM format 1) names the cell's global id and
   the measurement behind the model's KPI. The answer carries a SubscriptionId.
3. The outcome arrives on the rmr-data stream as E2AP RICsubscriptionResponse (12011) or
   RICsubscriptionFailure (12012): the response's RIC requestor id is the entry's
   XappEventInstanceId, which names the cell; its RIC instance id and action id are what that
   cell's indications will carry, so they become the ingestor's route.
4. ``DELETE {submgr}/ric/v1/subscriptions/{SubscriptionId}`` on shutdown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from xapp.e2 import e2ap, kpm
from xapp.e2.ingest import Ingestor, Route
from xapp.e2.transport import RIC_SUB_FAILURE, RIC_SUB_RESP, Frame

log = logging.getLogger(__name__)

RAN_FUNCTION_ID = 2  # E2SM-KPM, as O-RAN SC E2 nodes number it
ACTION_ID = 1
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Cell:
    cell_id: str
    plmn: bytes
    nr_cell: int


@dataclass
class Pending:
    cell: Cell
    granularity_ms: int


class Subscriber:
    def __init__(
        self, submgr_url: str, client_host: str, rmr_port: int, http_port: int,
        ingestor: Ingestor, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.submgr_url = submgr_url.rstrip("/")
        self.client = {"Host": client_host, "HTTPPort": http_port, "RMRPort": rmr_port}
        self.ingestor = ingestor
        self._transport = transport
        self.subscription_ids: list[str] = []
        self._pending: dict[int, Pending] = {}  # XappEventInstanceId -> the cell it is for

    async def subscribe(self, measurement: str, period_ms: int, retry_max_s: float = 30.0
                        ) -> None:
        """Subscribe to every cell of every node; HTTP failures are retried, never fatal."""
        retrying = AsyncRetrying(
            wait=wait_exponential(multiplier=0.5, max=retry_max_s),
            retry=retry_if_exception_type(httpx.HTTPError),
            before_sleep=lambda state: log.warning(
                "e2: subscription manager at %s: %s; retrying", self.submgr_url,
                state.outcome.exception() if state.outcome else "?"),
        )
        async with httpx.AsyncClient(timeout=TIMEOUT_S, transport=self._transport) as client:
            async for attempt in retrying:
                with attempt:
                    response = await client.get(f"{self.submgr_url}/ric/v1/e2nodes")
                    response.raise_for_status()
                    nodes = response.json()
            for node in nodes:
                body = self._request(node, measurement, period_ms)
                async for attempt in retrying:
                    with attempt:
                        response = await client.post(f"{self.submgr_url}/ric/v1/subscriptions",
                                                     json=body)
                        response.raise_for_status()
                self.subscription_ids.append(response.json()["SubscriptionId"])
                log.info("e2: subscribed to %d cell(s) of %s", len(node["cells"]), node["meid"])

    def _request(self, node: dict, measurement: str, period_ms: int) -> dict:
        trigger = list(kpm.encode_event_trigger(period_ms))
        details = []
        for cell in node["cells"]:
            event_id = len(self._pending) + 1
            target = Cell(cell["cellId"], bytes.fromhex(cell["plmn"]), int(cell["nrCellId"]))
            self._pending[event_id] = Pending(target, period_ms)
            definition = kpm.encode_action_definition(kpm.ActionDefinition(
                [measurement], granularity_ms=period_ms,
                cell=kpm.CellId(target.plmn, nr_cell=target.nr_cell)))
            details.append({
                "XappEventInstanceId": event_id,
                "EventTriggers": trigger,
                "ActionToBeSetupList": [{
                    "ActionID": ACTION_ID, "ActionType": "report",
                    "ActionDefinition": list(definition),
                    "SubsequentAction": {"SubsequentActionType": "continue",
                                         "TimeToWait": "zero"},
                }],
            })
        return {"SubscriptionId": "", "ClientEndpoint": self.client, "Meid": node["meid"],
                "RANFunctionID": RAN_FUNCTION_ID, "SubscriptionDetails": details}

    async def handle(self, frame: Frame) -> bool:
        """Take a subscription outcome frame; False when the frame is not one."""
        if frame.msg_type not in (RIC_SUB_RESP, RIC_SUB_FAILURE):
            return False
        try:
            pdu = e2ap.decode(frame.payload)
        except kpm.DecodeError as exc:
            log.warning("e2: undecodable subscription outcome: %s", exc)
            return True
        pending = self._pending.get(pdu.requestor_id)
        if pending is None:
            log.warning("e2: outcome for unknown request %d", pdu.requestor_id)
            return True
        cell = pending.cell.cell_id
        if pdu.kind == "subscription_response" and ACTION_ID in pdu.admitted:
            self.ingestor.add_route(pdu.instance_id, ACTION_ID,
                                    Route(cell, pending.granularity_ms))
        else:
            cause = pdu.cause or pdu.not_admitted.get(ACTION_ID)
            log.warning("e2: subscription for cell %s refused: %s", cell, cause)
        return True

    async def unsubscribe(self) -> None:
        """Delete every subscription made; failures are logged (the RIC times them out)."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S, transport=self._transport) as client:
            for subscription_id in self.subscription_ids:
                try:
                    response = await client.delete(
                        f"{self.submgr_url}/ric/v1/subscriptions/{subscription_id}")
                    response.raise_for_status()
                except httpx.HTTPError as exc:
                    log.warning("e2: deleting subscription %s failed: %s", subscription_id, exc)
        self.subscription_ids.clear()

"""Subscribing to E2 nodes through the subscription manager, by O-RAN SC submgr's published
REST API (``submgr-xapp-rest-api.yaml``, base path ``/ric/v1``); the nodes and cells come from
the E2 Manager (``discovery.py``).

1. ``POST {submgr}/subscriptions`` per node this replica owns (``e2/ownership.py``), a
   SubscriptionParams: ClientEndpoint (where to send this xApp's frames), Meid, the node's
   E2SM-KPM RANFunctionID, and one SubscriptionDetails entry per cell, whose single action's
   definition (E2SM-KPM format 1) names the cell's global id and the measurements behind the
   models' KPIs that the node reports: one subscription per node, whatever the number of
   models. The answer carries a SubscriptionId.
2. The outcome arrives on the rmr-data stream as E2AP RICsubscriptionResponse (12011) or
   RICsubscriptionFailure (12012): the response's RIC requestor id is the entry's
   XappEventInstanceId, which names the cell; its RIC instance id and action id are what that
   cell's indications will carry, so they become the ingestor's route.
3. ``DELETE {submgr}/subscriptions/{SubscriptionId}`` for a node given up (or gone), and for
   all on shutdown; the routes of its cells go with it.
4. ``GET {submgr}/subscriptions`` now and then: a subscription it no longer lists for this
   replica's endpoint (the subscription manager or the E2 node restarted and lost it) is
   forgotten here, so that the next round makes it again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Annotated, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from kpi_forecast.xapp.failures import describe, rest_retrying
from kpi_forecast.xapp.ric.e2 import e2ap, kpm
from kpi_forecast.xapp.ric.e2.discovery import Cell, E2Node
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.e2.transport import RIC_SUB_FAILURE, RIC_SUB_RESP, Frame

log = logging.getLogger(__name__)

ACTION_ID = 1
TIMEOUT_S = 5.0

# --- the REST bodies, in submgr's field names ---------------------------------------------------

_REST = ConfigDict(populate_by_name=True, extra="ignore")
Octets = list[Annotated[int, Field(ge=0, le=255)]]  # an encoded ASN.1 value, byte by byte


class ClientEndpoint(BaseModel):
    model_config = _REST

    host: str = Field(alias="Host", min_length=1)
    http_port: int | None = Field(None, alias="HTTPPort", ge=0, le=65535)
    rmr_port: int = Field(alias="RMRPort", ge=1, le=65535)


TimeToWait = Literal["zero", "w1ms", "w2ms", "w5ms", "w10ms", "w20ms", "w30ms", "w40ms",
                     "w50ms", "w100ms", "w200ms", "w500ms", "w1s", "w2s", "w5s", "w10s",
                     "w20s", "w60s"]


class SubsequentAction(BaseModel):
    model_config = _REST

    type: Literal["continue", "wait"] = Field(alias="SubsequentActionType")
    time_to_wait: TimeToWait = Field(alias="TimeToWait")


class ActionToBeSetup(BaseModel):
    model_config = _REST

    action_id: int = Field(alias="ActionID", ge=0, le=255)
    action_type: Literal["insert", "policy", "report"] = Field(alias="ActionType")
    action_definition: Octets = Field(alias="ActionDefinition")
    subsequent_action: SubsequentAction | None = Field(None, alias="SubsequentAction")


class SubscriptionDetail(BaseModel):
    model_config = _REST

    xapp_event_instance_id: int = Field(alias="XappEventInstanceId", ge=0, le=65535)
    event_triggers: Octets = Field(alias="EventTriggers")
    actions: list[ActionToBeSetup] = Field(alias="ActionToBeSetupList", min_length=1)


class SubscriptionRequest(BaseModel):
    """SubscriptionParams: one E2 node, one detail (here: one cell) per entry."""

    model_config = _REST

    subscription_id: str = Field("", alias="SubscriptionId")
    client_endpoint: ClientEndpoint = Field(alias="ClientEndpoint")
    meid: str = Field(alias="Meid", min_length=1)
    ran_function_id: int = Field(alias="RANFunctionID", ge=0, le=4095)
    details: list[SubscriptionDetail] = Field(alias="SubscriptionDetails", min_length=1)


class SubscriptionInstance(BaseModel):
    model_config = _REST

    xapp_event_instance_id: int = Field(alias="XappEventInstanceId")
    e2_event_instance_id: int = Field(alias="E2EventInstanceId")


class SubscriptionResponse(BaseModel):
    model_config = _REST

    subscription_id: str = Field(alias="SubscriptionId")
    instances: list[SubscriptionInstance] = Field(alias="SubscriptionInstances")


class SubscriptionData(BaseModel):
    """An entry of ``GET /subscriptions``' SubscriptionList."""

    model_config = _REST

    subscription_id: int = Field(alias="SubscriptionId")
    meid: str = Field(alias="Meid")
    client_endpoint: list[str] = Field(alias="ClientEndpoint")


SubscriptionList = TypeAdapter(list[SubscriptionData])


@dataclass
class Pending:
    cell: Cell
    granularity_ms: int
    meid: str  # the node whose subscription it is part of


MAX_EVENT_ID = 65535  # XappEventInstanceId is 16 bits


class Subscriber:
    def __init__(
        self, submgr_url: str, client_host: str, rmr_port: int, http_port: int,
        ingestor: Ingestor, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.submgr_url = submgr_url.rstrip("/")
        self.client = ClientEndpoint(host=client_host, http_port=http_port, rmr_port=rmr_port)
        self.ingestor = ingestor
        # One client for the replica's life: each new one builds an SSL context, costly in
        # CPU, and the node list is asked for every lease round.
        self._client = httpx.AsyncClient(timeout=TIMEOUT_S, transport=transport)
        self.subscription_ids: dict[str, str] = {}  # node (meid) -> its SubscriptionId
        self._pending: dict[int, Pending] = {}  # XappEventInstanceId -> the cell it is for
        self._routes: dict[str, list[tuple[int, int]]] = {}  # node -> its cells' routes
        self._last_event = 0

    async def subscribe(self, node: E2Node, period_ms: int, retry_max_s: float = 30.0,
                        attempts: int | None = None) -> None:
        """Subscribe to every cell of ``node``, for the measurements it carries."""
        body = self._request(node, period_ms)
        try:
            async for attempt in rest_retrying(
                log, f"e2: subscription manager at {self.submgr_url}", retry_max_s, attempts):
                with attempt:
                    response = await self._client.post(f"{self.submgr_url}/subscriptions",
                                                       json=body)
                    response.raise_for_status()
                    answer = SubscriptionResponse.model_validate_json(response.content)
        except BaseException:
            self._forget(node.meid)  # its cells wait for no outcome
            raise
        self.subscription_ids[node.meid] = answer.subscription_id
        log.info("e2: subscribed to %d cell(s) of %s", len(node.cells), node.meid)

    async def lost(self) -> set[str]:
        """The nodes this replica holds a subscription to that the subscription manager no
        longer lists for its endpoint, forgotten here so that they are subscribed to again."""
        response = await self._client.get(f"{self.submgr_url}/subscriptions")
        response.raise_for_status()
        endpoint = f"{self.client.host}:{self.client.rmr_port}"
        listed = {(str(entry.subscription_id), entry.meid)
                  for entry in SubscriptionList.validate_json(response.content)
                  if endpoint in entry.client_endpoint}
        gone = {meid for meid, subscription_id in self.subscription_ids.items()
                if (subscription_id, meid) not in listed}
        for meid in sorted(gone):
            log.warning("e2: the subscription manager no longer lists subscription %s of %s "
                        "(it or the E2 node restarted): subscribing again",
                        self.subscription_ids[meid], meid)
            self._forget(meid)
        return gone

    def _event_id(self) -> int:
        """The next XappEventInstanceId not waiting for an outcome (they wrap at 16 bits:
        a long-lived replica subscribes again at every handover)."""
        for _ in range(MAX_EVENT_ID):
            self._last_event = self._last_event % MAX_EVENT_ID + 1
            if self._last_event not in self._pending:
                return self._last_event
        raise RuntimeError(f"all {MAX_EVENT_ID} subscription event ids are in use")

    def _request(self, node: E2Node, period_ms: int) -> dict:
        trigger = list(kpm.encode_event_trigger(period_ms))
        details = []
        for cell in node.cells:
            event_id = self._event_id()
            self._pending[event_id] = Pending(cell, period_ms, node.meid)
            definition = kpm.encode_action_definition(kpm.ActionDefinition(
                list(node.measurements), granularity_ms=period_ms, cell=cell.global_id))
            details.append(SubscriptionDetail(
                xapp_event_instance_id=event_id, event_triggers=trigger,
                actions=[ActionToBeSetup(
                    action_id=ACTION_ID, action_type="report",
                    action_definition=list(definition),
                    subsequent_action=SubsequentAction(type="continue", time_to_wait="zero"))]))
        request = SubscriptionRequest(client_endpoint=self.client, meid=node.meid,
                                      ran_function_id=node.ran_function_id, details=details)
        return request.model_dump(by_alias=True)

    async def handle(self, frame: Frame) -> bool:
        """Take a subscription outcome frame; False when the frame is not one."""
        if frame.msg_type not in (RIC_SUB_RESP, RIC_SUB_FAILURE):
            return False
        try:
            pdu = e2ap.decode(frame.payload)
        except kpm.DecodeError as exc:
            self.ingestor.reject("subscription-outcome", f"undecodable: {describe(exc)}")
            return True
        pending = self._pending.get(pdu.requestor_id)
        if pdu.kind not in ("subscription_response", "subscription_failure") or pending is None:
            self.ingestor.reject("subscription-outcome", f"an E2AP {pdu.kind} for request "
                                 f"{pdu.requestor_id}, which is not one waiting for an outcome")
            return True
        cell = pending.cell.cell_id
        if pdu.kind == "subscription_response" and ACTION_ID in pdu.admitted:
            self.ingestor.add_route(pdu.instance_id, ACTION_ID,
                                    Route(cell, pending.granularity_ms))
            self._routes.setdefault(pending.meid, []).append((pdu.instance_id, ACTION_ID))
        else:
            cause = pdu.cause or pdu.not_admitted.get(ACTION_ID)
            log.warning("e2: subscription for cell %s refused: %s", cell, cause)
        return True

    def _forget(self, meid: str) -> str | None:
        """Drop what this replica holds of ``meid``'s subscription (its routes: later
        indications of it count as unknown), returning its SubscriptionId."""
        for event_id in [e for e, p in self._pending.items() if p.meid == meid]:
            del self._pending[event_id]
        for route in self._routes.pop(meid, []):
            self.ingestor.routes.pop(route, None)
        return self.subscription_ids.pop(meid, None)

    async def unsubscribe_node(self, meid: str, within_s: float = TIMEOUT_S) -> None:
        """Give up ``meid``: delete its subscription (a failure is logged: the RIC times out
        what is left) and stop ingesting what it still sends."""
        subscription_id = self._forget(meid)
        if subscription_id is None:
            return
        try:
            response = await self._client.delete(
                f"{self.submgr_url}/subscriptions/{subscription_id}", timeout=within_s)
            response.raise_for_status()
            log.info("e2: unsubscribed from %s", meid)
        except httpx.HTTPError as exc:
            log.warning("e2: deleting subscription %s of %s failed: %s", subscription_id, meid,
                        describe(exc))

    async def unsubscribe(self, within_s: float = TIMEOUT_S) -> None:
        """Delete every subscription made, all within ``within_s``; failures are logged (the
        RIC times out what is left). The routes stay: what arrives meanwhile is still taken.
        """
        left = list(self.subscription_ids.values())
        self.subscription_ids.clear()
        try:
            async with asyncio.timeout(within_s):
                while left:
                    try:
                        response = await self._client.delete(
                            f"{self.submgr_url}/subscriptions/{left[0]}",
                            timeout=within_s)
                        response.raise_for_status()
                    except httpx.HTTPError as exc:
                        log.warning("e2: deleting subscription %s failed: %s", left[0],
                                    describe(exc))
                    left.pop(0)
        except TimeoutError:
            log.warning("e2: %d subscription(s) not deleted within %.1f s (the subscription "
                        "manager did not answer): %s", len(left), within_s, ", ".join(left))

    async def close(self) -> None:
        await self._client.aclose()

"""Subscribing to E2 nodes through the subscription manager, as O-RAN SC submgr runs its REST
API (base path ``/ric/v1``) for a REST subscriber; the nodes and cells come from the E2
Manager (``discovery.py``). Read from submgr's source (``pkg/control/control.go``) and
xapp-frame's (``pkg/xapp/subscription.go``, ``pkg/models``):

1. ``POST {submgr}/subscriptions`` per node this replica owns (``e2/ownership.py``): a
   SubscriptionParams with ClientEndpoint (``Host``, whose ``http`` submgr turns into ``rmr``
   for the RMR endpoint, the HTTP and RMR ports), Meid, the node's E2SM-KPM RANFunctionID,
   and one SubscriptionDetails entry per cell, whose single action's definition (E2SM-KPM
   format 1) names the cell's global id and the measurements behind the models' KPIs that the
   node reports: one subscription per node, whatever the number of models. The 201 answer
   carries the REST SubscriptionId only (``SubscriptionInstances`` is null: the details are
   processed after it, ``RESTSubscriptionHandler``).
2. Each detail's outcome arrives as an HTTP ``POST`` of a SubscriptionResponse to
   ``/ric/v1/subscriptions/response`` on ``Host:HTTPPort`` (``Subscriber.Notify``, retried
   until a 200), possibly before the 201 itself: its ``E2EventInstanceId`` is the E2
   subscription's instance id, which the cell's indications carry (as the RMR sub id and
   the RIC request's instance id; their requestor id is submgr's own, 123), so it becomes
   the ingestor's route; an ``ErrorCause`` says why a cell was refused
   (``take_outcome``).
3. ``DELETE {submgr}/subscriptions/{SubscriptionId}`` for a node given up (or gone), for one
   made again, and for all on shutdown; the routes of its cells go with it.
4. ``GET {submgr}/subscriptions`` now and then: it lists each E2 subscription under its
   instance id with the RMR endpoints it reports to (``Registry.QueryHandler``); a node
   whose routed instances it no longer lists for this replica's endpoint (submgr or the
   E2 node restarted and lost them) is forgotten and its subscription deleted, so that the
   next round makes it again (``lost``).
5. At start, before subscribing, what submgr lists for this replica's own endpoint is a
   predecessor's (a restarted process): deleted, found by node through submgr's
   ``GET /get_e2node_rest_subscriptions/{ranName}`` (``delete_strays``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field

import httpx

from kpi_forecast.xapp.failures import describe, rest_retrying
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2 import kpm
from kpi_forecast.xapp.ric.e2.discovery import Cell, E2Node
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.e2.submgr_api import (
    ActionToBeSetup,
    ClientEndpoint,
    NodeRestSubscriptions,
    SubscriptionData,
    SubscriptionDetail,
    SubscriptionInstance,
    SubscriptionList,
    SubscriptionRequest,
    SubscriptionResponse,
    SubsequentAction,
)

log = logging.getLogger(__name__)

ACTION_ID = 1
TIMEOUT_S = 5.0

# Why a cell's subscription was refused, as submgr says it: the timeout's kind, else the
# error's source (xapp-frame ``models.SubscriptionInstance``'s enums).
CAUSES = ("E2-Timeout", "RTMGR-Timeout", "DBAAS-Timeout", "E2Node", "SUBMGR", "RTMGR", "DBAAS",
          "ASN1", "other")


def cause_of(instance: SubscriptionInstance) -> str:
    named = instance.timeout_type or instance.error_source
    return named if named in CAUSES else "other"


@dataclass
class Pending:
    cell: Cell
    granularity_ms: int
    meid: str  # the node whose subscription it is part of


@dataclass
class Outcomes:
    """What one posted SubscriptionResponse did: cells routed, refused, repeats of outcomes
    already taken, and instances no subscription of this replica waits for."""

    routed: int = 0
    refused: int = 0
    repeated: int = 0
    unknown: int = 0
    causes: Counter[str] = field(default_factory=Counter)


MAX_EVENT_ID = 65535  # XappEventInstanceId is 16 bits


class Subscriber:
    def __init__(
        self, submgr_url: str, client_host: str, rmr_port: int, http_port: int,
        ingestor: Ingestor, metrics: Metrics,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.submgr_url = submgr_url.rstrip("/")
        self.client = ClientEndpoint(host=client_host, http_port=http_port, rmr_port=rmr_port)
        self.ingestor = ingestor
        self._metrics = metrics
        # One client for the replica's life: each new one builds an SSL context, costly in
        # CPU, and the node list is asked for every lease round.
        self._client = httpx.AsyncClient(timeout=TIMEOUT_S, transport=transport)
        self.subscription_ids: dict[str, str] = {}  # node (meid) -> its SubscriptionId
        self.nodes: dict[str, E2Node] = {}  # node (meid) -> what it was subscribed for
        self._pending: dict[int, Pending] = {}  # XappEventInstanceId -> the cell it is for
        self._routes: dict[str, set[int]] = {}  # node -> its cells' E2 instance ids
        self._last_event = 0

    async def subscribe(self, node: E2Node, period_ms: int, retry_max_s: float = 30.0,
                        attempts: int | None = None) -> None:
        """Subscribe to every cell of ``node``, for the measurements it carries; the cells'
        outcomes come to ``take_outcome``."""
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
        self.nodes[node.meid] = node
        log.info("e2: subscribed to %d cell(s) of %s (subscription %s)", len(node.cells),
                 node.meid, answer.subscription_id)

    def settled(self) -> set[str]:
        """The nodes subscribed to whose every cell's outcome has come: only then are their
        reports taken, and only then may a previous owner let them go."""
        waiting = {pending.meid for pending in self._pending.values()}
        return set(self.subscription_ids) - waiting

    def take_outcome(self, answer: SubscriptionResponse) -> Outcomes:
        """Take the outcomes submgr posts: an admitted cell's E2 instance id becomes the
        route of its indications, a refused cell is logged and counted by cause. A repeat
        (submgr retries until it gets a 200) changes nothing; an outcome for a subscription
        this replica does not hold, or a cell it waits for no outcome of, is counted."""
        outcomes = Outcomes()
        for instance in answer.instances or []:
            pending = self._pending.get(instance.xapp_event_instance_id)
            # The outcome may come before the 201 that names the subscription.
            if pending is not None and self.subscription_ids.get(
                    pending.meid, answer.subscription_id) == answer.subscription_id:
                del self._pending[instance.xapp_event_instance_id]
                self._take(pending, instance, outcomes)
            elif self._holds(answer.subscription_id, instance.e2_event_instance_id):
                outcomes.repeated += 1
            else:
                outcomes.unknown += 1
                self.ingestor.reject(
                    "subscription-outcome", f"an outcome of subscription "
                    f"{answer.subscription_id} for XappEventInstanceId "
                    f"{instance.xapp_event_instance_id}, which this replica waits for no "
                    "outcome of")
        return outcomes

    def _take(self, pending: Pending, instance: SubscriptionInstance, outcomes: Outcomes
              ) -> None:
        e2_instance = instance.e2_event_instance_id
        if not instance.error_cause and e2_instance:
            self.ingestor.add_route(e2_instance, ACTION_ID,
                                    Route(pending.cell.cell_id, pending.granularity_ms))
            self._routes.setdefault(pending.meid, set()).add(e2_instance)
            outcomes.routed += 1
            return
        cause = cause_of(instance)
        outcomes.refused += 1
        outcomes.causes[cause] += 1
        self._metrics.e2_subscriptions_refused.labels(cause=cause).inc()
        log.warning("e2: subscription for cell %s of %s refused (%s): %s",
                    pending.cell.cell_id, pending.meid, cause,
                    instance.error_cause or "no ErrorCause given")

    def _holds(self, subscription_id: str, e2_instance: int | None) -> bool:
        return any(self.subscription_ids.get(meid) == subscription_id
                   and (not e2_instance or e2_instance in self._routes.get(meid, ()))
                   for meid in self.subscription_ids)

    async def _listed(self) -> list[SubscriptionData]:
        response = await self._client.get(f"{self.submgr_url}/subscriptions")
        response.raise_for_status()
        return SubscriptionList.validate_json(response.content)

    async def lost(self) -> dict[str, str]:
        """The nodes whose routed E2 subscriptions the subscription manager no longer lists
        for this replica's endpoint, with the subscription each had: deleted (submgr may
        still hold the REST side of it) and forgotten here, so that they are subscribed to
        again."""
        endpoint = self.client.rmr_endpoint()
        listed = {(entry.meid, entry.subscription_id) for entry in await self._listed()
                  if endpoint in (entry.client_endpoint or ())}
        gone = {meid for meid, instances in self._routes.items()
                if meid in self.subscription_ids
                and any((meid, instance) not in listed for instance in instances)}
        replaced = {}
        for meid in sorted(gone):
            log.warning("e2: the subscription manager no longer lists the E2 subscriptions "
                        "of %s for %s (it or the E2 node restarted): subscribing again", meid,
                        endpoint)
            replaced[meid] = self._forget(meid)
            await self.delete(replaced[meid], meid, "replaced")
        return replaced

    async def delete_strays(self) -> int:
        """Delete the subscriptions submgr lists for this replica's own endpoint that it
        does not hold: a predecessor's at the same address (a restarted process). Called
        before the first subscription, as one at this endpoint would be merged into the
        predecessor's. Returns how many REST subscriptions were deleted."""
        endpoint = self.client.rmr_endpoint()
        held = {(meid, i) for meid, instances in self._routes.items() for i in instances}
        strays: dict[str, set[int]] = {}
        for entry in await self._listed():
            if endpoint in (entry.client_endpoint or ()) and (
                    entry.meid, entry.subscription_id) not in held:
                strays.setdefault(entry.meid, set()).add(entry.subscription_id)
        deleted = 0
        for meid, instances in sorted(strays.items()):
            response = await self._client.get(
                f"{self.submgr_url}/get_e2node_rest_subscriptions/{meid}")
            response.raise_for_status()
            for rest_id, rest in NodeRestSubscriptions.validate_json(response.content).items():
                if rest_id != self.subscription_ids.get(meid) and instances & set(
                        rest.instance_ids or ()):
                    log.warning("e2: deleting subscription %s of %s: it reports to this "
                                "replica's endpoint %s, and this replica did not make it (a "
                                "predecessor at the same address did)", rest_id, meid,
                                endpoint)
                    await self.delete(rest_id, meid, "stray")
                    deleted += 1
        return deleted

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

    def _forget(self, meid: str) -> str | None:
        """Drop what this replica holds of ``meid``'s subscription (its routes: later
        indications of it count as unknown), returning its SubscriptionId."""
        for event_id in [e for e, p in self._pending.items() if p.meid == meid]:
            del self._pending[event_id]
        for instance in self._routes.pop(meid, ()):
            self.ingestor.routes.pop((instance, ACTION_ID), None)
        self.nodes.pop(meid, None)
        return self.subscription_ids.pop(meid, None)

    async def delete(self, subscription_id: str | None, meid: str, why: str,
                      within_s: float = TIMEOUT_S) -> None:
        """Delete one subscription; a failure is logged (the RIC times out what is left)."""
        if subscription_id is None:
            return
        try:
            response = await self._client.delete(
                f"{self.submgr_url}/subscriptions/{subscription_id}", timeout=within_s)
            response.raise_for_status()
            self._metrics.e2_subscriptions_deleted.labels(reason=why).inc()
            log.info("e2: deleted subscription %s of %s (%s)", subscription_id, meid, why)
        except httpx.HTTPError as exc:
            log.warning("e2: deleting subscription %s of %s failed: %s", subscription_id, meid,
                        describe(exc))

    async def unsubscribe_node(self, meid: str, within_s: float = TIMEOUT_S) -> None:
        """Give up ``meid``: delete its subscription and stop ingesting what it still
        sends."""
        await self.delete(self._forget(meid), meid, "given-up", within_s)

    async def unsubscribe(self, within_s: float = TIMEOUT_S) -> None:
        """Delete every subscription made, all within ``within_s``; failures are logged (the
        RIC times out what is left). The routes stay: what arrives meanwhile is still taken.
        """
        left = sorted(self.subscription_ids.items())
        self.subscription_ids.clear()
        try:
            async with asyncio.timeout(within_s):
                while left:
                    meid, subscription_id = left[0]
                    await self.delete(subscription_id, meid, "stopping", within_s)
                    left.pop(0)
        except TimeoutError:
            log.warning("e2: %d subscription(s) not deleted within %.1f s (the subscription "
                        "manager did not answer): %s", len(left), within_s,
                        ", ".join(i for _, i in left))

    async def close(self) -> None:
        await self._client.aclose()

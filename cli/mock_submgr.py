"""A stand-in for O-RAN SC's subscription manager (submgr) in front of the mock E2 node: what
submgr's source does, not only what its API document says. Each behaviour names the file and
function it follows, in o-ran-sc/ric-plt-submgr at ``SUBMGR_COMMIT`` (``pkg/control``) and
o-ran-sc/ric-plt-xapp-frame at ``XAPP_FRAME_COMMIT`` (``pkg/xapp``, ``pkg/models``):

- ``POST /ric/v1/subscriptions`` (control.go ``RESTSubscriptionHandler``): 503 for a node
  whose E2 connection is down, 400 without ports; else 201 with the REST SubscriptionId (a
  ksuid) and ``SubscriptionInstances: null``, the details processed afterwards. A request
  equal to one already processed gets that one's id again (duplicate.go: the md5 of the
  request; ``GetOrCreateRestSubscription``); one naming a SubscriptionId it lacks is a 404.
- Each detail in turn (``processSubscriptionRequests``): one E2 subscription, whose instance
  id comes from a pool of 1..65534 taken from the front and given back at the end
  (registry.go ``Initialize``, ``allocateSubs``), requested of the E2 node with RIC
  requestor id 123 (``sendE2TSubscriptionRequest``); a detail equal to an E2 subscription of
  the node (same event trigger and actions, registry.go ``findExistingSubs``,
  subscription.go ``IsMergeable``) joins it: the endpoint is added, or, when already there,
  the subscription is given back as it is. Its outcome is posted to the subscriber's
  ``http://{Host}:{HTTPPort}/ric/v1/subscriptions/response`` (``sendSuccesfullResponse
  Notification``: E2EventInstanceId; ``sendUnsuccesfullResponseNotification``: an
  E2EventInstanceId of 0, ErrorCause, ErrorSource, TimeoutType), tried up to 10 times 5 s
  apart until answered 200 (xapp-frame subscription.go ``Notify``).
- The RMR endpoint is the ClientEndpoint's Host with ``http`` turned into ``rmr`` and the
  RMR port (restendpoint.go ``ConstructEndpointAddresses``).
- ``GET /ric/v1/subscriptions`` (registry.go ``QueryHandler``): one entry per E2
  subscription, ``SubscriptionId`` its instance id, its RMR endpoints, instances null.
- ``DELETE /ric/v1/subscriptions/{id}`` (``RESTSubscriptionDeleteHandler``): 204 whether or
  not the id is known; each of its E2 subscriptions loses the subscriber's endpoint and is
  deleted at the node once none is left (``SubscriptionDeleteHandler``,
  ``RemoveFromSubscription``).
- ``GET /ric/v1/get_e2node_rest_subscriptions/{ranName}`` (debug_rest_if.go, registry.go
  ``GetAllE2NodeRestSubscriptions``): the node's REST subscriptions by id, with the fields
  Go marshals (Created, Meid, InstanceIds, SubReqOngoing, SubDelReqOngoing).
- A node whose E2 connection drops loses its E2 subscriptions, not the REST ones
  (e2if_state.go ``NotificationCb``, registry.go ``DeleteAllE2Subscriptions``).

Simplified here: a deletion is done before its 204 (submgr's goroutine does it after), and
the node starts reporting once every outcome of a request is posted (a live node reports a
period after its own).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import string
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import httpx

from kpi_forecast.cli.mock_e2_node import MockE2Node
from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.ric.e2 import e2ap
from kpi_forecast.xapp.ric.e2.submgr_api import SubscriptionDetail, SubscriptionRequest

log = logging.getLogger(__name__)

SUBMGR_COMMIT = "0bb599bc0fc0bef72770ac08b2d710cb5b0ed5a2"
XAPP_FRAME_COMMIT = "c79954127421383b7e864e94db579c9aea9ff4dd"
RIC_REQUESTOR_ID = 123  # control.go: const ricRequestorId
RESPONSE_PATH = "/ric/v1/subscriptions/response"  # xapp-frame NewSubscriber: clientUrl
# E2AP causes as submgr numbers them in an ErrorCause (e2ap/pkg/e2ap/msg_e2ap.go): the
# group, and the values of it the mock node sends.
CAUSE_CONTENT = {"ricRequest": 1, "ricService": 2, "e2Node": 3, "transport": 4,
                 "protocol": 5, "misc": 6}
CAUSE_VALUES = {"ran-function-id-invalid": 0, "action-not-supported": 1}
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase


def ksuid() -> str:
    """A new id of segmentio/ksuid's shape, as submgr's REST subscription ids are: 4 octets
    of time and 16 random ones, 27 base-62 digits."""
    number = int.from_bytes(int(time.time() - 1_400_000_000).to_bytes(4, "big")
                            + secrets.token_bytes(16), "big")
    digits = []
    for _ in range(27):
        number, digit = divmod(number, 62)
        digits.append(BASE62[digit])
    return "".join(reversed(digits))


@dataclass
class E2Subscription:
    """registry.go ``Subscription``: one detail at one node, and who it reports to."""

    instance_id: int
    meid: str
    request: tuple  # the event trigger and actions, as IsMergeable compares them
    endpoints: list[str]  # EpList: RMR endpoints, host:port


@dataclass
class RestSubscription:
    """registry.go ``RESTSubscription``."""

    meid: str
    rmr_endpoint: str
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S.000"))
    instance_ids: list[int] = field(default_factory=list)
    ongoing: bool = True


@dataclass
class Outcome:
    xapp_event_instance_id: int
    e2_instance_id: int = 0
    error_cause: str = ""
    error_source: str = ""
    timeout_type: str = ""


class MockSubmgr:
    def __init__(self, node: MockE2Node, notify_attempts: int = 10,
                 notify_delay_s: float = 5.0,
                 notify_transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.node = node
        self.notify_attempts = notify_attempts
        self.notify_delay_s = notify_delay_s
        # Set by a test whose xApp answers in process rather than on a socket.
        self.notify_transport = notify_transport
        self._free_ids: deque[int] = deque(range(1, 65535))
        self.e2: dict[int, E2Subscription] = {}  # by instance id
        self.rest: dict[str, RestSubscription] = {}
        self._by_md5: dict[str, str] = {}  # previousRequestMap
        self._ongoing: dict[str, str] = {}  # ongoingRequestMap
        # REST requests taken, deletions, notifications (tries), and outcomes: counted once
        # each before it is posted, as control.go's ``sendSuccesfullResponseNotification`` and
        # ``sendUnsuccesfullResponseNotification`` count RestSubNotifToXapp and
        # RestSubFailNotifToXapp; "outcomes_delivered", answered 200, is the stand-in's own
        # count (xapp-frame's ``Notify`` only stops retrying then).
        self.counts: Counter[str] = Counter()
        self._tasks: set[asyncio.Task] = set()
        self._client: httpx.AsyncClient | None = None

    # --- the REST API ------------------------------------------------------------------------

    def subscribe(self, params: SubscriptionRequest, md5: str) -> tuple[int, dict | None]:
        """``RESTSubscriptionHandler``: the status and body answered; ``md5`` stands for
        ``CalculateRequestMd5sum`` of the request as it came."""
        meid = params.meid
        if meid not in self.node.nodes or meid in self.node.disconnected:
            return 503, None  # IsE2ConnectionUp: false
        endpoint = params.client_endpoint
        if not endpoint.rmr_port and not endpoint.http_port:
            return 400, None
        if params.subscription_id:
            if params.subscription_id not in self.rest:
                return 404, None
            rest_id = params.subscription_id
        else:
            rest_id = self._by_md5.get(md5, "")
            if rest_id not in self.rest:
                rest_id = ksuid()
                self.rest[rest_id] = RestSubscription(meid, endpoint.rmr_endpoint())
        self.counts["subscriptions"] += 1
        if md5 in self._ongoing:  # IsDuplicateToOngoingTransaction
            return 201, {"SubscriptionId": rest_id, "SubscriptionInstances": None}
        self._ongoing[md5] = rest_id
        task = asyncio.create_task(self._process(rest_id, params, md5))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return 201, {"SubscriptionId": rest_id, "SubscriptionInstances": None}

    def listing(self) -> list[dict]:
        """``QueryHandler``."""
        return [{"SubscriptionId": s.instance_id, "Meid": s.meid,
                 "ClientEndpoint": list(s.endpoints), "SubscriptionInstances": None}
                for s in self.e2.values()]

    def delete(self, rest_id: str) -> None:
        """``RESTSubscriptionDeleteHandler``: answered 204 whatever is found."""
        rest = self.rest.pop(rest_id, None)
        if rest is None:
            return
        for instance_id in rest.instance_ids:
            self._remove_endpoint(instance_id, rest.rmr_endpoint)
        for md5 in [m for m, i in self._by_md5.items() if i == rest_id]:
            del self._by_md5[md5]
        self.counts["deletions"] += 1

    def node_rest_subscriptions(self, meid: str) -> dict[str, dict]:
        """``GetAllE2NodeRestSubscriptions``, with the fields json.Marshal writes."""
        return {rest_id: {"Created": r.created, "Meid": r.meid, "InstanceIds": r.instance_ids,
                          "SubReqOngoing": r.ongoing, "SubDelReqOngoing": False}
                for rest_id, r in self.rest.items() if r.meid == meid}

    def subscribers(self) -> dict[str, list[str]]:
        """Each node's REST subscriptions, by the RMR endpoint they were made for."""
        held: dict[str, list[str]] = {}
        for rest in self.rest.values():
            held.setdefault(rest.meid, []).append(rest.rmr_endpoint)
        return held

    def disconnect(self, meid: str) -> None:
        """The node's E2 connection is lost: e2mgr lists it disconnected, the node stops, and
        its E2 subscriptions go (``DeleteAllE2Subscriptions``); the REST ones stay."""
        self.node.disconnect(meid)
        for instance_id in [i for i, s in self.e2.items() if s.meid == meid]:
            del self.e2[instance_id]
            self._free_ids.append(instance_id)

    # --- processing a request ----------------------------------------------------------------

    async def _process(self, rest_id: str, params: SubscriptionRequest, md5: str) -> None:
        """``processSubscriptionRequests``: each detail's E2 subscription and its outcome
        posted in turn; then the node reports on what it admitted."""
        rest = self.rest.get(rest_id)
        endpoint = params.client_endpoint
        created = []  # new E2 subscriptions (one joined is reported on already)
        try:
            for detail in params.details:
                known = set(self.e2)
                outcome = self._assign(params, detail, endpoint.rmr_endpoint())
                if outcome.e2_instance_id and rest is not None:
                    rest.instance_ids.append(outcome.e2_instance_id)
                    if outcome.e2_instance_id not in known:
                        created.append(outcome.e2_instance_id)
                await self._notify(rest_id, outcome, endpoint.host, endpoint.http_port or 0)
        finally:
            self._ongoing.pop(md5, None)
            if rest is not None:
                rest.ongoing = False
                self._by_md5[md5] = rest_id  # SetMd5sumFromLastOkRequest
        self.node.start_reports(params.meid, [i for i in created if i in self.e2])

    def _assign(self, params: SubscriptionRequest, detail: SubscriptionDetail,
                rmr_endpoint: str) -> Outcome:
        """``AssignToSubscription``, then the E2 node's answer (``handleSubscriptionRequest``)."""
        request = (detail.event_triggers, [a.model_dump() for a in detail.actions])
        for existing in self.e2.values():  # findExistingSubs
            if existing.meid == params.meid and existing.request == request:
                if rmr_endpoint not in existing.endpoints:
                    existing.endpoints.append(rmr_endpoint)
                    self.node.add_endpoint(existing.instance_id, rmr_endpoint)
                return Outcome(detail.xapp_event_instance_id, existing.instance_id)
        instance_id = self._free_ids.popleft()
        answer = e2ap.decode(self.node.request(
            params.meid, RIC_REQUESTOR_ID, instance_id, params.ran_function_id, detail,
            rmr_endpoint).payload)
        if answer.kind == "subscription_response":
            self.e2[instance_id] = E2Subscription(instance_id, params.meid, request,
                                                  [rmr_endpoint])
            return Outcome(detail.xapp_event_instance_id, instance_id)
        self._free_ids.append(instance_id)
        kind, value = answer.cause
        return Outcome(detail.xapp_event_instance_id, error_source="E2Node",
                       error_cause=f"RICSubscriptionFailure. E2NodeCause: "
                                   f"(Cause:{CAUSE_CONTENT[kind]}, Value {CAUSE_VALUES[value]})")

    def _remove_endpoint(self, instance_id: int, rmr_endpoint: str) -> None:
        subscription = self.e2.get(instance_id)
        if subscription is None or rmr_endpoint not in subscription.endpoints:
            return
        subscription.endpoints.remove(rmr_endpoint)
        self.node.remove_endpoint(instance_id, rmr_endpoint)
        if not subscription.endpoints:
            del self.e2[instance_id]
            self._free_ids.append(instance_id)

    async def _notify(self, rest_id: str, outcome: Outcome, host: str, http_port: int) -> None:
        """xapp-frame pkg/xapp/subscription.go ``Subscriber.Notify``: posted until answered
        200, ``notify_attempts`` times at most (its subscription.retryCount, 10), with
        ``notify_delay_s`` after each failure (retryDelay, 5 s); each failure logged."""
        instance = {"XappEventInstanceId": outcome.xapp_event_instance_id,
                    "E2EventInstanceId": outcome.e2_instance_id}
        for name, value in (("ErrorCause", outcome.error_cause),
                            ("ErrorSource", outcome.error_source),
                            ("TimeoutType", outcome.timeout_type)):
            if value:  # omitempty
                instance[name] = value
        body = {"SubscriptionId": rest_id, "SubscriptionInstances": [instance]}
        url = f"http://{host}:{http_port}{RESPONSE_PATH}"
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=5.0, transport=self.notify_transport)
        self.counts["outcomes"] += 1
        for attempt in range(self.notify_attempts):
            self.counts["notifications"] += 1
            try:
                answer = await self._client.post(url, json=body)
                if answer.status_code == 200:
                    self.counts["outcomes_delivered"] += 1
                    return
                log.warning("submgr: notifying %s: status %d (attempt %d)", url,
                            answer.status_code, attempt + 1)
            except httpx.HTTPError as exc:
                log.warning("submgr: notifying %s: %s (attempt %d)", url, describe(exc),
                            attempt + 1)
            await asyncio.sleep(self.notify_delay_s)
        self.counts["notifications_failed"] += 1

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()


def md5_of(body: bytes) -> str:
    """The request's fingerprint for duplicate detection (submgr hashes its decoded form)."""
    return hashlib.md5(body).hexdigest()  # noqa: S324 - a fingerprint, as submgr's

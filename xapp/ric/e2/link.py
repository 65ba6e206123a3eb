"""The xApp's RMR side wired together: a transport (``Transport``, the rmr-data stream) whose
frames go to ingestion (indications) or to the A1 policies (when taken); subscriptions
(their outcomes come over HTTP, to ``Subscriber.take_outcome``) to the E2 nodes this replica
owns (``ownership.py``) among those the E2 Manager lists (``discovery.py``), made once a
model says which KPI to ask for (one subscription per node, for the measurements of every
model's KPI) and followed as ownership moves, nodes connect and disconnect and models come
and go; and the orderly stop."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from dataclasses import dataclass, field

import httpx
import pandas as pd

from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.a1.handler import PolicyHandler
from kpi_forecast.xapp.ric.a1.policy_type import A1_POLICY_REQ
from kpi_forecast.xapp.ric.e2.discovery import (
    REASONS,
    E2Manager,
    E2Node,
    KpiOptions,
    Listing,
    describe_wanted,
)
from kpi_forecast.xapp.ric.e2.ingest import Ingestor
from kpi_forecast.xapp.ric.e2.ownership import ROUND_S, Ownership
from kpi_forecast.xapp.ric.e2.subscription import Subscriber
from kpi_forecast.xapp.ric.transport import (
    KPI_FORECAST_ACK,
    RIC_INDICATION,
    Handler,
    MessageHandlers,
    Transport,
)
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable

log = logging.getLogger(__name__)

CONCURRENT_REQUESTS = 8  # to the subscription manager, when many nodes change hands at once
# Every this many rounds the subscriptions held are checked against the subscription manager's
# list: a restart of it, or of an E2 node, loses them without a word to the xApp.
CHECK_ROUNDS = 5
RESUBSCRIBE_BOUND_S = (CHECK_ROUNDS + 1) * ROUND_S  # from the loss to the request made again
# Every this many rounds each connected node's details are read again from the E2 Manager:
# a configuration update changes a node's cells without a reconnection. A minute, so that a
# RIC of a thousand nodes costs e2mgr a few reads a second.
REFRESH_ROUNDS = 30


@dataclass(eq=False)
class E2Link:
    """``transport`` is None when E2, A1 and RMR publication are off; it is built before the
    app starts, so that a transport that cannot be had (no librmr) is said before anything
    runs."""

    state: ServingState
    transport: Transport | None
    ingestor: Ingestor
    http_port: int
    ownership: Ownership
    metrics: Metrics
    policies: PolicyHandler | None = None
    # Takes the consumers' KPI_FORECAST_ACK where forecasts are published over RMR.
    acknowledgements: Handler | None = None
    subscriber: Subscriber | None = field(default=None, init=False)
    e2mgr: E2Manager | None = field(default=None, init=False)
    # The subscriptions following ownership.
    following: asyncio.Task | None = field(default=None, init=False, repr=False)
    ready_said: bool = field(default=True, init=False)  # what was last logged of RMR's readiness

    async def start(self) -> list[asyncio.Task]:
        """Listen when E2 is enabled, and subscribe in the background when the subscription
        manager is known; the writer of what E2 delivers runs in any case."""
        e2 = self.state.now.controls.e2
        tasks = []
        if self.transport is not None:
            handlers = MessageHandlers(other=self.ingestor.refuse)
            handlers.register(RIC_INDICATION, self.ingestor.handle)
            if self.policies is not None:
                handlers.register(A1_POLICY_REQ, self.policies.handle)
            if self.acknowledgements is not None:
                handlers.register(KPI_FORECAST_ACK, self.acknowledgements)
            await self.transport.start(handlers)
            log.info("e2: listening for rmr-data frames on port %d", self.transport.port)
            if e2.enabled and e2.submgr_url:
                self.e2mgr = E2Manager(e2.e2mgr_url)
                self.subscriber = Subscriber(e2.submgr_url, e2.endpoint_host(),
                                             self.transport.port, self.http_port, self.ingestor,
                                             self.metrics)
                self.following = asyncio.create_task(self._subscribe_when_ready(),
                                                      name="e2-subscribe")
                tasks.append(self.following)
        return [*tasks, asyncio.create_task(self.ingestor.run(), name="e2-writer")]

    def ready(self) -> bool:
        """RMR is not used, or its transport can take messages (it has a route table). The
        first time it has none, and when it has one again, is logged: the readiness probe
        asks often, the log says it once."""
        ready = self.transport is None or self.transport.ready()
        if ready != self.ready_said:
            if ready:
                log.info("rmr: a route table is loaded: ready for E2 and A1")
            else:
                log.warning("rmr: no route table yet (from the routing manager, RMR_RTG_SVC=%s, "
                            "or static, RMR_SEED_RT=%s): unready until one is loaded",
                            os.environ.get("RMR_RTG_SVC", "-"),
                            os.environ.get("RMR_SEED_RT", "-"))
            self.ready_said = ready
        return ready

    def wanted(self) -> tuple[tuple[KpiOptions, ...], int] | None:
        """What the subscriptions ask for: the measurements each KPI of the models served may
        be read from (in order; each KPI once), and the reporting period (controls.e2's, else
        the finest step that divides every model's, so that each grid gets whole periods);
        None while no model served has a KPI a measurement maps."""
        served = [s for s in self.state.models.values() if s.kpi_source is not None]
        if not served:
            return None
        measurements = tuple(sorted({s.kpi_source.options() for s in served}))
        step_ms = math.gcd(*(int(s.model.step / pd.Timedelta("1ms")) for s in served))
        return measurements, served[0].controls.e2.reporting_period_ms or step_ms

    async def _subscribe_when_ready(self) -> None:
        """Subscribe once a model says which KPI, and at which step, to ask for; models whose
        KPI no measurement feeds (controls.e2.kpis) are said once each, then waited out."""
        told: set[str] = set()
        while (wanted := self.wanted()) is None:
            for served in self.state.models.values():
                model = served.model
                if model is not None and model.metadata.model_version not in told:
                    told.add(model.metadata.model_version)
                    log.warning("e2: not subscribing for model %s: its KPI %r has no "
                                "measurement in controls.e2.kpis (%s); waiting for a model "
                                "or config that maps one", served.name, model.metadata.target,
                                ", ".join(served.controls.e2.kpis))
            await asyncio.sleep(0.1)
        await self._follow_ownership(wanted)

    async def _follow_ownership(self, wanted: tuple[tuple[KpiOptions, ...], int]) -> None:
        """Every ``ROUND_S``: the nodes, a lease round, and the subscriptions brought in line
        with what is owned in a task of their own. The leases are renewed on time whatever
        the subscription manager takes: a round that waited for a hundred subscriptions on a
        busy RIC would let its own leases run out and hand its nodes to another replica
        while it still held them. One failed step is logged and tried again next round.
        When the models served ask for other measurements (one loaded, one unloaded), the
        subscriptions held are made again with them."""
        measurements, period_ms = wanted
        self.metrics.e2_reporting_period.set(period_ms / 1000.0)
        # The first list is waited for; later ones are tried once a round.
        listing = await self.e2mgr.listing(measurements)
        try:  # before the first subscription, which would merge into a predecessor's
            await self.subscriber.delete_strays()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("e2: looking for a predecessor's subscriptions at %s failed (%s); "
                        "subscribing all the same", self.subscriber.submgr_url, describe(exc))
        following: asyncio.Task | None = None
        rounds = 0
        try:
            while True:
                rounds += 1
                self._show(listing)
                owned = await self.ownership.round(sorted(listing.nodes),
                                                   self.subscriber.settled())
                if following is None or following.done():
                    if following is not None and not following.cancelled() and (
                            failure := following.exception()) is not None:
                        log.warning("e2: following the leases failed (%s); this round tries "
                                    "again", describe(failure))
                    now = self.wanted()
                    if now is not None and now != (measurements, period_ms):
                        log.info("e2: the models served now ask for %s every %d ms: "
                                 "subscribing again", describe_wanted(now[0]), now[1])
                        for meid in sorted(self.subscriber.subscription_ids):
                            await self.subscriber.unsubscribe_node(meid)
                        (measurements, period_ms) = now
                        self.metrics.e2_reporting_period.set(period_ms / 1000.0)
                        listing = await self.e2mgr.listing(measurements, attempts=1)
                    following = asyncio.create_task(self._follow(
                        owned, self.ownership.handed_over, listing.nodes, period_ms,
                        initial=following is None, check=rounds % CHECK_ROUNDS == 0))
                await asyncio.sleep(ROUND_S)
                try:
                    listing = await self.e2mgr.listing(
                        measurements, attempts=1, refresh=rounds % REFRESH_ROUNDS == 0)
                except (httpx.HTTPError, ValueError) as exc:
                    log.warning("e2: listing the E2 nodes failed (%s); the last list stands",
                                describe(exc))
        finally:
            if following is not None:
                following.cancel()

    def _show(self, listing: Listing) -> None:
        skipped = listing.skipped_by_reason()
        for reason in REASONS:
            self.metrics.e2_cells_skipped.labels(reason=reason).set(skipped[reason])

    async def _follow(self, owned: set[str], handed_over: set[str],
                      listing: dict[str, E2Node], period_ms: int, initial: bool,
                      check: bool = False) -> None:
        """Unsubscribe from the nodes handed over (or gone) and subscribe to those taken, a
        few requests to the subscription manager at a time; with ``check``, first forget the
        subscriptions it no longer lists, so that they are made again."""
        subscriber, metrics = self.subscriber, self.metrics
        if check:
            try:
                lost = await subscriber.lost()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("e2: checking the subscriptions at %s failed (%s); the next check "
                            "tries again", subscriber.submgr_url, describe(exc))
            else:
                metrics.e2_subscriptions_lost.inc(len(lost))
                for meid, subscription_id in lost.items():
                    await self._record(meid, forget=subscription_id)
        # A node whose cells or measurements changed (a configuration update): made again.
        for meid in sorted(set(subscriber.nodes) & owned & set(listing)):
            if listing[meid] != subscriber.nodes[meid]:
                log.info("e2: %s now declares %d cell(s) (%s): subscribing again", meid,
                         len(listing[meid].cells), listing[meid].cells_from)
                given = subscriber.subscription_ids.get(meid)
                await subscriber.unsubscribe_node(meid)
                await self._record(meid, forget=given)
        held = set(subscriber.subscription_ids)
        done_with = (held - owned) & (handed_over | (held - set(listing)))
        slots = asyncio.Semaphore(CONCURRENT_REQUESTS)

        async def give_up(meid: str) -> None:
            async with slots:
                given = subscriber.subscription_ids.get(meid)
                await subscriber.unsubscribe_node(meid)
                await self._record(meid, forget=given)
            metrics.e2_handovers.labels(direction="given").inc()

        async def take(meid: str) -> None:
            async with slots:
                await self._delete_orphans(meid)
                try:
                    await subscriber.subscribe(listing[meid], period_ms, attempts=1)
                except (httpx.HTTPError, ValueError) as exc:
                    log.warning("e2: subscribing to %s failed (%s); next round tries again",
                                meid, describe(exc))
                    return
                await self._record(meid, made=subscriber.subscription_ids.get(meid))
            if not initial:
                metrics.e2_handovers.labels(direction="taken").inc()

        await asyncio.gather(*map(give_up, sorted(done_with)),
                             *map(take, sorted(owned - held)))
        metrics.e2_nodes_owned.set(len(subscriber.subscription_ids))

    async def _record(self, meid: str, made: str | None = None,
                      forget: str | None = None) -> None:
        """Keep the shared record of which replica made which subscription, so that a
        crashed replica's are deleted by the node's next owner; a store that cannot be
        reached is logged (its subscriptions then outlive a crash, as without a record)."""
        store = self.state.now.shared
        if store is None:
            return
        try:
            if made is not None:
                await store.record_subscription(meid, made, self.ownership.replica)
            if forget is not None:
                await store.forget_subscription(meid, forget)
        except HistoryUnavailable as exc:
            log.warning("e2: the record of %s's subscriptions was not updated (%s)", meid,
                        describe(exc))

    async def _delete_orphans(self, meid: str) -> None:
        """Before subscribing to a node taken: delete the subscriptions to it that replicas
        no longer alive made and left (a crash: nobody deleted them, and the node would go on
        reporting them to an address where nobody listens)."""
        store = self.state.now.shared
        if store is None:
            return
        try:
            orphaned = await store.orphaned_subscriptions(meid, self.ownership.replica)
        except HistoryUnavailable as exc:
            log.warning("e2: the record of %s's subscriptions cannot be read (%s); a crashed "
                        "replica's are left", meid, describe(exc))
            return
        for subscription_id in orphaned:
            log.warning("e2: %s: deleting subscription %s, made by a replica no longer alive",
                        meid, subscription_id)
            await self.subscriber.delete(subscription_id, meid, "orphaned")
            await self._record(meid, forget=subscription_id)

    async def stop(self, step_s: float) -> None:
        """Unsubscribe, stop listening, write what was received: each step bounded by
        ``step_s``, so that the process exits within seconds whatever is down."""
        if self.following is not None:  # or it would subscribe again to what is deleted
            self.following.cancel()
            await asyncio.wait([self.following], timeout=step_s)
        if self.subscriber is not None:
            await self.subscriber.unsubscribe(within_s=step_s)
            await self.subscriber.close()
        if self.e2mgr is not None:
            await self.e2mgr.close()
        if self.transport is not None:
            await self.transport.close()
        try:  # what was received is written, if it can be
            await asyncio.wait_for(self.ingestor.flush(), step_s)
        except TimeoutError:
            log.warning("e2: stopping with indications unwritten: the history store did not "
                        "take them within %.0f s", step_s)

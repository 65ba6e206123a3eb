"""A mock E2 node: replays a KPI file as E2SM-KPM indications (the E2 Manager and the
subscription manager around it: ``mock_ric.py``, ``mock_submgr.py``).

For each E2 subscription the subscription manager requests (``request``: one cell, under the
RIC request id it gives), the node answers in E2AP, then (``start_reports``) sends the file's
values for the cell as RIC Indications to every RMR endpoint the subscription reports to, as
the E2 termination routes them: one per reporting period, holding one value per step of the
data, stamped with the collection start time. The messages go through a ``Transport``: librmr
in ``kpi-forecast e2sim``.

Cells are named as e2mgr names them (``cellId``: the PLMN and the NR cell identity in hex);
``cell_ids`` gives each file cell's name. A node can be disconnected and connected again
(``disconnect``, ``connect``): its subscriptions end with the connection.

As an E2 termination does, it keeps no indication for an xApp that cannot take it: one that
cannot be sent (the xApp restarting, not up yet) is dropped and counted (``undelivered``), the
outage logged once with its reason and its end; the replay goes on. History before
``live_from`` is sent as a node that catches up would: period by period, at most
``catch_up_rate`` reports a second over all subscriptions. Faults can be injected for tests:
malformed payloads, duplicates, late (out-of-order) reports and lost reports (gaps).

    kpi-forecast e2sim --data FILE --kpi COL=MEAS_NAME [--listen HOST:PORT] [--speed X] ...
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np
import pandas as pd

from kpi_forecast.cli import indication_writer
from kpi_forecast.data.panel import Panel
from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.ric.e2 import discovery, e2ap, kpm, kpm_indication
from kpi_forecast.xapp.ric.e2.submgr_api import SubscriptionDetail
from kpi_forecast.xapp.ric.rmr import RmrError
from kpi_forecast.xapp.ric.transport import (
    RIC_INDICATION,
    RIC_SUB_FAILURE,
    RIC_SUB_RESP,
    Frame,
    Transport,
)

log = logging.getLogger(__name__)

PLMN = "00f110"  # the test PLMN (MCC 001, MNC 01)
RAN_FUNCTION_ID = 2  # the node's E2SM-KPM function, as O-RAN SC E2 nodes number it
FAULTS = ("malformed", "duplicate", "late", "gap")


@dataclass
class Stream:
    """One E2 subscription: a cell, reported under one RIC request."""

    rows: list[int]  # of the panel: the cell's, or the node's (reported as their mean)
    requestor_id: int
    instance_id: int
    action_id: int
    measurements: list[str]  # the subscribed ones this node has, in the subscription's order
    period_ms: int
    endpoints: list[str]  # the RMR endpoints (host:port) its indications are routed to


@dataclass
class Reporting:
    """The streams of one node started together, reported by one task."""

    meid: str
    streams: list[Stream]
    task: asyncio.Task | None = None


def cell_id(row: int) -> str:
    """The e2mgr cellId of the file's cell ``row``: the test PLMN and the row as its NR cell
    identity."""
    return discovery.format_cell_id(kpm.CellGlobalId(bytes.fromhex(PLMN), nr_cell=row))


# What a send to an endpoint that is not there raises: librmr's failure, a socket's.
UNREACHABLE = (RmrError, OSError)


@dataclass
class MockE2Node:
    panel: Panel  # the grid and cells; its target column is reported as ``measurement``
    measurement: str
    transport: Transport  # started and closed with the node
    # Further measurements on the same grid and cells (other columns of the file), by name.
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    cells_per_node: int = 8
    speed: float = 0.0  # replay speed against real time; 0: as fast as the link takes
    pace_ms: float | None = None  # wall-clock ms between reports, overriding speed
    start: int = 0  # first step replayed
    end: int | None = None  # step after the last one replayed
    live_from: int | None = None  # steps before this one are caught up on, then at speed
    # Reports a second, over all subscriptions, while catching up on the steps before
    # live_from (None: as fast as the link takes).
    catch_up_rate: float | None = None
    # Reports follow the wall clock, as a real node's: a subscription's first is the period
    # that ends next, and each goes out as its period ends (the file's times must span now).
    wall_clock: bool = False
    faults: dict[str, float] = field(default_factory=dict)  # fault -> probability per report
    seed: int = 0
    sent: Counter = field(default_factory=Counter)  # what went out, by kind
    # On the wall clock: (monotonic s, ms from a period's end to its last report handed to
    # the transport), the recent ones, so that a slow mock node is not mistaken for a slow
    # xApp.
    send_lag_ms: deque = field(default_factory=lambda: deque(maxlen=100_000))
    streams: dict[int, Stream] = field(default_factory=dict)  # by instance id
    reportings: list[Reporting] = field(default_factory=list)
    kpm_version: int = 3  # of the RAN function description it declares: 2, or 3 (and later)
    refuse: set[int] = field(default_factory=set)  # rows of cells it refuses to report on
    # Where e2mgr finds each node's cells: servedNrCells, the F1 component of its E2 setup,
    # or nowhere (the node then reports as a whole: the mean over its cells).
    cells_from: Literal["served", "f1", "none"] = "served"
    # servedNrCells an operator put (PUT /v1/nodeb/gnb/{ranName}), by node, as given.
    operator_cells: dict[str, list[dict]] = field(default_factory=dict)
    disconnected: set[str] = field(default_factory=set)  # nodes whose E2 connection is down

    def __post_init__(self) -> None:
        self._values = {self.measurement: self.panel.values, **self.extra}
        self._unreachable: set[str] = set()  # endpoints in an outage, logged at its start
        self._rng = random.Random(self.seed)
        self.step_ms = int(self.panel.step / pd.Timedelta("1ms"))
        self._index_ns = self.panel.index.as_unit("ns").asi8
        self._headers: dict[int, bytes] = {}  # by first step: one encoding per period
        self._catch_up_free = 0.0  # monotonic time from which the next catch-up may go
        self._definitions: dict[str, str] = {}  # each node's RAN function description, hex

    @cached_property
    def cell_ids(self) -> list[str]:
        """Each file cell's name as e2mgr gives it (and the xApp keeps it), in the file's
        order."""
        return [cell_id(row) for row in range(self.panel.n_cells)]

    @cached_property
    def nodes(self) -> dict[str, list[int]]:
        """Each node's cells (rows of the panel), by meid."""
        per = self.cells_per_node
        return {f"gnb-{k // per:03d}": list(range(k, min(k + per, self.panel.n_cells)))
                for k in range(0, self.panel.n_cells, per)}

    def node_names(self) -> list[str]:
        return list(self.nodes)

    def disconnect(self, meid: str) -> None:
        """The node's E2 connection is lost: e2mgr lists it disconnected, and its
        subscriptions end (the subscription manager forgets them: ``MockSubmgr.disconnect``)."""
        self.disconnected.add(meid)
        for reporting in [r for r in self.reportings if r.meid == meid]:
            for stream in list(reporting.streams):
                self.delete(stream.instance_id)

    def connect(self, meid: str) -> None:
        self.disconnected.discard(meid)

    # --- the E2 Manager ---------------------------------------------------------------------

    def ran_function_definition(self, meid: str) -> str:
        """The E2SM-KPM RAN function description the node declares, as e2mgr shows it (in
        hex): report style 1 with the measurements the node has and, in v2, its cells."""
        if meid not in self._definitions:
            cells = [kpm.CellObject(self.cell_ids[row],
                                    discovery.parse_cell_id(self.cell_ids[row]))
                     for row in self.nodes[meid]] if self.kpm_version == 2 else None
            description = kpm.RanFunctionDescription(
                kpm.SHORT_NAME, kpm.OID_V2 if self.kpm_version == 2 else kpm.OID_V3,
                {kpm.NODE_MEASUREMENT_STYLE: sorted(self._values)}, self.kpm_version, cells)
            self._definitions[meid] = kpm.encode_ran_function_description(description).hex()
        return self._definitions[meid]

    async def open(self) -> None:
        """Start the transport (before the first subscription)."""

        async def nothing_expected(frame: Frame) -> None:  # the xApp sends over REST
            log.warning("e2sim: ignoring a message of type %d", frame.msg_type)

        await self.transport.start(nothing_expected)

    # --- E2 subscriptions ------------------------------------------------------------------

    def request(self, meid: str, requestor_id: int, instance_id: int, ran_function_id: int,
                detail: SubscriptionDetail, rmr_endpoint: str) -> Frame:
        """The node's E2AP answer to a RICsubscriptionRequest for ``detail`` (one action),
        under submgr's requestor id and instance id (ric-plt-submgr control.go
        ``sendE2TSubscriptionRequest``, ``ricRequestorId = 123``; its indications carry both,
        as kpimon-go's captured RICindications, ``testfile1.txt`` and ``testfile2.txt``, show
        ricRequestorID 123):
        admitted when it names this node's KPM function, a cell of the node and one at least
        of the measurements it has; the stream waits for ``start_reports``."""
        action = detail.actions[0]
        try:
            period = kpm.decode_event_trigger(bytes(detail.event_triggers))
            definition = kpm.decode_action_definition(bytes(action.action_definition))
        except kpm.DecodeError:
            return self._failure(requestor_id, instance_id, "action-not-supported")
        if ran_function_id != RAN_FUNCTION_ID:
            return self._failure(requestor_id, instance_id, "ran-function-id-invalid")
        node_rows = self.nodes.get(meid, [])
        rows = [definition.cell.nr_cell] if definition.cell else node_rows
        wanted = [m for m in definition.measurements if m in self._values]
        if not rows or not set(rows) <= set(node_rows) - self.refuse or not wanted:
            return self._failure(requestor_id, instance_id, "action-not-supported")
        self.streams[instance_id] = Stream(rows, requestor_id, instance_id, action.action_id,
                                           wanted, max(period, self.step_ms), [rmr_endpoint])
        payload = e2ap.encode_subscription_response(requestor_id, instance_id, RAN_FUNCTION_ID,
                                                    [action.action_id])
        return Frame(RIC_SUB_RESP, instance_id, payload)

    def _failure(self, requestor: int, instance: int, cause: str) -> Frame:
        self.sent["subscription_failures"] += 1
        payload = e2ap.encode_subscription_failure(requestor, instance, RAN_FUNCTION_ID,
                                                   ("ricRequest", cause))
        return Frame(RIC_SUB_FAILURE, instance, payload)

    def start_reports(self, meid: str, instance_ids: list[int]) -> None:
        """Report on the streams admitted, in one task."""
        streams = [self.streams[i] for i in instance_ids if i in self.streams]
        if streams:
            reporting = Reporting(meid, streams)
            reporting.task = asyncio.create_task(self._replay(reporting))
            self.reportings.append(reporting)

    def add_endpoint(self, instance_id: int, rmr_endpoint: str) -> None:
        """Another subscriber merged into the subscription: its reports go there too (submgr
        registry.go ``findExistingSubs`` adds the endpoint to the subscription's list and
        ``AssignToSubscription`` updates its route, ``RouteCreateUpdate``, which the E2
        termination then sends each indication along)."""
        self.streams[instance_id].endpoints.append(rmr_endpoint)

    def remove_endpoint(self, instance_id: int, rmr_endpoint: str) -> None:
        stream = self.streams.get(instance_id)
        if stream is not None and rmr_endpoint in stream.endpoints:
            stream.endpoints.remove(rmr_endpoint)
            if not stream.endpoints:
                self.delete(instance_id)

    def delete(self, instance_id: int) -> None:
        """The E2 subscription is deleted: its reports stop."""
        stream = self.streams.pop(instance_id, None)
        for reporting in list(self.reportings):
            if stream in reporting.streams:
                reporting.streams.remove(stream)
                if not reporting.streams:
                    self.reportings.remove(reporting)
                    if reporting.task is not None:
                        reporting.task.cancel()

    # --- the replay ------------------------------------------------------------------------

    async def _replay(self, reporting: Reporting) -> None:
        per_report = max(1, reporting.streams[0].period_ms // self.step_ms)
        end = self.panel.n_steps if self.end is None else min(self.end, self.panel.n_steps)
        start = self._next_period() if self.wall_clock else self.start
        held: list[tuple[str, Frame]] = []  # late reports, sent after the next one
        for first in range(start, end, per_report):
            steps = range(first, min(first + per_report, end))
            # Encoded before the period ends, as a node has its report ready when it does
            # (encoding is a large share of this Python node's CPU at many cells).
            by_endpoint: dict[str, list[Frame]] = {}
            for stream in reporting.streams:
                frame = self._indication(stream, steps)
                for endpoint in stream.endpoints:  # each subscriber merged into it
                    by_endpoint.setdefault(endpoint, []).append(frame)
            if self.wall_clock:
                ends_ns = self._index_ns[first] + len(steps) * self.step_ms * 1_000_000
                await asyncio.sleep(max(0.0, (ends_ns - time.time_ns()) / 1e9))
            elif self.live_from is not None and first < self.live_from:
                await self._catch_up(len(reporting.streams))
            for endpoint, frames in by_endpoint.items():
                if self.faults:
                    for frame in frames:
                        await self._send_with_faults(endpoint, frame, held)
                else:
                    await self._send_all(endpoint, frames)
            if self.wall_clock:
                self.send_lag_ms.append((time.monotonic(), (time.time_ns() - ends_ns) / 1e6))
            else:
                caught_up = self.live_from is None or first >= self.live_from
                await asyncio.sleep(self._pause(per_report) if caught_up else 0.0)
        for endpoint, frame in held:
            await self._send(endpoint, frame)
        self.sent["replays_done"] += 1

    async def _catch_up(self, reports: int) -> None:
        """Wait for the turn of ``reports`` reports of the history, so that the subscriptions
        together stay within ``catch_up_rate`` a second."""
        if self.catch_up_rate is None:
            return
        now = time.monotonic()
        turn = max(now, self._catch_up_free)
        self._catch_up_free = turn + reports / self.catch_up_rate
        await asyncio.sleep(turn - now)

    def _next_period(self) -> int:
        """The first step whose period has not ended yet."""
        ended = time.time_ns() - self.step_ms * 1_000_000
        return int(np.searchsorted(self._index_ns, ended, side="right"))

    def _indication(self, stream: Stream, steps: range) -> Frame:
        measurements = []
        for name in stream.measurements:
            if len(stream.rows) == 1:
                values = self._values[name][stream.rows[0], steps.start:steps.stop]
            else:  # the node as a whole: the mean of its cells' values, NaN where none
                block = self._values[name][stream.rows, steps.start:steps.stop]
                counts = (~np.isnan(block)).sum(axis=0)
                values = np.where(counts > 0, np.nansum(block, axis=0) / np.maximum(counts, 1),
                                  np.nan)
            measurements.append(kpm.Measurement(
                name, [None if v != v else v for v in values.tolist()]))  # NaN: no value
        header = self._headers.get(steps.start)
        if header is None:
            if len(self._headers) > 64:
                self._headers.clear()
            header = self._headers[steps.start] = kpm_indication.encode_indication_header(
                self.panel.index[steps.start].to_pydatetime(), self.kpm_version)
        message = indication_writer.encode_message(kpm.IndicationMessage(
            measurements, granularity_ms=self.step_ms))
        payload = indication_writer.encode_e2ap(
            stream.requestor_id, stream.instance_id, RAN_FUNCTION_ID, stream.action_id,
            steps.start % 65536, header, message)
        return Frame(RIC_INDICATION, stream.instance_id, payload)

    async def _send_with_faults(self, endpoint: str, frame: Frame,
                                held: list[tuple[str, Frame]]) -> None:
        if self._rng.random() < self.faults.get("gap", 0.0):
            self.sent["gaps"] += 1  # a report lost on the way: its steps stay missing
            return
        if self._rng.random() < self.faults.get("malformed", 0.0):
            garbage = bytes(self._rng.getrandbits(8) for _ in range(24))
            await self._send(endpoint, Frame(RIC_INDICATION, frame.subscription_id, garbage),
                             "malformed")
        if self._rng.random() < self.faults.get("late", 0.0):
            held.append((endpoint, frame))
            self.sent["late"] += 1
            return
        await self._send(endpoint, frame)
        if self._rng.random() < self.faults.get("duplicate", 0.0):
            await self._send(endpoint, frame, "duplicates")
        while held and self._rng.random() < 0.5:
            await self._send(*held.pop(0))

    def _pause(self, steps: int) -> float:
        if self.pace_ms is not None:
            return self.pace_ms / 1000.0
        if self.speed <= 0:
            return 0.0
        return steps * self.step_ms / 1000.0 / self.speed

    async def _send(self, endpoint: str, frame: Frame, kind: str = "indications") -> None:
        """Send once; what cannot be sent is dropped and counted as ``undelivered``."""
        host, _, port = endpoint.rpartition(":")
        try:
            await self.transport.send(host, int(port), frame)
        except UNREACHABLE as exc:
            self._undelivered(endpoint, 1, exc)
            return
        self._delivered(endpoint, 1, kind)

    async def _send_all(self, endpoint: str, frames: list[Frame]) -> None:
        """A period's indications to one subscriber, in one hand-off to the transport."""
        host, _, port = endpoint.rpartition(":")
        sent, error = await self.transport.send_many(host, int(port), frames)
        if sent:
            self._delivered(endpoint, sent, "indications")
        if error is not None:
            self._undelivered(endpoint, len(frames) - sent, error)

    def _delivered(self, endpoint: str, count: int, kind: str) -> None:
        if endpoint in self._unreachable:
            self._unreachable.discard(endpoint)
            log.warning("e2sim: %s reached again (%d undelivered so far)", endpoint,
                        self.sent["undelivered"])
        self.sent[kind] += count

    def _undelivered(self, endpoint: str, count: int, exc: Exception) -> None:
        self.sent["undelivered"] += count
        if endpoint not in self._unreachable:
            self._unreachable.add(endpoint)
            log.warning("e2sim: the subscriber's rmr-data endpoint %s cannot be reached "
                        "(%s): dropping indications, counted as undelivered, until it can",
                        endpoint, describe(exc))

    async def close(self) -> None:
        tasks = [r.task for r in self.reportings if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.transport.close()

"""The E2 nodes and their cells, as the RIC's E2 Manager lists them (O-RAN SC e2mgr's REST
API, under its ``/v1``; O-RAN SC's kpimon reads them the same way):

1. ``GET {e2mgr}/nodeb/states``: every node's inventory name (the Meid a subscription names)
   and connection status, asked every lease round, so that nodes connecting and
   disconnecting are followed.
2. ``GET {e2mgr}/nodeb/{ranName}`` for each node that connects: its served cells and its RAN
   functions, the E2SM-KPM one among them, whose ``ranFunctionDefinition`` (the hex of its
   aligned-PER RAN function description) says which measurements report style 1 carries.

A node's cells are subscribable when its KPM function is v3 or later (this xApp subscribes
with that encoding) and reports one at least of the measurements behind the models' KPIs (a
node is asked for those it reports); the others are
counted by reason (``kpi_forecast_e2_cells_skipped``) and logged once per node and change.
A cell is named as e2mgr names it (``cellId``: the PLMN and the NR cell identity in hex,
``00f110:0000000010``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from kpi_forecast.xapp.failures import rest_retrying
from kpi_forecast.xapp.ric.e2 import kpm

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
CONCURRENT_REQUESTS = 8  # node details asked at once, when many nodes connect together
CONNECTED = ("CONNECTED", 1)  # e2mgr writes the RNIB's enum by name; its number is 1

# Why a node's cells are not subscribed to.
Reason = Literal["no-kpm-function", "kpm-v2", "measurement-not-reported", "cell-id-unreadable"]
REASONS: dict[Reason, str] = {
    "no-kpm-function": "the node lists no E2SM-KPM RAN function this xApp can read",
    "kpm-v2": "the node's E2SM-KPM is v2, and this xApp subscribes with v3 and later",
    "measurement-not-reported": "the node's E2SM-KPM report style 1 carries none of "
                                "{measurements}",
    "cell-id-unreadable": "e2mgr's cellId is not a PLMN and an NR cell identity in hex",
}

# --- e2mgr's answers, in its field names (the parts read here) --------------------------------

_REST = ConfigDict(populate_by_name=True, extra="ignore")


class NodebIdentity(BaseModel):
    model_config = _REST

    inventory_name: str = Field(alias="inventoryName", min_length=1)
    connection_status: str | int | None = Field(None, alias="connectionStatus")


STATES = TypeAdapter(list[NodebIdentity])


class RanFunction(BaseModel):
    model_config = _REST

    ran_function_id: int = Field(alias="ranFunctionId", ge=0, le=4095)
    ran_function_definition: str = Field("", alias="ranFunctionDefinition")


class ServedNrCellInformation(BaseModel):
    model_config = _REST

    cell_id: str = Field(alias="cellId")


class ServedNrCell(BaseModel):
    model_config = _REST

    information: ServedNrCellInformation = Field(alias="servedNrCellInformation")


class Gnb(BaseModel):
    model_config = _REST

    served_nr_cells: list[ServedNrCell] = Field(default_factory=list, alias="servedNrCells")
    ran_functions: list[RanFunction] = Field(default_factory=list, alias="ranFunctions")


class Enb(BaseModel):
    model_config = _REST

    served_cells: list[dict] = Field(default_factory=list, alias="servedCells")


class NodebResponse(BaseModel):
    model_config = _REST

    ran_name: str = Field(alias="ranName", min_length=1)
    gnb: Gnb | None = None
    enb: Enb | None = None


# --- what discovery gives ---------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    cell_id: str  # e2mgr's cellId: the history's and the REST routes' name for the cell
    global_id: kpm.CellId


@dataclass(frozen=True)
class E2Node:
    meid: str
    ran_function_id: int  # of its E2SM-KPM function: the subscription's RANFunctionID
    cells: tuple[Cell, ...]
    measurements: tuple[str, ...]  # of those wanted, the ones it reports: its subscription's


@dataclass
class Listing:
    """The connected nodes with cells to subscribe to, and per node the cells left out."""

    nodes: dict[str, E2Node] = field(default_factory=dict)
    skipped: dict[str, Counter[Reason]] = field(default_factory=dict)

    def skipped_by_reason(self) -> Counter[Reason]:
        return sum(self.skipped.values(), Counter())


def parse_cell_id(text: str) -> kpm.CellId:
    """e2mgr's cellId of an NR cell: the PLMN's 3 octets and the 36-bit NR cell identity as
    its 5 octets (a left-aligned bit string), in hex, with a colon between."""
    plmn, sep, cell = text.partition(":")
    if not sep or len(plmn) != 6 or len(cell) != 10:
        raise ValueError(f"cellId {text!r} is not PLMN:NCI in hex (6 and 10 digits)")
    try:
        identity = int(cell, 16)
        octets = bytes.fromhex(plmn)
    except ValueError:
        raise ValueError(f"cellId {text!r} is not hex") from None
    if identity & 0xF:
        raise ValueError(f"cellId {text!r}: the last 4 bits of a 36-bit identity are unused")
    return kpm.CellId(octets, nr_cell=identity >> 4)


def format_cell_id(cell: kpm.CellId) -> str:
    """What e2mgr writes for an NR cell (parse_cell_id's inverse)."""
    if cell.nr_cell is None:
        raise ValueError("only NR cells have e2mgr cellIds of this form")
    return f"{cell.plmn.hex()}:{cell.nr_cell << 4:010x}"


def kpm_function(node: NodebResponse) -> tuple[RanFunction, kpm.RanFunctionDescription] | None:
    """The node's E2SM-KPM RAN function and its description, if it has one this xApp reads."""
    for function in node.gnb.ran_functions if node.gnb else []:
        try:
            description = kpm.decode_ran_function_description(
                bytes.fromhex("".join(function.ran_function_definition.split())))
        except (ValueError, kpm.DecodeError):
            continue  # another service model (RC, NI, ...), or not hex
        if description.short_name == kpm.SHORT_NAME or description.oid in (kpm.OID_V2,
                                                                          kpm.OID_V3):
            return function, description
    return None


def subscribable(node: NodebResponse, measurements: Sequence[str]
                 ) -> tuple[E2Node | None, Counter[Reason]]:
    """The node's cells this xApp can subscribe to for ``measurements`` (one at least), and
    those it cannot, by reason."""
    served = [c.information.cell_id for c in node.gnb.served_nr_cells] if node.gnb else []
    if node.enb is not None:
        served += [str(c.get("cellId", "")) for c in node.enb.served_cells]
    found = kpm_function(node)
    if found is None:
        return None, Counter({"no-kpm-function": len(served)})
    function, description = found
    if description.version == 2:
        return None, Counter({"kpm-v2": len(description.cells or served)})
    reported = set(description.measurements())
    carried = tuple(m for m in measurements if m in reported)
    if not carried:
        return None, Counter({"measurement-not-reported": len(served)})
    cells, skipped = [], Counter[Reason]()
    for cell_id in served:
        try:
            cells.append(Cell(cell_id, parse_cell_id(cell_id)))
        except ValueError:
            skipped["cell-id-unreadable"] += 1
    if not cells:
        return None, skipped
    return E2Node(node.ran_name, function.ran_function_id, tuple(cells), carried), skipped


class E2Manager:
    """A client of e2mgr's REST API: ``listing`` gives the nodes to subscribe to."""

    def __init__(self, url: str, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(timeout=TIMEOUT_S, transport=transport)
        self._details: dict[str, NodebResponse] = {}  # connected nodes, read once each
        self._told: dict[str, Counter[Reason]] = {}  # what was logged of each node

    async def _get(self, path: str) -> bytes:
        response = await self._client.get(f"{self.url}{path}")
        response.raise_for_status()
        return response.content

    async def listing(self, measurements: Sequence[str], retry_max_s: float = 30.0,
                      attempts: int | None = None) -> Listing:
        """The connected nodes and their cells for ``measurements``; each node's details are
        asked for when it (re)connects. Failures are retried (``attempts`` in all, the last
        one's error raised; None: until they succeed), logged with their reason."""
        async for attempt in rest_retrying(
                log, f"e2: E2 Manager at {self.url}", retry_max_s, attempts):
            with attempt:
                states = STATES.validate_json(await self._get("/nodeb/states"))
                connected = {s.inventory_name for s in states
                             if s.connection_status in CONNECTED}
                for name in set(self._details) - connected:  # read again when it is back
                    del self._details[name]
                await self._read_details(sorted(connected - set(self._details)))
        listing = Listing()
        for name in sorted(self._details):
            node, skipped = subscribable(self._details[name], measurements)
            if node is not None:
                listing.nodes[name] = node
            if skipped:
                listing.skipped[name] = skipped
            self._tell(name, node, skipped, measurements)
        for name in set(self._told) - set(self._details):
            del self._told[name]
        return listing

    async def _read_details(self, names: list[str]) -> None:
        slots = asyncio.Semaphore(CONCURRENT_REQUESTS)

        async def read(name: str) -> None:
            async with slots:
                content = await self._get(f"/nodeb/{name}")
            self._details[name] = NodebResponse.model_validate_json(content)

        await asyncio.gather(*map(read, names))

    def _tell(self, name: str, node: E2Node | None, skipped: Counter[Reason],
              measurements: Sequence[str]) -> None:
        """Log a node's left-out cells once, and again when they change."""
        if self._told.get(name) == skipped:
            return
        self._told[name] = skipped
        if not skipped:
            return
        kept = len(node.cells) if node else 0
        named = ", ".join(measurements)
        why = "; ".join(f"{count} because {REASONS[reason].format(measurements=named)}"
                        for reason, count in sorted(skipped.items()))
        log.warning("e2: %s: %d of %d cell(s) not subscribed to: %s", name,
                    sum(skipped.values()), kept + sum(skipped.values()), why)

    async def close(self) -> None:
        await self._client.aclose()

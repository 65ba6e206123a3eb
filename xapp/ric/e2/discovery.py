"""The E2 nodes and their cells, as the RIC's E2 Manager lists them (O-RAN SC e2mgr's REST
API, under its ``/v1``; O-RAN SC's kpimon reads them the same way):

1. ``GET {e2mgr}/nodeb/states``: every node's inventory name (the Meid a subscription names)
   and connection status, asked every lease round, so that nodes connecting and
   disconnecting are followed.
2. ``GET {e2mgr}/nodeb/{ranName}`` for each node that connects: its cells and its RAN
   functions, the E2SM-KPM one among them, whose ``ranFunctionDefinition`` (the hex of its
   aligned-PER RAN function description) says which measurements report style 1 carries.

A node's cells are taken from the first place that names any, in this order: ``servedNrCells``
(e2mgr fills it from an EN-DC X2 setup or an operator's ``PUT /v1/nodeb/gnb/{ranName}``);
the F1 component of ``gnb.nodeConfigs``, the F1 Setup Request (or gNB-DU Configuration Update)
e2mgr keeps from the node's E2 setup and configuration updates (``f1ap.py``; E1, NG, Xn and X2
components say nothing of cells); the node list of a KPM v2 RAN function description; none
found, the node gets one node-level subscription (report style 1 without a cell), its series
named after the node. Duplicates are taken once.

A node is subscribed to when it has an E2SM-KPM function, v2 or later (the event trigger and
action definition of format 1 are the same octets in v2 and v3; a v2 node's indication header
carries 4 octets of time, read as such), and reports one at least of the measurements behind
the models' KPIs (a node is asked for those it reports); the cells left out are counted by
reason
(``kpi_forecast_e2_cells_skipped``) and logged once per node and change. A cell is named as
e2mgr names it (``cellId``: the PLMN and the NR cell identity in hex, ``00f110:0000000010``).
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
from kpi_forecast.xapp.ric.e2 import f1ap, kpm

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
CONCURRENT_REQUESTS = 8  # node details asked at once, when many nodes connect together
CONNECTED = ("CONNECTED", 1)  # e2mgr writes the RNIB's enum by name; its number is 1

# Why a node's cells are not subscribed to (f1-unreadable counts F1 components, not cells).
Reason = Literal["no-kpm-function", "measurement-not-reported", "cell-id-unreadable",
                 "cell-id-duplicate", "f1-unreadable"]
REASONS: dict[Reason, str] = {
    "no-kpm-function": "the node lists no E2SM-KPM RAN function this xApp can read",
    "measurement-not-reported": "the node's E2SM-KPM report style 1 carries none of "
                                "{measurements}",
    "cell-id-unreadable": "e2mgr's cellId is not a PLMN and an NR cell identity in hex",
    "cell-id-duplicate": "the node names the cell twice (taken once)",
    "f1-unreadable": "an F1 component's request part is not an F1 Setup Request or gNB-DU "
                     "Configuration Update this xApp can read",
}
Source = Literal["servedNrCells", "F1", "KPM v2", "node"]  # where a node's cells were found
# What the subscriptions ask for, a KPI at a time: the measurements it may be read from, in
# order of preference, each option those a node must all report (KpiSource.options); a lone
# name stands for a KPI read from that measurement alone.
KpiOptions = tuple[tuple[str, ...], ...]
Wanted = Sequence[str | KpiOptions]


def _options(wanted: Wanted) -> list[KpiOptions]:
    return [((kpi,),) if isinstance(kpi, str) else kpi for kpi in wanted]


def describe_wanted(wanted: Wanted) -> str:
    """``RRU.PrbTotDl or RRU.PrbUsedDl with RRU.PrbAvailDl, DRB.UEThpDl``."""
    return ", ".join(" or ".join(" with ".join(option) for option in kpi)
                     for kpi in _options(wanted))


def carried(wanted: Wanted, reported: set[str]) -> tuple[str, ...]:
    """The measurements to ask a node for: per KPI, the first option it reports whole."""
    names: list[str] = []
    for kpi in _options(wanted):
        chosen = next((option for option in kpi if set(option) <= reported), ())
        names += [name for name in chosen if name not in names]
    return tuple(names)

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


class NodeConfig(BaseModel):
    """An E2 node component's configuration, as e2mgr's jsonpb writes it (a default, as the
    interface type ng, is left out; octets are base64)."""

    model_config = _REST

    interface_type: str = Field("ng", alias="e2nodeComponentInterfaceType")
    request_part: str = Field("", alias="e2nodeComponentRequestPart")


class Gnb(BaseModel):
    model_config = _REST

    served_nr_cells: list[ServedNrCell] = Field(default_factory=list, alias="servedNrCells")
    ran_functions: list[RanFunction] = Field(default_factory=list, alias="ranFunctions")
    node_configs: list[NodeConfig] = Field(default_factory=list, alias="nodeConfigs")


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
    cell_id: str  # e2mgr's cellId (the node's name for a node-level series): the history's
    global_id: kpm.CellGlobalId | None  # None: the whole node's measurements


@dataclass(frozen=True)
class E2Node:
    meid: str
    ran_function_id: int  # of its E2SM-KPM function: the subscription's RANFunctionID
    cells: tuple[Cell, ...]
    measurements: tuple[str, ...]  # of those wanted, the ones it reports: its subscription's
    cells_from: Source = "servedNrCells"
    kpm_version: int = 3  # of its RAN function: 2, or 3 for v3 and later


@dataclass
class Listing:
    """The connected nodes with cells to subscribe to, and per node the cells left out."""

    nodes: dict[str, E2Node] = field(default_factory=dict)
    skipped: dict[str, Counter[Reason]] = field(default_factory=dict)

    def skipped_by_reason(self) -> Counter[Reason]:
        return sum(self.skipped.values(), Counter())


def parse_cell_id(text: str) -> kpm.CellGlobalId:
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
    return kpm.CellGlobalId(octets, nr_cell=identity >> 4)


def format_cell_id(cell: kpm.CellGlobalId) -> str:
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


def declared_cells(node: NodebResponse, description: kpm.RanFunctionDescription | None = None
                   ) -> tuple[list[Cell], Source, Counter[Reason]]:
    """The node's cells, from the first place that names any (servedNrCells, the F1
    components, a KPM v2 ``description``'s node list), each once; none: the node itself.
    With those left out, by reason."""
    skipped = Counter[Reason]()
    named: list[str] = []
    if node.gnb is not None:
        named = [c.information.cell_id for c in node.gnb.served_nr_cells]
    if node.enb is not None:
        named += [str(c.get("cellId", "")) for c in node.enb.served_cells]
    cells, source = [], "servedNrCells"
    for cell_id in named:
        try:
            cells.append(Cell(cell_id, parse_cell_id(cell_id)))
        except ValueError:
            skipped["cell-id-unreadable"] += 1
    if not named and node.gnb is not None:
        source = "F1"
        for config in node.gnb.node_configs:
            if config.interface_type != "f1":
                continue
            try:
                found = f1ap.served_cells(f1ap.request_part_octets(config.request_part))
            except kpm.DecodeError:
                skipped["f1-unreadable"] += 1
                continue
            cells += [Cell(format_cell_id(cell), cell) for cell in found]
    if not cells and not skipped and description is not None and description.cells:
        source = "KPM v2"
        for item in description.cells:
            if item.cell.nr_cell is None:
                skipped["cell-id-unreadable"] += 1  # an LTE cell: no e2mgr name of this form
            else:
                cells.append(Cell(format_cell_id(item.cell), item.cell))
    if not cells and not skipped:  # named nowhere (not named unreadably)
        return [Cell(node.ran_name, None)], "node", skipped
    unique = list(dict.fromkeys(cells))
    if len(unique) < len(cells):
        skipped["cell-id-duplicate"] += len(cells) - len(unique)
    return unique, source, skipped


def subscribable(node: NodebResponse, measurements: Wanted
                 ) -> tuple[E2Node | None, Counter[Reason]]:
    """The node to subscribe to for the KPIs ``measurements`` feed (one at least) with its
    cells, and the cells left out, by reason."""
    found = kpm_function(node)
    cells, source, skipped = declared_cells(node, found[1] if found else None)
    named = len(cells) if source != "node" else 0
    if found is None:
        return None, skipped + Counter({"no-kpm-function": named})
    function, description = found
    asked = carried(measurements, set(description.measurements()))
    if not asked:
        return None, skipped + Counter({"measurement-not-reported": named})
    if not cells:
        return None, skipped
    return E2Node(node.ran_name, function.ran_function_id, tuple(cells), asked, source,
                  description.version), skipped


class E2Manager:
    """A client of e2mgr's REST API: ``listing`` gives the nodes to subscribe to."""

    def __init__(self, url: str, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(timeout=TIMEOUT_S, transport=transport)
        self._details: dict[str, NodebResponse] = {}  # connected nodes, read once each
        self._told: dict[str, tuple] = {}  # what was logged of each node
        # Each node's subscribable() for what was asked, until its details are read again
        # (decoding an F1 setup is costly beside a lease round).
        self._found: dict[str, tuple[tuple, tuple[E2Node | None, Counter[Reason]]]] = {}

    async def _get(self, path: str) -> bytes:
        response = await self._client.get(f"{self.url}{path}")
        response.raise_for_status()
        return response.content

    async def listing(self, measurements: Wanted, retry_max_s: float = 30.0,
                      attempts: int | None = None, refresh: bool = False) -> Listing:
        """The connected nodes and their cells for ``measurements``; each node's details are
        asked for when it (re)connects, and with ``refresh`` again for every node (e2mgr
        keeps a node's configuration updates: cells added or removed). Failures are retried
        (``attempts`` in all, the last one's error raised; None: until they succeed), logged
        with their reason."""
        async for attempt in rest_retrying(
                log, f"e2: E2 Manager at {self.url}", retry_max_s, attempts):
            with attempt:
                states = STATES.validate_json(await self._get("/nodeb/states"))
                connected = {s.inventory_name for s in states
                             if s.connection_status in CONNECTED}
                for name in set(self._details) - connected:  # read again when it is back
                    del self._details[name]
                    self._found.pop(name, None)
                await self._read_details(sorted(
                    connected if refresh else connected - set(self._details)))
        listing = Listing()
        wanted = tuple(measurements)
        for name in sorted(self._details):
            found = self._found.get(name)
            if found is None or found[0] != wanted:  # worked out once per details read
                found = self._found[name] = (wanted, subscribable(self._details[name],
                                                                  measurements))
            node, skipped = found[1]
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
            self._found.pop(name, None)

        await asyncio.gather(*map(read, names))

    def _tell(self, name: str, node: E2Node | None, skipped: Counter[Reason],
              measurements: Wanted) -> None:
        """Log where a node's cells come from (unless e2mgr lists them) and those left out,
        once, and again when that changes."""
        told = (skipped, node.cells_from if node else None, len(node.cells) if node else 0)
        if self._told.get(name) == told:
            return
        self._told[name] = told
        if node is not None and node.cells_from == "F1":
            log.info("e2: %s: %d cell(s) from its F1 component (gnb.nodeConfigs); e2mgr lists "
                     "no servedNrCells", name, len(node.cells))
        elif node is not None and node.cells_from == "node":
            log.warning("e2: %s names no cell (no servedNrCells, no F1 component with cells): "
                        "one node-level subscription, its series named %s", name, name)
        if not skipped:
            return
        kept = len(node.cells) if node and node.cells_from != "node" else 0
        named = describe_wanted(measurements)
        why = "; ".join(f"{count} because {REASONS[reason].format(measurements=named)}"
                        for reason, count in sorted(skipped.items()))
        log.warning("e2: %s: %d of %d cell(s) not subscribed to: %s", name,
                    sum(skipped.values()), kept + sum(skipped.values()), why)

    async def close(self) -> None:
        await self._client.aclose()

"""E2SM-KPM codec: the report-style-1 subset the xApp subscribes with and the indications it reads
(their header and message: ``kpm_indication.py``).

Aligned PER over asn1tools, from the project's own ASN.1 module (kpm.asn), which is wire-compatible
with O-RAN E2SM-KPM v3+ for these structures. Encoders raise ValueError for values the standard
cannot carry; decoders raise DecodeError, and nothing else, for any input they cannot use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import asn1tools

# 3GPP TS 28.552 measurement names, as E2 nodes (srsRAN, OAI, vendor gNBs) report them.
MEASUREMENTS: tuple[str, ...] = (
    "RRU.PrbUsedDl",
    "RRU.PrbUsedUl",
    "RRU.PrbAvailDl",
    "RRU.PrbAvailUl",
    "DRB.UEThpDl",
    "DRB.UEThpUl",
    "RRC.ConnMean",
    "DRB.MeanActiveUeDl",
    "DRB.MeanActiveUeUl",
    "DRB.PdcpSduVolumeDL",  # traffic volume, Mbit (28.552 spells the link in capitals here)
    "DRB.PdcpSduVolumeUL",
)

Bytes = bytes | bytearray | memoryview

MAX_UINT32 = 2**32 - 1

# asn1tools reports bad input through its own errors and, for some corrupt lengths or unsupported
# corners (size extensions), through plain Python ones; all mean "cannot decode this".
ASN1_FAILURES = (
    asn1tools.Error,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    OverflowError,
    RecursionError,
    NotImplementedError,
)


class DecodeError(ValueError):
    """Input that cannot be decoded; `reason` is a short tag for counting rejections."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True)
class CellGlobalId:
    """A cell global identity: the PLMN (3 octets, as on the wire) and one of the cell ids."""

    plmn: bytes
    nr_cell: int | None = None
    eutra_cell: int | None = None

    def __post_init__(self) -> None:
        if len(self.plmn) != 3:
            raise ValueError("plmn must be 3 octets")
        if (self.nr_cell is None) == (self.eutra_cell is None):
            raise ValueError("give exactly one of nr_cell and eutra_cell")
        if self.nr_cell is not None and not 0 <= self.nr_cell < 2**36:
            raise ValueError("nr_cell must fit 36 bits")
        if self.eutra_cell is not None and not 0 <= self.eutra_cell < 2**28:
            raise ValueError("eutra_cell must fit 28 bits")


@dataclass(frozen=True)
class ActionDefinition:
    """Action definition format 1: which measurements, how often sampled, optionally which cell."""

    measurements: list[str]
    granularity_ms: int
    cell: CellGlobalId | None = None


# Not frozen, as E2apMessage: one of each is made for every indication.
@dataclass(slots=True)
class Measurement:
    """One measurement's values, one per granularity period, oldest first; None means no value."""

    name: str
    values: list[float | None]


@dataclass(slots=True)
class IndicationMessage:
    """Indication message format 1: every measurement covers the same granularity periods."""

    measurements: list[Measurement]
    granularity_ms: int | None = None


@cache
def spec() -> asn1tools.compiler.Specification:
    # Compiled once, on first use: importing the xApp should not pay for ASN.1 it may not use.
    text = resources.files(__package__).joinpath("kpm.asn").read_text(encoding="ascii")
    return asn1tools.compile_string(text, codec="per")


def encode(type_name: str, value: Any) -> bytes:
    # check_constraints: without it asn1tools silently writes out-of-range values (an integer
    # record of 2**32, say) as bytes no other decoder reads back the same.
    try:
        return spec().encode(type_name, value, check_constraints=True)
    except ASN1_FAILURES as exc:
        raise ValueError(f"{type_name}: {exc}") from exc


def as_bytes(data: Bytes) -> bytes:
    # memoryview, not bytes(): bytes(5) would quietly make five zero octets out of a wrong type.
    try:
        return bytes(memoryview(data))
    except TypeError as exc:
        raise DecodeError("per", f"not bytes: {type(data).__name__}") from exc


def decode(type_name: str, data: Bytes) -> Any:
    raw = as_bytes(data)
    try:
        return spec().decode(type_name, raw)
    except ASN1_FAILURES as exc:
        raise DecodeError("per", f"{type_name}: {exc}") from exc


def format1(choice: tuple[str | None, Any], expected: str) -> Any:
    # An extension alternative our module does not declare decodes as (None, None).
    name, body = choice
    if name != expected:
        raise DecodeError("format", f"{name or 'unknown extension'} is not supported")
    return body


# --- event trigger ------------------------------------------------------------------------------


def encode_event_trigger(period_ms: int) -> bytes:
    """Event trigger format 1: report every `period_ms` milliseconds."""
    format1 = {"reportingPeriod": period_ms}
    return encode(
        "KpmEventTrigger", {"eventDefinition-formats": ("eventDefinition-Format1", format1)}
    )


def decode_event_trigger(data: Bytes) -> int:
    """The reporting period in milliseconds."""
    value = decode("KpmEventTrigger", data)
    return format1(value["eventDefinition-formats"], "eventDefinition-Format1")["reportingPeriod"]


# --- action definition --------------------------------------------------------------------------


def _int_to_bits(number: int, width: int) -> tuple[bytes, int]:
    # asn1tools wants a BIT STRING as left-aligned octets plus the bit count.
    octets = (width + 7) // 8
    return (number << (octets * 8 - width)).to_bytes(octets, "big"), width


def _bits_to_int(bits: tuple[bytes, int]) -> int:
    data, width = bits
    return int.from_bytes(data, "big") >> (len(data) * 8 - width)


def _cgi_value(cell: CellGlobalId) -> tuple[str, dict[str, Any]]:
    if cell.nr_cell is not None:
        return "nR-CGI", {
            "pLMNIdentity": cell.plmn,
            "nRCellIdentity": _int_to_bits(cell.nr_cell, 36),
        }
    assert cell.eutra_cell is not None  # CellGlobalId guarantees one of the two
    return "eUTRA-CGI", {
        "pLMNIdentity": cell.plmn,
        "eUTRACellIdentity": _int_to_bits(cell.eutra_cell, 28),
    }


def _cell_id(cgi: tuple[str | None, Any]) -> CellGlobalId:
    kind, body = cgi
    if kind == "nR-CGI":
        return CellGlobalId(body["pLMNIdentity"], nr_cell=_bits_to_int(body["nRCellIdentity"]))
    if kind == "eUTRA-CGI":
        return CellGlobalId(body["pLMNIdentity"],
                            eutra_cell=_bits_to_int(body["eUTRACellIdentity"]))
    raise DecodeError("format", "unknown cell global identity")


def meas_info_list(names: Sequence[str]) -> list[dict[str, Any]]:
    # noLabel: the whole cell's value, not split by slice, QoS class or PLMN.
    return [
        {"measType": ("measName", name), "labelInfoList": [{"measLabel": {"noLabel": "true"}}]}
        for name in names
    ]


def meas_names(meas_info_list: list[dict[str, Any]]) -> list[str]:
    # Labels are not kept: the xApp subscribes with noLabel, and a node splitting a measurement
    # by label sends one entry per label, which stays a separate (same-named) measurement here.
    names = []
    for item in meas_info_list:
        kind, name = item["measType"]
        if kind != "measName":
            # The xApp subscribes by name and nodes echo the measType they were asked for.
            raise DecodeError("format", f"measurement type {kind or 'unknown'} is not supported")
        names.append(name)
    return names


def encode_action_definition(defn: ActionDefinition, style: int = 1) -> bytes:
    """Action definition format 1 under RIC style `style` (1: E2 node measurement)."""
    format1: dict[str, Any] = {
        "measInfoList": meas_info_list(defn.measurements),
        "granulPeriod": defn.granularity_ms,
    }
    if defn.cell is not None:
        format1["cellGlobalID"] = _cgi_value(defn.cell)
    value = {
        "ric-Style-Type": style,
        "actionDefinition-formats": ("actionDefinition-Format1", format1),
    }
    return encode("KpmActionDefinition", value)


def decode_action_definition(data: Bytes) -> ActionDefinition:
    """An action definition; only format 1 is accepted."""
    value = decode("KpmActionDefinition", data)
    body = format1(value["actionDefinition-formats"], "actionDefinition-Format1")
    cgi = body.get("cellGlobalID")
    return ActionDefinition(
        measurements=meas_names(body["measInfoList"]),
        granularity_ms=body["granulPeriod"],
        cell=None if cgi is None else _cell_id(cgi),
    )


# --- RAN function description -------------------------------------------------------------------
# What an E2 node declares for E2SM-KPM at E2 setup (e2mgr lists it as the RAN function's
# ranFunctionDefinition). KPM v2 and v3+ encode it differently (v2 has a node list before the
# styles) and carry no version field; the O-RAN OIDs name the version (oran(53148) e2(1)
# version(N) e2sm(2) e2sm-KPMMON-IEs(2)), but nodes are known to keep v2's OID after moving on.

SHORT_NAME = "ORAN-E2SM-KPM"
OID_V2 = "1.3.6.1.4.1.53148.1.2.2.2"
OID_V3 = "1.3.6.1.4.1.53148.1.3.2.2"
NODE_MEASUREMENT_STYLE = 1  # report style 1, "E2 Node Measurement": what the xApp subscribes to
_DESCRIPTION_TYPES = {3: "KpmRanFunctionDescription", 2: "KpmRanFunctionDescriptionV2"}


@dataclass(frozen=True)
class CellObject:
    """A cell a KPM v2 node lists: its object id (the node's name for it) and global id."""

    object_id: str
    cell: CellGlobalId


@dataclass(frozen=True)
class RanFunctionDescription:
    """An E2SM-KPM RAN function as its node declares it."""

    short_name: str
    oid: str
    # Report style type -> the measurements it can report (style 1: per node or cell).
    report_styles: dict[int, list[str]]
    version: int = 3  # 2, or 3 for v3 and later (which encode it alike)
    cells: list[CellObject] | None = None  # KPM v2's node list, every node's cells; v3+: None
    description: str = "KPM Monitor"

    def measurements(self, style: int = NODE_MEASUREMENT_STYLE) -> list[str]:
        return self.report_styles.get(style, [])


def encode_ran_function_description(desc: RanFunctionDescription) -> bytes:
    """The description in KPM v3+ form, or v2's with its cells as one node's (a gNB whose
    global id is the first cell's PLMN and an id of 0): what the mock E2 node declares."""
    styles = [{
        "ric-ReportStyle-Type": style, "ric-ReportStyle-Name": "E2 Node Measurement",
        "ric-ActionFormat-Type": 1,
        "measInfo-Action-List": [{"measName": name} for name in names],
        "ric-IndicationHeaderFormat-Type": 1, "ric-IndicationMessageFormat-Type": 1,
    } for style, names in sorted(desc.report_styles.items())]
    value: dict[str, Any] = {
        "ranFunction-Name": {"ranFunction-ShortName": desc.short_name,
                             "ranFunction-E2SM-OID": desc.oid,
                             "ranFunction-Description": desc.description},
        "ric-EventTriggerStyle-List": [{
            "ric-EventTriggerStyle-Type": 1, "ric-EventTriggerStyle-Name": "Periodic Report",
            "ric-EventTriggerFormat-Type": 1}],
    }
    if styles:
        value["ric-ReportStyle-List"] = styles
    if desc.version == 2 and desc.cells:
        plmn = desc.cells[0].cell.plmn
        value["ric-KPM-Node-List"] = [{
            "ric-KPMNode-Type": ("gNB", {"global-gNB-ID": {"plmn-id": plmn,
                                                           "gnb-id": ("gnb-ID", (b"\0" * 3, 22))}}),
            "cell-Measurement-Object-List": [
                {"cell-object-ID": c.object_id, "cell-global-ID": _cgi_value(c.cell)}
                for c in desc.cells]}]
    return encode(_DESCRIPTION_TYPES[2 if desc.version == 2 else 3], value)


def decode_ran_function_description(data: Bytes) -> RanFunctionDescription:
    """A RAN function description of KPM v2 or v3+. Both encodings are tried, since nothing in
    the bytes says which: the reading that re-encodes to exactly the input wins (with both,
    the OID decides), else the first that decodes at all (unknown extensions, as KPM v4's
    bin ranges, are skipped and do not re-encode), v3+ first."""
    raw = as_bytes(data)
    readings: list[tuple[int, dict[str, Any], bool]] = []
    for version, type_name in _DESCRIPTION_TYPES.items():
        try:
            value = spec().decode(type_name, raw)
        except ASN1_FAILURES:
            continue
        try:
            exact = spec().encode(type_name, value) == raw
        except ASN1_FAILURES:
            exact = False
        readings.append((version, value, exact))
    if not readings:
        raise DecodeError("per", "not an E2SM-KPM RAN function description")
    exact = [r for r in readings if r[2]]
    if len(exact) > 1:
        oid = exact[0][1]["ranFunction-Name"]["ranFunction-E2SM-OID"]
        exact.sort(key=lambda r: r[0] != (2 if oid == OID_V2 else 3))
    version, value, _ = (exact or readings)[0]
    name = value["ranFunction-Name"]
    styles: dict[int, list[str]] = {}
    for style in value.get("ric-ReportStyle-List", []):
        styles.setdefault(style["ric-ReportStyle-Type"], []).extend(
            item["measName"] for item in style["measInfo-Action-List"])
    cells = None
    if version == 2:
        cells = [CellObject(item["cell-object-ID"], _cell_id(item["cell-global-ID"]))
                 for node in value.get("ric-KPM-Node-List", [])
                 for item in node.get("cell-Measurement-Object-List", [])]
    return RanFunctionDescription(name["ranFunction-ShortName"], name["ranFunction-E2SM-OID"],
                                  styles, version, cells, name["ranFunction-Description"])

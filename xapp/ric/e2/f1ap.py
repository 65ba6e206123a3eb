"""The cells a gNB-DU serves, from the F1 component an E2 node declares at E2 setup (and in
its configuration updates): the F1AP message of the component's request part, decoded with
pycrate's F1AP module (3GPP TS 38.473, aligned PER).

An F1 Setup Request names them in its gNB-DU Served Cells List; a gNB-DU Configuration Update
in its Served Cells To Add List (what O-RAN SC's kpimon-go reads). Each item's served cell
information carries the cell's NR CGI: the PLMN and the 36-bit NR cell identity.

e2mgr keeps a component's request part as the E2 termination's XER gives it: the octets as
hex digits, with whitespace (``E2Manager/models/e2_setup_request_message.go``, the
``e2nodeComponentRequestPart`` chardata taken as bytes), which its REST API then shows in
base64; ``request_part_octets`` undoes both.
"""

from __future__ import annotations

import base64
import binascii
import string
import threading
from functools import cache
from typing import Any

from kpi_forecast.xapp.ric.e2.kpm import CellGlobalId, DecodeError

F1_SETUP = 1  # procedure codes (F1AP-Constants)
GNB_DU_CONFIGURATION_UPDATE = 3
# (procedure, the IE holding the cells, its items' value type)
_CELL_LISTS = {
    F1_SETUP: (44, "GNB-DU-Served-Cells-Item"),  # id-gNB-DU-Served-Cells-List
    GNB_DU_CONFIGURATION_UPDATE: (58, "Served-Cells-To-Add-Item"),  # id-Served-Cells-To-Add-List
}
_HEX = set(string.hexdigits)
_lock = threading.Lock()  # pycrate keeps a decoded value on its module-level objects


@cache
def _pdu() -> Any:
    # Imported on first use: the F1AP module builds tens of thousands of ASN.1 objects.
    from pycrate_asn1dir import F1AP

    return F1AP.F1AP_PDU_Descriptions.F1AP_PDU


def request_part_octets(shown: str) -> bytes:
    """The F1AP octets of a request part as e2mgr's REST API shows it: base64 of the XER's
    hex text (whitespace between the digits), or, from an e2mgr that keeps octets, of the
    octets themselves."""
    try:
        stored = base64.b64decode(shown, validate=True)
    except binascii.Error as exc:
        raise DecodeError("f1ap", f"the request part is not base64: {exc}") from None
    text = b"".join(stored.split())
    if text and len(text) % 2 == 0 and set(text.decode("latin-1")) <= _HEX:
        return bytes.fromhex(text.decode("ascii"))
    return stored


def served_cells(octets: bytes) -> list[CellGlobalId]:
    """The NR cells an F1 Setup Request or gNB-DU Configuration Update names (in order);
    DecodeError for anything else."""
    pdu = _pdu()
    try:
        with _lock:
            pdu.from_aper(octets)
            kind, message = pdu.get_val()
    except Exception as exc:  # pycrate raises many kinds for octets it cannot read
        raise DecodeError("f1ap", f"not an F1AP PDU: {type(exc).__name__}: {exc}") from None
    found = _CELL_LISTS.get(message.get("procedureCode")) if kind == "initiatingMessage" else None
    if found is None:
        raise DecodeError("f1ap", f"an F1AP {kind} of procedure {message.get('procedureCode')}, "
                                  "not an F1 Setup Request or gNB-DU Configuration Update")
    list_id, item_type = found
    cells = []
    for ie in message["value"][1]["protocolIEs"]:
        if ie["id"] != list_id:
            continue
        for item in ie["value"][1]:
            name, body = item["value"]
            if name != item_type:
                continue
            cgi = body["served-Cell-Information"]["nRCGI"]
            bits, width = cgi["nRCellIdentity"]
            if width != 36 or len(cgi["pLMN-Identity"]) != 3:
                raise DecodeError("f1ap", "an NR CGI of another size than 3 octets and 36 bits")
            cells.append(CellGlobalId(cgi["pLMN-Identity"], nr_cell=bits))
    return cells

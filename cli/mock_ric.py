"""The RIC platform around the mock E2 node (``mock_e2_node.py``):

- the E2 Manager (``/v1``), by its published contract: ``GET /v1/nodeb/states`` lists the
  nodes (cells grouped into nodes of ``cells_per_node``) and whether each is connected,
  ``GET /v1/nodeb/{ranName}`` one node with its served NR cells and its RAN functions, the
  E2SM-KPM one with the RAN function description an E2 node declares at E2 setup (encoded
  from the same cell list and the measurements it has: KPM v3+, or v2 with its node list);
- the subscription manager (``/ric/v1``) as its source runs it (``mock_submgr.py``):
  ``GET`` and ``POST /ric/v1/subscriptions``, ``DELETE /ric/v1/subscriptions/{id}`` and
  ``GET /ric/v1/get_e2node_rest_subscriptions/{ranName}``, the outcomes posted to the
  subscriber;

and ``GET /stats``: what the node sent, what the subscription manager did, who subscribes to
each node, and how late the node sent.
"""

from __future__ import annotations

import base64
import contextlib
import math
import time
from collections.abc import AsyncIterator
from typing import Annotated

import numpy as np
from fastapi import FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from kpi_forecast.cli.mock_e2_node import PLMN, RAN_FUNCTION_ID, MockE2Node
from kpi_forecast.cli.mock_submgr import MockSubmgr, md5_of
from kpi_forecast.xapp.ric.e2 import discovery, kpm
from kpi_forecast.xapp.ric.e2.submgr_api import SubscriptionRequest


def _status(node: MockE2Node, meid: str) -> str:
    return "DISCONNECTED" if meid in node.disconnected else "CONNECTED"


def _global_nb_id(meid: str) -> dict:
    return {"plmnId": PLMN, "nbId": f"{int(meid.removeprefix('gnb-')):08x}"}


def nodeb_states(node: MockE2Node) -> list[dict]:
    """``GET /v1/nodeb/states``: e2mgr's NodebIdentity of every node (E2Manager
    controllers/nodeb_controller.go ``GetNodebIdList``)."""
    return [{"inventoryName": meid, "globalNbId": _global_nb_id(meid),
             "connectionStatus": _status(node, meid)} for meid in node.nodes]


def xer_hex(octets: bytes, indent: int = 12) -> str:
    """Octets as the E2 termination's XER writes an OCTET STRING and e2mgr keeps it (asn1c's
    OCTET_STRING_encode_xer: uppercase hex pairs, a space between, a new indented line every
    16 octets)."""
    lines = [" ".join(f"{b:02X}" for b in octets[i:i + 16]) for i in range(0, len(octets), 16)]
    pad = "\n" + " " * indent
    return pad + pad.join(lines) + "\n" + " " * (indent - 4)


def f1_setup_request(cells: list[kpm.CellGlobalId], du_id: int) -> bytes:
    """The F1 Setup Request a gNB-DU serving ``cells`` sends (TS 38.473 9.2.1.4: its gNB-DU
    Served Cells List, each with its NR CGI; the other mandatory fields with test values)."""
    from pycrate_asn1dir import F1AP

    def served(cell: kpm.CellGlobalId) -> dict:
        return {"id": 43, "criticality": "reject", "value": ("GNB-DU-Served-Cells-Item", {
            "served-Cell-Information": {
                "nRCGI": {"pLMN-Identity": cell.plmn, "nRCellIdentity": (cell.nr_cell, 36)},
                "nRPCI": (cell.nr_cell or 0) % 1008,
                "servedPLMNs": [{"pLMN-Identity": cell.plmn}],
                "nR-Mode-Info": ("tDD", {
                    "nRFreqInfo": {"nRARFCN": 620000, "freqBandListNr": [
                        {"freqBandIndicatorNr": 78, "supportedSULBandList": []}]},
                    "transmission-Bandwidth": {"nRSCS": "scs30", "nRNRB": "nrb106"}}),
                "measurementTimingConfiguration": b"\x00"}})}

    pdu = F1AP.F1AP_PDU_Descriptions.F1AP_PDU
    pdu.set_val(("initiatingMessage", {
        "procedureCode": 1, "criticality": "reject", "value": ("F1SetupRequest", {
            "protocolIEs": [
                {"id": 78, "criticality": "reject", "value": ("TransactionID", 1)},
                {"id": 42, "criticality": "reject", "value": ("GNB-DU-ID", du_id)},
                {"id": 44, "criticality": "reject", "value": (
                    "GNB-DU-Served-Cells-List", [served(cell) for cell in cells])},
                {"id": 171, "criticality": "reject", "value": (
                    "RRC-Version", {"latest-RRC-Version": (0, 3)})}]})}))
    return pdu.to_aper()


def node_configs(node: MockE2Node, meid: str) -> list[dict]:
    """``gnb.nodeConfigs`` as e2mgr keeps a node's E2 setup components (nodeb-rnib
    ``E2nodeComponentConfig``, written by jsonpb: camelCase names, an enum by name, a default
    such as the interface type ng left out, int64 as a string, octets in base64): an NG
    component and, for a node whose cells come by F1, its F1 Setup Request as XER hex text."""
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    configs = [{"e2nodeComponentInterfaceTypeNG": {"amfName": "amf-1"},
                "e2nodeComponentRequestPart": b64(xer_hex(b"NG Setup Request")),
                "e2nodeComponentResponsePart": b64(xer_hex(b"NG Setup Response"))}]
    if node.cells_from == "f1":
        rows = node.nodes[meid]
        request = f1_setup_request([discovery.parse_cell_id(node.cell_ids[r]) for r in rows],
                                   du_id=rows[0])
        configs.append({"e2nodeComponentInterfaceTypeF1": {"gNBDuId": str(rows[0])},
                        "e2nodeComponentInterfaceType": "f1",
                        "e2nodeComponentRequestPart": b64(xer_hex(request)),
                        "e2nodeComponentResponsePart": b64(xer_hex(b"F1 Setup Response"))})
    return configs


def nodeb(node: MockE2Node, meid: str) -> dict | None:
    """``GET /v1/nodeb/{ranName}``: e2mgr's NodebResponse (None: no such node). Its cells are
    where the node's ``cells_from`` says: servedNrCells (as e2mgr fills them from an EN-DC
    setup or an operator's PUT), the F1 component of nodeConfigs, or nowhere."""
    rows = node.nodes.get(meid)
    if rows is None:
        return None
    cells = [{"servedNrCellInformation": {
        "cellId": node.cell_ids[row], "servedPlmns": [PLMN], "nrPci": row % 1008,
        "nrMode": "FDD", "choiceNrMode": {"fdd": {}}}} for row in rows]
    gnb = {"gnbType": "GNB", "ranFunctions": [{
        "ranFunctionId": RAN_FUNCTION_ID, "ranFunctionRevision": 1,
        "ranFunctionDefinition": node.ran_function_definition(meid)}],
        "nodeConfigs": node_configs(node, meid)}
    if meid in node.operator_cells:
        gnb["servedNrCells"] = node.operator_cells[meid]
    elif node.cells_from == "served":
        gnb["servedNrCells"] = cells
    return {"ranName": meid, "connectionStatus": _status(node, meid), "nodeType": "GNB",
            "globalNbId": _global_nb_id(meid), "setupFromNetwork": True, "gnb": gnb}


def create_app(node: MockE2Node, submgr: MockSubmgr | None = None) -> FastAPI:
    """The REST side of ``node`` and of ``submgr`` (one of its own when None)."""
    submgr = submgr or MockSubmgr(node)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await node.open()
        yield
        await submgr.close()
        await node.close()  # the replays stop with the server

    app = FastAPI(title="kpi-forecast mock E2 node, E2 Manager and subscription manager",
                  lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The published APIs answer a body they cannot read with 400 (FastAPI's own: 422).
        return JSONResponse({"errorCode": 402, "errorMessage": str(exc.errors()[:3])}, 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method of the path, not the first route's only
            headers["Allow"] = ", ".join(sorted(
                method for route in app.routes if isinstance(route, APIRoute)
                and route.matches(request.scope)[0] != Match.NONE for method in route.methods))
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=headers)

    @app.get("/v1/nodeb/states")
    async def states() -> list[dict]:
        return nodeb_states(node)

    @app.get("/v1/nodeb/{ran_name}")
    async def one_nodeb(ran_name: str) -> JSONResponse:
        found = nodeb(node, ran_name)
        if found is None:
            # e2mgr's ErrorResponse: its code a number (models/error_response.go).
            return JSONResponse({"errorCode": 404, "errorMessage": f"no RAN {ran_name}"},
                                404, media_type="application/problem+json")
        return JSONResponse(found)

    @app.put("/v1/nodeb/gnb/{ran_name}")
    async def update_gnb(ran_name: str, request: Request) -> JSONResponse:
        """An operator sets a gNB's served cells (e2mgr ``NodebController.UpdateGnb``,
        ``UpdateGnbManager``: validated, 404 for an unknown node, the cells replaced, the
        node answered)."""
        try:
            cells = (await request.json())["servedNrCells"]
            valid = isinstance(cells, list) and cells and all(
                c["servedNrCellInformation"]["cellId"] for c in cells)
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            return JSONResponse({"errorCode": 402, "errorMessage": "Validation error"}, 400,
                                media_type="application/problem+json")
        if ran_name not in node.nodes:
            return JSONResponse({"errorCode": 404, "errorMessage": "Resource not found"},
                                404, media_type="application/problem+json")
        node.operator_cells[ran_name] = cells
        return JSONResponse(nodeb(node, ran_name))

    @app.get("/ric/v1/subscriptions")
    async def subscriptions() -> list[dict]:
        return submgr.listing()

    @app.post("/ric/v1/subscriptions", status_code=201)
    async def subscribe(request: Request) -> Response:
        body = await request.body()
        try:
            params = SubscriptionRequest.model_validate_json(body)
        except ValueError as exc:
            raise RequestValidationError([{"msg": str(exc)[:500]}]) from None
        status, answer = submgr.subscribe(params, md5_of(body))
        return JSONResponse(answer, status) if answer is not None else Response(status_code=status)

    @app.delete("/ric/v1/subscriptions/{subscription_id}", status_code=204)
    async def unsubscribe(subscription_id: str) -> Response:
        submgr.delete(subscription_id)
        return Response(status_code=204)

    @app.get("/ric/v1/get_e2node_rest_subscriptions/{ran_name}")
    async def node_rest_subscriptions(ran_name: str) -> dict:
        return submgr.node_rest_subscriptions(ran_name)

    @app.get("/stats")
    async def stats(seconds: Annotated[float | None, Query(gt=0)] = None) -> dict:
        """What went out, by kind, what the subscription manager did (subscriptions,
        deletions, notifications), who holds a subscription to each node (the rmr-data
        endpoint of each REST subscription, host:port) and, on the wall clock, how late the
        node itself sent: the median and p99 from a period's end to its last report handed
        to RMR, over the periods of the last ``seconds`` (all those kept, without)."""
        since = -math.inf if seconds is None else time.monotonic() - seconds
        lags = np.asarray([lag for at, lag in node.send_lag_ms if at >= since])
        lag = {f"send_lag_{name}_ms": float(np.percentile(lags, q)) if len(lags) else None
               for name, q in (("p50", 50), ("p99", 99))}
        return {**node.sent, **submgr.counts, **lag, "subscribers": submgr.subscribers()}

    return app

"""Where a node's cells come from on a real RIC: e2mgr's servedNrCells when it has them (an
EN-DC setup, an operator's PUT), else the F1 component e2mgr keeps from the node's E2 setup
(its F1 Setup Request, or a gNB-DU Configuration Update, in the E2 termination's XER hex text,
base64 in e2mgr's JSON), else the node as a whole; and the end-to-end replay of each shape
into the running xApp."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pytest

from kpi_forecast.cli import mock_ric
from kpi_forecast.cli.mock_e2_node import MockE2Node
from kpi_forecast.cli.mock_submgr import MockSubmgr
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import generate
from kpi_forecast.xapp.ric.e2 import f1ap, kpm
from kpi_forecast.xapp.ric.e2.discovery import (
    E2Manager,
    NodebResponse,
    declared_cells,
    format_cell_id,
    subscribable,
)
from tests.waiting import until_async

MEASUREMENT = "RRU.PrbUsedDl"
PLMN = bytes.fromhex("02f829")


class Quiet:
    port = 0

    async def start(self, handler) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cells") / "cells.csv"
    generate(n_cells=5, days=9, seed=3, start="2024-03-04", tz="UTC").to_csv(path, index=False)
    return path


def node_of(data: Path, cells_from: str, meid: str = "gnb-000") -> NodebResponse:
    mock = MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, Quiet(), cells_per_node=2,
                      cells_from=cells_from)
    return NodebResponse.model_validate(mock_ric.nodeb(mock, meid))


def shown(octets: bytes) -> str:
    """A request part as e2mgr's REST API shows it: base64 of the XER hex text."""
    return base64.b64encode(mock_ric.xer_hex(octets).encode()).decode()


def test_an_f1_setup_request_names_the_du_cells() -> None:
    cells = [kpm.CellGlobalId(PLMN, nr_cell=n) for n in (0x123456789, 2**36 - 1, 7)]
    octets = mock_ric.f1_setup_request(cells, du_id=3)
    assert f1ap.request_part_octets(shown(octets)) == octets
    assert f1ap.request_part_octets(base64.b64encode(octets).decode()) == octets  # raw octets
    assert f1ap.served_cells(octets) == cells
    assert f1ap.served_cells(f1ap.request_part_octets(shown(octets))) == cells


def test_a_du_configuration_update_names_the_cells_it_adds() -> None:
    """What O-RAN SC's kpimon-go reads from the F1 component: the Served Cells To Add List
    of a gNB-DU Configuration Update (TS 38.473 9.2.1.7)."""
    from pycrate_asn1dir import F1AP

    setup = F1AP.F1AP_PDU_Descriptions.F1AP_PDU
    cells = [kpm.CellGlobalId(PLMN, nr_cell=n) for n in (10, 11)]
    setup.from_aper(mock_ric.f1_setup_request(cells, du_id=1))
    served = next(ie for ie in setup.get_val()[1]["value"][1]["protocolIEs"] if ie["id"] == 44)
    items = [{"id": 57, "criticality": "reject",
              "value": ("Served-Cells-To-Add-Item", item["value"][1])}
             for item in served["value"][1]]
    update = F1AP.F1AP_PDU_Descriptions.F1AP_PDU
    update.set_val(("initiatingMessage", {
        "procedureCode": 3, "criticality": "reject", "value": ("GNBDUConfigurationUpdate", {
            "protocolIEs": [
                {"id": 78, "criticality": "reject", "value": ("TransactionID", 2)},
                {"id": 58, "criticality": "reject", "value": ("Served-Cells-To-Add-List",
                                                             items)}]})}))
    assert f1ap.served_cells(update.to_aper()) == cells


@pytest.mark.parametrize("shown_part", [
    "cmVxcGFydA==",  # "reqpart": e2mgr's own test E2 setup's request part, not F1AP
    base64.b64encode(mock_ric.xer_hex(b"\x00\x01\x02").encode()).decode(),
    "not base64 !",
])
def test_a_request_part_that_is_not_f1ap_is_a_decode_error(shown_part: str) -> None:
    with pytest.raises(kpm.DecodeError) as raised:
        f1ap.served_cells(f1ap.request_part_octets(shown_part))
    assert raised.value.reason == "f1ap"


def test_cells_come_from_served_cells_then_f1_then_the_node(data: Path) -> None:
    served = node_of(data, "served")
    cells, source, skipped = declared_cells(served)
    assert source == "servedNrCells" and not skipped
    assert [c.cell_id for c in cells] == ["00f110:0000000000", "00f110:0000000010"]
    # The same cells when e2mgr has only the F1 Setup Request of the node's E2 setup (its NG
    # component says nothing of cells).
    by_f1 = node_of(data, "f1")
    assert not by_f1.gnb.served_nr_cells and len(by_f1.gnb.node_configs) == 2
    assert declared_cells(by_f1) == (cells, "F1", Counter())
    node, skipped = subscribable(by_f1, [MEASUREMENT])
    assert node.cells == tuple(cells) and node.cells_from == "F1" and not skipped
    # Named nowhere: the node as a whole, its series named after it.
    nowhere = node_of(data, "none", "gnb-001")
    node, skipped = subscribable(nowhere, [MEASUREMENT])
    assert node.cells_from == "node" and not skipped
    assert [(c.cell_id, c.global_id) for c in node.cells] == [("gnb-001", None)]


def test_a_duplicate_cell_and_an_unreadable_f1_component_are_counted_the_rest_served(
        data: Path) -> None:
    raw = mock_ric.nodeb(MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, Quiet(),
                                    cells_per_node=2, cells_from="f1"), "gnb-000")
    configs = raw["gnb"]["nodeConfigs"]
    broken = {**configs[1], "e2nodeComponentRequestPart": shown(b"\xff\xfe not F1AP")}
    extra = mock_ric.f1_setup_request(
        [kpm.CellGlobalId(PLMN, nr_cell=9),
         kpm.CellGlobalId(bytes.fromhex("00f110"), nr_cell=1)], du_id=9)
    second = {**configs[1], "e2nodeComponentRequestPart": shown(extra)}
    raw["gnb"]["nodeConfigs"] = [configs[0], broken, configs[1], second]
    node, skipped = subscribable(NodebResponse.model_validate(raw), [MEASUREMENT])
    assert [c.cell_id for c in node.cells] == [
        "00f110:0000000000", "00f110:0000000010", format_cell_id(kpm.CellGlobalId(PLMN, nr_cell=9))]
    assert skipped == Counter({"f1-unreadable": 1, "cell-id-duplicate": 1})


def test_where_the_cells_come_from_is_logged_once_per_node(
        data: Path, caplog: pytest.LogCaptureFixture) -> None:
    mock = MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, Quiet(), cells_per_node=2,
                      cells_from="f1")

    async def go() -> None:
        e2mgr = E2Manager("http://e2mgr/v1", transport=httpx.ASGITransport(
            app=mock_ric.create_app(mock)))
        for _ in range(2):
            listing = await e2mgr.listing([MEASUREMENT], attempts=1)
            assert [len(n.cells) for n in listing.nodes.values()] == [2, 2, 1]
        mock.cells_from = "none"
        for meid in mock.nodes:  # reconnected: read again
            mock.disconnect(meid)
        await e2mgr.listing([MEASUREMENT], attempts=1)
        for meid in mock.nodes:
            mock.connect(meid)
        listing = await e2mgr.listing([MEASUREMENT], attempts=1)
        assert {n.cells_from for n in listing.nodes.values()} == {"node"}
        await e2mgr.close()

    with caplog.at_level(logging.INFO, logger="kpi_forecast.xapp.ric.e2.discovery"):
        asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "e2: gnb-000: 2 cell(s) from its F1 component (gnb.nodeConfigs); e2mgr lists no "
        "servedNrCells",
        "e2: gnb-001: 2 cell(s) from its F1 component (gnb.nodeConfigs); e2mgr lists no "
        "servedNrCells",
        "e2: gnb-002: 1 cell(s) from its F1 component (gnb.nodeConfigs); e2mgr lists no "
        "servedNrCells",
        *[f"e2: {meid} names no cell (no servedNrCells, no F1 component with cells): one "
          f"node-level subscription, its series named {meid}" for meid in mock.nodes]]


@pytest.mark.slow
@pytest.mark.parametrize(("cells_from", "kpm_version"), [
    ("served", 3), ("f1", 3), ("none", 3), ("none", 2)],
    ids=["v3-served-cells", "v3-f1", "v3-no-cells", "v2-node-list"])
def test_a_replay_of_each_node_shape_fills_every_series(
        tmp_path: Path, data: Path, rmr_library: Path, cells_from: str,
        kpm_version: int) -> None:
    """The mock E2 node's cells where each shape of node declares them (a KPM v2 node in its
    RAN function's node list), replayed into the running xApp through the mock subscription
    manager: every cell's history held (a node's own series where it names none), its
    forecast answered, each node subscribed to once."""
    from benchmarks.ports import free_port
    from kpi_forecast.model.config import ModelConfig
    from tests.rmr_library import rmr_transport
    from tests.test_e2_end_to_end import serve_node
    from tests.tolerance import answer_tolerance
    from tests.xapp_helpers import CONTEXT, HORIZON, descriptor, make_model, running

    panel = load_panel(data, "prb_util")
    port = free_port()

    async def go() -> None:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(), cells_per_node=2, speed=0.0,
                          cells_from=cells_from, kpm_version=kpm_version)
        submgr = MockSubmgr(node)
        server, serving = await serve_node(node, port, submgr)
        desc = descriptor(tmp_path, make_model(tmp_path / "model"), e2={
            "enabled": True, "port": free_port(), "submgrUrl": f"http://127.0.0.1:{port}/ric/v1",
            "e2mgrUrl": f"http://127.0.0.1:{port}/v1",
            "kpis": {"kpi": {"measurement": MEASUREMENT}}},
            recalibration={"everySeconds": 0, "maxCells": 256})
        whole_nodes = cells_from == "none" and kpm_version == 3
        series = list(node.nodes) if whole_nodes else node.cell_ids
        async with running(desc, submgr=submgr) as client:
            await until_async(lambda: node.sent["replays_done"] == 3, 60, "the replays")

            async def held() -> list[str]:
                return sorted(c["cell_id"] for c in (await client.get("/v1/cells")).json()[
                    "cells"])

            for _ in range(200):
                if await held() == sorted(series):
                    break
                await asyncio.sleep(0.05)
            assert await held() == sorted(series)
            assert submgr.counts["subscriptions"] == 3  # one per node
            for name in series:
                answer = await client.get(f"/v1/cells/{name}/forecast")
                assert answer.status_code == 200, answer.text
            if whole_nodes:  # the node's series is the mean of its cells
                mean = np.nanmean(panel.values[:2, -CONTEXT:], axis=0)
                direct = (await client.post("/v1/forecast", json={
                    "cell_id": "gnb-000", "start": panel.index[-CONTEXT].isoformat(),
                    "freq": "1h", "values": [None if np.isnan(v) else float(v)
                                             for v in mean]})).json()
                from_e2 = (await client.get("/v1/cells/gnb-000/forecast")).json()
                within = answer_tolerance(ModelConfig(CONTEXT, HORIZON), np.nanmax(mean))
                for a, b in zip(from_e2["forecasts"], direct["forecasts"], strict=True):
                    assert a["p50"] == pytest.approx(b["p50"], abs=within)
        server.should_exit = True
        await serving

    asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("named_by", ["configuration-update", "operator-put"])
def test_cells_named_later_are_followed(
        tmp_path: Path, data: Path, rmr_library: Path, monkeypatch: pytest.MonkeyPatch,
        named_by: str) -> None:
    """A node first named no cell (one node-level subscription); then its E2 node
    configuration update brings its F1 setup, which e2mgr keeps, or an operator puts its
    served cells at e2mgr (``PUT /v1/nodeb/gnb/{ranName}``): at the next reading of the
    nodes' details the xApp deletes the node-level subscription and subscribes cell by
    cell."""
    from benchmarks.ports import free_port
    from kpi_forecast.xapp.ric.e2 import link
    from kpi_forecast.xapp.ric.e2.ownership import ROUND_S
    from tests.rmr_library import rmr_transport
    from tests.test_e2_end_to_end import serve_node
    from tests.xapp_helpers import descriptor, make_model, running

    monkeypatch.setattr(link, "REFRESH_ROUNDS", 2)  # every other round, not every minute
    panel = load_panel(data, "prb_util")
    port = free_port()

    async def go() -> None:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(), cells_per_node=5, speed=1.0,
                          cells_from="none")
        submgr = MockSubmgr(node)
        server, serving = await serve_node(node, port, submgr)
        desc = descriptor(tmp_path, make_model(tmp_path / "model"), e2={
            "enabled": True, "port": free_port(), "submgrUrl": f"http://127.0.0.1:{port}/ric/v1",
            "e2mgrUrl": f"http://127.0.0.1:{port}/v1",
            "kpis": {"kpi": {"measurement": MEASUREMENT}}})
        async with running(desc, submgr=submgr):
            await until_async(lambda: len(node.streams) == 1, 10 * ROUND_S, "node-level")
            if named_by == "configuration-update":
                node.cells_from = "f1"  # as e2mgr keeps the update
            else:
                served = mock_ric.nodeb(MockE2Node(panel, MEASUREMENT, Quiet(),
                                                   cells_per_node=5), "gnb-000")
                async with httpx.AsyncClient() as client:
                    put = await client.put(f"http://127.0.0.1:{port}/v1/nodeb/gnb/gnb-000",
                                           json={"servedNrCells": served["gnb"][
                                               "servedNrCells"]})
                assert put.status_code == 200
                assert len(put.json()["gnb"]["servedNrCells"]) == 5
            await until_async(lambda: len(node.streams) == 5, 6 * ROUND_S, "cell by cell")
            assert submgr.counts["subscriptions"] == 2 and submgr.counts["deletions"] == 1
            assert submgr.subscribers() == {"gnb-000": ["127.0.0.1:" + str(
                desc.controls.e2.port)]}
        server.should_exit = True
        await serving

    asyncio.run(go())

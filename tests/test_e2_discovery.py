"""E2 discovery as the RIC provides it: the nodes from the E2 Manager, each node's cells and
measurements from its E2SM-KPM RAN function description; and the mock's E2 Manager and
subscription manager checked against O-RAN SC's published API documents, as is the
subscription the xApp sends, so that neither side can drift from the real APIs."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from kpi_forecast.cli import mock_ric
from kpi_forecast.cli.mock_e2_node import PLMN, RAN_FUNCTION_ID, MockE2Node
from kpi_forecast.cli.mock_ric import create_app
from kpi_forecast.cli.mock_submgr import MockSubmgr
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import generate
from kpi_forecast.xapp.ric.e2 import kpm
from kpi_forecast.xapp.ric.e2.discovery import (
    E2Manager,
    NodebResponse,
    describe_wanted,
    format_cell_id,
    parse_cell_id,
    subscribable,
)
from kpi_forecast.xapp.ric.e2.subscription import Subscriber
from kpi_forecast.xapp.ric.transport import Frame
from tests import oran_api
from tests.waiting import until_async

MEASUREMENT = "RRU.PrbUsedDl"


class Recorded:
    """A transport that keeps what the mock node sends (nothing here listens for it)."""

    port = 0

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    async def start(self, handler) -> None:
        pass

    def ready(self) -> bool:
        return True

    async def send(self, host: str, port: int, frame: Frame) -> None:
        self.frames.append(frame)

    async def send_many(self, host: str, port: int, frames: Sequence[Frame]
                        ) -> tuple[int, Exception | None]:
        self.frames.extend(frames)
        return len(frames), None

    async def route(self, frame: Frame) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("discovery") / "cells.csv"
    generate(n_cells=5, days=1, seed=0, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    return load_panel(data, "prb_util")


def mock(panel, **options) -> MockE2Node:
    return MockE2Node(panel, MEASUREMENT, Recorded(), cells_per_node=2, end=1, **options)


def nodeb(node: MockE2Node, meid: str = "gnb-000") -> NodebResponse:
    return NodebResponse.model_validate(mock_ric.nodeb(node, meid))


# --- cells and measurements from e2mgr and the RAN function description --------------------


def test_cell_ids_read_as_e2mgr_writes_them() -> None:
    cell = kpm.CellGlobalId(bytes.fromhex("02f829"), nr_cell=2**36 - 1)
    assert format_cell_id(cell) == "02f829:fffffffff0"
    assert parse_cell_id("02f829:fffffffff0") == cell
    assert parse_cell_id("00F110:0000000010") == kpm.CellGlobalId(bytes.fromhex(PLMN), nr_cell=1)
    for bad in ("cell-000", "00f110-0000000010", "00f110:000000001", "00f110:00000000zz",
                "00f110:0000000011"):  # the last: bits beyond the identity's 36
        with pytest.raises(ValueError, match="cellId"):
            parse_cell_id(bad)


def test_the_kpm_description_says_which_cells_are_subscribed(panel) -> None:
    node, skipped = subscribable(nodeb(mock(panel)), [MEASUREMENT])
    assert node is not None and not skipped
    assert node.ran_function_id == RAN_FUNCTION_ID
    assert [c.cell_id for c in node.cells] == ["00f110:0000000000", "00f110:0000000010"]
    assert node.cells[1].global_id == kpm.CellGlobalId(bytes.fromhex(PLMN), nr_cell=1)
    assert node.measurements == (MEASUREMENT,)
    # Several measurements asked for (the models of a repository): the node is asked for
    # those it reports, the others left out.
    node, skipped = subscribable(nodeb(mock(panel)), ["DRB.UEThpDl", MEASUREMENT])
    assert node.measurements == (MEASUREMENT,) and not skipped

    # The node reports other measurements only: none of its cells.
    node, skipped = subscribable(nodeb(mock(panel)), ["DRB.UEThpDl"])
    assert node is None and skipped == Counter({"measurement-not-reported": 2})
    # A KPM v2 node (its node list names the same cells): subscribed to as any other, its
    # cells from servedNrCells, or, where e2mgr names none, from that list.
    v2 = mock(panel, kpm_version=2)
    description = kpm.decode_ran_function_description(bytes.fromhex(
        v2.ran_function_definition("gnb-001")))
    assert description.version == 2
    assert [c.object_id for c in description.cells] == v2.cell_ids[2:4]
    assert description.measurements() == [MEASUREMENT]
    for cells_from, source in (("served", "servedNrCells"), ("none", "KPM v2")):
        v2 = mock(panel, kpm_version=2, cells_from=cells_from)
        node, skipped = subscribable(nodeb(v2, "gnb-001"), [MEASUREMENT])
        assert (node.kpm_version, node.cells_from, not skipped) == (2, source, True)
        assert [c.cell_id for c in node.cells] == v2.cell_ids[2:4]
    # No KPM function, or one this xApp cannot read (another service model's bytes).
    raw = mock_ric.nodeb(mock(panel), "gnb-000")
    raw["gnb"]["ranFunctions"][0]["ranFunctionDefinition"] = "0001ff"
    assert subscribable(NodebResponse.model_validate(raw), [MEASUREMENT]) == (
        None, Counter({"no-kpm-function": 2}))
    # One cell whose id e2mgr gives in a form not read: the others are subscribed to.
    raw = mock_ric.nodeb(mock(panel), "gnb-000")
    raw["gnb"]["servedNrCells"][0]["servedNrCellInformation"]["cellId"] = "cell-000"
    node, skipped = subscribable(NodebResponse.model_validate(raw), [MEASUREMENT])
    assert [c.cell_id for c in node.cells] == ["00f110:0000000010"]
    assert skipped == Counter({"cell-id-unreadable": 1})


def test_nodes_connecting_and_disconnecting_are_followed(
        panel, caplog: pytest.LogCaptureFixture) -> None:
    node = mock(panel)
    asked: list[str] = []

    class Counting(httpx.ASGITransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            asked.append(request.url.path)
            return await super().handle_async_request(request)

    async def go() -> list[list[str]]:
        e2mgr = E2Manager("http://e2mgr/v1", transport=Counting(app=create_app(node)))
        seen = []
        for change in (None, "disconnect", None, "connect"):
            if change:
                getattr(node, change)("gnb-001")
            seen.append(sorted((await e2mgr.listing([MEASUREMENT], attempts=1)).nodes))
        await e2mgr.close()
        return seen

    assert asyncio.run(go()) == [["gnb-000", "gnb-001", "gnb-002"],
                                 ["gnb-000", "gnb-002"], ["gnb-000", "gnb-002"],
                                 ["gnb-000", "gnb-001", "gnb-002"]]
    # Every round lists the states; a node's details are read when it (re)connects.
    assert asked.count("/v1/nodeb/states") == 4
    assert asked.count("/v1/nodeb/gnb-000") == 1 and asked.count("/v1/nodeb/gnb-001") == 2


def test_cells_left_out_are_counted_and_logged_once_by_node(
        panel, caplog: pytest.LogCaptureFixture) -> None:
    node = mock(panel)

    async def go() -> list[Counter]:
        e2mgr = E2Manager("http://e2mgr/v1", transport=httpx.ASGITransport(
            app=create_app(node)))
        found = []
        for _ in range(2):
            listing = await e2mgr.listing(["RRC.ConnMean"], attempts=1)
            assert not listing.nodes
            found.append(listing.skipped_by_reason())
        await e2mgr.close()
        return found

    with caplog.at_level(logging.WARNING, logger="kpi_forecast.xapp.ric.e2.discovery"):
        found = asyncio.run(go())
    assert found == [Counter({"measurement-not-reported": 5})] * 2
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"e2: {meid}: {n} of {n} cell(s) not subscribed to: {n} because the "
                     "node's E2SM-KPM report style 1 carries none of RRC.ConnMean"
                     for meid, n in (("gnb-000", 2), ("gnb-001", 2), ("gnb-002", 1))]


def test_an_e2mgr_answer_that_is_not_its_api_is_retried_with_its_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([httpx.Response(200, json={"not": "a list"}),
                    httpx.Response(200, json=[])])

    async def go() -> None:
        e2mgr = E2Manager("http://e2mgr/v1", transport=httpx.MockTransport(
            lambda request: next(answers)))
        assert (await e2mgr.listing([MEASUREMENT], retry_max_s=0.0)).nodes == {}
        await e2mgr.close()

    with caplog.at_level(logging.WARNING, logger="kpi_forecast.xapp.ric.e2.discovery"):
        asyncio.run(go())
    assert "e2: E2 Manager at http://e2mgr/v1: ValidationError: " in caplog.text


# --- the published contracts ------------------------------------------------------------------


def test_the_mock_e2mgr_answers_as_its_api_document_says(panel) -> None:
    node = mock(panel)
    node.disconnect("gnb-002")

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(node)),
                                     base_url="http://e2mgr") as client:
            states = await client.get("/v1/nodeb/states")
            oran_api.answer(oran_api.E2MGR, "/nodeb/states", "get", 200).validate(
                states.json())
            assert {s["connectionStatus"] for s in states.json()} == {"CONNECTED",
                                                                     "DISCONNECTED"}
            for state in states.json():
                found = await client.get(f"/v1/nodeb/{state['inventoryName']}")
                oran_api.answer(oran_api.E2MGR, "/nodeb/{ranName}", "get", 200).validate(
                    found.json())
            missing = await client.get("/v1/nodeb/gnb-999")
            assert missing.headers["content-type"] in oran_api.documented_media_types(
                oran_api.E2MGR, "/nodeb/{ranName}", "get", 404)
            oran_api.answer(oran_api.E2MGR, "/nodeb/{ranName}", "get", 404,
                            as_run=True).validate(missing.json())
            # An operator's PUT of a gNB's served cells: the request as the document has it,
            # the node answered with them; a request without cells is a 400.
            cells = (await client.get("/v1/nodeb/gnb-000")).json()["gnb"]["servedNrCells"]
            put = {"servedNrCells": cells[:1]}
            oran_api.request_body(oran_api.E2MGR, "/nodeb/gnb/{ranName}", "put").validate(put)
            updated = await client.put("/v1/nodeb/gnb/gnb-001", json=put)
            assert updated.status_code == 200
            oran_api.answer(oran_api.E2MGR, "/nodeb/gnb/{ranName}", "put", 200).validate(
                updated.json())
            assert updated.json()["gnb"]["servedNrCells"] == cells[:1]
            refused = await client.put("/v1/nodeb/gnb/gnb-001", json={"servedNrCells": []})
            assert refused.status_code == 400
            oran_api.answer(oran_api.E2MGR, "/nodeb/gnb/{ranName}", "put", 400,
                            as_run=True).validate(refused.json())

    asyncio.run(go())


def test_the_xapps_subscription_and_the_mocks_answers_follow_the_submgr_api(panel) -> None:
    """What the xApp sends follows the published document; what the mock answers follows
    the document where submgr's source does (``oran_api.AS_RUN``: its nulls), and its
    source where the document says otherwise (a node that is not connected: 503; deleting an
    unknown id: 204)."""
    node = mock(panel)
    posted: list[dict] = []

    def outcome(request: httpx.Request) -> httpx.Response:
        posted.append(json.loads(request.content))
        return httpx.Response(200, json={})

    async def go() -> None:
        submgr = MockSubmgr(node, notify_transport=httpx.MockTransport(outcome))
        app = create_app(node, submgr)
        found, _ = subscribable(nodeb(node), [MEASUREMENT])
        subscriber = Subscriber("http://submgr/ric/v1", "127.0.0.1", 4560, 8080,
                                ingestor=None, metrics=None)
        body = subscriber._request(found, 3_600_000)
        params = oran_api.request_body(oran_api.SUBMGR, "/subscriptions", "post")
        params.validate(body)
        assert body["RANFunctionID"] == RAN_FUNCTION_ID
        assert [d["XappEventInstanceId"] for d in body["SubscriptionDetails"]] == [1, 2]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://submgr") as client:
            created = await client.post("/ric/v1/subscriptions", json=body)
            assert created.status_code == 201
            assert created.json()["SubscriptionInstances"] is None
            assert not oran_api.answer(oran_api.SUBMGR, "/subscriptions", "post", 201
                                       ).is_valid(created.json())  # the document's miss
            oran_api.answer(oran_api.SUBMGR, "/subscriptions", "post", 201,
                            as_run=True).validate(created.json())
            for request, status in (
                    ({**body, "Meid": "gnb-999"}, 503),  # no E2 connection
                    ({k: v for k, v in body.items() if k != "Meid"}, 400)):  # not the API's
                assert (await client.post("/ric/v1/subscriptions", json=request)
                        ).status_code == status
                oran_api.answer(oran_api.SUBMGR, "/subscriptions", "post", status)
            wrong = copy.deepcopy(body)
            wrong["SubscriptionDetails"][0]["ActionToBeSetupList"][0]["ActionType"] = "watch"
            assert not params.is_valid(wrong)  # the document's enum, which the mock reads too
            assert (await client.post("/ric/v1/subscriptions", json=wrong)).status_code == 400
            await until_async(lambda: len(posted) == 2, 10, "both cells' outcomes posted")
            subscription = created.json()["SubscriptionId"]
            assert [p["SubscriptionId"] for p in posted] == [subscription] * 2
            assert [p["SubscriptionInstances"][0]["E2EventInstanceId"] for p in posted] == [1, 2]
            listed = await client.get("/ric/v1/subscriptions")
            oran_api.answer(oran_api.SUBMGR, "/subscriptions", "get", 200,
                            as_run=True).validate(listed.json())
            assert sorted((s["SubscriptionId"], s["Meid"], s["ClientEndpoint"])
                          for s in listed.json()) == [
                (1, "gnb-000", ["127.0.0.1:4560"]), (2, "gnb-000", ["127.0.0.1:4560"])]
            for _ in range(2):  # then it is gone, and submgr says 204 all the same
                deleted = await client.delete(f"/ric/v1/subscriptions/{subscription}")
                assert deleted.status_code == 204
                oran_api.answer(oran_api.SUBMGR, "/subscriptions/{subscriptionId}", "delete",
                                204)
            assert (await client.get("/ric/v1/subscriptions")).json() == []
        await submgr.close()
        await node.close()
        await subscriber.close()

    asyncio.run(go())


@pytest.mark.slow
def test_schemathesis_finds_the_mock_true_to_the_published_documents(
        tmp_path: Path, panel, rmr_library: Path) -> None:
    """schemathesis on O-RAN SC's own documents, against the mock e2sim serves: the E2
    Manager's two reads and the subscription manager's list, subscribe and unsubscribe."""
    import os
    import subprocess

    from benchmarks.ports import free_port
    from tests.processes import BIN, answers, running

    data = tmp_path / "cells.csv"
    generate(n_cells=4, days=1, seed=0, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    e2sim = [str(BIN / "kpi-forecast"), "e2sim", "--data", str(data), "--kpi",
             f"prb_util={MEASUREMENT}", "--listen", f"127.0.0.1:{port}", "--rmr-port",
             str(free_port()), "--cells-per-node", "2"]
    reports = []
    with running(e2sim, answers(f"{url}/v1/nodeb/states"), tmp_path / "e2sim.log") as node:
        for name, base, operations in (
                (oran_api.E2MGR, f"{url}/v1", ("getNodebIdList", "getNb")),
                (oran_api.SUBMGR, f"{url}/ric/v1",
                 ("getAllSubscriptions", "Subscribe", "Unsubscribe"))):
            # The document as submgr's source answers it (its nulls); and, as its source
            # does, a subscription for a node without an E2 connection is a 503 and an
            # unsubscribe a 204 whatever the id, both without a body or a content type
            # (control.go RESTSubscriptionHandler, RESTSubscriptionDeleteHandler): those two
            # checks would fail the real submgr.
            document = oran_api.as_run_file(name, tmp_path)
            excluded = ["positive_data_acceptance"] + (
                ["not_a_server_error", "content_type_conformance"]
                if name == oran_api.SUBMGR else [])
            fuzz = [str(BIN / "schemathesis"), "run", str(document), "--url", base,
                    *[arg for op in operations for arg in ("--include-operation-id", op)],
                    "--checks", "all", "--exclude-checks", ",".join(excluded),
                    "--max-examples", "50", "--seed", "0", "--generation-database", "none",
                    "--no-color"]
            done = subprocess.run(fuzz, cwd=tmp_path, env=dict(os.environ),
                                  capture_output=True, text=True, timeout=300)
            reports.append(done.stdout + done.stderr)
            assert done.returncode == 0, reports[-1][-6000:]
            summary = reports[-1][reports[-1].rindex("SUMMARY"):]
            assert "Failures:" not in summary and "Errors:" not in summary, summary
        assert "Traceback" not in node.log, node.log[-6000:]


def test_a_node_is_asked_for_the_measurements_it_can_give_each_kpi_by(panel) -> None:
    """prb_util from RRU.PrbTotDl where the node reports it, else from the PRBs used and
    available; a node with neither is not subscribed to for it."""
    from kpi_forecast.xapp.descriptor.controls import DEFAULT_KPIS

    wanted = [DEFAULT_KPIS["prb_util"].options(), DEFAULT_KPIS["traffic_mb"].options()]
    asked = {}
    for name, extra in (("total", ["RRU.PrbTotDl", "RRU.PrbUsedDl", "RRU.PrbAvailDl"]),
                        ("used-and-available", ["RRU.PrbUsedDl", "RRU.PrbAvailDl"]),
                        ("used", ["RRU.PrbUsedDl"])):
        node = MockE2Node(panel, "DRB.PdcpSduVolumeDL", Recorded(), cells_per_node=2, end=1,
                          extra={m: panel.values for m in extra})
        found, _ = subscribable(nodeb(node), wanted)
        asked[name] = found.measurements
    assert asked == {"total": ("RRU.PrbTotDl", "DRB.PdcpSduVolumeDL"),
                     "used-and-available": ("RRU.PrbUsedDl", "RRU.PrbAvailDl",
                                            "DRB.PdcpSduVolumeDL"),
                     "used": ("DRB.PdcpSduVolumeDL",)}
    node = MockE2Node(panel, "RRU.PrbUsedDl", Recorded(), cells_per_node=2, end=1)
    assert subscribable(nodeb(node), wanted[:1]) == (
        None, Counter({"measurement-not-reported": 2}))
    assert describe_wanted(wanted) == (
        "RRU.PrbTotDl or RRU.PrbUsedDl with RRU.PrbAvailDl, DRB.PdcpSduVolumeDL")

"""The mock E2 node replays a KPI file into a running xApp, which finds the node's cells at the
mock E2 Manager and subscribes at the mock subscription manager, the messages going through
librmr as on a RIC."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import uvicorn

from benchmarks.ports import free_port
from kpi_forecast.cli.mock_e2_node import RAN_FUNCTION_ID, MockE2Node
from kpi_forecast.cli.mock_ric import create_app
from kpi_forecast.cli.mock_submgr import RIC_REQUESTOR_ID, MockSubmgr
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import generate
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.xapp.descriptor.controls import KpiSource
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2 import e2ap, kpm, kpm_indication
from kpi_forecast.xapp.ric.e2.discovery import parse_cell_id
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.e2.submgr_api import SubscriptionDetail
from kpi_forecast.xapp.ric.transport import RIC_INDICATION, RIC_SUB_FAILURE, RIC_SUB_RESP, Frame
from kpi_forecast.xapp.store.cell_history import MemoryCellHistory
from tests.processes import ROOT
from tests.rmr_library import rmr_transport
from tests.tolerance import answer_tolerance
from tests.waiting import until_async
from tests.xapp_helpers import (
    CONTEXT,
    HORIZON,
    descriptor,
    make_model,
    make_repository,
    running,
    serving_state,
)

MEASUREMENT = "RRU.PrbUsedDl"
VOLUME = "DRB.PdcpSduVolumeDL"
SERVER_START_S = 10.0


def one_cell_two_days(tmp_path: Path) -> Path:
    """A small complete file: one cell, 48 hourly steps, no gaps."""
    data = tmp_path / "cells.csv"
    generate(n_cells=1, days=2, seed=0, start="2024-03-04", tz="UTC",
             missing=False).to_csv(data, index=False)
    return data



async def serve_node(node: MockE2Node, port: int, submgr: MockSubmgr
                     ) -> tuple[uvicorn.Server, asyncio.Task]:
    """The mock's REST side (E2 Manager, subscription manager) served on ``port``; set the
    server's should_exit and await the task to stop it (its lifespan closes the node)."""
    server = uvicorn.Server(uvicorn.Config(create_app(node, submgr), host="127.0.0.1",
                                           port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    await until_async(lambda: server.started, SERVER_START_S, "the mock's REST side started")
    return server, serving


def subscribe_first_cell(node: MockE2Node, rmr_port: int,
                         measurements: tuple[str, ...] = (MEASUREMENT,),
                         period_ms: int = 3_600_000, instance_id: int = 5) -> Frame:
    """Subscribe, as the subscription manager would for an xApp at 127.0.0.1:``rmr_port``, to
    the first cell of the first node (hourly reports unless told): the node's E2AP answer;
    an admitted cell's reports start at once."""
    definition = kpm.encode_action_definition(kpm.ActionDefinition(
        list(measurements), period_ms, parse_cell_id(node.cell_ids[0])))
    detail = SubscriptionDetail.model_validate({
        "XappEventInstanceId": 1, "EventTriggers": list(kpm.encode_event_trigger(period_ms)),
        "ActionToBeSetupList": [{"ActionID": 1, "ActionType": "report",
                                 "ActionDefinition": list(definition)}]})
    answer = node.request("gnb-000", RIC_REQUESTOR_ID, instance_id, RAN_FUNCTION_ID, detail,
                          f"127.0.0.1:{rmr_port}")
    node.start_reports("gnb-000", [instance_id])
    return answer


@pytest.mark.slow
def test_replayed_cells_forecast_like_their_file(tmp_path: Path, rmr_library: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    data = tmp_path / "cells.csv"
    generate(n_cells=4, days=9, seed=1, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    panel = load_panel(data, "prb_util")
    port = free_port()

    async def go() -> None:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(), cells_per_node=2, speed=0.0,
                          faults={"malformed": 0.05, "duplicate": 0.05, "late": 0.05}, seed=0)
        # Lost reports would leave gaps the direct forecast does not have: tested on their own.
        submgr = MockSubmgr(node)
        server, serving = await serve_node(node, port, submgr)
        # The model's own calibration: the comparison below is of the history E2 delivered
        # against the same values sent directly, and a background recalibration (tested on
        # its own) would blend each with naives of its own length, landing whenever it lands.
        desc = descriptor(tmp_path, model_dir, e2={
            "enabled": True, "port": free_port(), "submgrUrl": f"http://127.0.0.1:{port}/ric/v1",
            "e2mgrUrl": f"http://127.0.0.1:{port}/v1",
            "kpis": {"kpi": {"measurement": MEASUREMENT}}},
            recalibration={"everySeconds": 0, "maxCells": 256})
        async with running(desc, submgr=submgr) as client:
            for _ in range(1000):
                if node.sent["replays_done"] == 2:
                    break
                await asyncio.sleep(0.02)
            assert node.sent["replays_done"] == 2, node.sent
            taken = node.sent["indications"] + node.sent["duplicates"]
            for _ in range(200):
                metrics = (await client.get("/ric/v1/metrics")).text
                if f"kpi_forecast_e2_indications_total {taken}.0" in metrics:
                    break
                await asyncio.sleep(0.02)
            assert f"kpi_forecast_e2_indications_total {taken}.0" in metrics
            rejected = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                           if line.startswith("kpi_forecast_e2_indications_rejected_total"))
            assert rejected == node.sent["malformed"] > 0
            assert node.sent["late"] > 0 and node.sent["duplicates"] > 0

            for row, cell in enumerate(node.cell_ids):  # named as e2mgr names them
                from_e2 = (await client.get(f"/v1/cells/{cell}/forecast")).json()
                history = panel.values[row, -CONTEXT:]
                direct = (await client.post("/v1/forecast", json={
                    "cell_id": cell, "start": panel.index[-CONTEXT].isoformat(), "freq": "1h",
                    "values": [None if np.isnan(v) else float(v) for v in history]})).json()
                assert from_e2["source"] == direct["source"] == "model"
                within = answer_tolerance(ModelConfig(CONTEXT, HORIZON), np.nanmax(history))
                for a, b in zip(from_e2["forecasts"], direct["forecasts"], strict=True):
                    for q in ("p10", "p50", "p90"):
                        assert a[q] == pytest.approx(b[q], abs=within)
        assert submgr.counts["deletions"] == 2  # the xApp unsubscribed on shutdown
        assert node.sent["undelivered"] == 0
        server.should_exit = True
        await serving  # its lifespan closes the node

    asyncio.run(go())


@pytest.mark.slow
def test_one_subscription_per_node_fills_the_history_of_every_models_kpi(
        tmp_path: Path, rmr_library: Path) -> None:
    """A repository of two models, each of a KPI behind its own measurement: one subscription
    per node asks for both, and each report's measurements land in their KPI's history."""
    repository = make_repository(tmp_path / "models", {"prb": "prb_util", "traffic": "traffic_mb"})
    data = tmp_path / "cells.csv"
    generate(n_cells=4, days=9, seed=2, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    prb, traffic = load_panel(data, "prb_util"), load_panel(data, "traffic_mb")
    port = free_port()

    async def go() -> None:
        node = MockE2Node(prb, MEASUREMENT, rmr_transport(), cells_per_node=2, speed=0.0,
                          extra={VOLUME: traffic.values})
        submgr = MockSubmgr(node)
        server, serving = await serve_node(node, port, submgr)
        desc = descriptor(tmp_path, None, modelRepository=str(repository), e2={
            "enabled": True, "port": free_port(), "submgrUrl": f"http://127.0.0.1:{port}/ric/v1",
            "e2mgrUrl": f"http://127.0.0.1:{port}/v1",
            "kpis": {"prb_util": {"measurement": MEASUREMENT},
                     "traffic_mb": {"measurement": VOLUME, "aggregate": "sum"}}},
            recalibration={"everySeconds": 0, "maxCells": 256})
        async with running(desc, submgr=submgr) as client:
            await until_async(lambda: node.sent["replays_done"] == 2, 60, "the replays")
            assert submgr.counts["subscriptions"] == 2  # one per node, for both models
            assert {tuple(sorted(s.measurements)) for s in node.streams.values()} == {
                (VOLUME, MEASUREMENT)}
            for _ in range(200):
                metrics = (await client.get("/ric/v1/metrics")).text
                if metric(metrics, "kpi_forecast_e2_indications_total") == node.sent[
                        "indications"]:
                    break
                await asyncio.sleep(0.02)
            assert metric(metrics, "kpi_forecast_e2_indications_total") == node.sent[
                "indications"]
            for name, panel in (("prb", prb), ("traffic", traffic)):
                held = (await client.get(f"/v1/models/{name}/cells")).json()
                assert held["count"] == 4
                for row, cell in enumerate(node.cell_ids):
                    from_e2 = (await client.get(f"/v1/models/{name}/cells/{cell}/forecast"))
                    history = panel.values[row, -CONTEXT:]
                    direct = (await client.post(f"/v1/models/{name}/forecast", json={
                        "cell_id": cell, "start": panel.index[-CONTEXT].isoformat(),
                        "freq": "1h",
                        "values": [None if np.isnan(v) else float(v) for v in history]}))
                    within = answer_tolerance(ModelConfig(CONTEXT, HORIZON), np.nanmax(history))
                    for a, b in zip(from_e2.json()["forecasts"], direct.json()["forecasts"],
                                    strict=True):
                        assert a["p50"] == pytest.approx(b["p50"], abs=within)
        server.should_exit = True
        await serving

    asyncio.run(go())


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.slow
@pytest.mark.parametrize(("measurement", "subscribed"), [(MEASUREMENT, True),
                                                         ("DRB.UEThpDl", False)])
def test_nodes_that_disconnect_and_connect_again_are_followed(
        tmp_path: Path, rmr_library: Path, measurement: str, subscribed: bool) -> None:
    """A node whose E2 connection drops is given up; once e2mgr lists it connected again it
    is subscribed to again. Nodes that do not report the model's measurement are counted."""
    model_dir = make_model(tmp_path / "model")
    data = tmp_path / "cells.csv"
    generate(n_cells=4, days=2, seed=1, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    port = free_port()

    async def go() -> None:
        node = MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, rmr_transport(),
                          cells_per_node=2, speed=1.0)  # real time: the replays go on
        submgr = MockSubmgr(node)
        server, serving = await serve_node(node, port, submgr)
        desc = descriptor(tmp_path, model_dir, e2={
            "enabled": True, "port": free_port(), "submgrUrl": f"http://127.0.0.1:{port}/ric/v1",
            "e2mgrUrl": f"http://127.0.0.1:{port}/v1", "kpis": {"kpi": {"measurement":
                                                                         measurement}}})

        async with running(desc, submgr=submgr) as client:
            async def owned(expected: float) -> str:
                for _ in range(600):
                    text = (await client.get("/ric/v1/metrics")).text
                    if metric(text, "kpi_forecast_e2_nodes_owned") == expected:
                        return text
                    await asyncio.sleep(0.02)
                raise AssertionError(f"never {expected} nodes owned: {text[-3000:]}")

            if not subscribed:
                # The round that read the node's cells has counted them skipped: none is
                # ever subscribed to.
                for _ in range(600):
                    text = (await client.get("/ric/v1/metrics")).text
                    if metric(text, 'kpi_forecast_e2_cells_skipped{reason='
                              '"measurement-not-reported"}') == 4:
                        break
                    await asyncio.sleep(0.02)
                text = await owned(0)
                assert metric(text, 'kpi_forecast_e2_cells_skipped{reason='
                              '"measurement-not-reported"}') == 4
                assert submgr.subscribers() == {} and submgr.counts["subscriptions"] == 0
            else:
                text = await owned(2)
                assert metric(text, 'kpi_forecast_e2_cells_skipped{reason='
                              '"measurement-not-reported"}') == 0
                submgr.disconnect("gnb-001")
                await owned(1)
                assert sorted(submgr.subscribers()) == ["gnb-000"]  # gnb-001's deleted
                node.connect("gnb-001")
                await owned(2)
                assert sorted(submgr.subscribers()) == ["gnb-000", "gnb-001"]
                assert submgr.counts["subscriptions"] == 3  # each made once
        server.should_exit = True
        await serving

    asyncio.run(go())


def test_e2sim_command_serves_the_node_inventory(tmp_path: Path, rmr_library: Path) -> None:

    data = tmp_path / "cells.csv"
    generate(n_cells=3, days=2, seed=0, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    root = Path(__file__).resolve().parents[1]
    bad = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", str(data),
                          "--kpi", "prb_util"], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 2 and "COLUMN=MEASUREMENT" in bad.stderr
    assert "Traceback" not in bad.stderr
    for source, cells in ((str(data), [2, 1]), ("synthetic", [2, 2, 1])):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", source, "--kpi",
             f"prb_util={MEASUREMENT}", "--kpi", "dl_throughput_mbps=DRB.UEThpDl",
             "--listen", f"127.0.0.1:{port}", "--rmr-port", str(free_port()),
             "--cells-per-node", "2", "--cells", "5"],
            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(400):
                try:
                    states = httpx.get(f"http://127.0.0.1:{port}/v1/nodeb/states").json()
                    break
                except httpx.TransportError:
                    assert process.poll() is None, process.communicate()[1][-3000:]
                    time.sleep(0.05)
            nodes = [httpx.get(f"http://127.0.0.1:{port}/v1/nodeb/{s['inventoryName']}").json()
                     for s in states]
            served = [n["gnb"]["servedNrCells"] for n in nodes]
            assert [len(cells) for cells in served] == cells
            assert states[0] == {"inventoryName": "gnb-000", "connectionStatus": "CONNECTED",
                                 "globalNbId": {"plmnId": "00f110", "nbId": "00000000"}}
            assert served[0][1]["servedNrCellInformation"]["cellId"] == "00f110:0000000010"
        finally:
            process.terminate()
            process.wait(10)


def receiver(port: int, out: Path) -> subprocess.Popen:
    """An RMR endpoint in a process of its own, writing what it receives to ``out``."""
    process = subprocess.Popen([sys.executable, "-m", "tests.rmr_receiver", str(port)],
                               cwd=ROOT, stdout=out.open("w"), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while "ready" not in out.read_text():
        assert process.poll() is None and time.monotonic() < deadline, "no RMR receiver"
        time.sleep(0.02)
    return process


def sequence_numbers(out: Path) -> list[int]:
    return [int(line) for line in out.read_text().split() if line.isdigit()]


def test_an_xapp_restarted_mid_replay_misses_only_what_was_sent_while_it_was_down(
        tmp_path: Path, rmr_library: Path) -> None:
    """The RMR-level fault: the xApp's process dies mid-replay and a new one comes up on the
    same port. What the node could not send meanwhile is dropped and counted, as an E2
    termination does; once the endpoint is back, every report arrives."""
    data = tmp_path / "cells.csv"
    generate(n_cells=1, days=10, seed=0, start="2024-03-04", tz="UTC",
             missing=False).to_csv(data, index=False)
    panel = load_panel(data, "prb_util")
    port = free_port()
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"

    async def go() -> MockE2Node:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(), pace_ms=5.0)
        await node.open()
        xapp = await asyncio.to_thread(receiver, port, first)
        subscribe_first_cell(node, port)
        replay_s = 3 * panel.n_steps * 0.005 + 10  # paced 5 ms a report, room for a busy box
        await until_async(lambda: len(sequence_numbers(first)) >= 40, replay_s, "40 received")
        xapp.kill()  # the xApp dies mid-replay...
        await asyncio.to_thread(xapp.wait)
        await until_async(lambda: node.sent["undelivered"] >= 10, replay_s, "10 undelivered")
        xapp = await asyncio.to_thread(receiver, port, second)  # ...and comes back
        await until_async(lambda: node.sent["replays_done"] >= 1, replay_s, "the replay done")
        deadline = time.monotonic() + 10  # all sent: what is on its way lands at once
        while (sequence_numbers(second) or [-1])[-1] < panel.n_steps - 1:
            assert time.monotonic() < deadline, sequence_numbers(second)[-5:]
            await asyncio.sleep(0.01)
        xapp.kill()
        await asyncio.to_thread(xapp.wait)
        await node.close()
        return node

    node = asyncio.run(go())
    before, after = sequence_numbers(first), sequence_numbers(second)
    assert before == list(range(len(before)))
    # After the reconnect nothing is lost: every report from the first one it got.
    assert after and after == list(range(after[0], panel.n_steps)), after
    # Before it, what was sent while the endpoint was down is counted; what its socket held
    # when the process died is gone without a trace at the sender, as with TCP.
    assert 10 <= node.sent["undelivered"] <= after[0] - len(before)
    assert node.sent["indications"] + node.sent["undelivered"] == panel.n_steps


def test_lost_reports_leave_gaps_in_the_history(tmp_path: Path, rmr_library: Path) -> None:
    data = one_cell_two_days(tmp_path)
    panel = load_panel(data, "prb_util")

    async def go() -> None:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(), faults={"gap": 0.3}, seed=1)
        await node.open()
        store = MemoryCellHistory("1h", length=48)
        source = KpiSource(measurement=MEASUREMENT)
        metrics = Metrics([0.1], 8)
        ingestor = Ingestor(serving_state(store, source), metrics)
        writer = asyncio.create_task(ingestor.run())
        xapp = rmr_transport()
        await xapp.start(ingestor.handle)
        cell = node.cell_ids[0]
        assert subscribe_first_cell(node, xapp.port, instance_id=7).msg_type == RIC_SUB_RESP
        ingestor.add_route(7, 1, Route(cell, 3_600_000))
        await until_async(lambda: node.sent["replays_done"] >= 1, 10, "the replay done")
        # Everything sent has been written.
        await until_async(lambda: metrics.registry.get_sample_value(
            "kpi_forecast_e2_indications_total") >= node.sent["indications"], 10,
            "every indication sent written")
        await ingestor.flush()
        writer.cancel()
        held = ~np.isnan((await store.window(cell))[0])
        assert node.sent["gaps"] > 0
        assert held.sum() == node.sent["indications"] == 48 - node.sent["gaps"]
        await xapp.close()
        await node.close()

    asyncio.run(go())


def test_live_mode_catches_up_on_the_past_at_its_rate_then_paces(tmp_path: Path,
                                                                 rmr_library: Path) -> None:
    data = one_cell_two_days(tmp_path)

    async def go() -> None:
        # 40 of 48 hours are the past, caught up on at 200 reports a second; the last 8 go
        # out one every 50 ms (72000x real time).
        node = MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, rmr_transport(),
                          speed=72_000.0, live_from=40, catch_up_rate=200.0)
        await node.open()
        arrivals: list[float] = []

        async def stamp(frame: Frame) -> None:
            arrivals.append(time.monotonic())

        xapp = rmr_transport()
        await xapp.start(stamp)
        started = time.monotonic()
        subscribe_first_cell(node, xapp.port)
        await until_async(lambda: node.sent["replays_done"] >= 1, 30, "the replay done")
        await until_async(lambda: len(arrivals) >= 48, 10, "48 reports")
        reports = [t - started for t in arrivals]
        assert len(reports) == 48
        # Bounds from here, not between arrivals, which carry each report's delivery jitter:
        # the node's first turn comes after the subscription, so the 40th report leaves no
        # sooner than 39 turns of 5 ms after it, and the last 7 pauses of 50 ms later (an
        # asyncio timer may fire up to the clock's resolution early).
        early = time.get_clock_info("monotonic").resolution
        assert reports[39] >= 39 / 200.0 - early
        assert reports[0] < reports[39] / 2  # the first at once, not after a turn
        assert reports[-1] >= 39 / 200.0 + 7 * 0.05 - 8 * early
        await xapp.close()
        await node.close()

    asyncio.run(go())


def test_on_the_wall_clock_each_report_goes_out_as_its_period_ends(tmp_path: Path,
                                                                   rmr_library: Path) -> None:
    """As a live node: a subscription's first report is the period that ends next (nothing
    from before it), and each report leaves when its one-second period ends."""
    now = pd.Timestamp.now(tz="UTC").floor("s")
    data = tmp_path / "seconds.csv"
    times = pd.date_range(now - pd.Timedelta("20s"), periods=60, freq="1s")
    pd.DataFrame({"timestamp": times, "cell_id": "cell-000",
                  "prb_util": np.arange(60, dtype=float)}).to_csv(data, index=False)

    async def go() -> None:
        node = MockE2Node(load_panel(data, "prb_util"), MEASUREMENT, rmr_transport(),
                          wall_clock=True)
        await node.open()
        reports: list[tuple[int, float]] = []  # (collection start, UNIX s), arrival

        async def stamp(frame: Frame) -> None:
            if frame.msg_type == RIC_INDICATION:
                pdu = e2ap.decode(frame.payload)
                reports.append((kpm_indication.decode_header_us(pdu.header), time.time()))

        xapp = rmr_transport()
        await xapp.start(stamp)
        subscribed = time.time()
        subscribe_first_cell(node, xapp.port, period_ms=1000)
        async with asyncio.timeout(10):  # three one-second periods, then some
            while len(reports) < 3:
                await asyncio.sleep(0.01)
        await xapp.close()
        await node.close()
        starts = [start_us / 1e6 for start_us, _ in reports]
        assert subscribed - 1 <= starts[0] <= subscribed + 1e-6  # the period under way
        assert np.diff(starts).tolist() == [1.0, 1.0]
        for start, arrived in zip(starts, (at for _, at in reports), strict=True):
            assert start + 1 <= arrived + 0.002  # not before its period ends (clock rounding)

    asyncio.run(go())


def test_a_node_with_several_kpis_reports_what_was_subscribed(tmp_path: Path,
                                                              rmr_library: Path) -> None:
    data = one_cell_two_days(tmp_path)
    panel = load_panel(data, "prb_util")
    throughput = load_panel(data, "dl_throughput_mbps").values

    async def go() -> None:
        node = MockE2Node(panel, MEASUREMENT, rmr_transport(),
                          extra={"DRB.UEThpDl": throughput}, end=2)
        await node.open()
        frames: list[Frame] = []

        async def keep(frame: Frame) -> None:
            frames.append(frame)

        xapp = rmr_transport()
        await xapp.start(keep)
        subscribe_first_cell(node, xapp.port, ("DRB.UEThpDl", MEASUREMENT))
        refused = subscribe_first_cell(node, xapp.port, ("RRC.ConnMean",), instance_id=6)
        assert refused.msg_type == RIC_SUB_FAILURE  # not on this node
        assert e2ap.decode(refused.payload).cause == ("ricRequest", "action-not-supported")
        for _ in range(200):
            if node.sent["replays_done"] == 1 and len(frames) == 2:
                break
            await asyncio.sleep(0.01)
        indications = [e2ap.decode(f.payload) for f in frames if f.msg_type == 12050]
        message = kpm_indication.decode_indication_message(indications[0].message)
        assert [m.name for m in message.measurements] == ["DRB.UEThpDl", MEASUREMENT]
        assert message.measurements[0].values == [pytest.approx(float(throughput[0, 0]))]
        assert message.measurements[1].values == [pytest.approx(float(panel.values[0, 0]))]
        assert [f.msg_type for f in frames] == [RIC_INDICATION] * 2
        assert {i.requestor_id for i in indications} == {RIC_REQUESTOR_ID}
        await xapp.close()
        await node.close()

    asyncio.run(go())


def test_the_mock_nodes_send_lag_is_read_over_the_seconds_asked(tmp_path: Path) -> None:
    """/stats?seconds=S: the node's own send lag over the periods of the last S seconds
    only, so that a benchmark phase is not read with the handovers before it."""
    from tests.tcp_transport import TcpTransport

    node = MockE2Node(load_panel(one_cell_two_days(tmp_path), "prb_util"), MEASUREMENT,
                      TcpTransport("127.0.0.1", 0))
    now = time.monotonic()
    node.send_lag_ms.extend([(now - 100.0, 900.0)] * 10 + [(now, 10.0)] * 10)

    async def stats(**params: float) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(node)),
                                     base_url="http://node") as client:
            return await client.get("/stats", params=params)

    recent = asyncio.run(stats(seconds=50)).json()
    assert (recent["send_lag_p50_ms"], recent["send_lag_p99_ms"]) == (10.0, 10.0)
    everything = asyncio.run(stats()).json()
    assert everything["send_lag_p99_ms"] == np.percentile([900.0] * 10 + [10.0] * 10, 99)
    assert asyncio.run(stats(seconds=0)).status_code == 400

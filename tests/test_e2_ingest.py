"""E2 ingestion into a running xApp: real E2AP/KPM messages over librmr."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.ports import free_port
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.xapp.descriptor.controls import KpiSource
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2 import e2ap, kpm, kpm_indication
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.transport import RIC_INDICATION, RIC_SUB_RESP, Frame
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable, MemoryCellHistory
from tests.rmr_library import rmr_transport
from tests.tolerance import answer_tolerance
from tests.xapp_helpers import CONTEXT, HORIZON, descriptor, make_model, running, serving_state

MEASUREMENT = "RRU.PrbUsedDl"
E2_CONTROLS = {"enabled": True, "kpis": {"kpi": {"measurement": MEASUREMENT}}}
START = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
QUARTER_MS = 15 * 60 * 1000


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("e2") / "model")


def indication(instance_id: int, action_id: int, start: dt.datetime,
               values: list[float | None], measurement: str = MEASUREMENT) -> Frame:
    header = kpm_indication.encode_indication_header(start)
    message = kpm_indication.encode_indication_message(kpm.IndicationMessage(
        [kpm.Measurement(measurement, values)], granularity_ms=QUARTER_MS))
    payload = e2ap.encode_indication(1001, instance_id, 2, action_id, None, header, message)
    return Frame(RIC_INDICATION, instance_id, payload)


def hourly_load(cells: int, hours: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    hour = np.arange(hours)
    daily = 40 + 25 * np.sin(2 * np.pi * (hour - 8) / 24)
    return np.round(np.maximum(daily + rng.normal(0, 3, (cells, hours)), 1.0), 2)


def test_replayed_reports_become_the_history_a_forecast_uses(model_dir: Path, tmp_path: Path,
                                                             rmr_library: Path) -> None:
    hours = CONTEXT
    load = hourly_load(2, hours)
    cells = ["cell-A", "cell-B"]

    async def go() -> None:
        controls = {**E2_CONTROLS, "port": free_port()}
        async with running(descriptor(tmp_path, model_dir, e2=controls)) as client:
            service = client.app.state.components
            for action, cell in enumerate(cells, start=1):
                service.ingestor.add_route(7, action, Route(cell, QUARTER_MS))
            sender = rmr_transport()
            await sender.start(lambda frame: asyncio.sleep(0))
            port = service.e2.transport.port
            frames = []
            for h in range(hours):
                for action in (1, 2):
                    v = float(load[action - 1, h])
                    # Four quarter-hour reports whose mean is the hourly value.
                    frames.append(indication(7, action, START + dt.timedelta(hours=h),
                                             [v - 1.0, v + 1.0, v - 0.5, v + 0.5]))
            frames.append(frames[10])  # a duplicate: taken, changes nothing
            frames.append(Frame(RIC_INDICATION, 7, b"\x00\x01garbage"))
            frames.append(indication(7, 99, START, [1.0]))  # no such action subscribed
            frames.append(Frame(RIC_SUB_RESP, 7, b"\x00"))  # not an indication
            frames.append(indication(7, 1, START, [-5.0]))  # not a KPI value
            for frame in frames:
                await sender.send("127.0.0.1", port, frame)
            metrics = ""
            for _ in range(200):
                metrics = (await client.get("/ric/v1/metrics")).text
                if f"kpi_forecast_e2_indications_total {2 * hours + 1}.0" in metrics and (
                        'reason="value"} 1.0' in metrics):
                    break
                await asyncio.sleep(0.02)
            await sender.close()
            assert f"kpi_forecast_e2_indications_total {2 * hours + 1}.0" in metrics
            e2_lines = [line for line in metrics.splitlines()
                        if line.startswith("kpi_forecast_e2_indications_rejected_total")]
            assert sorted(e2_lines) == sorted(
                f'kpi_forecast_e2_indications_rejected_total{{reason="{reason}"}} 1.0'
                for reason in ("e2ap", "unknown-subscription", "msg-type", "value"))

            held = (await client.get("/v1/cells")).json()
            assert {c["cell_id"]: c["steps_held"] for c in held["cells"]} == {
                "cell-A": hours, "cell-B": hours}
            for row, cell in enumerate(cells):
                from_e2 = (await client.get(f"/v1/cells/{cell}/forecast")).json()
                direct = (await client.post("/v1/forecast", json={
                    "cell_id": cell, "start": START.isoformat(), "freq": "1h",
                    "values": load[row].tolist()})).json()
                assert from_e2["source"] == direct["source"] == "model"
                assert [p["timestamp"] for p in from_e2["forecasts"]] == [
                    pd.Timestamp(p["timestamp"]).tz_convert("Europe/Paris").isoformat()
                    for p in direct["forecasts"]]
                within = answer_tolerance(ModelConfig(CONTEXT, HORIZON), np.abs(load[row]).max())
                for a, b in zip(from_e2["forecasts"], direct["forecasts"], strict=True):
                    for q in ("p10", "p50", "p90"):
                        assert a[q] == pytest.approx(b[q], abs=within), q

    asyncio.run(go())


def ingestor_with(store: MemoryCellHistory | None) -> tuple[Ingestor, Metrics]:
    """An ingestor on ``store``; without one it behaves as before any model is loaded."""
    metrics = Metrics([0.1], 8)
    source = KpiSource(measurement=MEASUREMENT, scale=2.0) if store is not None else None
    ingestor = Ingestor(serving_state(store, source), metrics)
    ingestor.add_route(1, 1, Route("c", QUARTER_MS))
    return ingestor, metrics


def rejected(metrics: Metrics, reason: str) -> float:
    return metrics.registry.get_sample_value(
        "kpi_forecast_e2_indications_rejected_total", {"reason": reason}) or 0.0


def ingest(ingestor: Ingestor, *frames: Frame, then=None) -> None:
    """Hand frames to the ingestor, wait until its writer has taken them, then run ``then``
    (a coroutine function) in the same event loop."""
    async def go() -> None:
        writer = asyncio.create_task(ingestor.run())
        for frame in frames:
            await ingestor.handle(frame)
        await ingestor.flush()
        if then is not None:
            await then()
        writer.cancel()

    asyncio.run(go())


def test_reports_are_scaled_gaps_stay_missing_and_bad_reports_are_dropped_whole() -> None:
    store = MemoryCellHistory("15min", length=8)
    ingestor, metrics = ingestor_with(store)

    async def check() -> None:
        values, last = await store.window("c")
        np.testing.assert_array_equal(values[-3:], [2.0, np.nan, 6.0])
        assert last == pd.Timestamp(START) + pd.Timedelta("30min")  # the bad one left no mark

    ingest(ingestor, indication(1, 1, START, [1.0, None, 3.0]),
           indication(1, 1, START + dt.timedelta(hours=1), [4.0, float("inf")]),
           indication(1, 1, START, [1.0], measurement="DRB.UEThpDl"), then=check)
    assert rejected(metrics, "value") == 1.0
    assert rejected(metrics, "measurement-missing") == 1.0


def test_a_flood_of_rest_written_cells_does_not_stop_e2_ingestion() -> None:
    store = MemoryCellHistory("15min", length=8, max_cells=10, max_rest_cells=5)
    ingestor, metrics = ingestor_with(store)

    async def check() -> None:
        assert (await store.window("c")) is not None  # the cell E2 reports was taken
        assert await store.count() == 6

    flood = asyncio.run(store.put_cells([(f"made-up-{i}", [(pd.Timestamp(START), 1.0)])
                                         for i in range(1000)], "rest"))
    assert sum(not isinstance(k, Exception) for k in flood) == 5
    ingest(ingestor, indication(1, 1, START, [1.0, 2.0]), then=check)
    assert metrics.registry.get_sample_value("kpi_forecast_e2_indications_total") == 1.0
    assert not [line for line in metrics.registry.collect()
                for sample in line.samples
                if sample.name == "kpi_forecast_e2_indications_rejected_total" and sample.value]


def test_before_a_model_is_loaded_reports_are_counted_not_lost_silently() -> None:
    ingestor, metrics = ingestor_with(None)
    ingest(ingestor, indication(1, 1, START, [1.0]))
    assert rejected(metrics, "not-ready") == 1.0


class CountingStore(MemoryCellHistory):
    """The in-memory store, counting the store calls and failing while ``down``."""

    def __init__(self) -> None:
        super().__init__("15min", length=96)
        self.calls: list[int] = []
        self.down = False

    async def put_checked(self, items, origin="e2"):
        if self.down:
            raise HistoryUnavailable("history store: writing failed: connection refused")
        self.calls.append(len(items))
        return await super().put_checked(items, origin)


def test_queued_indications_go_to_the_store_in_batches_and_an_outage_drops_only_its_own() -> None:
    store = CountingStore()
    ingestor, metrics = ingestor_with(store)
    frames = [indication(1, 1, START + dt.timedelta(minutes=15 * k), [float(k)])
              for k in range(40)]

    async def outage_then_back() -> None:
        store.down = True
        for frame in frames[:5]:  # replays of reports already held
            await ingestor.handle(frame)
        await ingestor.flush()
        store.down = False
        await ingestor.handle(indication(1, 1, START + dt.timedelta(minutes=15 * 40), [40.0]))
        await ingestor.flush()

    ingest(ingestor, *frames, then=outage_then_back)
    # Decoding never waits on the store: the 40 queued frames took a few calls, not 40.
    assert sum(store.calls[:-1]) == 40 and len(store.calls) < 40
    assert rejected(metrics, "history-store") == 5.0
    total = metrics.registry.get_sample_value("kpi_forecast_e2_indications_total")
    assert total == 41.0
    values, _ = asyncio.run(store.window("c"))
    np.testing.assert_array_equal(values[-41:], np.arange(41) * 2.0)  # scale 2


def test_each_ingested_report_counts_its_lag_from_the_end_of_its_last_period() -> None:
    store = MemoryCellHistory("15min", length=8)
    ingestor, metrics = ingestor_with(store)
    # Three quarters that ended 15 minutes ago (whole seconds: what any header form holds).
    made = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
    before = time.time()
    ingest(ingestor, indication(1, 1, made, [1.0, None, 3.0]),
           indication(1, 1, made, [2.0, float("inf")]))  # dropped: no lag of its own
    after = time.time()
    ended = (made + dt.timedelta(minutes=45)).timestamp()
    sample = metrics.registry.get_sample_value
    assert sample("kpi_forecast_e2_ingest_lag_seconds_count") == 1.0
    assert before - ended <= sample("kpi_forecast_e2_ingest_lag_seconds_sum") <= after - ended
    assert sample("kpi_forecast_e2_ingest_lag_seconds_bucket", {"le": "900.0"}) == 0.0
    assert sample("kpi_forecast_e2_ingest_lag_seconds_bucket", {"le": "3600.0"}) == 1.0


def test_a_report_delivered_twice_is_kept_once_and_the_repeat_counted() -> None:
    """After a handover both owners may have had a period's report: one copy is kept, the
    other shows in the not-kept count (and so does a report older than the window)."""
    store = MemoryCellHistory("15min", length=8)
    ingestor, metrics = ingestor_with(store)
    twice = indication(1, 1, START + dt.timedelta(hours=3), [1.0, 2.0])
    too_old = indication(1, 1, START, [9.0])  # three hours before: 12 steps, the window is 8
    ingest(ingestor, twice, twice, too_old)
    sample = metrics.registry.get_sample_value
    assert sample("kpi_forecast_e2_indications_total") == 3.0
    assert sample("kpi_forecast_e2_reports_not_kept_total") == 3.0  # 2 repeats + 1 too old
    values, _ = asyncio.run(store.window("c"))
    np.testing.assert_array_equal(values[-2:], [2.0, 4.0])  # scale 2, once each


def reports(start: dt.datetime, **measurements: list[float | None]) -> Frame:
    """One indication carrying several measurements, by name."""
    header = kpm_indication.encode_indication_header(start)
    message = kpm_indication.encode_indication_message(kpm.IndicationMessage(
        [kpm.Measurement(name, values) for name, values in measurements.items()],
        granularity_ms=QUARTER_MS))
    return Frame(RIC_INDICATION, 1, e2ap.encode_indication(123, 1, 2, 1, None, header, message))


def test_prb_utilisation_is_taken_as_a_percentage_or_worked_out_from_prbs_used_and_available(
        ) -> None:
    """prb_util is TS 28.552's Total DL PRB Usage (RRU.PrbTotDl, a percentage); a node that
    reports only the mean PRBs used and available gives it as 100 x used / available, per
    period (no value where either has none or none are available)."""
    from kpi_forecast.xapp.descriptor.controls import DEFAULT_KPIS

    store = MemoryCellHistory("15min", length=16)
    metrics = Metrics([0.1], 8)
    ingestor = Ingestor(serving_state(store, DEFAULT_KPIS["prb_util"]), metrics)
    ingestor.add_route(1, 1, Route("c", QUARTER_MS))
    ingest(ingestor,
           reports(START, **{"RRU.PrbTotDl": [40.0, 41.5]}),
           reports(START + dt.timedelta(minutes=30), **{
               "RRU.PrbUsedDl": [53.0, None, 20.0, 7.0],
               "RRU.PrbAvailDl": [106.0, 106.0, 0.0, 273.0]}),
           # Both: the percentage the node reports is taken, not the ratio.
           reports(START + dt.timedelta(minutes=90), **{
               "RRU.PrbTotDl": [12.0], "RRU.PrbUsedDl": [99.0], "RRU.PrbAvailDl": [100.0]}),
           # PRBs used alone: nothing to work it out from.
           reports(START + dt.timedelta(minutes=105), **{"RRU.PrbUsedDl": [5.0]}))
    values, _ = asyncio.run(store.window("c"))
    np.testing.assert_allclose(values[-7:], [40.0, 41.5, 50.0, np.nan, np.nan,
                                             100 * 7.0 / 273.0, 12.0],
                               rtol=np.finfo(np.float32).eps)  # the history keeps float32
    assert rejected(metrics, "measurement-missing") == 1.0

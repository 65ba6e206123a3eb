"""KPI history read from the RIC's InfluxDB (a real influxd, 1.x): the same panel as the file
it was written from, whether the cell is a field (as ric-app-qp writes it) or a tag (as the
Viavi RIC tester does); the CLI's commands take it as --data; a source that cannot be read is
one line naming host, database and measurement (train's, which reads --data as every command
does: ``ingest.load_panel``)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.data.ingest import load_panel
from tests.influx_server import influx_server, query, write_rows
from tests.xapp_helpers import descriptor, make_model, running

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample" / "cells_hourly.csv.gz"
BIN = Path(sys.executable).parent
DATABASE = "RIC-Test"
LAYOUTS = {"field": "CellReports", "tag": "ViaviCellReports"}  # measurement per cell layout


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory):
    """An influxd holding the sample twice, the cell as a field and as a tag; and, per
    layout, a Parquet file of the rows as written."""
    frame = pd.read_csv(SAMPLE)
    directory = tmp_path_factory.mktemp("influx")
    with influx_server(directory) as port:
        files = {}
        for cell_as, measurement in LAYOUTS.items():
            files[cell_as] = directory / f"{cell_as}.parquet"
            write_rows(port, DATABASE, measurement, frame, "nrCellIdentity",
                       cell_as).to_parquet(files[cell_as])
        yield port, files


@pytest.fixture(scope="module")
def influx(written) -> int:
    return written[0]


def source(port: int, measurement: str = "CellReports", cell: str = "nrCellIdentity") -> str:
    return f"influx://127.0.0.1:{port}/{DATABASE}?measurement={measurement}&cell={cell}"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kpi-forecast"), *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("cell_as", LAYOUTS)
def test_a_measurement_reads_as_a_file_of_the_rows_written(written, cell_as: str) -> None:
    port, files = written
    from_file = load_panel(files[cell_as], "traffic_mb")
    from_influx = load_panel(source(port, LAYOUTS[cell_as]), "traffic_mb")
    assert from_influx.cell_ids == from_file.cell_ids
    assert from_influx.freq == from_file.freq
    assert from_influx.index.equals(from_file.index)
    np.testing.assert_array_equal(from_influx.values, from_file.values)
    assert from_influx.log == from_file.log


def test_predict_from_influx_answers_as_from_the_file(influx: int, tmp_path: Path) -> None:
    model = make_model(tmp_path / "model", target="traffic_mb")
    outputs = []
    for data in (str(SAMPLE), source(influx, LAYOUTS["tag"])):
        out = tmp_path / f"forecast-{len(outputs)}.csv"
        done = cli("predict", "--model", str(model), "--data", data, "--out", str(out))
        assert done.returncode == 0, done.stderr
        outputs.append(pd.read_csv(out))
    pd.testing.assert_frame_equal(*outputs)


@pytest.mark.parametrize(("data", "target", "says"), [
    ("{unknown_measurement}", "traffic_mb",
     "no measurement 'KpmReports' in database 'RIC-Test'; measurements: 'CellReports', "
     "'ViaviCellReports'"),
    ("{unknown_database}", "traffic_mb", "no database 'RIC' at 127.0.0.1:{port}"),
    ("{source}", "pdcpBytesDl", "target field 'pdcpBytesDl' not found; fields: "),
    ("{no_cell}", "traffic_mb", "cell 'cellId' is neither a tag nor a field of 'CellReports'"),
    ("{unreachable}", "traffic_mb", "cannot reach InfluxDB at 127.0.0.1:1: "),
])
def test_a_source_that_cannot_be_read_is_one_line(influx: int, data: str, target: str,
                                                  says: str) -> None:
    sources = {
        "source": source(influx), "unknown_measurement": source(influx, "KpmReports"),
        "unknown_database": source(influx).replace(f"/{DATABASE}?", "/RIC?"),
        "no_cell": source(influx, cell="cellId"),
        "unreachable": source(influx).replace(f":{influx}/", ":1/")}
    url = data.format(**sources)
    done = cli("train", "--data", url, "--target", target, "--out", "/nonexistent/out")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"kpi-forecast: error: {url.split('&')[0]}")
    assert says.format(port=influx) in line


def test_the_xapp_seeds_each_cells_history_from_influx_at_start(influx: int,
                                                                 tmp_path: Path) -> None:
    model = make_model(tmp_path / "traffic_mb", target="traffic_mb")
    sample = load_panel(SAMPLE, "traffic_mb")
    desc = descriptor(tmp_path, model, historyLength=336,
                      historyStore={"seedFrom": source(influx, LAYOUTS["tag"])})

    async def scenario() -> tuple[dict, int]:
        async with running(desc) as client:
            cells = (await client.get("/v1/cells")).json()
            forecast = await client.get("/v1/cells/cell-003/forecast")
            return cells, forecast.status_code

    cells, status = asyncio.run(scenario())
    assert cells["count"] == len(sample.cell_ids)
    last = sample.index[-1]
    for cell in cells["cells"]:
        row = sample.values[sample.cell_ids.index(cell["cell_id"]), -336:]
        assert cell["steps_held"] == int((~np.isnan(row)).sum())
        assert pd.Timestamp(cell["last"]) <= last
    assert status == 200


def test_a_seed_that_cannot_be_read_leaves_the_model_serving(influx: int, tmp_path: Path,
                                                             caplog) -> None:
    model = make_model(tmp_path / "traffic_mb", target="traffic_mb")
    desc = descriptor(tmp_path, model,
                      historyStore={"seedFrom": source(influx, "KpmReports")})

    async def scenario() -> int:
        async with running(desc) as client:
            return (await client.get("/v1/cells")).json()["count"]

    assert asyncio.run(scenario()) == 0
    assert any("history not seeded" in r.message and "no measurement 'KpmReports'" in r.message
               for r in caplog.records)


def test_published_forecasts_are_written_back_beside_the_reports(influx: int,
                                                                tmp_path: Path) -> None:
    model = make_model(tmp_path / "traffic_mb", target="traffic_mb")
    url = f"influx://127.0.0.1:{influx}/{DATABASE}?measurement=KpiForecasts"
    desc = descriptor(tmp_path, model, publication={"influx": {"url": url}})
    start = pd.Timestamp("2024-03-04T00:00:00Z")

    async def scenario() -> str:
        async with running(desc) as client:
            response = await client.post("/v1/cells/history", json={"items": [
                {"cell_id": cell, "start": start.isoformat(), "freq": "1h",
                 "values": [float(v) for v in 20 + 10 * np.sin(np.arange(200) / 4)]}
                for cell in ("c1", "c2")]})
            assert response.status_code == 200, response.text
            for _ in range(200):
                text = (await client.get("/ric/v1/metrics")).text
                if "kpi_forecast_publication_forecasts_total" in text and (
                        'destination="influx",model="traffic_mb"} 2.0' in text):
                    return text
                await asyncio.sleep(0.05)
            raise AssertionError(text)

    asyncio.run(scenario())
    points = pd.read_csv(io.BytesIO(query(
        influx, 'SELECT "p10", "p50", "p90", "made_at" FROM "KpiForecasts" GROUP BY "cell_id", '
        '"model"', DATABASE, csv=True)))
    assert sorted(set(points["tags"])) == ["cell_id=c1,model=traffic_mb",
                                           "cell_id=c2,model=traffic_mb"]
    first = (start + 199 * pd.Timedelta("1h")).value  # the newest step reported
    for _, one in points.groupby("tags"):
        assert one["time"].tolist() == [first + k * 3_600 * 10**9 for k in range(24)]
        assert ((one["p10"] <= one["p50"]) & (one["p50"] <= one["p90"])).all()
        assert one["made_at"].nunique() == 1


def test_a_write_back_to_an_influx_that_is_away_counts_the_forecasts_unpublished(
        tmp_path: Path) -> None:
    model = make_model(tmp_path / "traffic_mb", target="traffic_mb")
    desc = descriptor(tmp_path, model, publication={"influx": {
        "url": "influx://127.0.0.1:1/RIC-Test?measurement=KpiForecasts"}})

    async def scenario() -> str:
        async with running(desc) as client:
            response = await client.post("/v1/cells/c1/history", json={
                "start": "2024-03-04T00:00:00Z", "freq": "1h", "values": [20.0] * 200})
            assert response.status_code == 200, response.text
            for _ in range(200):
                text = (await client.get("/ric/v1/metrics")).text
                if 'kpi_forecast_publication_failures_total{destination="influx"' in text:
                    return text
                await asyncio.sleep(0.05)
            raise AssertionError(text)

    text = asyncio.run(scenario())
    assert 'kpi_forecast_publication_failures_total{destination="influx",model="traffic_mb"} ' \
           '1.0' in text

"""Serving many cells: per-cell history in memory against Redis (the RIC's SDL).

For 10^4 cells with four weeks of hourly history (672 steps, the default historyLength):

1. Writes: seeding every cell's history (`POST /v1/cells/history`'s store call, many cells per
   round trip), and E2 indications through the ingestor, its writer batching what is queued
   (max_batch 512) against one store call per indication (max_batch 1).
2. Forecasts per second for all 10^4 held cells through the running app (in process, over
   ASGI, so both stores pay the same HTTP cost): `POST /v1/cells/forecast` with 64 and 512
   cells per call, and `GET /v1/cells/{id}/forecast` for one cell, 32 requests in flight;
   and one cell's latency alone.
3. Redis's memory for the 10^4 cells.

A real redis-server (Debian package) on loopback, without persistence.

    python -m benchmarks.shared_history
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import redis

from benchmarks.common import write_section
from benchmarks.e2_ingest import MEASUREMENT
from benchmarks.results import RESULTS, Results
from benchmarks.runtime import default_model
from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME, DEFAULT_DIR, load_descriptor
from kpi_forecast.xapp.descriptor.controls import HistoryStore, KpiSource
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2 import e2ap, kpm, kpm_indication
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.transport import RIC_INDICATION, Frame
from kpi_forecast.xapp.store.cell_history import CellHistory, MemoryCellHistory
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from tests.redis_server import redis_server
from tests.xapp_helpers import serving_state

CELLS, LENGTH = 10_000, 672
SEED_CHUNK = 100  # cells per store call when seeding
START = pd.Timestamp("2024-03-04", tz="UTC")
INGEST_HOURS = 3  # new hours of indications, for every cell, after the seeded history
SINGLES, IN_FLIGHT = 2048, 32  # one-cell forecasts timed, and how many are sent at once


def cell_values(cells: int) -> np.ndarray:
    hours = np.arange(LENGTH)
    rng = np.random.default_rng(0)
    base = 40 + 20 * np.sin(2 * np.pi * hours / 24)
    return np.round(np.maximum(base + rng.normal(0, 5, (cells, LENGTH)), 0), 3)


async def seed(store: CellHistory, values: np.ndarray) -> float:
    """Reports per second, writing every cell's history, SEED_CHUNK cells per call."""
    stamps = [START + k * store.step for k in range(LENGTH)]
    started = time.perf_counter()
    for first in range(0, len(values), SEED_CHUNK):
        await store.put_cells([
            (f"cell-{row}", list(zip(stamps, values[row].tolist(), strict=True)))
            for row in range(first, min(first + SEED_CHUNK, len(values)))])
    return values.size / (time.perf_counter() - started)


def route_of(cell: int) -> tuple[int, int]:
    """(RIC request instance, action id) of a cell: an action id is at most 255."""
    return cell // 255 + 1, cell % 255 + 1


def indication(cell: int, start: dt.datetime, value: float) -> Frame:
    header = kpm_indication.encode_indication_header(start)
    message = kpm_indication.encode_indication_message(kpm.IndicationMessage(
        [kpm.Measurement(MEASUREMENT, [value])], granularity_ms=3_600_000))
    return Frame(RIC_INDICATION, 1, e2ap.encode_indication(1, route_of(cell)[0], 2,
                                                           route_of(cell)[1], None, header,
                                                           message))


async def ingest(store: CellHistory, max_batch: int, hours: range) -> float:
    """E2 indications per second through the ingestor into ``store``."""
    ingestor = Ingestor(serving_state(store, KpiSource(measurement=MEASUREMENT)),
                        Metrics([0.1], 64), max_batch=max_batch)
    for cell in range(CELLS):
        ingestor.add_route(*route_of(cell), Route(f"cell-{cell}", 3_600_000))
    frames = [indication(cell, (START + pd.Timedelta(hours=h)).to_pydatetime(), 50.0)
              for h in hours for cell in range(CELLS)]
    writer = asyncio.create_task(ingestor.run())
    started = time.perf_counter()
    for frame in frames:
        await ingestor.handle(frame)
    await ingestor.flush()
    seconds = time.perf_counter() - started
    writer.cancel()
    return len(frames) / seconds


async def forecasts(config: Path, store: CellHistory) -> dict:
    """Forecasts per second for every held cell, by batch size; the app reads ``store``."""
    app = create_app(load_descriptor(config), watch_config=False)
    service = app.state.components
    out = {}
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://xapp", timeout=60) as client:
        while service.state.now.model is None:
            await asyncio.sleep(0.01)
        await service.state.now.history.close()
        # The seeded one: the same data for both stores.
        service.state.swap(service.state.default, history=store)
        cells = [f"cell-{row}" for row in range(CELLS)]
        for size in (512, 64):
            started = time.perf_counter()
            for first in range(0, CELLS, size):
                answer = await client.post("/v1/cells/forecast",
                                           json={"cell_ids": cells[first:first + size]})
                assert answer.status_code == 200, answer.text
                assert {i["source"] for i in answer.json()["items"]} == {"model"}
            out[f"batch_{size}_per_s"] = CELLS / (time.perf_counter() - started)
        async def one(cell: str) -> float:
            started = time.perf_counter()
            answer = await client.get(f"/v1/cells/{cell}/forecast")
            assert answer.status_code == 200 and answer.json()["source"] == "model"
            return time.perf_counter() - started

        latencies = [await one(cell) for cell in cells[:SINGLES]]
        out["single_p50_ms"] = float(np.percentile(latencies, 50) * 1000)
        out["single_p99_ms"] = float(np.percentile(latencies, 99) * 1000)
        started = time.perf_counter()
        for first in range(0, SINGLES, IN_FLIGHT):
            await asyncio.gather(*(one(cell) for cell in cells[first:first + IN_FLIGHT]))
        out["single_per_s"] = SINGLES / (time.perf_counter() - started)
    return out


def descriptor(directory: Path, model_dir: Path) -> Path:
    raw = json.loads((DEFAULT_DIR / CONFIG_FILE_NAME).read_text())
    # A budget that measures throughput, not shedding: the batch calls take what they take.
    raw["controls"].update(modelDir=str(model_dir), latencyBudgetMs=10_000, historyLength=LENGTH,
                           historyStore={"backend": "memory", "maxCells": CELLS})
    raw["controls"]["batching"].update(maxBatchSize=512, maxQueueSize=100_000)
    path = directory / CONFIG_FILE_NAME
    path.write_text(json.dumps(raw))
    return path


async def measure(store: CellHistory, config: Path, values: np.ndarray) -> dict:
    row = {"seed_reports_per_s": await seed(store, values)}
    row["ingest_batched_per_s"] = await ingest(store, 512, range(LENGTH, LENGTH + INGEST_HOURS))
    after = LENGTH + INGEST_HOURS
    row["ingest_single_per_s"] = await ingest(store, 1, range(after, after + 1))
    row.update(await forecasts(config, store))
    return row


def main() -> int:
    if shutil.which("redis-server") is None:
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 1
    values = cell_values(CELLS)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        model_dir = directory / "model"
        model_dir.mkdir()
        default_model(model_dir)
        config = descriptor(directory, model_dir)
        rows["memory"] = asyncio.run(measure(MemoryCellHistory("1h", LENGTH, CELLS), config,
                                             values))
        with redis_server(directory) as port:
            async def shared() -> dict:
                store = await RedisCellHistory.open(HistoryStore(
                    backend="redis", host="127.0.0.1", port=port, max_cells=CELLS), "1h", LENGTH)
                return await measure(store, config, values)

            rows["redis"] = asyncio.run(shared())
            used = redis.Redis(port=port).info("memory")["used_memory"]
    rows["redis"]["redis_mb"] = used / 2**20
    table = pd.DataFrame(rows).T
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "shared_history.csv", index_label="store")
    results = Results("shared_history", "python -m benchmarks.shared_history", "benchmarks.md",
                      "shared-history", tables=["shared_history"])
    section = markdown(table, results)
    print(section)
    write_section(results, section)
    return 0


def markdown(table: pd.DataFrame, results: Results) -> str:
    memory, shared = table.loc["memory"], table.loc["redis"]

    def row(label: str, column: str, unit: str = "", digits: int = 0) -> str:
        a, b = memory[column], shared[column]
        return f"| {label} | {a:,.{digits}f}{unit} | {b:,.{digits}f}{unit} | {b / a:.2f}x |"

    return "\n".join([
        "## Serving many cells: in-memory against shared Redis history",
        "",
        f"{results.measured} (part of `make bench`): {CELLS:,} cells x {LENGTH} hourly "
        "steps, the default model "
        "(context 336, horizon 24) on ONNX Runtime, the app in process over ASGI, "
        "redis-server 7 (Debian) on loopback without persistence.",
        "",
        "| measure | memory | Redis | Redis / memory |",
        "|---|---|---|---|",
        row("seeding history, reports per second (100 cells per store call)",
            "seed_reports_per_s"),
        row("E2 indications ingested per second, writer batching what is queued",
            "ingest_batched_per_s"),
        row("E2 indications ingested per second, one store call each", "ingest_single_per_s"),
        row("forecasts per second, `POST /v1/cells/forecast`, 512 cells per call",
            "batch_512_per_s"),
        row("forecasts per second, `POST /v1/cells/forecast`, 64 cells per call",
            "batch_64_per_s"),
        row(f"forecasts per second, `GET /v1/cells/{{id}}/forecast`, {IN_FLIGHT} in flight",
            "single_per_s"),
        row("one cell's forecast alone, p50", "single_p50_ms",
            " ms", 2),
        row("one cell's forecast alone, p99", "single_p99_ms", " ms", 2),
        "",
        f"Redis holds the {CELLS:,} cells' history ({LENGTH} steps of 16 bytes per cell) in "
        f"{shared['redis_mb']:,.0f} MB.",
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())

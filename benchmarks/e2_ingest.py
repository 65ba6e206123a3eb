"""E2 ingestion speed: decode cost, indications per second,
indication-to-forecast.

1. Decode cost per indication (E2AP, KPM header, KPM message), one core, no I/O: the general
   decoders (pycrate, asn1tools) and the fast indication path (``xapp/ric/e2/indication.py``).
2. Ingestion rate: indications decoded and written to history per second, in process on one
   core (into the in-memory store, and into a real redis-server on loopback where Debian's
   package is installed), and into a running xApp over the RIC's librmr (``../shared/rmr``)
   and over the TCP stand-in it replaced (``tests/tcp_transport.py``; the sender on the same
   machine).
   Over RMR also with the sender in a process of its own, as the E2 side is on a RIC.
3. End-to-end: from sending the indication of a new hour to a forecast from
   `GET /v1/cells/{id}/forecast` that includes it.

    python -m benchmarks.e2_ingest
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from benchmarks.common import write_section
from benchmarks.ports import free_port
from benchmarks.results import RESULTS, Results
from benchmarks.runtime import CONTEXT, default_model
from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.components import Components, rmr_transport
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME, DEFAULT_DIR, load_descriptor
from kpi_forecast.xapp.descriptor.controls import HistoryStore, KpiSource
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric import rmr
from kpi_forecast.xapp.ric.e2 import e2ap, kpm, kpm_indication
from kpi_forecast.xapp.ric.e2.fast_indication import fast_e2ap, fast_header_stamp, fast_message
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.rmr import RmrTransport
from kpi_forecast.xapp.ric.transport import RIC_INDICATION, Frame, Transport
from kpi_forecast.xapp.store.cell_history import CellHistory, MemoryCellHistory
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from tests.redis_server import redis_server
from tests.rmr_library import RMR
from tests.tcp_transport import TcpTransport, encode_frame
from tests.xapp_helpers import serving_state

MEASUREMENT = "RRU.PrbUsedDl"
START = dt.datetime(2024, 3, 4, tzinfo=dt.UTC)
# The same pass on these shared cores took 30 k/s or 45 k/s, in no order: one pass tells little.
PASSES = 5


def indication(action: int, start: dt.datetime, values: list[float]) -> Frame:
    header = kpm_indication.encode_indication_header(start)
    message = kpm_indication.encode_indication_message(kpm.IndicationMessage(
        [kpm.Measurement(MEASUREMENT, values)], granularity_ms=3_600_000))
    return Frame(RIC_INDICATION, 1, e2ap.encode_indication(1, 1, 2, action, None, header,
                                                           message))


def frames_for(cells: int, hours: int) -> list[Frame]:
    rng = np.random.default_rng(0)
    return [indication(cell + 1, START + dt.timedelta(hours=h), [float(rng.uniform(5, 95))])
            for h in range(hours) for cell in range(cells)]


def decode_cost(frames: list[Frame]) -> dict:
    def median_us(call) -> float:
        times = []
        for frame in frames:
            started = time.perf_counter()
            call(frame)
            times.append(time.perf_counter() - started)
        return float(np.median(times) * 1e6)

    pdus = [e2ap.decode(f.payload) for f in frames]
    by_payload = {f.payload: p for f, p in zip(frames, pdus, strict=True)}
    return {
        "e2ap_us": median_us(lambda f: e2ap.decode(f.payload)),
        "kpm_header_us": median_us(lambda f: kpm_indication.decode_indication_header(
            by_payload[f.payload].header)),
        "kpm_message_us": median_us(lambda f: kpm_indication.decode_indication_message(
            by_payload[f.payload].message, subscribed=[MEASUREMENT])),
        "fast_e2ap_us": median_us(lambda f: fast_e2ap(f.payload)),
        "fast_kpm_us": median_us(lambda f: (
            fast_header_stamp(by_payload[f.payload].header),
            fast_message(by_payload[f.payload].message, [MEASUREMENT]))),
    }


async def ingest_rate(frames: list[Frame], cells: int, store: CellHistory) -> float:
    """Indications per second through the ingestor (decode, check, the writer's batches) into
    ``store``, on this process's one thread."""
    source = KpiSource(measurement=MEASUREMENT)
    ingestor = Ingestor(serving_state(store, source), Metrics([0.1], 64))
    for cell in range(cells):
        ingestor.add_route(1, cell + 1, Route(f"cell-{cell}", 3_600_000))
    return await rate_through(ingestor, frames)


async def rate_through(ingestor: Ingestor, frames: list[Frame]) -> float:
    """Indications per second ``ingestor`` takes ``frames`` at, its writer running, from the
    first frame handed over until the last is written."""
    writer = asyncio.create_task(ingestor.run())
    started = time.perf_counter()
    for frame in frames:
        await ingestor.handle(frame)
    await ingestor.flush()
    rate = len(frames) / (time.perf_counter() - started)
    writer.cancel()
    return rate


def spread(rates: list[float]) -> str:
    return f"{np.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def in_process_rate(frames: list[Frame], cells: int) -> float:
    return asyncio.run(ingest_rate(frames, cells, MemoryCellHistory("1h", 672)))


def into_redis_rate(frames: list[Frame], cells: int) -> float | None:
    """``in_process_rate`` into a redis-server on loopback (its own process, so on the other
    core); None where the server is not installed."""
    if shutil.which("redis-server") is None:
        return None

    async def run(port: int) -> float:
        settings = HistoryStore(backend="redis", host="127.0.0.1", port=port)
        store = await RedisCellHistory.open(settings, "1h", 672)
        try:
            return await ingest_rate(frames, cells, store)
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as port:
        return asyncio.run(run(port))


def rmr_available() -> bool:
    """librmr from ../shared/rmr; with no route source named, the xApp and the senders take
    librmr's empty static table themselves (wormholes only)."""
    library = RMR / "lib" / rmr.LIBRARY
    if not library.is_file():
        return False
    rmr.LIBRARY = str(library)
    return True


def write_config(model_dir: Path) -> tuple[Path, int]:
    """A descriptor serving ``model_dir`` with E2 on a free rmr-data port: its path, the port."""
    raw = json.loads((DEFAULT_DIR / CONFIG_FILE_NAME).read_text())
    port = free_port()
    raw["controls"].update(modelDir=str(model_dir), e2={
        "enabled": True, "port": port, "kpis": {"traffic": {"measurement": MEASUREMENT}}})
    config = model_dir.parent / CONFIG_FILE_NAME
    config.write_text(json.dumps(raw))
    return config, port


def new_sender(transport: str) -> Transport:
    return RmrTransport(free_port()) if transport == "rmr" else TcpTransport("127.0.0.1", 0)


async def through_the_xapp(model_dir: Path, cells: int, hours: int, transport: str) -> dict:
    config, _ = write_config(model_dir)
    frames = frames_for(cells, hours)
    app = create_app(load_descriptor(config), watch_config=False,
                     e2_transport=rmr_transport if transport == "rmr" else (
                         lambda e2, broken: TcpTransport("127.0.0.1", e2.port, broken)))
    components = app.state.components
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://xapp") as client:
        while components.state.now.model is None:
            await asyncio.sleep(0.01)
        for cell in range(cells):
            components.ingestor.add_route(1, cell + 1, Route(f"cell-{cell}", 3_600_000))
        sender = new_sender(transport)
        await sender.start(lambda frame: asyncio.sleep(0))
        port = components.e2.transport.port
        started = time.perf_counter()
        for frame in frames:
            await sender.send("127.0.0.1", port, frame)
        registry = components.metrics.registry
        while registry.get_sample_value("kpi_forecast_e2_indications_total") < len(frames):
            await asyncio.sleep(0.001)
        rate = len(frames) / (time.perf_counter() - started)
        # The bulk replay kept the event loop busy for seconds: admission would rightly shed a
        # forecast asked while it is still that late. The latencies are of the steady state.
        while components.loop_lag.seconds > 0.001:
            await asyncio.sleep(0.01)
        # Indication of a new hour -> a forecast that starts after it.
        latencies = []
        for extra in range(20):
            stamp = START + dt.timedelta(hours=hours + extra)
            wanted = (pd.Timestamp(stamp) + pd.Timedelta("1h")).tz_convert("Europe/Rome")
            started = time.perf_counter()
            await sender.send("127.0.0.1", port, indication(1, stamp, [50.0]))
            while True:
                answer = (await client.get("/v1/cells/cell-0/forecast")).json()
                if answer["forecasts"][0]["timestamp"] == wanted.isoformat():
                    break
            latencies.append((time.perf_counter() - started) * 1000)
        await sender.close()
    return {f"{transport}_rate": rate, f"{transport}_to_forecast_ms": float(np.median(latencies)),
            f"{transport}_to_forecast_max_ms": float(np.max(latencies))}


async def taken_from_sender(components: Components, port: int, framed: Path) -> tuple[float, float]:
    """The frames of ``framed`` sent to the running xApp's rmr-data ``port`` by
    ``benchmarks.rmr_sender``, a process of its own: the rate at which the xApp takes them,
    from the first one counted to the last, and how many it counted."""
    sender = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.rmr_sender", f"127.0.0.1:{port}", str(framed),
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "LD_LIBRARY_PATH": str(RMR / "lib")})
    registry = components.metrics.registry

    def ingested() -> float:
        return registry.get_sample_value("kpi_forecast_e2_indications_total") or 0.0

    while ingested() == 0:
        await asyncio.sleep(0.001)
    first, started = ingested(), time.perf_counter()
    # librmr drops what arrives while its receive ring is full: the count may stop short of
    # what was sent, so it is read once the sender is done and nothing more comes.
    await sender.wait()
    last, settled = ingested(), time.perf_counter()
    while time.perf_counter() - settled < 1.0:
        await asyncio.sleep(0.01)
        if ingested() != last:
            last, settled = ingested(), time.perf_counter()
    return (last - first) / (settled - started), last


async def from_another_process(model_dir: Path, cells: int, hours: int) -> dict:
    """The E2 side in a process of its own (``benchmarks.rmr_sender``), as on a RIC: the rate
    at which the xApp takes indications, from the first one counted to the last."""
    config, port = write_config(model_dir)
    frames = frames_for(cells, hours)
    framed = model_dir.parent / "frames.bin"
    framed.write_bytes(b"".join(encode_frame(frame) for frame in frames))
    app = create_app(load_descriptor(config), watch_config=False)
    components = app.state.components
    async with app.router.lifespan_context(app):
        while components.state.now.model is None:
            await asyncio.sleep(0.01)
        for cell in range(cells):
            components.ingestor.add_route(1, cell + 1, Route(f"cell-{cell}", 3_600_000))
        rate, last = await taken_from_sender(components, port, framed)
        registry = components.metrics.registry
        counted = registry.get_sample_value("kpi_forecast_e2_indications_rejected_total",
                                            {"reason": "receive-queue-full"}) or 0.0
    return {"rmr_process_rate": rate, "rmr_process_lost": int(len(frames) - last),
            "rmr_process_counted": int(counted)}


def main() -> int:
    cells, hours = 50, CONTEXT
    frames = frames_for(cells, hours)
    cost = decode_cost(frames[:2000])
    rates = [in_process_rate(frames, cells) for _ in range(PASSES)]
    redis_rates = [into_redis_rate(frames, cells) for _ in range(PASSES)]
    rate = float(np.median(rates))
    redis_rate = None if None in redis_rates else float(np.median(redis_rates))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        model_dir.mkdir()
        default_model(model_dir)
        transports = ["rmr", "tcp"] if rmr_available() else ["tcp"]
        e2e = {key: value for transport in transports for key, value in
               asyncio.run(through_the_xapp(model_dir, cells, hours, transport)).items()}
        if rmr_available():
            e2e.update(asyncio.run(from_another_process(model_dir, cells, hours)))
    table = pd.DataFrame([{**cost, "decode_total_us": sum(cost.values()),
                           "in_process_per_s": rate, "into_redis_per_s": redis_rate, **e2e}])
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "e2_ingest.csv", index=False)
    fast_us = cost["fast_e2ap_us"] + cost["fast_kpm_us"]
    general_us = cost["e2ap_us"] + cost["kpm_header_us"] + cost["kpm_message_us"]
    results = Results("e2_ingest", "python -m benchmarks.e2_ingest", "benchmarks.md",
                      "e2-ingest", tables=["e2_ingest"])
    lines = [
        "## E2 ingestion",
        "",
        f"{results.measured} (part of `make bench`): {len(frames)} RIC Indications "
        f"({cells} cells x {hours} "
        f"hours, one {MEASUREMENT} value each), E2AP and E2SM-KPM in aligned PER.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| decode per indication, general decoders: E2AP (pycrate) | {cost['e2ap_us']:.0f} us |",
        f"| decode per indication, general decoders: KPM header + message (asn1tools) | "
        f"{cost['kpm_header_us'] + cost['kpm_message_us']:.0f} us |",
        f"| decode per indication, fast path: E2AP | {cost['fast_e2ap_us']:.1f} us |",
        f"| decode per indication, fast path: KPM header + message | "
        f"{cost['fast_kpm_us']:.1f} us |",
        f"| fast path against the general decoders | {general_us / fast_us:.0f}x faster |",
        f"| ingested per second, in process, one core (decode + in-memory history; median "
        f"of {PASSES} passes, their range) | {spread(rates)} |",
        "| ingested per second, in process, one core, into Redis (redis-server on the other "
        "core, loopback; likewise) | "
        + (f"{spread(redis_rates)} |" if redis_rate is not None else "not measured: no "
           "redis-server |"),
        *[line for transport, name in (("rmr", "RMR (librmr)"), ("tcp", "the TCP stand-in"))
          if f"{transport}_rate" in e2e for line in (
              f"| ingested per second over {name} into the running xApp (sender on the same "
              f"2 cores) | {e2e[f'{transport}_rate']:,.0f} |",
              f"| over {name}: indication of a new hour -> forecast including it (median / "
              f"max of 20) | {e2e[f'{transport}_to_forecast_ms']:.1f} / "
              f"{e2e[f'{transport}_to_forecast_max_ms']:.1f} ms |")],
        *([f"| ingested per second over RMR, the sender a process of its own (the E2 side "
           f"as on a RIC, on the same 2 cores) | {e2e['rmr_process_rate']:,.0f} |",
           f"| of the {len(frames):,} sent as one burst: lost / counted by the xApp "
           f"(`receive-queue-full`) | {e2e['rmr_process_lost']:,} / "
           f"{e2e['rmr_process_counted']:,} |"]
          if "rmr_process_rate" in e2e else
          ["", "RMR not measured: ../shared/rmr is absent."]),
        "",
        "The in-process rates are of one core's CPU as much as of the code: passes of the "
        "same build on this virtual machine ran at two speeds about 1.5x apart, in no "
        "order, hence the median and range of several. "
        "In the rows into the running xApp with the sender \"on the same 2 cores\", it runs "
        "in the xApp's process and event loop, one send at a "
        "time: over RMR each send is a hop to a worker thread and a librmr call, so those rates "
        "compare the two paths as a whole (sender included). The last rows are the xApp's "
        "receiving alone, from the first indication counted to the last, with the sender "
        "(`benchmarks/rmr_sender.py`) in another process. librmr drops what arrives while its "
        "receive ring is full and counts none of it, so a loss above the xApp's own count is "
        "librmr's; the xApp's receiving thread drains that ring into a queue of its own "
        f"({rmr.RECEIVE_QUEUE:,} frames) and counts what that cannot hold.",
        "",
    ]
    print("\n".join(lines))
    write_section(results, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

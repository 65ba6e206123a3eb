"""Three models served together (a repository, a model per KPI) against one served alone, side
by side in one run, on `kpi-forecast serve` processes (the same three-KPI models in both):

1. Per model, a 1000-cell Arrow batch (`POST /v1/models/{name}/forecast/batch`, the median of
   its calls) and the single-cell p99 at a steady rate (`hey`, 2 connections at 50 requests/s
   each, on `/v1/models/{name}/forecast`), the model served alone and with the two others.
   Rounds alternate which server goes first; each figure is the median over the rounds.
2. The xApp's resident memory with three models against one: once ready, and after 10^4 cells
   of history held per model (written over REST, a day each: a cell's ring is whole from its
   first write).
3. E2 ingestion: indications a second taken by a running xApp over librmr from a sender in a
   process of its own (as ``benchmarks.e2_ingest`` measures it), of reports carrying the three
   models' measurements (three histories written) against reports of one (one model served);
   and through the ingestor alone, in process. Passes alternate. One subscription per node for
   every model is tested end to end (tests/test_e2_end_to_end.py counts them at the mock
   node).

    python -m benchmarks.repository [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

from benchmarks.common import write_section
from benchmarks.e2_ingest import rate_through, rmr_available, taken_from_sender
from benchmarks.ports import free_port
from benchmarks.results import Results
from benchmarks.runtime import CONTEXT, default_model
from benchmarks.serving import arrow_body, rss_mb
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME, DEFAULT_DIR, load_descriptor
from kpi_forecast.xapp.descriptor.controls import KpiSource
from kpi_forecast.xapp.http import arrow_ipc
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.e2 import e2ap, kpm, kpm_indication
from kpi_forecast.xapp.ric.e2.ingest import Ingestor, Route
from kpi_forecast.xapp.ric.transport import RIC_INDICATION, Frame
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import MemoryCellHistory
from tests.tcp_transport import encode_frame
from tests.xapp_helpers import write_descriptor

ROOT = Path(__file__).resolve().parents[1]
# A model per KPI, each behind its E2 measurement (the packaged controls.e2.kpis).
KPIS = {"prb_util": "RRU.PrbTotDl", "traffic_mb": "DRB.PdcpSduVolumeDL",
        "active_ues": "DRB.MeanActiveUeDl"}
BATCH_CELLS, BATCH_CALLS = 1000, 15
HEY = (2, 50, 20)  # connections, requests/s each, seconds
HELD_CELLS = 10_000
E2_CELLS, E2_HOURS, E2_PASSES = 500, 24, 5
START = dt.datetime(2024, 3, 4, tzinfo=dt.UTC)


def repository(root: Path) -> Path:
    """The default network exported once, copied as a model per KPI."""
    first = root / "prb_util"
    first.mkdir(parents=True)
    default_model(first)
    for kpi in KPIS:
        target = root / kpi
        if kpi != "prb_util":
            subprocess.run(["cp", "-r", str(first), str(target)], check=True)
        meta = json.loads((target / "metadata.json").read_text())
        meta.update(target=kpi, model_version=f"{kpi}-bench")
        (target / "metadata.json").write_text(json.dumps(meta))
    return root


@contextmanager
def serving(config: Path, *source: str) -> Iterator[tuple[str, int]]:
    """`kpi-forecast serve` with ``source`` (--model DIR or --models DIR) until the block
    ends: its URL and pid."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "kpi_forecast.cli", "serve", *source, "--config", str(config),
         "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_ready(url, server, 120):
            raise RuntimeError(f"serve {' '.join(source)} did not become ready")
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(30)


def single_cell_times(url: str, body: Path) -> list[float]:
    """The latencies (ms) of `hey`'s answers at HEY's steady rate."""
    connections, rate, seconds = HEY
    done = subprocess.run(
        ["hey", "-z", f"{seconds}s", "-c", str(connections), "-q", str(rate), "-m", "POST",
         "-T", "application/json", "-D", str(body), "-o", "csv", url],
        capture_output=True, text=True, check=True)
    rows = [line.split(",") for line in done.stdout.splitlines()[1:] if line]
    times = [float(r[0]) * 1e3 for r in rows if r[6] == "200"]  # response-time, status-code
    if len(times) < 0.95 * len(rows):
        raise RuntimeError(f"{url}: {len(rows) - len(times)} of {len(rows)} answers not 200")
    return times


def model_figures(url: str, name: str, arrow: bytes, single: Path) -> dict:
    base = f"{url}/v1/models/{name}"
    with httpx.Client(timeout=60) as client:
        seconds = []
        for _ in range(BATCH_CALLS + 2):
            started = time.perf_counter()
            answer = client.post(f"{base}/forecast/batch", content=arrow,
                                 headers={"content-type": arrow_ipc.ARROW_STREAM})
            seconds.append(time.perf_counter() - started)
            answer.raise_for_status()
            if answer.headers["X-Source"] != "model":
                raise RuntimeError(f"{name}: the batch was answered by the fallback")
    return {"batch_ms": float(np.median(seconds[2:])) * 1e3,
            "times": single_cell_times(f"{base}/forecast", single)}


def hold_cells(url: str, names: list[str]) -> None:
    """A day of history for HELD_CELLS cells of each model's KPI, 1000 cells a call."""
    values = [round(10 + 5 * np.sin(h / 24 * 2 * np.pi), 2) for h in range(24)]
    with httpx.Client(timeout=120) as client:
        for name in names:
            for first in range(0, HELD_CELLS, 1000):
                items = [{"cell_id": f"cell-{c:05d}", "start": "2024-03-01T00:00:00+00:00",
                          "freq": "1h", "values": values}
                         for c in range(first, first + 1000)]
                client.post(f"{url}/v1/models/{name}/cells/history",
                            json={"items": items}).raise_for_status()


def held_memory(url: str, pid: int, names: list[str]) -> dict:
    """The server's resident memory now, and once HELD_CELLS cells are held per model."""
    ready = rss_mb(pid)
    hold_cells(url, names)
    return {"ready_mb": ready, "held_mb": rss_mb(pid)}


def serving_figures(tmp: Path, rounds: int) -> tuple[dict, dict]:
    models = repository(tmp / "models")
    config = write_descriptor(tmp / "config", None, modelRepository=str(models),
                              latencyBudgetMs=1000,
                              historyStore={"maxRestCells": 2 * HELD_CELLS})
    arrow = arrow_body(BATCH_CELLS, CONTEXT)
    single = tmp / "single.json"
    rng = np.random.default_rng(0)
    single.write_text(json.dumps({
        "cell_id": "c1", "start": "2024-03-01T00:00:00+00:00", "freq": "1h",
        "values": [round(float(v), 2) for v in rng.gamma(2.0, 10.0, CONTEXT)]}))
    runs: dict[str, list[dict]] = {"alone": [], "together": []}
    memory: dict[str, dict] = {}
    for k in range(rounds):
        for setting in (("alone", "together") if k % 2 == 0 else ("together", "alone")):
            figures = {}
            if setting == "alone":
                for name in KPIS:
                    with serving(config, "--model", str(models / name)) as (url, pid):
                        figures[name] = model_figures(url, name, arrow, single)
                        if k == 0 and name == "prb_util":
                            memory[setting] = held_memory(url, pid, [name])
            else:
                with serving(config, "--models", str(models)) as (url, pid):
                    for name in KPIS:
                        figures[name] = model_figures(url, name, arrow, single)
                    if k == 0:
                        memory[setting] = held_memory(url, pid, list(KPIS))
            runs[setting].append(figures)
    # The batch: the median over the rounds. The p99: of every round's answers pooled (a p99 of
    # one round's few thousand moves with the machine's moments), with the rounds' own range.
    figures = {setting: {name: {
        "batch_ms": float(np.median([r[name]["batch_ms"] for r in rounds_])),
        "p99_ms": float(np.percentile([t for r in rounds_ for t in r[name]["times"]], 99)),
        "p99_range": (min(np.percentile(r[name]["times"], 99) for r in rounds_),
                      max(np.percentile(r[name]["times"], 99) for r in rounds_)),
    } for name in KPIS} for setting, rounds_ in runs.items()}
    return figures, memory


def e2_frames(measurements: list[str], cells: int, hours: int) -> list[Frame]:
    rng = np.random.default_rng(0)
    frames = []
    for hour in range(hours):
        header = kpm_indication.encode_indication_header(START + dt.timedelta(hours=hour))
        for cell in range(cells):
            message = kpm_indication.encode_indication_message(kpm.IndicationMessage(
                [kpm.Measurement(m, [float(rng.uniform(5, 95))]) for m in measurements],
                granularity_ms=3_600_000))
            # A subscription per cell, as the xApp makes them: its instance id names the cell.
            frames.append(Frame(RIC_INDICATION, cell + 1, e2ap.encode_indication(
                1, cell + 1, 2, 1, None, header, message)))
    return frames


async def ingest_rate(frames: list[Frame], names: list[str]) -> float:
    """Indications a second through the ingestor into a memory history per model."""
    controls = load_descriptor(DEFAULT_DIR / CONFIG_FILE_NAME).controls
    state = ServingState(controls, tuple(names))
    for name in names:
        state.swap(name, history=MemoryCellHistory("1h", 672, kpi=name),
                   kpi_source=KpiSource(measurement=KPIS[name]))
    ingestor = Ingestor(state, Metrics([0.1], 64))
    for cell in range(E2_CELLS):
        ingestor.add_route(cell + 1, 1, Route(f"cell-{cell}", 3_600_000))
    return await rate_through(ingestor, frames)


async def over_rmr(tmp: Path, models: Path, names: list[str], frames: list[Frame]) -> float:
    """Indications a second a running xApp serving ``names`` of the repository ``models``
    takes over librmr from ``benchmarks.rmr_sender``, from the first counted to the last."""
    port = free_port()
    config = write_descriptor(tmp / f"e2-{len(names)}", None, modelRepository=str(models),
                              models=names, e2={"enabled": True, "port": port})
    framed = tmp / f"frames-{len(names)}.bin"
    framed.write_bytes(b"".join(encode_frame(frame) for frame in frames))
    app = create_app(load_descriptor(config), watch_config=False)
    service = app.state.components
    async with app.router.lifespan_context(app):
        while any(s.model is None for s in service.state.models.values()):
            await asyncio.sleep(0.01)
        for cell in range(E2_CELLS):
            service.ingestor.add_route(cell + 1, 1, Route(f"cell-{cell}", 3_600_000))
        rate, _ = await taken_from_sender(service, port, framed)
    return rate


def e2_figures(tmp: Path, models: Path) -> dict:
    one, three = ["prb_util"], list(KPIS)
    frames = {1: e2_frames([KPIS[n] for n in one], E2_CELLS, E2_HOURS),
              3: e2_frames([KPIS[n] for n in three], E2_CELLS, E2_HOURS)}
    rates: dict[str, list[float]] = {"rmr-1": [], "rmr-3": [], "process-1": [], "process-3": []}
    for k in range(E2_PASSES):
        for count in ((1, 3) if k % 2 == 0 else (3, 1)):
            names = one if count == 1 else three
            rates[f"process-{count}"].append(asyncio.run(ingest_rate(frames[count], names)))
            if rmr_available():
                rates[f"rmr-{count}"].append(asyncio.run(over_rmr(tmp, models, names,
                                                                  frames[count])))
    return {key: float(np.median(r)) if r else None for key, r in rates.items()}


def write_results(medians: dict, memory: dict, e2: dict, rounds: int) -> None:
    results = Results(
        "repository", f"python -m benchmarks.repository --rounds {rounds}", "benchmarks.md",
        "repository", figures={"serving": {s: {n: {k: v for k, v in f.items() if k != "times"}
                                               for n, f in m.items()}
                                           for s, m in medians.items()},
                               "memory": memory, "e2": e2})
    lines = [
        "## A model repository: three models served together",
        "",
        f"{results.measured} (both servers `kpi-forecast serve`, the "
        f"same three exports of the default network, a model per KPI; medians over {rounds} "
        "rounds of alternating order). Each model served with the two others against the "
        f"same model served alone: its {BATCH_CELLS}-cell Arrow batch (median of "
        f"{BATCH_CALLS} calls; the median over the rounds) and its single-cell p99 under `hey` "
        f"({HEY[0]} connections at {HEY[1]} requests/s each, {HEY[2]} s a round; the p99 of "
        "every round's answers pooled, the rounds' own p99s in brackets). Targets: at most "
        "1.15x and 1.1x.",
        "",
        "| model | batch alone (ms) | batch together (ms) | ratio | p99 alone (ms) | "
        "p99 together (ms) | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in KPIS:
        a, t = medians["alone"][name], medians["together"][name]
        lines.append(f"| {name} | {a['batch_ms']:.1f} | {t['batch_ms']:.1f} | "
                     f"{t['batch_ms'] / a['batch_ms']:.2f} | {a['p99_ms']:.2f} "
                     f"({a['p99_range'][0]:.1f}-{a['p99_range'][1]:.1f}) | {t['p99_ms']:.2f} "
                     f"({t['p99_range'][0]:.1f}-{t['p99_range'][1]:.1f}) | "
                     f"{t['p99_ms'] / a['p99_ms']:.2f} |")
    one, three = memory["alone"], memory["together"]
    lines += [
        "",
        f"Resident memory (VmRSS) of the xApp with one model and with three (target: at most "
        f"3.2x): once ready, {one['ready_mb']:.0f} MB and {three['ready_mb']:.0f} MB "
        f"({three['ready_mb'] / one['ready_mb']:.2f}x); with {HELD_CELLS:,} cells held per "
        f"model, {one['held_mb']:.0f} MB and {three['held_mb']:.0f} MB "
        f"({three['held_mb'] / one['held_mb']:.2f}x).",
        "",
        f"E2 ingestion ({E2_CELLS} cells x {E2_HOURS} hourly reports, median of "
        f"{E2_PASSES} alternating passes), reports carrying the three models' measurements "
        "(each into its model's history) against reports of one (one model served); target "
        "at least 0.8x of what a running xApp takes (the first row). The second row is the "
        "ingestor alone, for diagnosis: there each measurement is decoded and written to its "
        "history on its own, with no per-frame transport cost to share.",
        "",
        "| | one measurement (indications/s) | three (indications/s) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for key, what in (("rmr", "a running xApp over librmr, the sender a process of its own"),
                      ("process", "the ingestor alone, in process")):
        if e2[f"{key}-1"] is None:
            lines.append(f"| {what} | not measured: no librmr | | |")
            continue
        lines.append(f"| {what} | {e2[f'{key}-1']:,.0f} | {e2[f'{key}-3']:,.0f} | "
                     f"{e2[f'{key}-3'] / e2[f'{key}-1']:.2f} |")
    write_section(results, "\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        e2 = e2_figures(Path(tmp), repository(Path(tmp) / "e2-models"))
        print(json.dumps({"e2": e2}), flush=True)
        medians, memory = serving_figures(Path(tmp), args.rounds)
    write_results(medians, memory, e2, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Single-cell forecasts while background work runs: what a recalibration costs the requests
beside it.

The xApp with its history in a real redis-server (10^4 cells x 672 hourly steps, seeded
first), in process over ASGI, at the controls' default latency budget: `GET
/v1/cells/{id}/forecast` sent at a steady rate, each request on its own as independent clients
send them, first with nothing else running, then while the model's recalibration refreshes
(finds the most recently reported cells, reads their windows, fits the offsets), refresh after
refresh, then while live scoring takes on two rounds (every cell forecast at an origin, then
scored at the next and forecast again). Each phase:
the answers by status and source, and the latency percentiles. Target: no request answered 503
while only background work runs beside it.

    python -m benchmarks.background_work [--rate 100] [--quiet-seconds 10] [--refreshes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import redis.asyncio as aioredis

from benchmarks.common import write_section
from benchmarks.results import RESULTS, Results
from benchmarks.runtime import default_model
from benchmarks.shared_history import CELLS, LENGTH, cell_values, seed
from kpi_forecast.model.scores import POINTS
from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME, DEFAULT_DIR, load_descriptor
from kpi_forecast.xapp.serving.recalibrator import Recalibrator
from kpi_forecast.xapp.serving.scoring import Scorer
from tests.redis_server import redis_server


def descriptor(directory: Path, model_dir: Path, port: int) -> Path:
    raw = json.loads((DEFAULT_DIR / CONFIG_FILE_NAME).read_text())
    # The default budget and batching; recalibration and scoring only when this run asks.
    raw["controls"].update(modelDir=str(model_dir), historyLength=LENGTH, historyStore={
        "backend": "redis", "host": "127.0.0.1", "port": port, "maxCells": CELLS})
    raw["controls"]["recalibration"]["everySeconds"] = 0
    raw["controls"]["scoring"] = {"enabled": False}  # its rounds are called by the run
    path = directory / CONFIG_FILE_NAME
    path.write_text(json.dumps(raw))
    return path


async def load(client: httpx.AsyncClient, rate: float, done: Callable[[], bool]) -> list[dict]:
    """Single-cell forecasts at ``rate`` a second, each cell in turn, until ``done()``: each
    answer's status, source (or the reason it was refused) and seconds."""
    answers: list[dict] = []

    async def one(cell: str) -> None:
        started = time.perf_counter()
        answer = await client.get(f"/v1/cells/{cell}/forecast")
        body = answer.json()
        answers.append({"status": answer.status_code, "seconds": time.perf_counter() - started,
                        "source": body.get("source") or body.get("reason") or "?"})

    sent: list[asyncio.Task] = []
    began = time.perf_counter()
    while not done():
        sent.append(asyncio.create_task(one(f"cell-{len(sent) % CELLS}")))
        await asyncio.sleep(max(0.0, began + len(sent) / rate - time.perf_counter()))
    await asyncio.gather(*sent)
    return answers


def elapsed(seconds: float) -> Callable[[], bool]:
    """Whether ``seconds`` have passed since this call."""
    until = time.perf_counter() + seconds
    return lambda: time.perf_counter() > until


def summary(phase: str, answers: list[dict], seconds: float) -> dict:
    kinds = collections.Counter(f"{a['status']} {a['source']}" for a in answers)
    latency = np.array([a["seconds"] for a in answers]) * 1000
    return {"phase": phase, "seconds": round(seconds, 1), "requests": len(answers),
            "answered by the model": kinds.pop("200 model", 0),
            "answered by the fallback": sum(n for k, n in kinds.items() if k.startswith("200")),
            "refused (503)": sum(n for k, n in kinds.items() if k.startswith("503")),
            "other": sum(n for k, n in kinds.items() if not k.startswith(("200", "503"))),
            "refusal reasons": ", ".join(sorted(k[4:] for k in kinds if k.startswith("503"))),
            "p50 ms": float(np.percentile(latency, 50)),
            "p99 ms": float(np.percentile(latency, 99)), "max ms": float(latency.max())}


async def refresh(recalibrator: Recalibrator, times: int) -> int:
    """``times`` refreshes, one after another; the windows the last was fitted on."""
    for _ in range(times):
        fitted = await recalibrator.refresh()
    return fitted.windows


async def score(scorer: Scorer, first: int, horizon: int) -> int:
    """The rounds of two origins in turn; the points the second scored over the day."""
    await scorer.score_round(first)
    summary = await scorer.score_round(first + horizon)
    return int(summary.windows["day"][POINTS])


async def measure(config: Path, rate: float, quiet_s: float, times: int, port: int
                  ) -> tuple[list[dict], dict]:
    app = create_app(load_descriptor(config), watch_config=False)
    gc.freeze()  # as `kpi-forecast serve` does before serving (xapp/server.py)
    components = app.state.components
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://xapp", timeout=60) as client:
        while components.state.now.model is None:
            await asyncio.sleep(0.01)
        await seed(components.state.now.history, cell_values(CELLS))
        await load(client, rate, elapsed(2.0))  # warm-up
        started = time.perf_counter()
        quiet = await load(client, rate, elapsed(quiet_s))
        rows = [summary("nothing else running", quiet, time.perf_counter() - started)]
        started = time.perf_counter()
        refreshes = asyncio.create_task(refresh(components.default.recalibrator, times))
        during = await load(client, rate, refreshes.done)
        rows.append(summary(f"{times} recalibrations, one after another ({refreshes.result()} "
                            "windows each)", during, time.perf_counter() - started))
        model, history = components.state.now.model, components.state.now.history
        horizon = model.metadata.horizon
        last = history.newest_ns // model.step.value
        started = time.perf_counter()
        rounds = asyncio.create_task(score(components.default.scorer,
                                           (last - 1) // horizon * horizon - horizon, horizon))
        during = await load(client, rate, rounds.done)
        rows.append(summary(f"2 scoring rounds of {CELLS:,} cells ({rounds.result():,} points "
                            "scored)", during, time.perf_counter() - started))
        # What one cell's live scores hold: its record, and what Redis spends on the key.
        key = (f"{{kpi-forecast}},scores:{components.default.name}:"
               f"{model.metadata.model_version}:cell-0")
        async with aioredis.Redis(port=port) as redis:
            held = {"record bytes": await redis.strlen(key),
                    "redis bytes": await redis.memory_usage(key)}
    return rows, held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="requests a second")
    parser.add_argument("--quiet-seconds", type=float, default=10.0)
    parser.add_argument("--refreshes", type=int, default=10)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        model_dir = directory / "model"
        model_dir.mkdir()
        default_model(model_dir)
        with redis_server(directory) as port:
            rows, held = asyncio.run(measure(descriptor(directory, model_dir, port), args.rate,
                                             args.quiet_seconds, args.refreshes, port))
    table = pd.DataFrame(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "background_work.csv", index=False)
    results = Results(
        "background_work", f"python -m benchmarks.background_work --rate {args.rate:g} "
        f"--quiet-seconds {args.quiet_seconds:g} --refreshes {args.refreshes}", "benchmarks.md",
        "background-work",
        tables=["background_work"],
        figures={"refused while recalibrating": int(table["refused (503)"].iloc[1]),
                 "refused while scoring": int(table["refused (503)"].iloc[2]),
                 "scoring rounds seconds": float(table["seconds"].iloc[2]),
                 "score record bytes": held["record bytes"],
                 "score record redis bytes": held["redis bytes"]})
    section = "\n".join([
        "## Forecasts while background work runs",
        "",
        f"{results.measured}: the xApp in process over ASGI with its history in redis-server "
        f"({CELLS:,} cells x {LENGTH} hourly steps), the default model and latency budget; "
        f"`GET /v1/cells/{{id}}/forecast` at {args.rate:g} a second, each on its own, with "
        "nothing else running, then while the model's recalibration refreshes "
        f"{args.refreshes} times in a row, then while live scoring takes on two rounds (each "
        "cell forecast at an origin, then scored at the next and forecast again). Target: no "
        "503 beside background work.",
        "",
        table.to_markdown(index=False, floatfmt=".1f"),
        "",
        f"Live scores kept per cell and model version: a record of {held['record bytes']} "
        f"bytes, {held['redis bytes']} bytes of Redis memory with its key "
        "(`MEMORY USAGE`).",
        "",
    ])
    write_section(results, section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

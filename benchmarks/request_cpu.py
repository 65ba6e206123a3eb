"""CPU time per single-cell forecast in the app itself: `POST /v1/forecast` called as ASGI, in
process, one request after another (no HTTP server, no client), so that what is measured is
the app's own work per request (edge, framework, the forecast operation, the batcher's thread
hop, the model call and the answer) without a load generator's noise. The process's CPU time
over the requests' count, and the event loop's thread's alone: what a burst of concurrent
requests pays once per request in turn, while the model's call is paid once per batch. The
no-op handler of the serving benchmark (``benchmarks.noop_server``) through the same harness
gives the framework's own share. The latency budget is set far above the call's time, so every
answer is the model's; the loop is uvloop's and start-up's objects are frozen out of the cycle
collector, as `kpi-forecast serve` runs.

    python -m benchmarks.request_cpu --model DIR [--requests 2000] [--rounds 3]

Prints one JSON object: ``cpu_us_per_request`` and ``loop_us_per_request`` (the medians over
the rounds), ``noop_loop_us_per_request``, and each round's figures.
``benchmarks.side_by_side`` runs it against each tree's ``kpi_forecast``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import uvloop

from benchmarks import noop_server
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.xapp.app import create_app
from kpi_forecast.xapp.descriptor.config_file import (
    CONFIG_FILE_NAME,
    DEFAULT_DIR,
    load_descriptor,
)

BUDGET_MS = 1000.0  # far above a call's time: no answer is the fallback's
ROUTE, READY = "/v1/forecast", "/ric/v1/health/ready"


def single_cell_body(context: int) -> bytes:
    """The single-cell forecast request the serving benchmarks send: ``context`` hours."""
    rng = np.random.default_rng(0)
    return json.dumps({
        "cell_id": "c1", "start": "2013-12-01T00:00:00+01:00", "freq": "1h",
        "values": [round(float(v), 2) for v in rng.gamma(2.0, 10.0, context)], "horizon": 24,
    }).encode()


async def call(app, method: str, path: str, payload: bytes = b"") -> tuple[int, bytes]:
    """One request through the app's ASGI interface: its status and body."""
    sent: list[dict] = []
    read = False

    async def receive() -> dict:
        nonlocal read
        if not read:
            read = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError

    async def send(message: dict) -> None:
        sent.append(message)

    await app({
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080), "state": {},
        "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode())],
    }, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def measure(model_dir: Path, requests: int, rounds: int) -> list[dict[str, float]]:
    """Each round's CPU per request: the process's and the event loop's thread's (us)."""
    raw = json.loads((DEFAULT_DIR / CONFIG_FILE_NAME).read_text())
    raw["controls"].update(modelDir=str(model_dir), latencyBudgetMs=BUDGET_MS)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / CONFIG_FILE_NAME
        config.write_text(json.dumps(raw))
        app = create_app(load_descriptor(config), watch_config=False)
        gc.freeze()  # as `kpi-forecast serve` does before serving
        async with app.router.lifespan_context(app):
            while (await call(app, "GET", READY))[0] != 200:  # the model loads meanwhile
                await asyncio.sleep(0.1)
            payload = single_cell_body(load_metadata(model_dir).context)
            for _ in range(requests // 10):  # warm-up
                await call(app, "POST", ROUTE, payload)
            per_round = []
            for _ in range(rounds):
                started, loop_started = time.process_time(), time.thread_time()
                for _ in range(requests):
                    status, answer = await call(app, "POST", ROUTE, payload)
                    if status != 200 or b'"source":"model"' not in answer:
                        raise RuntimeError(f"not the model's answer: {status} {answer[:200]!r}")
                per_round.append({
                    "process": (time.process_time() - started) / requests * 1e6,
                    "loop": (time.thread_time() - loop_started) / requests * 1e6})
    return per_round


async def noop_loop(context: int, requests: int) -> float:
    """The no-op handler's CPU per request through the same harness (us)."""
    app = noop_server.create_app(b"{}")
    payload = single_cell_body(context)
    for _ in range(requests // 10):
        await call(app, "POST", ROUTE, payload)
    started = time.thread_time()
    for _ in range(requests):
        await call(app, "POST", ROUTE, payload)
    return (time.thread_time() - started) / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="an exported model")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    per_round = uvloop.run(measure(args.model, args.requests, args.rounds))
    noop = uvloop.run(noop_loop(load_metadata(args.model).context, args.requests))
    print(json.dumps({
        "cpu_us_per_request": statistics.median(r["process"] for r in per_round),
        "loop_us_per_request": statistics.median(r["loop"] for r in per_round),
        "noop_loop_us_per_request": noop, "rounds": per_round}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

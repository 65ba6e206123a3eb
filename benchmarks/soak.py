"""Two replicas on one Redis under steady single-cell load for minutes, their background work
running beside the requests: lease rounds and subscription checks against the E2 node,
recalibration refreshes, live scoring at its origins.

A redis-server seeded with shared_history's cells (10^4 x 672 hourly steps), the mock E2 node
(`kpi-forecast e2sim --wall-clock`, its cells reporting hourly) and two `kpi-forecast serve`
replicas with the E2 interface on, the default model, latency budget and batching. Their
recalibration refreshes every ``--refresh-seconds`` (a minute, not the default hour, so that
a soak of minutes holds several refreshes on each replica). `hey` sends `GET
/v1/cells/{id}/forecast` to both replicas for the whole soak. Target: no request answered 503.

    python -m benchmarks.soak [--minutes 8] [--rate 25] [--refresh-seconds 60]

The processes' logs are left in the temporary directory's ``soak.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import write_section
from benchmarks.e2_scale import MEASUREMENT, scrape
from benchmarks.ports import free_port
from benchmarks.results import RESULTS, Results
from benchmarks.runtime import default_model
from benchmarks.shared_history import CELLS, LENGTH, cell_values, seed
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from tests.redis_server import redis_server
from tests.rmr_library import RMR
from tests.xapp_helpers import write_descriptor

ROOT = Path(__file__).resolve().parents[1]
LOG = Path(tempfile.gettempdir()) / "soak.log"
CONNECTIONS = 4  # hey's, per replica
E2_CELLS, CELLS_PER_NODE = 100, 10
POLL_S = 2.0  # how often the replicas' metrics are read during the soak


def matching(found: dict[str, float], prefix: str) -> dict[str, float]:
    return {key: value for key, value in found.items() if key.startswith(prefix) and value}


async def seeded(port: int, kpi: str) -> None:
    settings = HistoryStore(backend="redis", host="127.0.0.1", port=port, max_cells=CELLS)
    store = await RedisCellHistory.open(settings, "1h", LENGTH, kpi=kpi)
    try:
        await seed(store, cell_values(CELLS))
    finally:
        await store.close()


def e2_node(tmp: Path, env: dict, minutes: float) -> tuple[subprocess.Popen, str]:
    """The mock E2 node, its cells' hourly data spanning the soak (a report per hour)."""
    now = pd.Timestamp.now(tz="UTC").floor("h")
    times = pd.date_range(now - pd.Timedelta("2h"), now + pd.Timedelta(minutes=minutes + 120),
                          freq="1h")
    values = np.random.default_rng(0).uniform(5, 95, (len(times), E2_CELLS)).round(2)
    data = tmp / "e2_cells.parquet"
    pd.DataFrame({"timestamp": np.repeat(times, E2_CELLS),
                  "cell_id": np.tile([f"e2-{c:03d}" for c in range(E2_CELLS)], len(times)),
                  "prb_util": values.ravel()}).to_parquet(data, index=False)
    url = f"http://127.0.0.1:{free_port()}"
    node = subprocess.Popen(
        [sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", str(data), "--kpi",
         f"prb_util={MEASUREMENT}", "--listen", url.removeprefix("http://"), "--rmr-port",
         str(free_port()), "--cells-per-node", str(CELLS_PER_NODE), "--wall-clock"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=LOG.open("a"))
    return node, url


def replica(tmp: Path, name: str, model_dir: Path, redis_port: int, node_url: str,
            refresh_s: float, env: dict) -> tuple[subprocess.Popen, str]:
    e2 = {"enabled": True, "port": free_port(), "submgrUrl": f"{node_url}/ric/v1",
          "e2mgrUrl": f"{node_url}/v1", "kpis": {"traffic": {"measurement": MEASUREMENT}}}
    config = write_descriptor(tmp / name, model_dir, e2=e2, historyLength=LENGTH,
                              historyStore={"backend": "redis", "host": "127.0.0.1",
                                            "port": redis_port, "maxCells": CELLS + E2_CELLS},
                              recalibration={"everySeconds": refresh_s})
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "kpi_forecast.cli", "serve", "--config", str(config), "--host",
         "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=LOG.open("a"))
    url = f"http://127.0.0.1:{port}"
    if not wait_ready(url, process, seconds=120):
        raise RuntimeError(f"replica {name} did not get ready: {LOG.read_text()[-3000:]}")
    return process, url


def hey(url: str, seconds: float, rate: int, out: Path) -> subprocess.Popen:
    """`hey` on ``url``, its CSV into ``out`` (a pipe would fill and stop it)."""
    return subprocess.Popen(
        ["hey", "-z", f"{seconds:g}s", "-c", str(CONNECTIONS), "-q", str(rate), "-o", "csv",
         url], stdout=out.open("w"), stderr=subprocess.DEVNULL)


def answers(printed: str) -> pd.DataFrame:
    """hey's CSV: each request's status, seconds and offset from the start."""
    rows = list(csv.DictReader(io.StringIO(printed)))
    return pd.DataFrame({"status": [int(r["status-code"]) for r in rows],
                         "seconds": [float(r["response-time"]) for r in rows],
                         "offset": [float(r["offset"]) for r in rows]})


def soak(minutes: float, rate: int, refresh_s: float) -> pd.DataFrame:
    LOG.write_text("")
    env = {**os.environ, "LD_LIBRARY_PATH": str(RMR / "lib")}
    seconds = minutes * 60
    with tempfile.TemporaryDirectory() as name, redis_server(Path(name)) as redis_port:
        tmp = Path(name)
        model_dir = tmp / "model"
        model_dir.mkdir()
        default_model(model_dir)
        asyncio.run(seeded(redis_port, load_metadata(model_dir).target))
        node, node_url = e2_node(tmp, env, minutes)
        processes = {"node": node}
        try:
            urls = {}
            for name_ in ("a", "b"):
                processes[name_], urls[name_] = replica(tmp, name_, model_dir, redis_port,
                                                       node_url, refresh_s, env)
            before = {name_: scrape(url) for name_, url in urls.items()}
            loads = {name_: hey(f"{url}/v1/cells/cell-{k}/forecast", seconds, rate,
                                tmp / f"hey-{name_}.csv")
                     for k, (name_, url) in enumerate(urls.items())}
            refreshes: dict[str, set[float]] = {name_: set() for name_ in urls}
            longest = dict.fromkeys(urls, 0.0)
            leases = dict.fromkeys(urls, 0.0)
            while any(load.poll() is None for load in loads.values()):
                time.sleep(POLL_S)
                for name_, url in urls.items():
                    now = scrape(url)
                    stamp = sum(matching(now, "kpi_forecast_recalibration_last_timestamp"
                                               "_seconds").values())
                    if stamp:
                        refreshes[name_].add(stamp)
                    longest[name_] = max(longest[name_], sum(matching(
                        now, "kpi_forecast_recalibration_duration_seconds").values()))
                    leases[name_] = now.get("kpi_forecast_e2_nodes_owned", 0.0)
            after = {name_: scrape(url) for name_, url in urls.items()}
            rows = []
            for name_ in loads:
                done = answers((tmp / f"hey-{name_}.csv").read_text())
                ok = done[done.status == 200].seconds * 1000
                shed = {key.split("reason=")[1]: value - before[name_].get(key, 0.0)
                        for key, value in matching(after[name_],
                                                   "kpi_forecast_shed_requests_total").items()}
                fallbacks = sum(value - before[name_].get(key, 0.0) for key, value in matching(
                    after[name_], "kpi_forecast_fallbacks_total").items())
                refused = done[done.status == 503]
                rows.append({
                    "replica": name_, "requests": len(done), "200": int((done.status == 200).sum()),
                    "of them the fallback's": int(fallbacks),
                    "503": len(refused),
                    "other": int(((done.status != 200) & (done.status != 503)).sum()),
                    "503 reasons": ", ".join(f"{k} {v:g}" for k, v in shed.items() if v),
                    "first 503 at s": (f"{refused.offset.min():.1f}" if len(refused)
                                       else "none"),
                    "p50 ms": float(np.percentile(ok, 50)), "p99 ms": float(np.percentile(ok, 99)),
                    "max ms": float(ok.max()),
                    "recalibrations": len(refreshes[name_]),
                    "longest recalibration s": longest[name_],
                    "E2 nodes owned": leases[name_]})
        finally:
            for process in processes.values():
                process.send_signal(signal.SIGTERM)
            for process in processes.values():
                process.wait(30)
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--rate", type=int, default=25, help="requests a second per hey "
                        f"connection ({CONNECTIONS} per replica)")
    parser.add_argument("--refresh-seconds", type=float, default=60.0)
    args = parser.parse_args()
    lacking = [tool for tool in ("redis-server", "hey") if shutil.which(tool) is None]
    if lacking or not (RMR / "lib").is_dir():
        print(f"the soak needs {', '.join(lacking) or RMR / 'lib'}", file=sys.stderr)
        return 1
    table = soak(args.minutes, args.rate, args.refresh_seconds)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "soak.csv", index=False)
    results = Results(
        "soak", f"python -m benchmarks.soak --minutes {args.minutes:g} --rate {args.rate} "
        f"--refresh-seconds {args.refresh_seconds:g}", "benchmarks.md", "soak",
        tables=["soak"], figures={"refused (503)": int(table["503"].sum()),
                                  "recalibrations": int(table["recalibrations"].sum())})
    refused = int(table["503"].sum())
    section = "\n".join([
        "## Two replicas soaked under load",
        "",
        f"{results.measured}: two `kpi-forecast serve` replicas on one redis-server "
        f"({CELLS:,} cells x {LENGTH} hourly steps seeded), the E2 interface on against the "
        f"mock E2 node ({E2_CELLS // CELLS_PER_NODE} nodes shared out by leases), the default "
        f"model, budget and batching, recalibration every {args.refresh_seconds:g} s; `hey` "
        f"sending `GET /v1/cells/{{id}}/forecast` to each, {CONNECTIONS} x {args.rate}/s, for "
        f"{args.minutes:g} minutes. Target: no 503 while only background work runs beside "
        f"the requests: {'met' if refused == 0 else f'**missed** ({refused})'}.",
        "",
        table.to_markdown(index=False, floatfmt=".1f"),
        "",
    ])
    write_section(results, section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

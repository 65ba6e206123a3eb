"""The xApp over HTTP under a real load generator, on this machine.

Starts `kpi-forecast serve` with the default-size model (context 14 days, horizon 24 h) and a
10 ms latency budget; `hey` runs on the same machine. Every figure is measured in this run and
reported beside what it is compared with:

1. **capacity**, with admission control off: the highest offered rate at which the accepted
   requests' p99 (at the client) stays within the budget, from `CONNECTIONS` connections
   ramping their rate (on a machine where no step does, the results say so, and 2. is left
   out);
2. with admission on (a new process): the shed fraction below capacity, then goodput (model
   answers within the budget, per second) at 1, 1.5, 2 and 4 times capacity, as a ratio to it,
   by adding connections at the capacity's per-connection rate (hey's connections send in step,
   so this keeps the bursts' rhythm and makes them larger);
3. single-cell forecasts at 200 requests/s against the same server stack with a no-op handler
   (`benchmarks/noop_server.py`) and with the least a server does with this model
   (`benchmarks/floor_server.py`), under the same load, in turns: the serving path's own cost,
   and what no serving path can take off the no-op's latency; the same with the model's int8
   graph (`precision: int8`); and the model's bare call on one burst's rows (one per
   connection), back to back and at the load's rhythm;
4. 1000 cells in one batch call, Arrow and JSON, against the model's bare graph call on the same
   1000 rows in this process.

    python -m benchmarks.serving [--seconds 10] [--threads 0] [--model DIR]
        [--server-cpus 0,1 --client-cpus 2-5]

On a machine with more cores than the xApp is given, ``--server-cpus`` and ``--client-cpus``
pin the xApp (with the no-op and floor servers and this process's bare graph calls) and `hey`
to disjoint cores, so that the load generator's own queueing stays out of the xApp's figures.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Literal

import httpx
import numpy as np
import pandas as pd

from benchmarks.common import write_section
from benchmarks.ports import free_port
from benchmarks.request_cpu import single_cell_body
from benchmarks.results import RESULTS, Results
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.model.artifact import Precision, load_metadata
from kpi_forecast.model.features import forecast_calendar
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME, DEFAULT_DIR
from kpi_forecast.xapp.http import arrow_ipc

ROOT = Path(__file__).resolve().parents[1]
BUDGET_MS = 10.0
CONNECTIONS = 4  # of the capacity ramp; 200 requests/s is 4 x 50
RAMP = (25, 50, 75, 100, 150, 200, 300)  # requests/s per connection
OVERLOAD = (1.0, 1.5, 2.0, 4.0)  # multiples of capacity
# Single-cell p99 over the no-op's at the steady load, at most: float32, int8 graph.
NOOP_TARGET, NOOP_TARGET_INT8 = 2.0, 2.5
BELOW = (0.5, 1.0)  # fractions of the capacity's per-connection rate, admission on
STEADY = (4, 50)  # connections x requests/s each: 200 requests/s
SINGLE_ROUNDS = 3  # runs at the steady load, each beside one of the no-op's
# A step's rate counts as offered when this share of it was sent: hey rounds its pacing, and
# a short run loses its last interval.
DELIVERED = 0.95
BURST_CALLS = 500  # bare model calls on one burst's rows, for their p50 and p99


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metric_lines(url: str) -> list[str]:
    return httpx.get(f"{url}/ric/v1/metrics").text.splitlines()


def counters(lines: list[str]) -> dict[str, float]:
    """Fallback, shed and goodput counters by label, from the xApp's own metrics."""
    found = {}
    for line in lines:
        counted = line.startswith(("kpi_forecast_fallbacks_total",
                                    "kpi_forecast_shed_requests_total"))
        goodput = (line.startswith("kpi_forecast_goodput_requests_total{")
                   and 'route="/v1/forecast"' in line)
        if counted or goodput:
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


ADMISSION_GAUGES = {  # the limit's state after a run, what it steered on in its last window
    "kpi_forecast_admission_limit": "limit",
    "kpi_forecast_queueing_delay_seconds": "delay_ms",
    "kpi_forecast_service_time_seconds": "service_ms",
    "kpi_forecast_queueing_delay_allowance_seconds": "allowance_ms",
    "kpi_forecast_event_loop_lag_seconds": "loop_lag_ms",
}


def admission_state(lines: list[str]) -> dict[str, float]:
    found = {}
    for line in lines:
        name, _, value = line.partition(" ")
        if name in ADMISSION_GAUGES:
            found[ADMISSION_GAUGES[name]] = float(value) * (1000.0 if name.endswith(
                "seconds") else 1.0)
    return found


def latency_buckets(lines: list[str]) -> dict[float, float]:
    """Cumulative counts of the xApp's own /v1/forecast latency histogram, by upper bound."""
    prefix = 'kpi_forecast_request_duration_seconds_bucket{le="'
    found = {}
    for line in lines:
        if line.startswith(prefix) and 'route="/v1/forecast"' in line:
            bound = line[len(prefix):].split('"', 1)[0]
            found[float(bound)] = float(line.rsplit(" ", 1)[1])
    return found


def server_side(before: dict[float, float], after: dict[float, float]) -> tuple[float, float]:
    """Share answered within the budget, and the bucket bound holding the p99 (ms)."""
    counts = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = counts[float("inf")]
    if not total:
        return float("nan"), float("nan")
    within = counts.get(BUDGET_MS / 1000.0, float("nan")) / total
    p99 = next(bound for bound, count in counts.items() if count >= 0.99 * total)
    return within, p99 * 1000.0


CLIENT_CPUS: set[int] | None = None  # hey's cores, where --client-cpus pins it


def cpu_list(text: str) -> set[int]:
    """Linux's CPU list syntax, as taskset and cpusets write it: ``0,1`` or ``2-5,8``."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def hey(url: str, body: Path, seconds: float, connections: int, rate: int) -> dict:
    """One `hey` run; latency percentiles of the 200 answers only, status counts."""
    done = subprocess.run(
        ["hey", "-z", f"{seconds}s", "-c", str(connections), "-q", str(rate), "-m", "POST",
         "-T", "application/json", "-D", str(body), "-o", "csv", f"{url}/v1/forecast"],
        capture_output=True, text=True, check=True,
        preexec_fn=None if CLIENT_CPUS is None else (
            lambda: os.sched_setaffinity(0, CLIENT_CPUS)),
    )
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    ok = np.array([float(r["response-time"]) for r in rows if r["status-code"] == "200"]) * 1e3
    codes: dict[str, int] = {}
    for row in rows:
        codes[row["status-code"]] = codes.get(row["status-code"], 0) + 1
    return {
        "connections": connections, "offered_rps": connections * rate,
        "ok_rps": round(len(ok) / seconds, 1),
        "p50_ms": float(np.percentile(ok, 50)) if len(ok) else np.nan,
        "p99_ms": float(np.percentile(ok, 99)) if len(ok) else np.nan,
        "shed_503": codes.get("503", 0),
        "other_errors": sum(n for c, n in codes.items() if c not in ("200", "503")),
        "requests": len(rows),
    }


def measured(url: str, body: Path, seconds: float, connections: int, rate: int) -> dict:
    """A `hey` run with what the xApp counted meanwhile: goodput, fallbacks, its own p99."""
    before = metric_lines(url)
    run = hey(url, body, seconds, connections, rate)
    after = metric_lines(url)
    counted = counters(before)
    delta = {k: v - counted.get(k, 0.0) for k, v in counters(after).items()}
    run["goodput_rps"] = round(sum(v for k, v in delta.items() if "goodput" in k) / seconds, 1)
    run["fallbacks"] = int(sum(v for k, v in delta.items() if "fallbacks" in k))
    run["server_within_budget"], run["server_p99_le_ms"] = server_side(
        latency_buckets(before), latency_buckets(after))
    run["shed_fraction"] = run["shed_503"] / run["requests"] if run["requests"] else np.nan
    return run | admission_state(after)


def capacity_of(ramp: list[dict]) -> dict | None:
    """The ramp step of the highest offered rate whose accepted p99 is within the budget,
    with nothing refused or failed, and the rate delivered: `hey`'s connections wait for
    their answers, so a rate they could not keep up was never offered (None: no step)."""
    within = [r for r in ramp if r["p99_ms"] <= BUDGET_MS and r["shed_503"] == 0
              and r["other_errors"] == 0 and r["ok_rps"] >= DELIVERED * r["offered_rps"]]
    return max(within, key=lambda r: r["offered_rps"]) if within else None


@contextmanager
def serving(command: list[str]) -> Iterator[tuple[str, int]]:
    """A server process on a free port until the block ends: (its URL, its pid)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([*command, str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        if not wait_ready(url, server):
            raise RuntimeError(f"{command[2:4]} did not become ready")
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(30)


@contextmanager
def beside(xapp: list[str], *yardsticks: list[str]) -> Iterator[tuple[list[str], int]]:
    """The xApp and the servers it is measured against, up at once: their URLs (the xApp's
    first) and the xApp's pid."""
    with ExitStack() as stack:
        url, pid = stack.enter_context(serving(xapp))
        yield [url, *(stack.enter_context(serving(command))[0] for command in yardsticks)], pid


def arrow_body(cells: int, context: int) -> bytes:
    rng = np.random.default_rng(0)
    return arrow_ipc.write_request(
        [f"cell-{i:05d}" for i in range(cells)],
        [pd.Timestamp("2024-03-01", tz="UTC")] * cells,
        list(rng.gamma(2.0, 10.0, (cells, context)).astype(np.float32)))


def batch_calls(url: str, cells: int, repeats: int, bare: BareGraph) -> list[dict]:
    """Each body's calls, every one right after a bare graph call on the same rows in this
    process: the two are measured side by side, through the same moments of the machine."""
    arrow = arrow_body(cells, bare.context)
    rng = np.random.default_rng(0)
    items = [{"cell_id": f"cell-{i:05d}", "start": "2024-03-01T00:00:00+00:00", "freq": "1h",
              "values": [round(float(v), 2) for v in rng.gamma(2.0, 10.0, bare.context)]}
             for i in range(cells)]
    json_body = json.dumps({"items": items}).encode()
    rows = []
    with httpx.Client(timeout=30) as client:
        for name, payload, content_type, query in (
            ("Arrow IPC", arrow, "application/vnd.apache.arrow.stream", "?freq=1h"),
            ("JSON", json_body, "application/json", ""),
        ):
            times, server, graph = [], [], []
            for _ in range(repeats + 2):
                graph.append(bare.call_ms())
                started = time.perf_counter()
                response = client.post(f"{url}/v1/forecast/batch{query}", content=payload,
                                       headers={"content-type": content_type})
                times.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                server.append(float(response.headers.get("x-latency-ms")
                                    or response.json()["latency_ms"]))
            # The first calls warm the larger shapes.
            times, server, graph = times[2:], server[2:], graph[2:]
            rows.append({
                "body": name, "cells": cells, "request_mb": round(len(payload) / 2**20, 2),
                "p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.max(times)),
                "server_p50_ms": float(np.percentile(server, 50)),
                "bare_graph_p50_ms": float(np.percentile(graph, 50)), "calls": repeats,
            })
    return rows


class BareGraph:
    """The model's graph alone (``OnnxForecaster.run``, split across the cores as the xApp's
    batch call does) on the rows and calendar of the batch benchmark's Arrow body."""

    def __init__(self, model_dir: Path, cells: int, threads: int,
                 precision: Literal["auto"] | Precision = "auto") -> None:
        self.forecaster = OnnxForecaster(model_dir, RuntimeOptions(intra_op_threads=threads,
                                                                   precision=precision))
        meta, step = self.forecaster.metadata, self.forecaster.step
        self.context = meta.context
        self.values = np.random.default_rng(0).gamma(2.0, 10.0, (cells, meta.context)).astype(
            np.float32)
        last = pd.DatetimeIndex(
            [pd.Timestamp("2024-03-01", tz="UTC") + (meta.context - 1) * step] * cells)
        self.calendar = forecast_calendar(last, meta.context, meta.horizon, step,
                                          meta.calendar_tz, meta.holidays)

    def call_ms(self) -> float:
        started = time.perf_counter()
        self.forecaster.run(self.values, self.calendar)
        return (time.perf_counter() - started) * 1000


def burst_call(model_dir: Path, precision: Precision) -> dict:
    """The bare graph on one burst's rows (a row per connection of the steady load), on one
    thread as the xApp runs a small batch: the model's share of every request in the burst.
    Timed back to back, and at the steady load's rhythm (one call per connection interval,
    idle in between), which is how the xApp calls it: a call after an idle gap finds the
    graph's weights and the core colder than one right after another."""
    bare = BareGraph(model_dir, STEADY[0], threads=1, precision=precision)
    for _ in range(20):
        bare.call_ms()
    back_to_back = [bare.call_ms() for _ in range(BURST_CALLS)]
    paced, due = [], time.perf_counter()
    for _ in range(BURST_CALLS):
        due += 1.0 / STEADY[1]
        time.sleep(max(0.0, due - time.perf_counter()))
        paced.append(bare.call_ms())
    return {"p50_ms": float(np.percentile(back_to_back, 50)),
            "p99_ms": float(np.percentile(back_to_back, 99)),
            "paced_p50_ms": float(np.percentile(paced, 50)),
            "paced_p99_ms": float(np.percentile(paced, 99))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=0,
                        help="ONNX Runtime intra-op threads of the xApp (0: all cores)")
    parser.add_argument("--model", type=Path,
                        help="serve this exported default-size model rather than exporting one "
                        "(a node whose torch or onnx differ from the project's)")
    parser.add_argument("--server-cpus", type=cpu_list, metavar="LIST",
                        help="the xApp's cores (and this process's), e.g. 0,1")
    parser.add_argument("--client-cpus", type=cpu_list, metavar="LIST",
                        help="hey's cores, e.g. 2-5; with --server-cpus")
    args = parser.parse_args()
    if shutil.which("hey") is None:
        print("skipped: `hey` is not installed (apt-get install hey)")
        return 0
    if (args.server_cpus is None) != (args.client_cpus is None):
        parser.error("--server-cpus and --client-cpus go together")
    if args.server_cpus is not None:
        if args.server_cpus & args.client_cpus:
            parser.error("--server-cpus and --client-cpus share cores")
        global CLIENT_CPUS
        CLIENT_CPUS = args.client_cpus
        os.sched_setaffinity(0, args.server_cpus)  # the xApp and the no-op server inherit it
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or Path(tmp) / "model"
        if args.model is None:
            from benchmarks.runtime import default_model  # torch and onnx: only to export

            model_dir.mkdir()
            default_model(model_dir)
        context = load_metadata(model_dir).context
        body = Path(tmp) / "body.json"
        body.write_bytes(single_cell_body(context))
        results = run_scenarios(Path(tmp), model_dir, body, args) | {"context": context}
    write_results(results, args)
    return 0


def xapp_command(tmp: Path, model_dir: Path, admission: str, threads: int,
                 precision: str = "auto") -> list[str]:
    raw = json.loads((DEFAULT_DIR / CONFIG_FILE_NAME).read_text())
    raw["controls"].update(modelDir=str(model_dir), latencyBudgetMs=BUDGET_MS,
                           intraOpThreads=threads, precision=precision)
    raw["controls"]["batching"]["admission"] = admission
    config = tmp / f"config-{admission}-{precision}.json"
    config.write_text(json.dumps(raw))
    return [sys.executable, "-m", "kpi_forecast.cli", "serve", "--config", str(config),
            "--host", "127.0.0.1", "--port"]


def floor_command(model_dir: Path, precision: Precision) -> list[str]:
    return [sys.executable, "-m", "benchmarks.floor_server", str(model_dir), precision]


def single_cell_rounds(urls: list[str], body: Path, seconds: float) -> list[list[dict]]:
    """The runs at the steady load of each server (the xApp's first, then the yardsticks
    beside it), in turns: a yardstick's p99 moves from run to run as much as the xApp's, so
    each ratio is of runs made one after the other."""
    for url in urls:
        hey(url, body, 2, *STEADY)  # warm-up
    runs: list[list[dict]] = [[] for _ in urls]
    for _ in range(SINGLE_ROUNDS):
        runs[0].append(measured(urls[0], body, seconds, *STEADY))
        for url, theirs in zip(urls[1:], runs[1:], strict=True):
            theirs.append(hey(url, body, seconds, *STEADY))
    return runs


def run_scenarios(tmp: Path, model_dir: Path, body: Path, args: argparse.Namespace) -> dict:
    seconds = args.seconds
    with serving(xapp_command(tmp, model_dir, "off", args.threads)) as (url, _):
        hey(url, body, 2, *STEADY)  # warm-up
        # The whole ramp: latency is not monotonic in the rate (after an idle gap a model call
        # takes twice as long on these VMs), so a slow low step does not end it.
        ramp = [measured(url, body, seconds / 2, CONNECTIONS, rate) for rate in RAMP]
        capacity = capacity_of(ramp)
        answer = httpx.post(f"{url}/v1/forecast", content=body.read_bytes(),
                            headers={"content-type": "application/json"}).content
    (tmp / "answer.json").write_bytes(answer)
    noop_command = [sys.executable, "-m", "benchmarks.noop_server", str(tmp / "answer.json")]
    with beside(xapp_command(tmp, model_dir, "adaptive", args.threads),
                floor_command(model_dir, "float32"), noop_command) as (urls, pid):
        url = urls[0]
        steady, floor, noop = single_cell_rounds(urls, body, seconds)
        below, overload, rss = [], [], None
        if capacity is not None:  # else nothing to take multiples of: reported as such
            rate = capacity["offered_rps"] // CONNECTIONS
            below = [measured(url, body, seconds, CONNECTIONS, max(1, round(rate * f)))
                     for f in BELOW]
            rss_before = rss_mb(pid)
            for multiple in OVERLOAD:
                run = measured(url, body, seconds, round(CONNECTIONS * multiple), rate)
                run["x_capacity"] = multiple
                run["goodput_ratio"] = run["goodput_rps"] / capacity["goodput_rps"]
                overload.append(run)
            rss = (rss_before, rss_mb(pid))
        batches = batch_calls(url, 1000, 20, BareGraph(model_dir, 1000, args.threads))
    with beside(xapp_command(tmp, model_dir, "adaptive", args.threads, "int8"),
                floor_command(model_dir, "int8"), noop_command) as (urls, _):
        int8, floor_int8, noop_int8 = single_cell_rounds(urls, body, seconds)
    burst = {precision: burst_call(model_dir, precision) for precision in ("float32", "int8")}
    return {"ramp": ramp, "capacity": capacity,
            "steady": steady, "below": below, "overload": overload,
            "rss": rss, "noop": noop, "floor": floor, "int8": int8, "noop_int8": noop_int8,
            "floor_int8": floor_int8, "burst": burst,
            "batches": batches}


def cpu_text(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def admission_sections(results: dict, below: pd.DataFrame, overload: pd.DataFrame
                       ) -> list[str]:
    """The capacity, then admission below and beyond it; or why there was none to measure."""
    capacity = results["capacity"]
    if capacity is None:
        first = results["ramp"][0]
        return [f"**No capacity**: no step of the ramp was answered within the "
                f"{BUDGET_MS:g} ms budget with nothing refused (the lowest, "
                f"{first['offered_rps']} requests/s: accepted p99 {first['p99_ms']:.1f} ms), "
                "so nothing was offered in multiples of it: the shedding and overload targets "
                "were not measured in this run.", ""]
    rss_before, rss_after = results["rss"]
    at = {run["x_capacity"]: run for run in results["overload"]}
    worst_shed_below = max(run["shed_fraction"] for run in results["below"])
    overloaded = [at[m] for m in (2.0, 4.0)]
    steering = pd.DataFrame(results["overload"])[["x_capacity", *ADMISSION_GAUGES.values()]]
    return [
        f"**Capacity: {capacity['offered_rps']} requests/s** ({CONNECTIONS} x "
        f"{capacity['offered_rps'] // CONNECTIONS}), the highest rate whose accepted p99 "
        f"({capacity['p99_ms']:.1f} ms) was within the budget with nothing refused and "
        f"{DELIVERED:.0%} of it sent or more; goodput "
        f"there {capacity['goodput_rps']:g}/s. Every ratio below is to this run's figures.",
        "",
        "### Admission on: below capacity",
        "",
        below.to_markdown(index=False, floatfmt=".3g"),
        "",
        f"Shed fraction below capacity at most {worst_shed_below:.2%} (target under 0.5 %: "
        f"{verdict(worst_shed_below < 0.005)}).",
        "",
        "### Admission on: at and beyond capacity (more connections at the capacity's rate each)",
        "",
        overload.to_markdown(index=False, floatfmt=".3g"),
        "",
        "The in-flight limit at the end of each run, and what it steered on in its last window "
        "(the 99th percentiles of the queueing delay and of the service time, the allowance, "
        "the event loop's lag):",
        "",
        steering.to_markdown(index=False, floatfmt=".3g"),
        "",
        "At 2x and 4x capacity: goodput "
        f"{min(r['goodput_ratio'] for r in overloaded):.2f}-"
        f"{max(r['goodput_ratio'] for r in overloaded):.2f} of capacity (target at least 0.9: "
        f"{verdict(all(r['goodput_ratio'] >= 0.9 for r in overloaded))}); accepted p99 at the "
        f"client {min(r['p99_ms'] for r in overloaded):.1f}-"
        f"{max(r['p99_ms'] for r in overloaded):.1f} ms (target at most "
        f"{1.2 * BUDGET_MS:g} ms: "
        f"{verdict(all(r['p99_ms'] <= 1.2 * BUDGET_MS for r in overloaded))}); at the xApp "
        f"{min(r['server_within_budget'] for r in overloaded):.1%} or more within "
        f"the budget (target: its p99 within it, 99 % or more: "
        f"{verdict(all(r['server_within_budget'] >= 0.99 for r in overloaded))}); "
        f"refusals other than 503: "
        f"{sum(r['other_errors'] for r in overloaded)} (target none: "
        f"{verdict(sum(r['other_errors'] for r in overloaded) == 0)}). Server memory (RSS) "
        f"{rss_before:.0f} MB before these runs, {rss_after:.0f} MB after.",
        "",
    ]


def timings(call: dict) -> str:
    """A bare call's p50 / p99, back to back and at the load's rhythm."""
    return (f"{call['p50_ms']:.2f} / {call['p99_ms']:.2f} ms back to back and "
            f"{call['paced_p50_ms']:.2f} / {call['paced_p99_ms']:.2f} ms at the load's rhythm")


def p99_ratio(runs: list[dict], beside: list[dict]) -> float:
    """The median over pairs of runs of one p99 over the other's."""
    return statistics.median(a["p99_ms"] / b["p99_ms"] for a, b in zip(runs, beside, strict=True))


def single_cell_table(handlers: list[tuple[str, list[dict]]]) -> str:
    """Per handler: the median p50 and p99 of its runs, each run's p99, what was refused."""
    return pd.DataFrame([{
        "handler": name,
        "p50_ms": statistics.median(run["p50_ms"] for run in runs),
        "p99_ms": statistics.median(run["p99_ms"] for run in runs),
        "p99_runs_ms": " / ".join(f"{run['p99_ms']:.1f}" for run in runs),
        "ok_rps": statistics.median(run["ok_rps"] for run in runs),
        "shed_503": sum(run["shed_503"] for run in runs),
        "other_errors": sum(run["other_errors"] for run in runs),
    } for name, runs in handlers]).to_markdown(index=False, floatfmt=".3g")


def write_results(results: dict, args: argparse.Namespace) -> None:
    steady, floor, noop = results["steady"], results["floor"], results["noop"]
    int8, floor_int8, noop_int8 = results["int8"], results["floor_int8"], results["noop_int8"]
    burst = results["burst"]
    load_columns = ["connections", "offered_rps", "ok_rps", "goodput_rps", "p50_ms", "p99_ms",
                    "shed_503", "fallbacks", "other_errors", "server_within_budget",
                    "server_p99_le_ms"]
    ramp = pd.DataFrame(results["ramp"])[load_columns]
    below = pd.DataFrame(results["below"], columns=[*load_columns, "shed_fraction"])
    overload = pd.DataFrame(results["overload"], columns=[
        "x_capacity", *load_columns, "goodput_ratio", "shed_fraction"])
    batches = pd.DataFrame(results["batches"])
    batches["x_bare_graph"] = batches["server_p50_ms"] / batches["bare_graph_p50_ms"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    phases = [ramp.assign(phase="capacity ramp, admission off"),
              below.assign(phase="below capacity, admission on"),
              overload.assign(phase="overload, admission on"),
              pd.DataFrame(steady).assign(phase="200 requests/s"),
              pd.DataFrame(floor).assign(phase="200 requests/s, floor server"),
              pd.DataFrame(noop).assign(phase="200 requests/s, no-op handler"),
              pd.DataFrame(int8).assign(phase="200 requests/s, int8 graph"),
              pd.DataFrame(floor_int8).assign(phase="200 requests/s, floor server, int8 graph"),
              pd.DataFrame(noop_int8).assign(phase="200 requests/s, no-op handler beside int8")]
    pd.concat([frame for frame in phases if not frame.empty]).to_csv(
        RESULTS / "serving_load.csv", index=False)
    batches.to_csv(RESULTS / "serving_batch.csv", index=False)
    run = Results("serving", "python -m benchmarks.serving" + (
        f" --seconds {args.seconds:g}" if args.seconds != 10 else "") + (
        f" --threads {args.threads}" if args.threads != 0 else "") + (
        f" --model {args.model}" if args.model else "") + (
        f" --server-cpus {cpu_text(args.server_cpus)} --client-cpus "
        f"{cpu_text(args.client_cpus)}" if args.server_cpus else ""),
        "benchmarks.md", "serving", tables=["serving_load", "serving_batch"])
    where_hey = (f"on cores of its own ({len(args.client_cpus)}; the xApp has "
                 f"{len(args.server_cpus)})" if args.server_cpus else "on the same cores")
    cost, int8_cost = p99_ratio(steady, noop), p99_ratio(int8, noop_int8)
    least, least_int8 = p99_ratio(floor, noop), p99_ratio(floor_int8, noop_int8)
    layers, layers_int8 = p99_ratio(steady, floor), p99_ratio(int8, floor_int8)
    # A bound below the floor server's: the no-op's p99 and the model's paced call, summed.
    noop_p99 = statistics.median(run["p99_ms"] for run in noop)
    noop_int8_p99 = statistics.median(run["p99_ms"] for run in noop_int8)
    bound = (noop_p99 + burst["float32"]["paced_p50_ms"]) / noop_p99
    bound_int8 = (noop_int8_p99 + burst["int8"]["paced_p50_ms"]) / noop_int8_p99
    arrow = batches.iloc[0]

    lines = [
        "## The xApp over HTTP, under load",
        "",
        f"{run.measured} (part of `make bench`): "
        f"`kpi-forecast serve` (uvicorn with uvloop and httptools, one process) with the "
        f"default-size model (context {results['context']} h, horizon 24 h, 3 members), a "
        f"{BUDGET_MS:g} ms latency budget, ONNX Runtime intra-op threads "
        f"{args.threads or 'automatic (one per call, large batches split across the cores)'}, "
        f"dynamic batching (max batch 64, max queue delay 2 ms); the load generator `hey` runs "
        f"{where_hey}. Client latencies are `hey`'s, of the 200 answers; `goodput_rps` is "
        "what the xApp answered from the model within the budget "
        "(`kpi_forecast_goodput_requests_total`), per second; `server_*` come from its own "
        "latency histogram (`server_p99_le_ms` is a bucket bound). `hey` starts its "
        "connections together and each sends at its own rate, so requests come in bursts of "
        "one per connection.",
        "",
        f"### Capacity: admission off, {CONNECTIONS} connections ramping their rate",
        "",
        ramp.to_markdown(index=False, floatfmt=".3g"),
        "",
        *admission_sections(results, below, overload),
        f"### Single-cell forecasts at 200 requests/s ({STEADY[0]} x {STEADY[1]}) against a "
        "no-op handler on the same stack",
        "",
        single_cell_table([("kpi-forecast", steady), ("floor server, beside it", floor),
                           ("no-op, beside it", noop), ("kpi-forecast, int8 graph", int8),
                           ("floor server, beside it", floor_int8),
                           ("no-op, beside it", noop_int8)]),
        "",
        f"{SINGLE_ROUNDS} runs of each, in turns (medians; `p99_runs_ms` each run's). The "
        f"xApp's p99 is **{cost:.2f}x** the no-op's (the median of the runs' ratios; target at "
        f"most {NOOP_TARGET}x: {verdict(cost <= NOOP_TARGET)}): the serving path's own cost, "
        f"model included. With the int8 graph (`precision: int8`, a process of its own) it is "
        f"**{int8_cost:.2f}x** (target at most {NOOP_TARGET_INT8}x: "
        f"{verdict(int8_cost <= NOOP_TARGET_INT8)}). "
        "The floor server (`benchmarks.floor_server`) does the least any server does with "
        "this model: it parses the body with the xApp's request model, answers the requests "
        "that arrive together from one call of the model's contract (`OnnxForecaster."
        "forecast`) in a worker thread, and encodes the quantiles and their timestamps, with "
        "no admission, budget, fallback, A1 policy or metrics. Its p99 is "
        f"**{least:.2f}x** the no-op's (int8 **{least_int8:.2f}x**): what this model costs "
        f"on this machine, whoever serves it; the xApp's own layers make the rest, "
        f"**{layers:.2f}x** the floor server's p99 (int8 **{layers_int8:.2f}x**). The model's "
        f"call on one burst's {STEADY[0]} rows alone (the bare graph in the benchmark's "
        f"process, one thread, {BURST_CALLS} calls) takes {timings(burst['float32'])} "
        f"(p50 / p99), the int8 graph's {timings(burst['int8'])}: a call every "
        f"{1000 / STEADY[1]:g} ms, idle in between, finds the weights and the core cold.",
        "",
        "### 1000 cells in one batch call (two weeks of hourly history each)",
        "",
        batches.to_markdown(index=False, floatfmt=".3g"),
        "",
        f"`bare_graph_p50_ms` is the model's graph alone on the same 1000 rows "
        f"(`OnnxForecaster.run` in the benchmark's process, split across the cores as the xApp "
        f"does), each call right before one to the xApp: {arrow['bare_graph_p50_ms']:.1f} ms "
        f"beside the Arrow calls. The Arrow call at the xApp is "
        f"**{arrow['x_bare_graph']:.2f}x** that (target at most 1.3x: "
        f"{verdict(arrow['x_bare_graph'] <= 1.3)}). `p99_ms` is the slowest call; "
        "`server_p50_ms` is the xApp's own latency (arrival to response body).",
        "",
    ]
    run.figures = {"p99 over no-op": cost, "int8 p99 over no-op": int8_cost,
                   "floor server p99 over no-op": least,
                   "int8 floor server p99 over no-op": least_int8,
                   "p99 over floor server": layers, "int8 p99 over floor server": layers_int8,
                   "no-op and paced model call over no-op": bound,
                   "int8: no-op and paced model call over no-op": bound_int8,
                   "ms left under the target for the rest": (NOOP_TARGET - bound) * noop_p99,
                   "p99 ms": statistics.median(run["p99_ms"] for run in steady),
                   "arrow over bare graph": arrow["x_bare_graph"]}
    print("\n".join(lines))
    write_section(run, "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

"""E2 at RIC scale: 10^4 cells reporting every second into one, then two replicas.

Everything real and in processes of their own, on this machine's cores: the mock E2 node
(`kpi-forecast e2sim --wall-clock`: each cell's report leaves as its one-second period ends),
librmr (``../shared/rmr``), a redis-server, and `kpi-forecast serve` replicas sharing out the
E2 nodes by leases in that Redis. The model is the default network with a one-second step, so
that the replicas subscribe for one report per cell per second; its background work (live
scoring, recalibration) is off, since on that grid it would cost per model step what it costs
an hourly model per hour (``scoring_cost`` and ``background_work`` measure it).

1. One replica owns every node: indications ingested per second, p99 ingest lag (from the
   end of a report's period to its values in Redis), CPU per 1,000 indications.
2. A second replica joins and takes its share: the same figures per replica and in all.
3. One replica is killed (SIGKILL: no unsubscription, no lease given back): the time until
   the other owns, and has subscribed for, every node; then every cell's history in Redis is
   read back and each report missing from it counted as lost (the mock node's data has no
   gaps), and each report delivered twice (kept once) counted as doubled.

    python -m benchmarks.e2_scale [--cells 10000] [--seconds 60]

The processes' logs are left in the temporary directory's ``e2_scale.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import redis
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import write_section
from benchmarks.ports import free_port
from benchmarks.results import RESULTS, Results
from benchmarks.runtime import default_model
from kpi_forecast.cli.mock_e2_node import cell_id
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.ric.e2.ownership import TAKEOVER_BOUND_S
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from tests.redis_server import redis_server
from tests.rmr_library import RMR
from tests.xapp_helpers import write_descriptor

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENT = "RRU.PrbUsedDl"
HISTORY_LENGTH = 900  # steps of one second: the whole run stays in every cell's window
TICK_S = os.sysconf("SC_CLK_TCK")
LOG = Path(tempfile.gettempdir()) / "e2_scale.log"  # the processes' stderr, left for a look


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent on anything but idle and I/O wait, so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICK_S


def scrape(url: str) -> dict[str, float]:
    """Every sample of the xApp's /ric/v1/metrics at ``url``, by name and labels."""
    text = httpx.get(f"{url}/ric/v1/metrics", timeout=10).text
    return {sample.name + "".join(f"|{k}={v}" for k, v in sorted(sample.labels.items())):
            sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples}


@dataclass
class Replica:
    name: str
    process: subprocess.Popen
    url: str
    endpoint: str  # host:port of its rmr-data listener

    def metrics(self) -> dict[str, float]:
        return scrape(self.url)


@dataclass
class Snapshot:
    at: float  # monotonic s
    metrics: dict[str, dict[str, float]]  # by replica
    cpu: dict[str, float]  # process name -> CPU s
    machine_cpu: float
    redis_commands: int  # those run by scripts included
    redis_scripts: int  # script calls: one per cell written


def lag_quantile(before: dict[str, float], after: dict[str, float], q: float) -> float:
    """``q`` of the ingest lag between two scrapes, interpolated in its bucket as Prometheus's
    histogram_quantile does."""
    lower, upper, share = _lag_bucket(before, after, q)
    return lower if np.isinf(upper) else lower + (upper - lower) * share


def lag_bucket(before: dict[str, float], after: dict[str, float], q: float
               ) -> tuple[float, float]:
    """The bounds of the histogram bucket that holds ``q`` of the lag: all that the
    histogram knows of it, whatever the interpolation says."""
    lower, upper, _ = _lag_bucket(before, after, q)
    return lower, upper


def _lag_bucket(before: dict[str, float], after: dict[str, float], q: float
                ) -> tuple[float, float, float]:
    """(lower, upper, the share of the bucket's count below the rank); NaNs without any."""
    prefix = "kpi_forecast_e2_ingest_lag_seconds_bucket|le="
    bounds = sorted((float(key[len(prefix):]), after[key] - before.get(key, 0.0))
                    for key in after if key.startswith(prefix))
    total = bounds[-1][1]
    if total == 0:
        return float("nan"), float("nan"), float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in bounds:
        if count >= rank:
            return lower, upper, (rank - below) / max(count - below, 1e-12)
        lower, below = upper, count
    return lower, float("inf"), 0.0


class Bench:
    def __init__(self, tmp: Path, redis_port: int, cells: int, cells_per_node: int,
                 seconds: float) -> None:
        self.tmp, self.redis_port, self.cells = tmp, redis_port, cells
        self.cells_per_node, self.seconds = cells_per_node, seconds
        self.nodes = -(-cells // cells_per_node)
        self.log = LOG
        self.log.write_text("")
        self.replicas: dict[str, Replica] = {}
        self.redis = redis.Redis(port=redis_port)
        self.redis_pid = int(self.redis.info("server")["process_id"])
        self.model_dir = tmp / "model"
        self.model_dir.mkdir()
        default_model(self.model_dir, freq="1s")
        self.env = {**os.environ, "LD_LIBRARY_PATH": str(RMR / "lib")}

    def start_node(self, run_s: float) -> None:
        """The mock E2 node(s), with data from a few seconds ago to past the run's end."""
        now = pd.Timestamp.now(tz="UTC").floor("s")
        steps = int(run_s) + 10
        times = pd.date_range(now - pd.Timedelta("5s"), periods=steps, freq="1s")
        values = np.random.default_rng(0).uniform(5, 95, (steps, self.cells)).round(2)
        data = self.tmp / "cells.parquet"
        pd.DataFrame({"timestamp": np.repeat(times, self.cells),
                      "cell_id": np.tile([f"cell-{c:05d}" for c in range(self.cells)], steps),
                      "prb_util": values.ravel()}).to_parquet(data, index=False)
        self.node_url = f"http://127.0.0.1:{free_port()}"
        self.node = subprocess.Popen(
            [sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", str(data), "--kpi",
             f"prb_util={MEASUREMENT}", "--listen", self.node_url.removeprefix("http://"),
             "--rmr-port", str(free_port()), "--cells-per-node", str(self.cells_per_node),
             "--wall-clock"], cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL,
            stderr=self.log.open("a"))

    def start_replica(self, name: str, **controls: object) -> Replica:
        """A replica with the bench's descriptor, ``controls`` (camelCase) replaced."""
        rmr_port, http_port = free_port(), free_port()
        e2 = {"enabled": True, "port": rmr_port, "submgrUrl": f"{self.node_url}/ric/v1",
              "e2mgrUrl": f"{self.node_url}/v1",
              "kpis": {"traffic": {"measurement": MEASUREMENT}}}
        store = {"backend": "redis", "host": "127.0.0.1", "port": self.redis_port}
        # The model's own background work off: on a one-second grid live scoring forecasts
        # every cell each horizon (24 s) and a recalibration refresh, hourly, falls in a phase
        # of a minute: work per model step or per refresh, measured by benchmarks.scoring_cost
        # and benchmarks.background_work, not E2's per indication.
        config = write_descriptor(self.tmp / name, self.model_dir, **{
            "e2": e2, "historyStore": store, "historyLength": HISTORY_LENGTH,
            "scoring": {"enabled": False}, "recalibration": {"everySeconds": 0}, **controls})
        process = subprocess.Popen(
            [sys.executable, "-m", "kpi_forecast.cli", "serve", "--config", str(config),
             "--host", "127.0.0.1", "--port", str(http_port)],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=self.log.open("a"))
        replica = Replica(name, process, f"http://127.0.0.1:{http_port}",
                          f"127.0.0.1:{rmr_port}")
        if not wait_ready(replica.url, process, seconds=120):
            raise RuntimeError(f"replica {name} did not get ready: {self.tail()}")
        self.replicas[name] = replica
        return replica

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def subscribers(self) -> dict[str, list[str]]:
        return httpx.get(f"{self.node_url}/stats", timeout=10).json()["subscribers"]

    def node_stats(self, seconds: float | None = None) -> dict:
        """The mock node's /stats, its send lag over the last ``seconds`` (all, without)."""
        params = {} if seconds is None else {"seconds": seconds}
        return httpx.get(f"{self.node_url}/stats", params=params, timeout=10).json()

    def wait_until(self, check: Callable[[], bool], seconds: float, what: str) -> float:
        """Seconds until ``check()`` held (polled every 100 ms)."""
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            with contextlib.suppress(httpx.TransportError):
                if check():
                    return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"not within {seconds} s: {what}; {self.subscribers()} "
                           f"{self.tail()}")

    def shared_out(self) -> bool:
        """Every node subscribed for by exactly one replica, each holding its share."""
        held = self.subscribers()
        live = list(self.replicas.values())
        owned = [r.metrics().get("kpi_forecast_e2_nodes_owned", 0.0) for r in live]
        share = -(-self.nodes // len(live))
        return (len(held) == self.nodes and all(len(ends) == 1 for ends in held.values())
                and sum(owned) == self.nodes and max(owned) <= share)

    def outcomes_taken(self) -> bool:
        """Every subscription outcome the subscription manager had to post, taken (or given
        up): the nodes report from then on, and the posts cost nothing more."""
        stats = self.node_stats()
        done = stats.get("outcomes_delivered", 0) + stats.get("notifications_failed", 0)
        return done == stats.get("outcomes", 0) >= self.cells

    def snapshot(self) -> Snapshot:
        cpu = {name: cpu_seconds(r.process.pid) for name, r in self.replicas.items()}
        cpu.update(node=cpu_seconds(self.node.pid), redis=cpu_seconds(self.redis_pid))
        scripts = self.redis.info("commandstats").get("cmdstat_evalsha", {"calls": 0})
        return Snapshot(time.monotonic(), {n: r.metrics() for n, r in self.replicas.items()},
                        cpu, machine_busy_seconds(),
                        int(self.redis.info("stats")["total_commands_processed"]),
                        int(scripts["calls"]))

    def steady(self, label: str) -> dict:
        """The figures of ``self.seconds`` of steady state with the replicas now running."""
        before = self.snapshot()
        time.sleep(self.seconds)
        after = self.snapshot()
        elapsed = after.at - before.at
        row: dict = {"phase": label, "replicas": len(self.replicas), "seconds": elapsed}
        total = 0.0
        for name in self.replicas:
            b, a = before.metrics[name], after.metrics[name]
            count = a["kpi_forecast_e2_indications_total"] - b["kpi_forecast_e2_indications_total"]
            total += count
            row[f"{name}_per_s"] = count / elapsed
            row[f"{name}_p99_lag_s"] = lag_quantile(b, a, 0.99)
            row[f"{name}_p99_lag_bucket_s"] = "-".join(f"{bound:g}" for bound in
                                                       lag_bucket(b, a, 0.99))
            row[f"{name}_cpu_ms_per_1000"] = (
                1e6 * (after.cpu[name] - before.cpu[name]) / max(count, 1))
            row[f"{name}_cpu_share"] = (after.cpu[name] - before.cpu[name]) / elapsed
        row["per_s"] = total / elapsed
        row["node_send_lag_p99_s"] = self.node_stats(elapsed)["send_lag_p99_ms"] / 1000
        row["rejected"] = sum(
            value - before.metrics[name].get(key, 0.0) for name in self.replicas
            for key, value in after.metrics[name].items()
            if key.startswith("kpi_forecast_e2_indications_rejected_total|"))
        row["offered_per_s"] = float(self.cells)
        for part in ("node", "redis"):
            row[f"{part}_cpu_share"] = (after.cpu[part] - before.cpu[part]) / elapsed
        row["machine_busy"] = (after.machine_cpu - before.machine_cpu) / elapsed / os.cpu_count()
        row["redis_ops_per_s"] = (after.redis_commands - before.redis_commands) / elapsed
        row["redis_scripts_per_s"] = (after.redis_scripts - before.redis_scripts) / elapsed
        row["redis_used_mb"] = self.redis.info("memory")["used_memory"] / 2**20
        return row

    def leases(self, meids: list[str]) -> dict[str, bytes | None]:
        """Each of the E2 nodes' lease holder in Redis (a replica's id), None where free."""
        namespace = HistoryStore().namespace  # the replicas' configs leave it as it is
        holders = self.redis.mget([f"{{{namespace}}},e2-lease:{meid}" for meid in meids])
        return dict(zip(meids, holders, strict=True))

    def kill(self, name: str) -> dict:
        """SIGKILL one replica; the time until the survivor holds the leases of every node,
        and until it has subscribed to each, and the window of the kill."""
        victim = self.replicas.pop(name)
        doubled_victim = victim.metrics().get("kpi_forecast_e2_reports_not_kept_total", 0.0)
        held = self.subscribers()
        # The nodes, read once: the mock node's /stats answers slowly while it sends 10^4
        # reports a second, and the leases are polled in Redis alone.
        meids = sorted(held)
        victim_id = next(self.leases(meids)[meid] for meid, ends in held.items()
                         if ends == [victim.endpoint])
        victim.process.kill()
        victim.process.wait(10)
        killed_at = pd.Timestamp.now(tz="UTC")
        [survivor] = self.replicas.values()
        leased = self.wait_until(
            lambda: all(holder not in (None, victim_id)
                        for holder in self.leases(meids).values()),
            TAKEOVER_BOUND_S + 30, "the leases taken over")
        takeover = leased + self.wait_until(
            lambda: all(survivor.endpoint in ends for ends in self.subscribers().values())
            and survivor.metrics().get("kpi_forecast_e2_nodes_owned") == self.nodes,
            TAKEOVER_BOUND_S + 30, "takeover")
        return {"leased_s": leased, "takeover_s": takeover, "killed_at": killed_at,
                "taken_at": killed_at + pd.Timedelta(seconds=takeover),
                "doubled_victim": doubled_victim}

    async def missing_reports(self, first: pd.Timestamp, last: pd.Timestamp) -> np.ndarray:
        """Per step from ``first`` to ``last``: the cells whose report is not in Redis."""
        settings = HistoryStore(backend="redis", host="127.0.0.1", port=self.redis_port)
        store = await RedisCellHistory.open(settings, "1s", HISTORY_LENGTH, kpi="traffic")
        try:
            steps = int((last - first) / pd.Timedelta("1s")) + 1
            missing = np.zeros(steps, dtype=np.int64)
            ids = [cell_id(c) for c in range(self.cells)]  # as e2mgr names the file's cells
            for chunk in range(0, self.cells, 1000):
                for window in await store.windows(ids[chunk:chunk + 1000]):
                    if window is None:
                        missing += 1
                        continue
                    values, end = window
                    stamps = pd.date_range(end=end, periods=len(values), freq="1s")
                    held = pd.Series(values, stamps).reindex(
                        pd.date_range(first, last, freq="1s"))
                    missing += held.isna().to_numpy()
            return missing
        finally:
            await store.close()

    def stop(self) -> None:
        for process in [r.process for r in self.replicas.values()] + [self.node]:
            process.send_signal(signal.SIGTERM)
        for process in [r.process for r in self.replicas.values()] + [self.node]:
            process.wait(30)


def run(cells: int, cells_per_node: int, seconds: float
        ) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis_port:
        bench = Bench(Path(tmp), redis_port, cells, cells_per_node, seconds)
        bench.start_node(run_s=3 * seconds + 240)  # three phases, starts and takeover
        try:
            bench.start_replica("a")
            bench.wait_until(bench.shared_out, 120, "one replica owning every node")
            bench.wait_until(bench.outcomes_taken, 120, "every cell's subscription outcome")
            started = pd.Timestamp.now(tz="UTC").ceil("s")
            time.sleep(3)  # the first reports of every node on their way
            rows = [bench.steady("one replica")]
            join_started = pd.Timestamp.now(tz="UTC")
            bench.start_replica("b")
            joined = bench.wait_until(bench.shared_out, 60, "the nodes shared out")
            bench.wait_until(bench.outcomes_taken, 60, "every cell's subscription outcome")
            join_ended = pd.Timestamp.now(tz="UTC")
            time.sleep(3)
            rows.append(bench.steady("two replicas"))
            kill = bench.kill("a")
            time.sleep(5)  # the survivor's first reports of the nodes it took over
            ended = pd.Timestamp.now(tz="UTC").floor("s") - pd.Timedelta("3s")
            sent = bench.node_stats()
            survivor = bench.replicas["b"].metrics()
            missing = asyncio.run(bench.missing_reports(started, ended))
        finally:
            bench.stop()
    stamps = pd.date_range(started, ended, freq="1s")

    def between(first: pd.Timestamp, last: pd.Timestamp) -> np.ndarray:
        return (stamps >= first.floor("s") - pd.Timedelta("1s")) & (
            stamps <= last.ceil("s") + pd.Timedelta("1s"))

    join, kill_window = between(join_started, join_ended), between(kill["killed_at"],
                                                                   kill["taken_at"])
    handover = {
        "join_s": joined, "leased_s": kill["leased_s"], "takeover_s": kill["takeover_s"],
        "reports_checked": len(stamps) * cells,
        "lost_in_join_window": int(missing[join].sum()),
        "lost_in_kill_window": int(missing[kill_window].sum()),
        "lost_elsewhere": int(missing[~join & ~kill_window].sum()),
        "kill_window_s": int(kill_window.sum()),
        "doubled": kill["doubled_victim"] + survivor.get(
            "kpi_forecast_e2_reports_not_kept_total", 0.0),
        "node_undelivered": int(sent.get("undelivered", 0)),
        "node_sent": int(sent.get("indications", 0)),
    }
    timeline = pd.DataFrame({"second": np.arange(len(stamps)), "missing": missing,
                             "join": join, "kill": kill_window})
    return pd.DataFrame(rows), handover, timeline


def report(table: pd.DataFrame, handover: dict, cells: int, cells_per_node: int,
           seconds: float, results: Results) -> str:
    one, two = table.iloc[0], table.iloc[1]
    cpu_one = one["a_cpu_ms_per_1000"]
    cpu_two = (two["a_cpu_ms_per_1000"] * two["a_per_s"] + two["b_cpu_ms_per_1000"]
               * two["b_per_s"]) / two["per_s"]
    lines = [
        "## E2 at RIC scale",
        "",
        f"{results.measured} (part of `make bench`): {cells:,} cells in "
        f"{-(-cells // cells_per_node)} mock E2 "
        f"nodes of {cells_per_node}, each cell reporting once a second on the wall clock "
        f"(`kpi-forecast e2sim --wall-clock`), over librmr into `kpi-forecast serve` "
        f"replicas on one redis-server; every process on these same cores. {seconds:.0f} s "
        "of steady state per phase. Live scoring and recalibration are off: on this "
        "one-second grid their rounds (every cell forecast each horizon, a refresh each "
        "hour) would land in a phase of a minute; they cost per model step or refresh, not "
        "per indication ([live scoring on against off](#live-scoring-on-against-off), "
        "[forecasts while background work runs](#forecasts-while-background-work-runs)).",
        "",
        "| phase | ingested per s (offered) | per replica | p99 ingest lag: interpolated, "
        "its histogram bucket (of it, the mock node's own sending) | CPU per 1,000 "
        "indications (replica) | replica CPU (cores) | mock node / Redis CPU (cores) | "
        "machine busy | Redis scripts / commands per s | Redis memory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        names = [n for n in ("a", "b") if f"{n}_per_s" in row and not pd.isna(row[f"{n}_per_s"])]
        lines.append(
            f"| {row['phase']} | {row['per_s']:,.0f} ({row['offered_per_s']:,.0f}) | "
            + " / ".join(f"{row[f'{n}_per_s']:,.0f}" for n in names) + " | "
            + " / ".join(f"{row[f'{n}_p99_lag_s'] * 1000:,.0f} ms, "
                         f"{row[f'{n}_p99_lag_bucket_s']} s" for n in names)
            + f" ({row['node_send_lag_p99_s'] * 1000:,.0f} ms) | "
            + " / ".join(f"{row[f'{n}_cpu_ms_per_1000']:,.0f} ms" for n in names) + " | "
            + " / ".join(f"{row[f'{n}_cpu_share']:.2f}" for n in names) + " | "
            f"{row['node_cpu_share']:.2f} / {row['redis_cpu_share']:.2f} | "
            f"{row['machine_busy']:.0%} | {row['redis_scripts_per_s']:,.0f} / "
            f"{row['redis_ops_per_s']:,.0f} | {row['redis_used_mb']:,.0f} MiB |")
    lost = sum(value for key, value in handover.items() if key.startswith("lost_"))
    lines += [
        "",
        f"- Two replicas against one: {two['per_s'] / one['per_s']:.2f}x the rate ingested, "
        f"at {cpu_two:,.0f} against {cpu_one:,.0f} ms of replica CPU per 1,000 indications. "
        "The offered load is the cells' one report a second: a rate can rise above it no "
        "further, so the capacity figure is the CPU per 1,000 indications (1,000 over it is "
        "the rate one fully busy core would sustain, "
        f"{1e6 / cpu_one:,.0f}/s with one replica).",
        f"- A second replica had its share within {handover['join_s']:.1f} s of being ready. "
        f"A replica killed with SIGKILL had every one of its nodes' leases taken by the "
        f"other within {handover['leased_s']:.1f} s (bound {TAKEOVER_BOUND_S:.0f} s), and "
        f"each of them subscribed for within {handover['takeover_s']:.1f} s.",
        f"- Of {handover['reports_checked']:,} reports due in Redis over the whole run, "
        f"{lost:,} were missing: {handover['lost_in_kill_window']:,} in the "
        f"{handover['kill_window_s']} s from the kill to the takeover (the dead replica's "
        f"nodes' reports, sent to its endpoint: the mock node counts such sends as "
        f"undelivered, {handover['node_undelivered']:,} by the end: the dead replica's "
        f"subscriptions report to it until the other, taking its nodes, deletes them), "
        f"{handover['lost_in_join_window']:,} "
        f"while the second replica took its share, and {handover['lost_elsewhere']:,} "
        f"elsewhere (the replicas counted {table['rejected'].sum():,.0f} frames rejected in "
        "the steady phases; the rest were lost in librmr or never sent). "
        f"The per-second counts are in `docs/benchmarks/e2_scale_missing.csv`. "
        f"{handover['doubled']:,.0f} reports arrived twice and were kept once "
        "(`kpi_forecast_e2_reports_not_kept_total`).",
        "",
        *at_ten_to_the_fifth(table, cells),
    ]
    return "\n".join(lines)


def replica_cost(table: pd.DataFrame) -> tuple[float, float]:
    """A replica's CPU as a fixed share of a core (its lease rounds, subscription checks,
    timers: work whatever the rate) plus a cost per indication, fitted by least squares to
    every replica's (rate, CPU) in both phases: (fixed cores, ms per 1,000 indications)."""
    points = [(row[f"{n}_per_s"], row[f"{n}_cpu_share"]) for _, row in table.iterrows()
              for n in ("a", "b") if f"{n}_per_s" in row and not pd.isna(row[f"{n}_per_s"])]
    rates, cores = (np.array(column, dtype=float) for column in zip(*points, strict=True))
    # The phases share the load out one then two ways, so the rates differ by about 2x; where
    # they do not (or the fit says a part is negative), all of the CPU counts per indication.
    if np.ptp(rates) > 0:
        per_indication, fixed = np.polyfit(rates, cores, 1)
        if fixed >= 0 and per_indication > 0:
            return float(fixed), 1e6 * float(per_indication)
    return 0.0, 1e6 * float(cores.sum() / rates.sum())


TARGET = 100_000  # indications a second on paper
CEILING = 0.7  # of a core, what a replica is kept below


def on_paper(table: pd.DataFrame) -> dict[str, float]:
    """What 10^5 cells reporting every second take, scaled from this run's measured costs."""
    two = table.iloc[1]
    fixed, replica_ms_per_1000 = replica_cost(table)
    replica_cores = TARGET * replica_ms_per_1000 / 1e6
    redis_ms_per_1000 = 1e6 * two["redis_cpu_share"] / two["per_s"]
    return {
        "one replica, CPU per 1,000 indications (ms)": table.iloc[0]["a_cpu_ms_per_1000"],
        "replica fixed CPU (cores)": fixed,
        "replica CPU per 1,000 indications, fitted (ms)": replica_ms_per_1000,
        "replica cores for 10^5 indications/s": replica_cores,
        "replicas for 10^5 indications/s": int(np.ceil(replica_cores / (CEILING - fixed))),
        "Redis CPU per 1,000 indications (ms)": redis_ms_per_1000,
        "Redis commands per indication": two["redis_ops_per_s"] / two["per_s"],
        "Redis script calls per s": two["redis_scripts_per_s"],
    }


def at_ten_to_the_fifth(table: pd.DataFrame, cells: int) -> list[str]:
    """The paragraph on paper for 10^5 cells."""
    paper = on_paper(table)
    redis_cores = TARGET * paper["Redis CPU per 1,000 indications (ms)"] / 1e6
    per_cell_kib = table.iloc[1]["redis_used_mb"] * 1024 / cells
    return [
        "**On paper, 10^5 cells reporting every second**, scaled from the costs above. A "
        "replica's CPU, fitted over both phases as a fixed share of a core (lease rounds, "
        "subscription checks, timers) plus a cost per indication, is "
        f"{paper['replica fixed CPU (cores)']:.3f} cores + "
        f"{paper['replica CPU per 1,000 indications, fitted (ms)']:,.1f} ms per 1,000 "
        f"indications: the replicas need {paper['replica cores for 10^5 indications/s']:.1f} "
        f"cores of ingestion, so at least {paper['replicas for 10^5 indications/s']} replicas "
        f"kept below {CEILING:.0%} of a core each, with the E2 nodes shared out among them by "
        "the leases as here (the lease round is one script a replica every 2 s, nothing beside "
        "the writes). Redis takes the writes of 10^5 indications a second (a script call per "
        "batch of whatever a replica had queued: "
        f"{paper['Redis script calls per s']:,.0f} calls a second here, about "
        f"{paper['Redis commands per indication']:.1f} commands per indication inside them) "
        f"at {paper['Redis CPU per 1,000 indications (ms)']:,.1f} ms of its CPU per 1,000 "
        f"indications, so {redis_cores:.1f} cores of a server that runs scripts on one thread: "
        "that is the next bottleneck. Its memory is "
        f"{per_cell_kib:,.0f} KiB a cell at {HISTORY_LENGTH} steps (16 bytes a step), "
        f"{per_cell_kib * TARGET / 2**20:,.1f} GiB for 10^5 cells. Every key of a namespace "
        "shares one hash tag (SDL's `{namespace},key`), so a Redis Cluster cannot spread one "
        "namespace over shards: beyond one Redis thread the cells are to be split over "
        "several namespaces (SDL's DBAAS instances are chosen per namespace), each node's "
        "cells in one of them.",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--cells-per-node", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0, help="steady state per phase")
    parser.add_argument("--json", action="store_true", help="print the figures on paper as "
                        "one JSON line and write nothing (benchmarks.side_by_side)")
    args = parser.parse_args()
    if not (RMR / "lib").is_dir():
        print("e2_scale: ../shared/rmr is absent; nothing measured")
        return 0
    table, handover, timeline = run(args.cells, args.cells_per_node, args.seconds)
    if args.json:
        print(json.dumps({name: float(value) for name, value in on_paper(table).items()}))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "e2_scale.csv", index=False)
    timeline.to_csv(RESULTS / "e2_scale_missing.csv", index=False)  # reports missing, per second
    options = {"--cells": (args.cells, 10_000), "--cells-per-node": (args.cells_per_node, 100),
               "--seconds": (args.seconds, 60.0)}
    results = Results(
        "e2_scale", " ".join(["python -m benchmarks.e2_scale", *(
            f"{name} {value:g}" for name, (value, default) in options.items()
            if value != default)]),
        "benchmarks.md", "e2-scale", tables=["e2_scale", "e2_scale_missing"])
    section = report(table, handover, args.cells, args.cells_per_node, args.seconds, results)
    print(section)
    write_section(results, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

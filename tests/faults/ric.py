"""A small RIC of real processes for the fault tests: redis-server, the mock E2 node (with its
E2 Manager and subscription manager) and `kpi-forecast serve` replicas on the shared history,
each of which a test may kill, restart or hang; and what they hold, read back."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from benchmarks.ports import free_port
from kpi_forecast.cli.mock_e2_node import cell_id
from kpi_forecast.cli.smoke import wait_ready
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.panel import Panel
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.store.sdl import RedisCellHistory
from tests.processes import ROOT, STOP_WITHIN_S
from tests.redis_server import RedisServer
from tests.test_xapp_process import NO_TORCH
from tests.waiting import wait_for
from tests.xapp_helpers import write_descriptor

MEASUREMENT = "RRU.PrbUsedDl"
NAMESPACE = "kpi-forecast"


def metric(url: str, name: str) -> float:
    """One sample of the xApp's metrics (0 when absent)."""
    for line in httpx.get(f"{url}/ric/v1/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


@dataclass
class Replica:
    """One `kpi-forecast serve` process, restartable on the same ports and descriptor."""

    config: Path
    port: int
    rmr_port: int
    log: Path
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.rmr_port}"

    def start(self) -> Replica:
        self.process = subprocess.Popen(
            [sys.executable, "-c", NO_TORCH, "serve", "--config", str(self.config), "--host",
             "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log.open("a"))
        assert wait_ready(self.url, self.process), self.log.read_text()[-3000:]
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> float:
        """SIGTERM; the seconds it took to exit 0 (fails past the project's bound)."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_WITHIN_S + 5)
        except subprocess.TimeoutExpired:  # what it was doing is in its log
            raise AssertionError(f"no exit {STOP_WITHIN_S + 5} s after SIGTERM: "
                                 f"{self.log.read_text()[-3000:]}") from None
        took = time.monotonic() - started
        assert code == 0 and took <= STOP_WITHIN_S, (code, took, self.log.read_text()[-2000:])
        return took

    def metric(self, name: str) -> float:
        return metric(self.url, name)


@dataclass
class Ric:
    """The processes of one test, started by the test and all stopped by ``close``."""

    directory: Path
    data: Path
    model_dir: Path
    redis: RedisServer
    column: str = "prb_util"  # the file's KPI column, replayed as MEASUREMENT
    node_port: int = field(default_factory=free_port)
    node_rmr_port: int = field(default_factory=free_port)
    node: subprocess.Popen | None = None
    replicas: list[Replica] = field(default_factory=list)

    @property
    def kpi(self) -> str:
        """The served model's KPI: the key of its history."""
        return load_metadata(self.model_dir).target

    @property
    def log(self) -> Path:
        return self.directory / "processes.log"

    @property
    def node_url(self) -> str:
        return f"http://127.0.0.1:{self.node_port}"

    def start_node(self, *options: str) -> None:
        """The mock E2 node on its ports (the same ones again after a restart)."""
        self.node = subprocess.Popen(
            [sys.executable, "-m", "kpi_forecast.cli", "e2sim", "--data", str(self.data),
             "--kpi", f"{self.column}={MEASUREMENT}", "--listen", f"127.0.0.1:{self.node_port}",
             "--rmr-port", str(self.node_rmr_port), *options],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log.open("a"))
        node = self.node

        def answers() -> bool:
            assert node.poll() is None, f"e2sim exited {node.returncode}: {self.tail()}"
            return httpx.get(f"{self.node_url}/v1/nodeb/states", timeout=2).is_success

        wait_for(answers, 30, self.tail)

    def stop_node(self) -> None:
        assert self.node is not None
        self.node.terminate()
        assert self.node.wait(STOP_WITHIN_S + 5) == 0

    def node_stats(self) -> dict:
        return httpx.get(f"{self.node_url}/stats", timeout=5).json()

    def add_replica(self, name: str, **controls: object) -> Replica:
        rmr_port, port = free_port(), free_port()
        e2 = {"enabled": True, "port": rmr_port, "submgrUrl": f"{self.node_url}/ric/v1",
              "e2mgrUrl": f"{self.node_url}/v1", "kpis": {self.kpi: {"measurement": MEASUREMENT}}}
        store = {"backend": "redis", "host": "127.0.0.1", "port": self.redis.port,
                 "namespace": NAMESPACE, "timeoutMs": 300}
        config = write_descriptor(self.directory / name, self.model_dir, e2=e2,
                                  historyStore=store, **controls)
        replica = Replica(config, port, rmr_port, self.log)
        self.replicas.append(replica)
        return replica.start()

    def close(self) -> None:
        for process in [*(r.process for r in self.replicas), self.node]:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        self.redis.stop()

    def tail(self) -> str:
        return self.log.read_text()[-3000:]


def the_file(data: Path) -> tuple[Panel, list[str]]:
    """The replayed file, and its cells as the mock E2 node names them."""
    panel = load_panel(data, "prb_util")
    return panel, [cell_id(row) for row in range(panel.n_cells)]


def held(redis_port: int, panel: Panel, cells: list[str], kpi: str) -> np.ndarray:
    """What the shared history of ``kpi`` holds of ``cells`` over the file's span, read with
    the store's own reader: [cells, steps] in the file's order, NaN where nothing is held."""
    async def read() -> np.ndarray:
        settings = HistoryStore(backend="redis", host="127.0.0.1", port=redis_port,
                                namespace=NAMESPACE)
        store = await RedisCellHistory.open(settings, panel.freq, panel.n_steps, kpi=kpi)
        try:
            windows = await store.windows(cells)
        finally:
            await store.close()
        out = np.full((len(cells), panel.n_steps), np.nan)
        last = panel.index[-1]
        for row, window in enumerate(windows):
            if window is None:
                continue
            values, newest = window
            shift = int((last - newest) / panel.step)  # steps the window ends before the file
            if shift >= 0:
                out[row, :panel.n_steps - shift] = values[shift:]
        return out

    return asyncio.run(read())

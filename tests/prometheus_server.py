"""A real Prometheus (the Debian package) on loopback, scraping one xApp every second and
evaluating the chart's alert rules every second, for the tests and the regime-change benchmark
that read what an operator's Prometheus would."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx

from benchmarks.ports import free_port
from tests.processes import ROOT
from tests.system_tools import system_tool
from tests.waiting import wait_for

RULES = ROOT / "helm/kpi-forecast/files/prometheus-rules.yaml"
START_WITHIN_S = 60.0


@contextlib.contextmanager
def prometheus_server(directory: Path, xapp_port: int) -> Iterator[str]:
    """Prometheus scraping the xApp on ``xapp_port`` (its ``/ric/v1/metrics``, as job
    ``kpi-forecast``), its files in ``directory``; its URL once ready, stopped on exit."""
    port = free_port()
    (directory / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{RULES}"]
scrape_configs:
  - job_name: kpi-forecast
    metrics_path: /ric/v1/metrics
    static_configs: [{{targets: ["127.0.0.1:{xapp_port}"]}}]
""")
    log = directory / "prometheus.log"
    process = subprocess.Popen(
        [system_tool("prometheus"), f"--config.file={directory / 'prometheus.yml'}",
         f"--storage.tsdb.path={directory / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/-/ready", timeout=2).is_success, START_WITHIN_S,
                 lambda: log.read_text()[-3000:])
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)

"""A real Prometheus server scrapes a running xApp on loopback: the queries operators run and
the chart's alert rules work against the metrics the xApp really exports."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from benchmarks.ports import free_port
from kpi_forecast.cli.smoke import wait_ready
from tests.prometheus_server import prometheus_server
from tests.test_xapp_process import NO_TORCH
from tests.xapp_helpers import CONTEXT, make_model, write_descriptor

ROOT = Path(__file__).resolve().parents[1]


def query(prometheus: str, expr: str) -> list[dict]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def eventually(check, seconds: float = 30.0):
    """Poll ``check`` until it returns something truthy (Prometheus scrapes every second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"not within {seconds} s: {check.__doc__ or check}")


@pytest.mark.slow
def test_prometheus_scrapes_the_xapp_and_evaluates_the_alert_rules(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    # A budget nothing can meet: 1 ms, less than reading a request and a model call, so the
    # answers are fallbacks, and late: the violation, latency and fallback alerts must see it.
    # Admission off: against such a budget it would refuse most requests before they are read
    # (the event loop alone runs later than 1 ms), and the fallbacks are what is tested here.
    config = write_descriptor(tmp_path / "config", model_dir, latencyBudgetMs=1,
                              batching={"admission": "off"})
    port = free_port()
    xapp = subprocess.Popen(
        [sys.executable, "-c", NO_TORCH, "serve", "--config", str(config), "--host",
         "127.0.0.1", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    stack = contextlib.ExitStack()
    try:
        assert wait_ready(url, xapp), "the xApp never became ready"
        prom = stack.enter_context(prometheus_server(tmp_path, port))

        def target_up() -> bool:
            """the xApp target is up"""
            return any(r["value"][1] == "1" for r in query(prom, 'up{job="kpi-forecast"}'))

        eventually(target_up, 60)

        def scraped_before_traffic() -> bool:
            """three scrapes of the xApp before the traffic, so that rates see it start"""
            return any(float(r["value"][1]) >= 3 for r in query(
                prom, 'count_over_time(up{job="kpi-forecast"}[1m])'))

        eventually(scraped_before_traffic)
        request = {"cell_id": "c1", "start": "2024-01-01T00:00:00+00:00", "freq": "1h",
                   "values": [float(i % 24) for i in range(CONTEXT)]}
        # How many at a time make the model late depends on the machine: alone, a slow one
        # misses the budget; several at a time queue for the model, but too many make the event
        # loop so late that requests are shed at the deadline before they are read. So the
        # concurrency rises a step per round until enough answers were fallbacks, and late; on
        # a machine where reading a request alone takes the whole 1 ms (every answer a 503),
        # the budget doubles (a config change the xApp applies live) and the rounds start again.
        with httpx.Client() as client:
            for budget_ms in (1, 2, 4):
                if budget_ms > 1:
                    write_descriptor(tmp_path / "config", model_dir, latencyBudgetMs=budget_ms,
                                     batching={"admission": "off"})

                    def applied(ms: float = budget_ms) -> bool:
                        """the xApp applied the new budget"""
                        config = client.get(f"{url}/ric/v1/config").json()[0]["config"]
                        return config["controls"]["latencyBudgetMs"] == ms

                    eventually(applied, 30)
                answers: list[httpx.Response] = []
                for senders in (1, 2, 3, 4, 6):
                    with ThreadPoolExecutor(senders) as pool:
                        answers += pool.map(
                            lambda _: client.post(f"{url}/v1/forecast", json=request), range(40))
                    answered = [a.json() for a in answers if a.status_code == 200]
                    fallbacks = sum(a["source"] == "fallback" for a in answered)
                    late = sum(a["latency_ms"] > budget_ms for a in answered)
                    if fallbacks >= 10 and late >= 10:
                        break
                if fallbacks >= 10 and late >= 10:
                    break
        assert fallbacks >= 10 and late >= 10, (fallbacks, late)
        budget_s = budget_ms / 1000.0
        assert {a.status_code for a in answers} <= {200, 503}  # 503: shed at the deadline

        def p99() -> list[dict]:
            """p99 of /v1/forecast from the histogram is above the budget"""
            return query(prom, 'histogram_quantile(0.99, sum by (le) (rate('
                         'kpi_forecast_request_duration_seconds_bucket{route="/v1/forecast"}'
                         f'[1m]))) > {budget_s}')

        latency = float(eventually(p99)[0]["value"][1])
        assert budget_s < latency < 1.0

        def violations() -> list[dict]:
            """the violation counter has every late answer"""
            return query(prom, 'kpi_forecast_budget_violations_total{route="/v1/forecast"}'
                         f' >= {late}')

        eventually(violations)
        budget = query(prom, "kpi_forecast_latency_budget_seconds")
        assert float(budget[0]["value"][1]) == budget_s

        def alerts() -> dict[str, str]:
            """the latency-burn and fallback alerts are active (pending or firing)"""
            found = httpx.get(f"{prom}/api/v1/alerts").json()["data"]["alerts"]
            states = {a["labels"]["alertname"]: a["state"] for a in found}
            wanted = {"KpiForecastLatencyBudgetBurn", "KpiForecastFallbackRate"}
            return states if wanted <= states.keys() else {}

        states = eventually(alerts, 60)
        assert "KpiForecastNotReady" not in states  # the model is loaded and serving
        rules = httpx.get(f"{prom}/api/v1/rules").json()["data"]["groups"]
        assert all(rule["health"] == "ok" for group in rules for rule in group["rules"])
    finally:
        stack.close()
        xapp.send_signal(signal.SIGTERM)
        xapp.wait(30)

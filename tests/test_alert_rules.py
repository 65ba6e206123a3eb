"""The xApp's Prometheus rules (helm/kpi-forecast/files/prometheus-rules.yaml) and dashboard.

promtool checks the rules file and runs its unit tests (tests/data/alert-rules-test.yaml): each
alert fires when it should and stays silent when it should not. promtool comes from the Debian
package `prometheus`, which the CI script installs; without it those two tests skip. The other
tests need no tool: every alert is covered by the unit tests both ways, carries a severity and a
runbook hint, and the rules and the Grafana dashboard name only metrics the xApp really exports.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.system_tools import system_tool

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "helm" / "kpi-forecast" / "files" / "prometheus-rules.yaml"
DASHBOARD = ROOT / "helm" / "kpi-forecast" / "files" / "dashboard.json"
RULES_TEST = ROOT / "tests" / "data" / "alert-rules-test.yaml"

EXPECTED_ALERTS = {
    "KpiForecastLatencyBudgetBurn",
    "KpiForecastFallbackRate",
    "KpiForecastShedRate",
    "KpiForecastShedWithoutQueueing",
    "KpiForecastNotReady",
    "KpiForecastNoE2Indications",
    "KpiForecastE2IngestLag",
    "KpiForecastWorseThanNaive",
    "KpiForecastCoverageOff",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = system_tool("promtool")
    # From the repository root: the unit-test file names the rules file relative to itself.
    return subprocess.run([path, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


# --- promtool ------------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    proc = promtool("check", "rules", str(RULES.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    # Lint findings are printed even on success; there should be none.
    assert "WARNING" not in proc.stdout + proc.stderr


def test_promtool_unit_tests() -> None:
    proc = promtool("test", "rules", str(RULES_TEST.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


# --- what the rules file promises -----------------------------------------------------------------


def test_the_alerts() -> None:
    found = alerts()
    assert set(found) == EXPECTED_ALERTS
    for name, rule in found.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        # for: keeps a single slow scrape or a rollout from paging anyone.
        assert rule["for"] == "5m", name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description"}, name
        assert "Runbook:" in annotations["description"], name


def test_latency_alert_compares_against_the_exported_budget() -> None:
    # The budget is whatever the running xApp exports, so a config reload moves the threshold.
    expr = alerts()["KpiForecastLatencyBudgetBurn"]["expr"]
    recorded = {rule["record"]: rule["expr"] for rule in rules() if "record" in rule}
    budget = next(name for name in recorded if name in expr and "budget" in name)
    assert "kpi_forecast_latency_budget_seconds" in recorded[budget]
    p99 = next(name for name in recorded if name in expr and "p99" in name)
    assert "histogram_quantile(0.99" in recorded[p99]
    assert "kpi_forecast_request_duration_seconds_bucket" in recorded[p99]
    assert '"/v1/forecast' in expr


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    cases = yaml.safe_load(RULES_TEST.read_text())
    assert cases["rule_files"] == ["../../helm/kpi-forecast/files/prometheus-rules.yaml"]
    firing: set[str] = set()
    silent: set[str] = set()
    for test in cases["tests"]:
        for case in test.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    assert firing == EXPECTED_ALERTS
    assert silent == EXPECTED_ALERTS


# --- the metric names, against the xApp ---------------------------------------------------------


SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}


def exported_names() -> set[str]:
    """Every series name the xApp's registry can expose. Taken from the metric families rather
    than their samples: a labelled metric has no sample until a label set is first used."""
    metrics = pytest.importorskip("kpi_forecast.xapp.metrics")
    registry = metrics.Metrics(budgets_seconds=[0.1], max_batch_size=64).registry
    return {family.name + suffix for family in registry.collect()
            for suffix in SUFFIXES[family.type]}


def referenced(text: str) -> set[str]:
    return set(re.findall(r"\bkpi_forecast_[a-z0-9_]+", text))


def test_rules_name_only_exported_metrics() -> None:
    exported = exported_names()
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    # Recording rule names also hold kpi_forecast_...: strip them before the check.
    used: set[str] = set()
    for rule in rules():
        expr = rule["expr"]
        for name in recorded:
            expr = expr.replace(name, "")
        used |= referenced(expr)
    assert used, "no metric found in the rules"
    assert used <= exported, sorted(used - exported)


def test_dashboard_names_only_exported_metrics() -> None:
    exported = exported_names()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = referenced(" ".join(exprs))
    assert used <= exported, sorted(used - exported)
    # And every metric the xApp exports has a panel.
    family = re.compile(r"_(bucket|sum|count|total)$")
    missing = {family.sub("", name) for name in exported} - {family.sub("", n) for n in used}
    assert not missing, sorted(missing)

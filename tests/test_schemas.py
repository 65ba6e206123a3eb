"""The checked-in JSON Schemas are what generation from the pydantic models gives
(`make schemas`): the descriptor's schema.json, the chart's copy and the chart's controls."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
from pydantic import Field

from kpi_forecast.cli import schema_files
from kpi_forecast.xapp.descriptor import schema as descriptor_schema
from kpi_forecast.xapp.descriptor.controls import Batching, Controls
from kpi_forecast.xapp.descriptor.envelope import DescriptorFile

ROOT = Path(__file__).resolve().parents[1]


def test_the_checked_in_schemas_are_the_generated_ones() -> None:
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli.schema_files", "--check",
                           "--root", str(ROOT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_check_names_a_file_that_drifted(tmp_path: Path) -> None:
    for path in schema_files.expected_files(ROOT):
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    drifted = tmp_path / schema_files.CHART_SCHEMA
    edited = json.loads(drifted.read_text())
    edited["properties"]["batching"]["properties"]["maxBatchSize"][
        "maximum"] += 1  # a bound changed by hand in the chart's copy
    drifted.write_text(json.dumps(edited, indent=2) + "\n")
    assert schema_files.main(["--check", "--root", str(tmp_path)]) == 1
    assert schema_files.main(["--root", str(tmp_path)]) == 0  # make schemas rewrites it
    assert drifted.read_text() == (ROOT / schema_files.CHART_SCHEMA).read_text()


def test_a_bound_changed_in_the_model_reaches_every_schema(monkeypatch) -> None:
    class Smaller(Batching):
        max_batch_size: int = Field(64, ge=1, le=2048)

    class SmallerControls(Controls):
        batching: Smaller = Smaller()

    class SmallerDescriptor(DescriptorFile):
        controls: SmallerControls

    monkeypatch.setattr(schema_files, "Controls", SmallerControls)  # the chart's values
    monkeypatch.setattr(descriptor_schema, "Controls", SmallerControls)
    monkeypatch.setattr(descriptor_schema, "DescriptorFile", SmallerDescriptor)
    files = schema_files.expected_files(ROOT)
    descriptor = json.loads(files[ROOT / schema_files.DESCRIPTOR_SCHEMA])
    chart_copy = json.loads(files[ROOT / schema_files.CHART_SCHEMA])
    values = json.loads(files[ROOT / schema_files.VALUES_SCHEMA])
    for controls in (descriptor, chart_copy, values["properties"]["xapp"],
                     descriptor_schema.descriptor_schema()["properties"]["controls"]):
        assert controls["properties"]["batching"]["properties"]["maxBatchSize"]["maximum"] == 2048


def test_the_generated_schema_accepts_what_the_models_accept_and_refuses_the_rest() -> None:
    schema = descriptor_schema.controls_schema()
    jsonschema.Draft7Validator.check_schema(schema)  # as the onboarder checks it
    controls = jsonschema.Draft7Validator(schema)
    # An optional value is "type: [T, null]", so a bound is reported as the bound it is.
    errors = list(controls.iter_errors({"modelDir": "/m", "defaultHorizon": 0}))
    assert [e.message for e in errors] == ["0 is less than the minimum of 1"]
    assert controls.is_valid({"modelDir": "/m", "defaultHorizon": None, "quantiles": None})
    assert not controls.is_valid({"modelDir": "/m", "quantiles": [0.5, 0.5]})


def test_the_chart_leaves_out_what_it_sets_and_requires_what_may_not_be_null() -> None:
    xapp = schema_files.chart_controls_schema()
    assert "modelDir" not in xapp["properties"]
    assert "port" not in xapp["properties"]["e2"]["properties"]
    assert {"host", "port", "db"}.isdisjoint(xapp["properties"]["historyStore"]["properties"])
    assert "latencyBudgetMs" in xapp["required"] and "defaultHorizon" not in xapp["required"]
    e2 = jsonschema.Draft202012Validator(xapp["properties"]["e2"])
    assert e2.is_valid({"enabled": False, "kpis": {"k": {"measurement": "m"}}, "clientHost": "",
                        "e2mgrUrl": "http://e2mgr:3800/v1"})
    assert not e2.is_valid({"enabled": False, "kpis": {}})


def test_the_reference_pages_are_the_generated_ones() -> None:
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli.reference", "--check",
                           "--root", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_reference_pages_name_every_control_metric_and_route() -> None:
    from kpi_forecast.cli import reference
    from kpi_forecast.xapp.app import create_app
    from kpi_forecast.xapp.descriptor.config_file import (
        CONFIG_FILE_NAME,
        DEFAULT_DIR,
        load_descriptor,
    )
    from kpi_forecast.xapp.http.edge import Route

    routes = [route for route in create_app(load_descriptor(DEFAULT_DIR / CONFIG_FILE_NAME),
                                            watch_config=False).routes
              if isinstance(route, Route)]
    assert routes
    configuration = reference.configuration_page()
    for name in ("modelDir", "e2.e2mgrUrl", "registration.enabled", "historyStore.backend"):
        assert f"| `{name}` |" in configuration, name
    metrics = reference.metrics_page()
    for name in ("kpi_forecast_requests_total", "kpi_forecast_e2_cells_skipped",
                 "kpi_forecast_request_duration_seconds", "kpi_forecast_model_info"):
        assert f"| `{name}` |" in metrics, name
    api = reference.api_page()
    for route in routes:
        assert f"## `{route.method} {route.path}`" in api, route.path


def test_the_alerts_page_gives_every_alert_what_to_do_and_every_panel() -> None:
    import yaml

    from kpi_forecast.cli import reference

    page = reference.alerts_page(ROOT)
    groups = yaml.safe_load((ROOT / reference.RULES).read_text())["groups"]
    alerts = [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]
    assert alerts
    sections = page.split("\n### ")[1:]
    assert [section.split("\n", 1)[0] for section in sections] == alerts
    for section in sections:
        what_to_do = section.split("**What to do.** ", 1)[1].split("\n", 1)[0]
        assert len(what_to_do.split()) >= 10, section.split("\n", 1)[0]
    panels = json.loads((ROOT / reference.DASHBOARD).read_text())["panels"]
    for panel in panels:
        if panel["type"] != "row":
            assert f"| {panel['title']} |" in page, panel["title"]

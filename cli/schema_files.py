"""The checked-in files generated from the descriptor's pydantic models
(`xapp/descriptor/controls.py`) and the A1 policy type's (`xapp/ric/a1/policy_type.py`): the
descriptor's `schema.json`, the chart's copy of it (Helm reads only files inside the chart),
the `xapp` part of the chart's `values.schema.json` and the chart's `a1-policy-type.json`.

    python -m kpi_forecast.cli.schema_files            # make schemas: write them
    python -m kpi_forecast.cli.schema_files --check    # fail if one differs from generation

From a checkout of the repository (the chart is not in the wheel).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.descriptor.schema import JSON_SCHEMA, controls_schema, plain_schema
from kpi_forecast.xapp.ric.a1.policy_type import ForecastPolicy, policy_type

DESCRIPTOR_SCHEMA = Path("xapp/descriptor/schema.json")
CHART = Path("helm/kpi-forecast")
CHART_SCHEMA = CHART / "files" / "schema.json"
VALUES_SCHEMA = CHART / "values.schema.json"
A1_POLICY_TYPE = CHART / "files" / "a1-policy-type.json"

# Controls the chart sets from its other values, so they are not under .Values.xapp: the model
# folder (model.path) and where the model comes from (model.source, so no modelUrl), the
# rmr-data port (containerPorts.rmrData) and Redis (sdl.host, sdl.port).
CHART_SETS = {("modelDir",), ("modelUrl",), ("e2", "port"), ("historyStore", "host"),
              ("historyStore", "port"), ("historyStore", "db")}
# Controls where the chart's template turns an empty string into its own default (the RMR
# Service's name) or into null, so values.yaml may hold "" for them.
CHART_EMPTY_MEANS_UNSET = {("e2", "submgrUrl"), ("e2", "clientHost")}


def a1_policy_type() -> dict[str, Any]:
    """The A1 policy type, as the A1 mediator is given it."""
    return policy_type({"$schema": JSON_SCHEMA, **plain_schema(ForecastPolicy)})


def chart_controls_schema() -> dict[str, Any]:
    """The schema of the chart's .Values.xapp: the controls less what the chart sets itself.
    A key that may not be null is required there: Helm drops a key set to null, which the
    template would then render as missing."""

    def chart(node: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        node = {k: v for k, v in node.items() if k not in ("default", "required")}
        if path in CHART_EMPTY_MEANS_UNSET:
            described = node.pop("description", "")
            return {"anyOf": [{"const": ""}, node],
                    "description": f"{described} Empty: the chart's own default.".lstrip()}
        if "properties" not in node:
            return node
        properties = {name: chart(sub, (*path, name)) for name, sub in node["properties"].items()
                      if (*path, name) not in CHART_SETS}
        required = [name for name, sub in properties.items()
                    if "null" not in (sub.get("type") or []) and "anyOf" not in sub]
        return {**node, "properties": properties, "required": required}

    controls = chart(plain_schema(Controls), ())
    controls["description"] = ("The xApp's controls in config-file.json, less what the chart "
                               "sets from its other values (generated from the xApp's models)")
    return controls


def rendered(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def expected_files(root: Path) -> dict[Path, str]:
    """Each generated file under ``root`` with the text generation gives it."""
    descriptor = rendered(controls_schema())
    values = json.loads((root / VALUES_SCHEMA).read_text())
    values["properties"]["xapp"] = chart_controls_schema()
    return {root / DESCRIPTOR_SCHEMA: descriptor, root / CHART_SCHEMA: descriptor,
            root / VALUES_SCHEMA: rendered(values),
            root / A1_POLICY_TYPE: rendered(a1_policy_type())}


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, "kpi_forecast.cli.schema_files", __doc__, VALUES_SCHEMA,
                          expected_files,
                          "generated schemas differ from the models (run make schemas)")


def generator_main(argv: list[str] | None, module: str, doc: str, marker: Path,
                   expected: Callable[[Path], dict[Path, str]], stale_said: str) -> int:
    """The command line of a generator of checked-in files (``make schemas``): ``--root``, the
    repository's root (it holds ``marker``), and ``--check``."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                     description=doc.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="the repository's root (default: here)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that differs")
    args = parser.parse_args(argv)
    if not (args.root / marker).is_file():
        print(f"{args.root}: not the repository's root (no {marker})", file=sys.stderr)
        return 2
    return sync_files(expected(args.root), args.check, stale_said)


def sync_files(expected: dict[Path, str], check: bool, stale_said: str) -> int:
    """Write each generated file whose text differs, or with ``check`` write nothing and
    exit 1 naming those that differ (after ``stale_said``)."""
    stale = []
    for path, text in expected.items():
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if check and stale:
        print(f"{stale_said}: " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

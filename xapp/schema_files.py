"""The JSON Schemas generated from the descriptor's pydantic models (`xapp/controls.py`) and
the A1 policy type's (`xapp/a1/policy.py`), and the checked-in files that hold them: the
descriptor's `schema.json`, the chart's copy of it (Helm reads only files inside the chart),
the `xapp` part of the chart's `values.schema.json` and the chart's `a1-policy-type.json`.

The descriptor's `schema.json` is the schema of its `controls`, as O-RAN SC's onboarder
(`dms_cli onboard`) takes it: the onboarder puts it in place of `controls` in its own schema
of the whole descriptor, validated with a draft-07 validator. `descriptor_schema` does the same
with the envelope this xApp reads, so that the xApp checks a whole descriptor either way.

    python -m kpi_forecast.xapp.schema_files            # make schemas: write them
    python -m kpi_forecast.xapp.schema_files --check    # fail if one differs from generation

From a checkout of the repository (the chart is not in the wheel).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kpi_forecast.xapp.a1.policy import ForecastPolicy, policy_type
from kpi_forecast.xapp.controls import Controls, DescriptorFile

# The onboarder and the A1 mediator both validate with draft-07 validators; nothing in the
# generated schemas needs a later draft.
JSON_SCHEMA = "http://json-schema.org/draft-07/schema#"
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


def plain_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema (camelCase), written as one would by hand: every reference
    inlined, no titles, ``type: [T, "null"]`` for an optional value, one-line descriptions."""
    schema = model.model_json_schema(by_alias=True)
    definitions = schema.pop("$defs", {})

    def plain(node: Any) -> Any:
        if not isinstance(node, dict):
            return node  # additionalProperties: true / false
        node = dict(node)
        if "$ref" in node:
            node = {**definitions[node.pop("$ref").rsplit("/", 1)[1]], **node}
        node.pop("title", None)
        options = node.pop("anyOf", None)
        if options is not None:
            rest = [o for o in options if o != {"type": "null"}]
            if len(options) == 2 and len(rest) == 1 and isinstance(plain(rest[0]).get("type"),
                                                                    str):
                merged = plain(rest[0])
                node = {**merged, **node, "type": [merged["type"], "null"]}
            else:
                node["anyOf"] = [plain(o) for o in options]
        if "description" in node:
            node["description"] = " ".join(node["description"].split())
        if "properties" in node:
            node["properties"] = {name: plain(sub) for name, sub in node["properties"].items()}
        for keyword in ("items", "additionalProperties"):
            if keyword in node:
                node[keyword] = plain(node[keyword])
        types = node.get("type")
        if "default" in node and node["default"] is None and "null" not in (
                types if isinstance(types, list) else [types]):
            del node["default"]  # an optional key that may not be null: absent means unset
        return node

    return plain(schema)


def controls_schema() -> dict[str, Any]:
    """The descriptor's schema.json: the schema of its controls."""
    return {"$schema": JSON_SCHEMA, **plain_schema(Controls)}


@functools.cache
def _envelope() -> str:
    return json.dumps(plain_schema(DescriptorFile))


def descriptor_schema(controls: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schema of the whole descriptor: the envelope as this xApp reads it (name, version,
    containers, messaging, ...) with ``controls`` as the schema of its controls (None: the
    generated one), as the onboarder composes its own."""
    schema = {"$schema": JSON_SCHEMA, **json.loads(_envelope())}
    controls = controls_schema() if controls is None else controls
    schema["properties"]["controls"] = {k: v for k, v in controls.items() if k != "$schema"}
    return schema


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
    parser = argparse.ArgumentParser(prog="python -m kpi_forecast.xapp.schema_files",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="the repository's root (default: here)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that differs")
    args = parser.parse_args(argv)
    if not (args.root / VALUES_SCHEMA).is_file():
        print(f"{args.root}: not the repository's root (no {VALUES_SCHEMA})", file=sys.stderr)
        return 2
    return sync_files(expected_files(args.root), args.check, "generated schemas differ from "
                      "the models (run make schemas)")


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

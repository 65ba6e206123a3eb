"""JSON Schemas of the descriptor from its pydantic models (``controls.py``), written as one
would by hand. The descriptor's `schema.json` is the schema of its `controls`, as O-RAN SC's
onboarder (`dms_cli onboard`) takes it: the onboarder puts it in place of `controls` in its own
schema of the whole descriptor, validated with a draft-07 validator. `descriptor_schema` does the
same with the envelope this xApp reads, so that the xApp checks a whole descriptor either way."""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.descriptor.envelope import DescriptorFile

# The onboarder and the A1 mediator both validate with draft-07 validators; nothing in the
# generated schemas needs a later draft.
JSON_SCHEMA = "http://json-schema.org/draft-07/schema#"

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
        if "patternProperties" in node:
            node["patternProperties"] = {pattern: plain(sub) for pattern, sub
                                         in node["patternProperties"].items()}
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

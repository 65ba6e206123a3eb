"""O-RAN SC's published REST API documents (../shared/oran/api): the E2 Manager's (OpenAPI 3)
and the subscription manager's as xApps see it (Swagger 2.0), read as JSON Schemas of what a
request or an answer may be, so that what the xApp sends and what the mock answers are checked
against the documents rather than against the xApp's own models."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

API = Path(__file__).resolve().parents[1].parent / "shared" / "oran" / "api"
E2MGR = "e2mgr-api.yaml"
SUBMGR = "submgr-xapp-rest-api.yaml"

# Where a component's source answers what its document does not allow: (the schema, its
# property, the type the source also writes). Go marshals a nil slice without omitempty as
# null: submgr answers a subscription with its id alone (pkg/control/control.go
# RESTSubscriptionHandler) and lists E2 subscriptions without their instances (registry.go
# QueryHandler), in xapp-frame's pkg/models types. e2mgr's errors carry their code as a number
# (E2Manager/models/error_response.go, ErrorResponse.Code int).
AS_RUN: dict[str, list[tuple[str, str, str]]] = {
    SUBMGR: [("SubscriptionResponse", "SubscriptionInstances", "null"),
             ("SubscriptionData", "SubscriptionInstances", "null")],
    E2MGR: [("ErrorResponse", "errorCode", "integer")],
}


@functools.cache
def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((API / name).read_text())


def document(name: str, as_run: bool = False) -> dict[str, Any]:
    """The document (``as_run``: with what the component's source answers beyond it, AS_RUN);
    the calling test is skipped (with the reason) where it is absent."""
    if not (API / name).is_file():
        pytest.skip(f"O-RAN SC's API document {name} not present (../shared/oran/api)")
    if not as_run:
        return _load(name)
    doc = copy.deepcopy(_load(name))
    schemas = doc.get("definitions") or doc["components"]["schemas"]  # Swagger 2, OpenAPI 3
    for definition, field, also in AS_RUN.get(name, []):
        prop = schemas[definition]["properties"][field]
        prop["type"] = [prop["type"], also]
        if also == "null":
            prop["x-nullable"] = True  # Swagger 2.0's way, which schemathesis reads
    return doc


def as_run_file(name: str, folder: Path) -> Path:
    """The ``as_run`` document written to ``folder``, for tools that read a file."""
    path = folder / name
    path.write_text(yaml.safe_dump(document(name, as_run=True)))
    return path


def _validator(doc: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Validator:
    # Both documents' schemas are draft-4 JSON Schema objects whose $refs point into the
    # document (#/definitions/..., #/components/schemas/...): resolved against it as root.
    root = {**schema, "definitions": doc.get("definitions", {}),
            "components": doc.get("components", {})}
    return jsonschema.Draft4Validator(root)


def request_body(name: str, path: str, method: str) -> jsonschema.Validator:
    doc = document(name)
    operation = doc["paths"][path][method]
    if "requestBody" in operation:  # OpenAPI 3
        return _validator(doc, operation["requestBody"]["content"]["application/json"]
                          ["schema"])
    (body,) = [p for p in operation["parameters"] if p["in"] == "body"]  # Swagger 2.0
    return _validator(doc, body["schema"])


def answer(name: str, path: str, method: str, status: int, as_run: bool = False
           ) -> jsonschema.Validator | None:
    """The schema of an answer with ``status`` (None: documented without a body); a status
    the document does not list fails the calling test."""
    doc = document(name, as_run)
    responses = doc["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path} documents no {status}"
    response = responses[str(status)]
    if "content" in response:  # OpenAPI 3
        (media,) = response["content"].values()
        return _validator(doc, media["schema"])
    return _validator(doc, response["schema"]) if "schema" in response else None


def documented_media_types(name: str, path: str, method: str, status: int) -> set[str]:
    doc = document(name)
    response = doc["paths"][path][method]["responses"][str(status)]
    if "content" in response:
        return set(response["content"])
    return set(doc["paths"][path][method].get("produces", doc.get("produces", [])))

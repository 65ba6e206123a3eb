"""The OpenAPI document: generated from the routes and their pydantic models, then told the
constraints of the model being served.

A request's ``freq`` must be the served model's step and its ``horizon`` at most the model's:
rules the pydantic models cannot state, because they follow the model loaded at run time. The
document states them (``enum``, ``maximum``) for the model in force, and is made anew when
another model is swapped in, so that client generators and fuzzers produce what the API takes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from kpi_forecast.model.artifact import ModelMetadata
from kpi_forecast.xapp.descriptor.controls import API_KEY_ENV, API_KEY_HEADER, Api
from kpi_forecast.xapp.http.edge import Route
from kpi_forecast.xapp.http.errors import ErrorOut
from kpi_forecast.xapp.serving.state import ServingState

COMPONENTS = "#/components/schemas/{model}"
API_KEY_SCHEME = "ApiKey"


def component_ref(model: type[BaseModel]) -> dict:
    """A reference to ``model``'s schema among the document's components (see ``register``)."""
    return {"$ref": COMPONENTS.format(model=model.__name__)}


class Document:
    """``app.openapi``: the document for the model and the access of ``state.now``, remade when
    either changes."""

    def __init__(self, app: FastAPI, state: ServingState,
                 extra_models: tuple[type[BaseModel], ...] = ()) -> None:
        self._app = app
        self._state = state
        self._extra_models = extra_models
        self._base: dict | None = None
        self._made: tuple[tuple, dict] | None = None

    def __call__(self) -> dict[str, Any]:
        served = self._state.now
        meta = served.model.metadata if served.model else None
        access = served.controls.api
        made_for = (meta.model_version if meta else None, access)
        if self._made is None or self._made[0] != made_for:
            routes = [r for r in self._app.routes if isinstance(r, Route)]
            self._made = made_for, restricted(constrained(self.base(), meta), access, routes)
        return self._made[1]

    def base(self) -> dict[str, Any]:
        if self._base is None:
            app = self._app
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)
            for model in self._extra_models:
                register(document, model)
            self._base = document
        return self._base


def register(document: dict, model: type[BaseModel]) -> None:
    """Add ``model`` (a body read by hand, not declared in a route's signature) and the models
    it refers to to the document's components, so that ``component_ref`` resolves."""
    schema = model.model_json_schema(ref_template=COMPONENTS)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in schema.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    schemas.setdefault(model.__name__, schema)


def restricted(document: dict, access: Api, routes: list[Route]) -> dict:
    """``document`` saying which access each restricted route needs (its group, declared as
    ``x-api-group``): the 403 it may answer, and the API key as its security requirement where
    its group needs one (controls.api)."""
    for route in routes:
        if route.group == "read":
            continue
        operation = document["paths"][route.path][route.method.lower()]
        mode = getattr(access, route.group)
        operation["description"] = (f"{operation.get('description', '')}\n\nRoute group "
                                    f"{route.group}: {mode} (controls.api).").strip()
        operation["responses"]["403"] = {"description": "Refused: the route group is off, or "
                                         "needs the API key", "content": {"application/json": {
                                             "schema": component_ref(ErrorOut)}}}
        if mode == "key":
            operation["security"] = [{API_KEY_SCHEME: []}]
            document["components"].setdefault("securitySchemes", {})[API_KEY_SCHEME] = {
                "type": "apiKey", "in": "header", "name": API_KEY_HEADER,
                "description": f"The key in the xApp's ${API_KEY_ENV}"}
    return document


def constrained(base: dict, meta: ModelMetadata | None) -> dict:
    """``base`` with ``freq`` fixed to the model's step and ``horizon`` bounded by its own."""
    document = copy.deepcopy(base)
    if meta is None:
        return document
    for name, schema in _fields(document):
        for option in schema.get("anyOf", [schema]):  # the value's type, beside a null
            if name == "freq" and option.get("type") == "string":
                option["enum"] = [meta.freq]
            elif name == "horizon" and option.get("type") == "integer":
                option["maximum"] = meta.horizon
    return document


def _fields(document: dict) -> Iterator[tuple[str, dict]]:
    """(name, schema) of every request body property and query parameter: what clients
    send. Response schemas keep theirs (they describe what was served, whichever model)."""
    schemas = document.get("components", {}).get("schemas", {})
    for name in _request_models(document, schemas):
        yield from schemas[name].get("properties", {}).items()
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and "schema" in parameter:
                    yield parameter["name"], parameter["schema"]


def _request_models(document: dict, schemas: dict) -> set[str]:
    """Names of the component schemas that request bodies use, directly or nested."""
    found: set[str] = set()
    pending = [operation.get("requestBody", {})
               for operations in document.get("paths", {}).values()
               for operation in operations.values()]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            name = ref.rsplit("/", 1)[-1]
            if ref.startswith("#/components/schemas/") and name not in found:
                found.add(name)
                pending.append(schemas.get(name, {}))
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found

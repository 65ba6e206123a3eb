"""The A1 policy type of the forecaster's controls, and the messages the O-RAN SC A1 mediator
exchanges with xApps over RMR about its instances.

An operator steers, from the non-RT RIC, what the xApp forecasts for a group of cells: the
horizon and quantiles a forecast of those cells gets when a request names none, their latency
budget, or that they are not forecast at all. ``ForecastPolicy`` is the type's create_schema
(generated into ``helm/kpi-forecast/files/a1-policy-type.json``, which is what the A1
mediator is given); its field names are those of the descriptor's controls.

The messages follow what the O-RAN SC A1 mediator sends and reads. A1_POLICY_REQ carries
``{operation, policy_type_id, policy_instance_id, payload}``: its contract
(a1_xapp_contract_openapi.yaml) has the type id a number and the payload an object, but the
mediator of today (ric-plt/a1 in Go, pkg/rmr/messages.go) writes every value as a string: the
type id in decimal, the payload as the JSON text of the instance (empty for a DELETE). Both
forms are taken. A1_POLICY_RESP answers ``{policy_type_id, policy_instance_id, handler_id,
status}``, the type id a number (the mediator reads it as one); this xApp adds ``reason``
when the status is ERROR (the mediator reads the four keys into a map: others are ignored).
A1_POLICY_QUERY ``{policy_type_id}`` makes the mediator send a CREATE for every instance of
the type.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from kpi_forecast.xapp.descriptor.fields import (
    MODEL_CONFIG,
    CellId,
    ModelName,
    Quantile,
    unique_items,
)

A1_POLICY_REQ = 20010
A1_POLICY_RESP = 20011
A1_POLICY_QUERY = 20012
POLICY_TYPE_ID = 30001  # A1 policy type ids are the deployment's to allocate (1 to 2^31 - 1)
POLICY_TYPE_NAME = "kpi-forecast-controls"
MAX_CELLS_PER_INSTANCE = 10_000


class ForecastPolicy(BaseModel):
    """What the forecasts of a group of cells get, by one model or every model. Unset fields
    leave the controls' value; a cell belongs to one instance at most for each model."""

    model_config = MODEL_CONFIG

    cells: list[CellId] = Field(min_length=1, max_length=MAX_CELLS_PER_INSTANCE,
                                json_schema_extra={"uniqueItems": True})
    """The cells this instance steers."""
    model: ModelName | None = None
    """The model whose forecasts of these cells it steers (GET /v1/models lists them); null:
    every model's."""
    horizon: Annotated[int, Field(ge=1)] | None = None
    """Steps forecast for these cells when a request names none; null: the controls'
    defaultHorizon. At most the horizon of each model it steers."""
    quantiles: list[Quantile] | None = Field(None, min_length=1, json_schema_extra={
        "uniqueItems": True})
    """Quantiles answered for these cells; null: the controls'. Among those of each model it
    steers."""
    latency_budget_ms: float | None = Field(None, gt=0, le=60_000)
    """Latency target of a request for these cells (ms); a request for several cells is held
    to the smallest of theirs. null: the controls' latencyBudgetMs."""
    excluded: bool = False
    """true: these cells are not forecast (the forecast routes answer 409); their history is
    still kept."""

    @field_validator("cells")
    @classmethod
    def _unique_cells(cls, value: list[str]) -> list[str]:
        return unique_items(value, "cells")

    @field_validator("quantiles")
    @classmethod
    def _unique_quantiles(cls, value: list[float] | None) -> list[float] | None:
        return unique_items(value, "quantiles")


def _decimal(value: object) -> object:
    # The mediator writes the type id as a decimal string; the contract as a number.
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value


def _json_text(value: object) -> object:
    # The mediator writes the payload as the instance's JSON text ("" for a DELETE); the
    # contract as an object.
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError as exc:
            raise ValueError(f"the payload is a string but not JSON: {exc}") from None
    return value


_WIRE = ConfigDict(extra="forbid", frozen=True)
TypeId = Annotated[int, BeforeValidator(_decimal), Field(ge=1, le=2**31 - 1, strict=True)]
InstanceId = Annotated[str, Field(min_length=1, max_length=256)]


class PolicyRequest(BaseModel):
    """A1_POLICY_REQ, as the A1 mediator sends it (either form)."""

    model_config = _WIRE

    operation: Literal["CREATE", "UPDATE", "DELETE"]
    policy_type_id: TypeId
    policy_instance_id: InstanceId
    payload: Annotated[dict[str, Any], BeforeValidator(_json_text)]


class PolicyResponse(BaseModel):
    """A1_POLICY_RESP: the instance's status in this handler."""

    model_config = _WIRE

    policy_type_id: int
    policy_instance_id: str
    handler_id: str
    status: Literal["OK", "ERROR", "DELETED"]
    reason: str | None = None


class PolicyQuery(BaseModel):
    """A1_POLICY_QUERY: ask the mediator to send every instance of the type again."""

    model_config = _WIRE

    policy_type_id: int


def policy_type(create_schema: dict[str, Any]) -> dict[str, Any]:
    """The policy type as the A1 mediator's northbound API takes it
    (PUT /A1-P/v2/policytypes/{id})."""
    return {
        "name": POLICY_TYPE_NAME,
        "description": "kpi-forecast: the horizon, quantiles and latency budget of a group of "
                       "cells' forecasts, or their exclusion from forecasting",
        "policy_type_id": POLICY_TYPE_ID,
        "create_schema": create_schema,
    }

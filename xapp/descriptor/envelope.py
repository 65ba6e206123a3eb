"""The O-RAN SC xApp descriptor (config-file.json) as the RIC platform reads it: the envelope
(name, version, containers, probes, messaging, RMR) around the xApp's own ``controls``
(``controls.py``). Its schema is generated from these models (``schema.py``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.descriptor.fields import MODEL_CONFIG, MessageTypes, Port

# The descriptor's envelope belongs to the RIC platform (appmgr, dms_cli): keys this xApp does
# not use are kept, not refused.
_ENVELOPE_CONFIG = ConfigDict(MODEL_CONFIG, extra="allow")


class Image(BaseModel):
    model_config = _ENVELOPE_CONFIG

    registry: str
    name: str = Field(min_length=1)
    tag: str = Field(min_length=1)


class Container(BaseModel):
    model_config = _ENVELOPE_CONFIG

    name: str = Field(min_length=1)
    image: Image
    command: list[str] | SkipJsonSchema[None] = None
    args: list[str] | SkipJsonSchema[None] = None


class HttpGet(BaseModel):
    model_config = _ENVELOPE_CONFIG

    path: str
    port: Port


class Probe(BaseModel):
    model_config = _ENVELOPE_CONFIG

    http_get: HttpGet | SkipJsonSchema[None] = None
    initial_delay_seconds: Annotated[int, Field(ge=0)] | SkipJsonSchema[None] = None
    period_seconds: Annotated[int, Field(ge=1)] | SkipJsonSchema[None] = None


class MessagingPort(BaseModel):
    model_config = _ENVELOPE_CONFIG

    name: str = Field(min_length=1)
    container: str | SkipJsonSchema[None] = None
    port: Port
    rx_messages: MessageTypes | SkipJsonSchema[None] = None
    tx_messages: MessageTypes | SkipJsonSchema[None] = None
    policies: list[int] | SkipJsonSchema[None] = None
    description: str | SkipJsonSchema[None] = None


class Messaging(BaseModel):
    model_config = _ENVELOPE_CONFIG

    ports: list[MessagingPort] = Field(min_length=1)


class Rmr(BaseModel):
    model_config = _ENVELOPE_CONFIG

    protocols: list[str] | SkipJsonSchema[None] = None
    max_size: Annotated[int, Field(ge=1)] | SkipJsonSchema[None] = None
    num_workers: Annotated[int, Field(ge=1)] | SkipJsonSchema[None] = None
    rx_messages: MessageTypes | SkipJsonSchema[None] = None
    tx_messages: MessageTypes | SkipJsonSchema[None] = None
    policies: list[int] | SkipJsonSchema[None] = None


class DescriptorFile(BaseModel):
    """O-RAN SC xApp descriptor (config-file.json) of the kpi-forecast xApp."""

    model_config = ConfigDict(_ENVELOPE_CONFIG, title="kpi-forecast xApp descriptor")

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    containers: list[Container] = Field(min_length=1)
    liveness_probe: Probe | SkipJsonSchema[None] = None
    readiness_probe: Probe | SkipJsonSchema[None] = None
    messaging: Messaging
    rmr: Rmr | SkipJsonSchema[None] = None
    controls: Controls

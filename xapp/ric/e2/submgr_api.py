"""The subscription manager's REST bodies, in its field names: xapp-frame's ``pkg/models``
(the Go types submgr serves, with their JSON tags: what they leave out as ``omitempty`` may be
absent, the others may be null), as O-RAN SC submgr reads and writes them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

_REST = ConfigDict(populate_by_name=True, extra="ignore")
Octets = list[Annotated[int, Field(ge=0, le=255)]]  # an encoded ASN.1 value, byte by byte


class ClientEndpoint(BaseModel):
    model_config = _REST

    host: str = Field(alias="Host", min_length=1)
    http_port: int | None = Field(None, alias="HTTPPort", ge=0, le=65535)
    rmr_port: int = Field(alias="RMRPort", ge=1, le=65535)

    def rmr_endpoint(self) -> str:
        """The RMR endpoint submgr makes of it and lists (``ConstructEndpointAddresses``:
        every ``http`` in the host becomes ``rmr``)."""
        return f"{self.host.replace('http', 'rmr')}:{self.rmr_port}"


TimeToWait = Literal["zero", "w1ms", "w2ms", "w5ms", "w10ms", "w20ms", "w30ms", "w40ms",
                     "w50ms", "w100ms", "w200ms", "w500ms", "w1s", "w2s", "w5s", "w10s",
                     "w20s", "w60s"]


class SubsequentAction(BaseModel):
    model_config = _REST

    type: Literal["continue", "wait"] = Field(alias="SubsequentActionType")
    time_to_wait: TimeToWait = Field(alias="TimeToWait")


class ActionToBeSetup(BaseModel):
    model_config = _REST

    action_id: int = Field(alias="ActionID", ge=0, le=255)
    action_type: Literal["insert", "policy", "report"] = Field(alias="ActionType")
    action_definition: Octets = Field(alias="ActionDefinition")
    subsequent_action: SubsequentAction | None = Field(None, alias="SubsequentAction")


class SubscriptionDetail(BaseModel):
    model_config = _REST

    xapp_event_instance_id: int = Field(alias="XappEventInstanceId", ge=0, le=65535)
    event_triggers: Octets = Field(alias="EventTriggers")
    actions: list[ActionToBeSetup] = Field(alias="ActionToBeSetupList", min_length=1)


class SubscriptionRequest(BaseModel):
    """SubscriptionParams: one E2 node, one detail (here: one cell) per entry."""

    model_config = _REST

    subscription_id: str = Field("", alias="SubscriptionId")
    client_endpoint: ClientEndpoint = Field(alias="ClientEndpoint")
    meid: str = Field(alias="Meid", min_length=1)
    ran_function_id: int = Field(alias="RANFunctionID", ge=0, le=4095)
    details: list[SubscriptionDetail] = Field(alias="SubscriptionDetails", min_length=1)


class SubscriptionInstance(BaseModel):
    """One detail's outcome (xapp-frame ``models.SubscriptionInstance``): the E2 instance id
    when admitted; an ErrorCause, ErrorSource and TimeoutType when not (and an instance id
    of 0)."""

    model_config = _REST

    xapp_event_instance_id: int = Field(alias="XappEventInstanceId")
    e2_event_instance_id: int | None = Field(None, alias="E2EventInstanceId")
    error_cause: str | None = Field(None, alias="ErrorCause")
    error_source: str | None = Field(None, alias="ErrorSource")
    timeout_type: str | None = Field(None, alias="TimeoutType")


class SubscriptionResponse(BaseModel):
    """The 201 answer to a subscription (the id; instances null) and each outcome submgr
    posts to ``/ric/v1/subscriptions/response`` (the id and one instance)."""

    model_config = _REST

    subscription_id: str = Field(alias="SubscriptionId", min_length=1)
    instances: list[SubscriptionInstance] | None = Field(None, alias="SubscriptionInstances")


class SubscriptionData(BaseModel):
    """An entry of ``GET /subscriptions``: one E2 subscription (xapp-frame
    ``models.SubscriptionData``; Meid and SubscriptionId are ``omitempty``)."""

    model_config = _REST

    subscription_id: int = Field(0, alias="SubscriptionId")
    meid: str = Field("", alias="Meid")
    client_endpoint: list[str] | None = Field(None, alias="ClientEndpoint")


SubscriptionList = TypeAdapter(list[SubscriptionData])


class RestSubscription(BaseModel):
    """An entry of submgr's ``GET /get_e2node_rest_subscriptions/{ranName}`` (its
    ``RESTSubscription``'s exported fields)."""

    model_config = _REST

    meid: str = Field("", alias="Meid")
    instance_ids: list[int] | None = Field(None, alias="InstanceIds")


NodeRestSubscriptions = TypeAdapter(dict[str, RestSubscription])

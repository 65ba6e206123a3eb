"""E2AP PDUs the xApp exchanges for a KPM report subscription, over pycrate's E2AP module.

The E2SM payloads (event trigger, action definition, indication header and message) travel as
opaque octets here; xapp.e2.kpm encodes and decodes them. Encoders raise ValueError for values
E2AP cannot carry; decode raises kpm.DecodeError (reason "e2ap"), and nothing else, for any
input it cannot use.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from kpi_forecast.xapp.ric.e2.kpm import Bytes, DecodeError

# A Cause is (group, value) as E2AP names them, e.g. ("ricRequest", "action-not-supported").
Cause = tuple[str, str]

Kind = Literal[
    "subscription_request",
    "subscription_response",
    "subscription_failure",
    "subscription_delete_request",
    "indication",
]

# Procedure codes (E2AP-Constants).
RIC_SUBSCRIPTION = 8
RIC_INDICATION = 5
RIC_SUBSCRIPTION_DELETE = 9

# Protocol IE ids (E2AP-Constants).
ID_CAUSE = 1
ID_RAN_FUNCTION_ID = 5
ID_ACTION_ADMITTED_ITEM = 14
ID_ACTION_ID = 15
ID_ACTION_NOT_ADMITTED_ITEM = 16
ID_ACTIONS_ADMITTED = 17
ID_ACTIONS_NOT_ADMITTED = 18
ID_ACTION_TO_BE_SETUP_ITEM = 19
ID_INDICATION_HEADER = 25
ID_INDICATION_MESSAGE = 26
ID_INDICATION_SN = 27
ID_INDICATION_TYPE = 28
ID_REQUEST_ID = 29
ID_SUBSCRIPTION_DETAILS = 30

# Criticality of each elementary procedure (E2AP-PDU-Descriptions): what a receiver that does
# not comprehend the procedure does with it; a RIC indication may be silently ignored.
_PROCEDURE_CRITICALITY = {
    RIC_SUBSCRIPTION: "reject",
    RIC_SUBSCRIPTION_DELETE: "reject",
    RIC_INDICATION: "ignore",
}

# (PDU choice, procedure code) -> (message type, kind).
_MESSAGES: dict[tuple[str, int], tuple[str, Kind]] = {
    ("initiatingMessage", RIC_SUBSCRIPTION): ("RICsubscriptionRequest", "subscription_request"),
    ("successfulOutcome", RIC_SUBSCRIPTION): ("RICsubscriptionResponse", "subscription_response"),
    ("unsuccessfulOutcome", RIC_SUBSCRIPTION): ("RICsubscriptionFailure", "subscription_failure"),
    ("initiatingMessage", RIC_SUBSCRIPTION_DELETE): (
        "RICsubscriptionDeleteRequest",
        "subscription_delete_request",
    ),
    ("initiatingMessage", RIC_INDICATION): ("RICindication", "indication"),
}

# pycrate keeps the value of an ASN.1 object on the (module-level) object itself, so two threads
# encoding or decoding at once would overwrite each other's PDU.
_lock = threading.Lock()


# Not frozen: a frozen dataclass sets each field through object.__setattr__, a cost paid on
# every indication ingested.
@dataclass(slots=True)
class E2apMessage:
    """A decoded E2AP PDU: the subscription it belongs to and the fields of its kind."""

    kind: Kind
    requestor_id: int
    instance_id: int
    ran_function_id: int
    action_id: int | None = None
    event_trigger: bytes | None = None
    action_definition: bytes | None = None
    sequence_number: int | None = None
    header: bytes | None = None
    message: bytes | None = None
    admitted: tuple[int, ...] = ()
    not_admitted: dict[int, Cause] = field(default_factory=dict)
    cause: Cause | None = None


@cache
def _pdu() -> Any:
    # Imported on first use: loading the E2AP module builds a few thousand ASN.1 objects.
    from pycrate_asn1dir import E2AP

    return E2AP.E2AP_PDU_Descriptions.E2AP_PDU


# --- encoding -----------------------------------------------------------------------------------


def _ie(ie_id: int, type_name: str, value: Any, criticality: str = "reject") -> dict[str, Any]:
    return {"id": ie_id, "criticality": criticality, "value": (type_name, value)}


def _subscription_ies(requestor_id: int, instance_id: int, ran_function_id: int) -> list[dict]:
    # Every PDU here opens with RICrequestID and RANfunctionID, both criticality reject.
    return [
        _ie(
            ID_REQUEST_ID,
            "RICrequestID",
            {"ricRequestorID": requestor_id, "ricInstanceID": instance_id},
        ),
        _ie(ID_RAN_FUNCTION_ID, "RANfunctionID", ran_function_id),
    ]


def _encode(choice: str, procedure: int, ies: list[dict[str, Any]]) -> bytes:
    message_type, _ = _MESSAGES[(choice, procedure)]
    value = (
        choice,
        {
            "procedureCode": procedure,
            "criticality": _PROCEDURE_CRITICALITY[procedure],
            "value": (message_type, {"protocolIEs": ies}),
        },
    )
    with _lock:
        pdu = _pdu()
        try:
            pdu.set_val(value)
            return pdu.to_aper()
        except Exception as exc:  # pycrate's errors share no base class with its TypeErrors etc.
            raise ValueError(f"{message_type}: {exc}") from exc


def encode_subscription_request(
    requestor_id: int,
    instance_id: int,
    ran_function_id: int,
    event_trigger: bytes,
    action_id: int,
    action_definition: bytes,
) -> bytes:
    """RICsubscriptionRequest with one report action."""
    action = _ie(
        ID_ACTION_TO_BE_SETUP_ITEM,
        "RICaction-ToBeSetup-Item",
        {
            "ricActionID": action_id,
            "ricActionType": "report",
            "ricActionDefinition": bytes(action_definition),
        },
        criticality="ignore",
    )
    details = {
        "ricEventTriggerDefinition": bytes(event_trigger),
        "ricAction-ToBeSetup-List": [action],
    }
    ies = _subscription_ies(requestor_id, instance_id, ran_function_id)
    ies.append(_ie(ID_SUBSCRIPTION_DETAILS, "RICsubscriptionDetails", details))
    return _encode("initiatingMessage", RIC_SUBSCRIPTION, ies)


def encode_subscription_response(
    requestor_id: int,
    instance_id: int,
    ran_function_id: int,
    admitted: Sequence[int],
    not_admitted: Mapping[int, Cause] | None = None,
) -> bytes:
    """RICsubscriptionResponse: at least one admitted action (else the node sends a failure)."""
    ies = _subscription_ies(requestor_id, instance_id, ran_function_id)
    admitted_items = [
        _ie(
            ID_ACTION_ADMITTED_ITEM,
            "RICaction-Admitted-Item",
            {"ricActionID": action_id},
            criticality="ignore",
        )
        for action_id in admitted
    ]
    ies.append(_ie(ID_ACTIONS_ADMITTED, "RICaction-Admitted-List", admitted_items))
    if not_admitted:
        rejected = [
            _ie(
                ID_ACTION_NOT_ADMITTED_ITEM,
                "RICaction-NotAdmitted-Item",
                {"ricActionID": action_id, "cause": cause},
                criticality="ignore",
            )
            for action_id, cause in not_admitted.items()
        ]
        ies.append(_ie(ID_ACTIONS_NOT_ADMITTED, "RICaction-NotAdmitted-List", rejected))
    return _encode("successfulOutcome", RIC_SUBSCRIPTION, ies)


def encode_subscription_failure(
    requestor_id: int, instance_id: int, ran_function_id: int, cause: Cause
) -> bytes:
    """RICsubscriptionFailure with its cause."""
    ies = _subscription_ies(requestor_id, instance_id, ran_function_id)
    ies.append(_ie(ID_CAUSE, "Cause", cause))
    return _encode("unsuccessfulOutcome", RIC_SUBSCRIPTION, ies)


def encode_subscription_delete_request(
    requestor_id: int, instance_id: int, ran_function_id: int
) -> bytes:
    """RICsubscriptionDeleteRequest."""
    ies = _subscription_ies(requestor_id, instance_id, ran_function_id)
    return _encode("initiatingMessage", RIC_SUBSCRIPTION_DELETE, ies)


def encode_indication(
    requestor_id: int,
    instance_id: int,
    ran_function_id: int,
    action_id: int,
    sequence_number: int | None,
    header: bytes,
    message: bytes,
) -> bytes:
    """RICindication of type report (what an E2 node sends for a KPM report action)."""
    ies = _subscription_ies(requestor_id, instance_id, ran_function_id)
    ies.append(_ie(ID_ACTION_ID, "RICactionID", action_id))
    if sequence_number is not None:
        ies.append(_ie(ID_INDICATION_SN, "RICindicationSN", sequence_number))
    ies += [
        _ie(ID_INDICATION_TYPE, "RICindicationType", "report"),
        _ie(ID_INDICATION_HEADER, "RICindicationHeader", bytes(header)),
        _ie(ID_INDICATION_MESSAGE, "RICindicationMessage", bytes(message)),
    ]
    return _encode("initiatingMessage", RIC_INDICATION, ies)


# --- decoding -----------------------------------------------------------------------------------


class _Ies:
    """The protocol IEs of one message, looked up by id and checked for their expected type."""

    def __init__(self, ies: list[dict[str, Any]]) -> None:
        self._values = {ie["id"]: ie["value"] for ie in ies}

    def optional(self, ie_id: int, type_name: str) -> Any:
        if ie_id not in self._values:
            return None
        name, value = self._values[ie_id]
        if name != type_name:
            raise DecodeError("e2ap", f"IE {ie_id} holds {name}, not {type_name}")
        return value

    def required(self, ie_id: int, type_name: str) -> Any:
        value = self.optional(ie_id, type_name)
        if value is None:
            raise DecodeError("e2ap", f"mandatory IE {ie_id} ({type_name}) is missing")
        return value


def _items(container: list[dict[str, Any]], ie_id: int, type_name: str) -> list[Any]:
    # Action lists are lists of single-IE containers.
    return [_Ies([item]).required(ie_id, type_name) for item in container]


def _request_fields(ies: _Ies) -> dict[str, int]:
    request = ies.required(ID_REQUEST_ID, "RICrequestID")
    return {
        "requestor_id": request["ricRequestorID"],
        "instance_id": request["ricInstanceID"],
        "ran_function_id": ies.required(ID_RAN_FUNCTION_ID, "RANfunctionID"),
    }


def _request_payload(ies: _Ies) -> dict[str, Any]:
    details = ies.required(ID_SUBSCRIPTION_DETAILS, "RICsubscriptionDetails")
    actions = _items(
        details["ricAction-ToBeSetup-List"], ID_ACTION_TO_BE_SETUP_ITEM, "RICaction-ToBeSetup-Item"
    )
    # The xApp subscribes one action per request; refusing more beats silently dropping some.
    if len(actions) != 1:
        raise DecodeError("e2ap", f"{len(actions)} actions in one request are not supported")
    return {
        "event_trigger": details["ricEventTriggerDefinition"],
        "action_id": actions[0]["ricActionID"],
        "action_definition": actions[0].get("ricActionDefinition"),
    }


def _response_payload(ies: _Ies) -> dict[str, Any]:
    admitted = _items(
        ies.required(ID_ACTIONS_ADMITTED, "RICaction-Admitted-List"),
        ID_ACTION_ADMITTED_ITEM,
        "RICaction-Admitted-Item",
    )
    rejected = _items(
        ies.optional(ID_ACTIONS_NOT_ADMITTED, "RICaction-NotAdmitted-List") or [],
        ID_ACTION_NOT_ADMITTED_ITEM,
        "RICaction-NotAdmitted-Item",
    )
    return {
        "admitted": tuple(item["ricActionID"] for item in admitted),
        "not_admitted": {item["ricActionID"]: item["cause"] for item in rejected},
    }


def _failure_payload(ies: _Ies) -> dict[str, Any]:
    return {"cause": ies.required(ID_CAUSE, "Cause")}


def _no_payload(ies: _Ies) -> dict[str, Any]:
    return {}


def _indication_payload(ies: _Ies) -> dict[str, Any]:
    ies.required(ID_INDICATION_TYPE, "RICindicationType")  # mandatory, though unused here
    return {
        "action_id": ies.required(ID_ACTION_ID, "RICactionID"),
        "sequence_number": ies.optional(ID_INDICATION_SN, "RICindicationSN"),
        "header": ies.required(ID_INDICATION_HEADER, "RICindicationHeader"),
        "message": ies.required(ID_INDICATION_MESSAGE, "RICindicationMessage"),
    }


_PAYLOADS = {
    "subscription_request": _request_payload,
    "subscription_response": _response_payload,
    "subscription_failure": _failure_payload,
    "subscription_delete_request": _no_payload,
    "indication": _indication_payload,
}


def _pdu_value(data: Bytes) -> Any:
    try:
        pdu = _pdu()
        pdu.from_aper(bytes(memoryview(data)))
        return pdu.get_val()
    except Exception as exc:  # pycrate fails in many ways (its own errors, struct, indexing)
        raise DecodeError("e2ap", f"not an E2AP PDU: {exc}") from exc


def _message(value: Any) -> E2apMessage:
    choice, body = value
    message = _MESSAGES.get((choice, body["procedureCode"]))
    type_name, content = body["value"]
    if message is None or message[0] != type_name:
        raise DecodeError("e2ap", f"{choice} {type_name} is not supported")
    kind = message[1]
    ies = _Ies(content["protocolIEs"])
    return E2apMessage(kind=kind, **_request_fields(ies), **_PAYLOADS[kind](ies))


def decode(data: Bytes) -> E2apMessage:
    """One of the five PDUs of a KPM report subscription; anything else is a DecodeError."""
    # The lock covers reading the value too: it may share objects with pycrate's own state.
    with _lock:
        value = _pdu_value(data)
        try:
            return _message(value)
        except DecodeError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # What pycrate cannot resolve (an unknown extension, an IE outside its tables) comes
            # back as raw bytes where a (name, value) pair or a dict is expected.
            raise DecodeError("e2ap", f"unexpected PDU contents: {exc!r}") from exc

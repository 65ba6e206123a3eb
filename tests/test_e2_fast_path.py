"""The fast indication path against the general decoders: on valid PDUs of every shape (ours,
the O-RAN reference module's, with and without the optional parts), on random bytes and on
mutated PDUs, the fast path answers exactly what the general decoders answer, or both refuse,
or it leaves the octets to them (NotFast). And it does answer the usual shapes itself."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asn1tools
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kpi_forecast.cli import indication_writer
from kpi_forecast.xapp.ric.e2 import e2ap, fast_indication, kpm
from kpi_forecast.xapp.ric.e2.fast_indication import NotFast
from kpi_forecast.xapp.ric.e2.kpm import DecodeError
from kpi_forecast.xapp.ric.e2.kpm_indication import (
    decode_header_us,
    decode_indication_message,
    encode_indication_header,
    encode_indication_message,
    stamp_us,
)
from tests.test_e2_codec import PROJECT_ASN, mutations, ref, ref_message  # noqa: F401

DIFFERENTIAL = settings(max_examples=400, deadline=None, database=None)
NAMES = st.sampled_from(kpm.MEASUREMENTS) | st.text(
    st.sampled_from("AZaz09 '()+,-./:=?"), min_size=1, max_size=150)
INTEGER = st.integers(0, 2**32 - 1)
REAL = st.floats(allow_nan=True, allow_infinity=True)
LABEL = st.sampled_from([
    {"noLabel": "true"}, {"noLabel": "true", "sUM": "true"}, {"fiveQI": 9},
    {"plmnID": b"\x00\xf1\x10"}, {"sliceID": {"sST": b"\x01", "sD": b"\x00\x00\x01"}},
])


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a decoded NaN is a new object every time)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__") and type(a) is type(b):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b


def agree(fast: Callable[[bytes], Any], general: Callable[[bytes], Any], data: bytes) -> str:
    """Run both on ``data``; fail unless they agree. Returns what happened, for the stats."""
    try:
        expected: Any = general(data)
    except DecodeError as exc:
        expected = exc
    try:
        got = fast(data)
    except NotFast:
        return "left to the general decoder"
    except DecodeError as exc:
        assert isinstance(expected, DecodeError), f"fast path refused {data.hex()}: {exc}"
        assert exc.reason == expected.reason
        return "both refused"
    assert not isinstance(expected, DecodeError), (
        f"fast path decoded {data.hex()} that the general decoder refuses: {expected}")
    assert same(got, expected), f"{data.hex()}: fast {got} != general {expected}"
    return "both decoded"


def fast_header(data: bytes) -> int:
    return stamp_us(fast_indication.fast_header_stamp(data))


# --- what valid indications look like -------------------------------------------------------

@st.composite
def records(draw: st.DrawFn, extensions: bool) -> tuple[str, Any]:
    kinds = ["integer", "real", "noValue"] + (["notSatisfied"] if extensions else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "integer":
        return kind, draw(INTEGER)
    if kind == "real":
        return kind, draw(REAL)
    return kind, None


@st.composite
def messages(draw: st.DrawFn, extensions: bool = False) -> bytes:
    """An indication message of format 1, in our module's encoding: any number of periods and
    measurements, incomplete periods, either optional part; with ``extensions`` also what the
    fast path leaves alone (notSatisfied, labels beyond noLabel)."""
    width = draw(st.integers(1, 4))
    items = []
    for _ in range(draw(st.integers(1, 4))):
        item: dict[str, Any] = {"measRecord": [draw(records(extensions)) for _ in range(width)]}
        if draw(st.booleans()):
            item["incompleteFlag"] = "true"
        items.append(item)
    format1: dict[str, Any] = {"measData": items}
    if draw(st.booleans()):
        labels = st.lists(LABEL if extensions else st.just({"noLabel": "true"}), min_size=1,
                          max_size=2)
        format1["measInfoList"] = [
            {"measType": ("measName", draw(NAMES)),
             "labelInfoList": [{"measLabel": label} for label in draw(labels)]}
            for _ in range(draw(st.sampled_from([width, width, width + 1])))]
    if draw(st.booleans()):
        format1["granulPeriod"] = draw(st.integers(1, 2**32 - 1))
    value = {"indicationMessage-formats": ("indicationMessage-Format1", format1)}
    return ours().encode("KpmIndicationMessage", value)


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    """A format-1 header: 8-octet NTP or 4-octet v2 time, optional strings or none."""
    optional = draw(st.fixed_dictionaries({}, optional={
        "fileFormatversion": st.text("AZ09.", max_size=15),
        "senderName": st.text("az09-", max_size=40), "vendorName": st.text("AZ", max_size=32),
    }))
    four = draw(st.booleans())
    stamp = draw(st.binary(min_size=4, max_size=4) if four else st.binary(min_size=8,
                                                                           max_size=8))
    body = {"colletStartTime": stamp, **optional}
    spelled = "KpmIndicationHeaderV2" if four else "KpmIndicationHeader"
    return ours().encode(spelled, {"indicationHeader-formats": ("indicationHeader-Format1",
                                                                body)})


@st.composite
def pdus(draw: st.DrawFn) -> bytes:
    sequence = draw(st.none() | st.integers(0, 65535))
    return e2ap.encode_indication(
        draw(st.integers(0, 65535)), draw(st.integers(0, 65535)), draw(st.integers(0, 4095)),
        draw(st.integers(0, 255)), sequence, draw(headers()), draw(messages()))


_OURS: list[asn1tools.compiler.Specification] = []


def ours() -> asn1tools.compiler.Specification:
    if not _OURS:
        _OURS.append(asn1tools.compile_files(str(PROJECT_ASN), "per"))
    return _OURS[0]


START = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
SEEDS = {
    "e2ap": [e2ap.encode_indication(3, 7, 2, 5, 300, encode_indication_header(START),
                                    encode_indication_message(kpm.IndicationMessage(
                                        [kpm.Measurement("RRU.PrbUsedDl", [42.0, None, 3.25])],
                                        granularity_ms=3_600_000)))],
    "header": [encode_indication_header(START), b"\x00" + (1_714_564_800).to_bytes(4, "big")],
    "message": [encode_indication_message(kpm.IndicationMessage(
        [kpm.Measurement("RRU.PrbUsedDl", [40.0, 0.5]), kpm.Measurement("DRB.UEThpDl",
                                                                      [None, 1e300])],
        granularity_ms=1000))],
}
PATHS: dict[str, tuple[Callable[[bytes], Any], Callable[[bytes], Any]]] = {
    "e2ap": (fast_indication.fast_e2ap, e2ap.decode),
    "header": (fast_header, decode_header_us),
    "message": (lambda d: fast_indication.fast_message(d, ["A", "B"]),
                lambda d: decode_indication_message(d, ["A", "B"])),
}


# --- the tests --------------------------------------------------------------------------------

@DIFFERENTIAL
@given(data=pdus())
def test_valid_indications_decode_alike(data: bytes) -> None:
    assert agree(*PATHS["e2ap"], data) == "both decoded"


@DIFFERENTIAL
@given(data=headers())
def test_valid_headers_decode_alike(data: bytes) -> None:
    event(agree(*PATHS["header"], data))


@DIFFERENTIAL
@given(data=messages(extensions=False))
def test_valid_messages_decode_alike(data: bytes) -> None:
    event(agree(*PATHS["message"], data))


@DIFFERENTIAL
@given(data=messages(extensions=True))
def test_messages_with_extensions_and_labels_decode_alike(data: bytes) -> None:
    event(agree(*PATHS["message"], data))


@pytest.mark.parametrize("name", PATHS)
@DIFFERENTIAL
@given(draw=st.data())
def test_mutated_encodings_decode_alike_or_are_refused_by_both(name: str,
                                                                 draw: st.DataObject) -> None:
    seeds = SEEDS[name] + [draw.draw({"e2ap": pdus(), "header": headers(),
                                      "message": messages(True)}[name])]
    event(agree(*PATHS[name], draw.draw(mutations(seeds))))


@pytest.mark.parametrize("name", PATHS)
@DIFFERENTIAL
@given(data=st.binary(max_size=128))
def test_random_bytes_decode_alike_or_are_refused_by_both(name: str, data: bytes) -> None:
    event(agree(*PATHS[name], data))


def test_the_reference_modules_encodings_decode_alike(ref: Any) -> None:  # noqa: F811
    """Encoded by the O-RAN E2SM-KPM v4 module itself: the shapes the fast path reads, and one
    it leaves (labels), both as the general decoder reads them."""
    format1 = {"measData": [{"measRecord": [("integer", 40), ("real", 812.25), ("noValue", None)]},
                            {"measRecord": [("integer", 4294967295), ("real", 0.5),
                                            ("integer", 3)], "incompleteFlag": "true"}],
               "measInfoList": [{"measType": ("measName", name),
                                 "labelInfoList": [{"measLabel": {"noLabel": "true"}}]}
                                for name in ("RRU.PrbUsedDl", "DRB.UEThpDl", "RRC.ConnMean")],
               "granulPeriod": 1000}
    usual = ref.encode("E2SM-KPM-IndicationMessage", ref_message(format1))
    assert agree(*PATHS["message"], usual) == "both decoded"
    format1["measInfoList"][0]["labelInfoList"] = [{"measLabel": {"fiveQI": 9}}]
    labelled = ref.encode("E2SM-KPM-IndicationMessage", ref_message(format1))
    assert agree(*PATHS["message"], labelled) == "left to the general decoder"
    header = ref.encode("E2SM-KPM-IndicationHeader", {"indicationHeader-formats": (
        "indicationHeader-Format1", {"colletStartTime": bytes.fromhex("eb9b8f1a80000000")})})
    assert agree(*PATHS["header"], header) == "both decoded"


def test_the_usual_report_takes_the_fast_path() -> None:
    """What the mock E2 node and the benchmarks send is read by the fast path, all of it."""
    pdu = fast_indication.fast_e2ap(SEEDS["e2ap"][0])
    assert (pdu.instance_id, pdu.action_id, pdu.sequence_number) == (7, 5, 300)
    assert fast_indication.decode_header_us(pdu.header) == (START - datetime(
        1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    message = fast_indication.fast_message(pdu.message, None)
    assert message.measurements[0].values == [42.0, None, 3.25]
    assert message.granularity_ms == 3_600_000


def test_a_repeated_measinfolist_is_read_once() -> None:
    """The names and granularity a node repeats are kept by their octets: a second report
    with other values reuses them and still decodes as the general decoder does; other
    names are read afresh."""
    fast_indication._tail.cache_clear()

    def report(name: str, value: float) -> bytes:
        return encode_indication_message(kpm.IndicationMessage(
            [kpm.Measurement(name, [value, None])], granularity_ms=1000))

    for value in (1.0, 2.5):
        assert agree(*PATHS["message"], report("RRU.PrbUsedDl", value)) == "both decoded"
    tail = fast_indication._tail
    assert (tail.cache_info().hits, tail.cache_info().currsize) == (1, 1)
    assert agree(*PATHS["message"], report("DRB.UEThpDl", 7.0)) == "both decoded"
    assert (tail.cache_info().hits, tail.cache_info().currsize) == (1, 2)


def test_what_the_fast_path_leaves_is_still_decoded() -> None:
    """A subscription response is no indication: the fast path leaves it, decode_e2ap reads it
    with the general decoder; a v2 header with a sender name likewise."""
    response = e2ap.encode_subscription_response(3, 7, 2, [5])
    with pytest.raises(NotFast):
        fast_indication.fast_e2ap(response)
    assert fast_indication.decode_e2ap(response).kind == "subscription_response"
    named = ours().encode("KpmIndicationHeaderV2", {"indicationHeader-formats": (
        "indicationHeader-Format1", {"colletStartTime": (1_714_564_800).to_bytes(4, "big"),
                                     "senderName": "gnb-1"})})
    with pytest.raises(NotFast):
        fast_indication.fast_header_stamp(named)
    assert fast_indication.decode_header_us(named) == 1_714_564_800 * 1_000_000


# --- the encoders the mock E2 node uses ---------------------------------------------------------

VALUE = st.none() | INTEGER.map(float) | REAL
PRINTABLE_NAMES = st.text(st.sampled_from("AZaz09 '()+,-./:=?"), min_size=1, max_size=150)


@st.composite
def indication_messages(draw: st.DrawFn) -> kpm.IndicationMessage:
    periods = draw(st.integers(1, 4))
    names = draw(st.lists(NAMES | PRINTABLE_NAMES, min_size=1, max_size=3, unique=True))
    return kpm.IndicationMessage(
        [kpm.Measurement(name, draw(st.lists(VALUE, min_size=periods, max_size=periods)))
         for name in names],
        draw(st.none() | st.integers(1, 2**32 - 1)))


@DIFFERENTIAL
@given(msg=indication_messages())
def test_the_fast_message_encoder_writes_the_general_encoders_octets(
        msg: kpm.IndicationMessage) -> None:
    expected = encode_indication_message(msg)
    assert indication_writer.fast_encode_message(msg) == expected
    assert indication_writer.encode_message(msg) == expected


@DIFFERENTIAL
@given(requestor=st.integers(0, 0xFFFF), instance=st.integers(0, 0xFFFF),
       function=st.integers(0, 4095), action=st.integers(0, 0xFF),
       number=st.none() | st.integers(0, 0xFFFF), header=st.binary(max_size=20),
       message=st.binary(max_size=400))
def test_the_fast_indication_encoder_writes_the_general_encoders_octets(
        requestor: int, instance: int, function: int, action: int, number: int | None,
        header: bytes, message: bytes) -> None:
    expected = e2ap.encode_indication(requestor, instance, function, action, number, header,
                                      message)
    assert indication_writer.fast_encode_e2ap(requestor, instance, function, action, number, header,
                                       message) == expected


def test_what_the_fast_encoders_leave_goes_to_the_general_ones() -> None:
    long_name = kpm.IndicationMessage([kpm.Measurement("x" * 151, [1.0])])
    with pytest.raises(NotFast):
        indication_writer.fast_encode_message(long_name)
    with pytest.raises(NotFast):
        indication_writer.fast_encode_e2ap(1, 1, 4096, 1, None, b"", b"")
    with pytest.raises(NotFast):
        indication_writer.fast_encode_message(kpm.IndicationMessage([kpm.Measurement("Prb\u00e9",
                                                                               [1.0])]))

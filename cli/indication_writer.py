"""RIC Indications written fast, as the mock E2 node sends them: the usual shape of an E2SM-KPM
format-1 report that ``xapp/ric/e2/indication.py`` reads fast, written straight as aligned-PER
octets; anything outside it (``NotFast``) goes to the general encoders, whose octets these are
byte for byte (``tests/test_e2_fast_path.py``)."""

from __future__ import annotations

import math
from functools import lru_cache

from kpi_forecast.xapp.ric.e2 import e2ap, kpm_indication
from kpi_forecast.xapp.ric.e2.fast_indication import (
    MAX_UINT32,
    NAME_MAX,
    NO_LABEL_ONLY,
    PRINTABLE,
    TAILS_KEPT,
    NotFast,
)
from kpi_forecast.xapp.ric.e2.kpm import IndicationMessage


class _Writer:
    """Aligned-PER octets written front to back, held as one integer of ``size`` bits."""

    __slots__ = ("value", "size")

    def __init__(self) -> None:
        self.value, self.size = 0, 0

    def bits(self, value: int, count: int) -> None:
        self.value = (self.value << count) | value
        self.size += count

    def align(self) -> None:
        pad = -self.size % 8
        self.value <<= pad
        self.size += pad

    def octets(self, data: bytes) -> None:
        self.align()
        self.bits(int.from_bytes(data, "big"), len(data) * 8)

    def length(self, count: int) -> None:
        self.align()
        if count < 0x80:
            self.bits(count, 8)
        elif count < 0x4000:
            self.bits(0x8000 | count, 16)
        else:
            raise NotFast  # fragmented: the general encoder's

    def result(self) -> bytes:
        self.align()
        return self.value.to_bytes(self.size // 8, "big")


def _minimal(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _real_octets(value: float) -> bytes:
    """A REAL's contents as asn1tools writes them: base 2, the mantissa odd, the exponent in
    one or two octets; the special values as their single octet."""
    if math.isnan(value):
        return b"\x42"
    if math.isinf(value):
        return b"\x40" if value > 0 else b"\x41"
    if value == 0.0:
        return b""
    sign = 0x40 if value < 0 else 0
    fraction, exponent = math.frexp(abs(value))
    mantissa = int(fraction * 2**53)
    shift = (mantissa & -mantissa).bit_length() - 1
    mantissa >>= shift
    exponent += shift - 53
    if -0x80 <= exponent < 0x80:
        head = bytes((0x80 | sign, exponent & 0xFF))
    elif -0x8000 <= exponent < 0x8000:
        head = bytes((0x81 | sign,)) + (exponent & 0xFFFF).to_bytes(2, "big")
    else:
        raise NotFast
    return head + mantissa.to_bytes(mantissa.bit_length() // 8 + 1, "big")


def fast_encode_message(msg: IndicationMessage) -> bytes:
    """``kpm_indication.encode_indication_message``'s octets, written straight; ``NotFast``
    where they would not be in the shape ``fast_message`` reads."""
    periods = {len(m.values) for m in msg.measurements}
    if len(periods) != 1 or not 1 <= (count := periods.pop()) <= 0xFFFF \
            or not 1 <= len(msg.measurements) <= 0xFFFF:
        raise NotFast
    granularity = msg.granularity_ms
    out = _Writer()
    out.bits(0b10 | (granularity is not None), 6)  # measInfoList always, granulPeriod if given
    out.octets((count - 1).to_bytes(2, "big"))
    for period in range(count):
        out.bits(0, 2)  # no incompleteFlag
        out.length(len(msg.measurements))
        for m in msg.measurements:
            value = m.values[period]
            if value is None:
                out.bits(2, 3)
            elif float(value).is_integer() and 0 <= value <= MAX_UINT32:
                octets = _minimal(int(value))
                out.bits(0, 3)
                out.bits(len(octets) - 1, 2)
                out.octets(octets)
            else:
                octets = _real_octets(float(value))
                out.bits(1, 3)
                out.length(len(octets))
                out.octets(octets)
    return out.result() + _encoded_tail(tuple(m.name for m in msg.measurements), granularity)


@lru_cache(maxsize=TAILS_KEPT)
def _encoded_tail(names: tuple[str, ...], granularity: int | None) -> bytes:
    """measInfoList and granulPeriod, from an octet boundary on: the same in every report
    of a subscription, so written once (``_tail`` reads them once likewise)."""
    out = _Writer()
    out.octets((len(names) - 1).to_bytes(2, "big"))
    for name in names:
        octets = name.encode("utf-8")
        if not 1 <= len(octets) <= NAME_MAX or not PRINTABLE.issuperset(octets):
            raise NotFast
        out.bits(0, 4)
        out.bits(len(octets) - 1, 8)
        out.octets(octets)
        out.length(1)  # one label: noLabel
        out.bits(NO_LABEL_ONLY, 23)
        out.bits(0, 1)
    if granularity is not None:
        if not 1 <= granularity <= MAX_UINT32:
            raise NotFast
        value = _minimal(granularity - 1)
        out.bits(len(value) - 1, 2)
        out.octets(value)
    return out.result()


def _with_length(value: bytes) -> bytes:
    """An aligned length determinant, then the octets: every E2AP part of an indication is
    octet-aligned, so it is written as octets, not through a _Writer."""
    count = len(value)
    if count < 0x80:
        return bytes((count,)) + value
    if count < 0x4000:
        return (0x8000 | count).to_bytes(2, "big") + value
    raise NotFast  # fragmented: the general encoder's


def _ie(ie_id: int, value: bytes) -> bytes:
    # id, then criticality reject and the padding after it
    return ie_id.to_bytes(2, "big") + b"\x00" + _with_length(value)


def fast_encode_e2ap(requestor_id: int, instance_id: int, ran_function_id: int,
                     action_id: int, sequence_number: int | None, header: bytes,
                     message: bytes) -> bytes:
    """``e2ap.encode_indication``'s octets (a RICindication of type report), written
    straight; ``NotFast`` for values outside their ranges."""
    if not (0 <= requestor_id <= 0xFFFF and 0 <= instance_id <= 0xFFFF
            and 0 <= ran_function_id <= 4095 and 0 <= action_id <= 0xFF
            and (sequence_number is None or 0 <= sequence_number <= 0xFFFF)):
        raise NotFast
    body = b"".join((
        b"\x00",  # RICindication's extension bit
        (6 + (sequence_number is not None)).to_bytes(2, "big"),
        _ie(e2ap.ID_REQUEST_ID, bytes((0,)) + requestor_id.to_bytes(2, "big")
            + instance_id.to_bytes(2, "big")),
        _ie(e2ap.ID_RAN_FUNCTION_ID, ran_function_id.to_bytes(2, "big")),
        _ie(e2ap.ID_ACTION_ID, bytes((action_id,))),
        b"" if sequence_number is None else _ie(e2ap.ID_INDICATION_SN,
                                                sequence_number.to_bytes(2, "big")),
        _REPORT_IE,
        _header_ie(header),
        _ie(e2ap.ID_INDICATION_MESSAGE, _with_length(message)),
    ))
    # initiatingMessage, criticality ignore
    return bytes((0, e2ap.RIC_INDICATION, 0x40)) + _with_length(body)


_REPORT_IE = _ie(e2ap.ID_INDICATION_TYPE, b"\x00")


@lru_cache(maxsize=64)
def _header_ie(header: bytes) -> bytes:
    """A period's header IE: every cell's report of that period carries the same."""
    return _ie(e2ap.ID_INDICATION_HEADER, _with_length(header))


def encode_message(msg: IndicationMessage) -> bytes:
    """``kpm_indication.encode_indication_message``, by the fast path where it can."""
    try:
        return fast_encode_message(msg)
    except NotFast:
        return kpm_indication.encode_indication_message(msg)


def encode_e2ap(requestor_id: int, instance_id: int, ran_function_id: int, action_id: int,
                sequence_number: int | None, header: bytes, message: bytes) -> bytes:
    """``e2ap.encode_indication``, by the fast path where it can."""
    try:
        return fast_encode_e2ap(requestor_id, instance_id, ran_function_id, action_id,
                                sequence_number, header, message)
    except NotFast:
        return e2ap.encode_indication(requestor_id, instance_id, ran_function_id, action_id,
                                      sequence_number, header, message)

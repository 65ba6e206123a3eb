"""The fast path for what arrives most: a RIC Indication carrying an E2SM-KPM format-1 report.

The general decoders (pycrate's E2AP tables, asn1tools over ``kpm.asn``) walk a schema for
every field, which caps ingestion at a few thousand indications per second per core
(docs/benchmarks.md, E2 ingestion, has both paths' costs). A KPM report has one usual shape,
and this reads that shape straight off the aligned-PER octets: the E2AP RICindication and its
IEs (all octet-aligned), the indication header with its 8-octet (v3+) or 4-octet (v2)
colletStartTime, and the indication message's integer, real and noValue records,
incompleteFlag, measInfoList of measurement names without labels, and granulPeriod.

Anything outside that shape (another PDU, an IE or extension it does not know, labels, a
decimal REAL, a fragmented length, trailing octets) is ``NotFast``, and ``decode_*`` hand the
same octets to the general decoders, which decide. So this path never needs to be complete,
only exact: where it answers, it answers what the general decoders answer, field for field
(``tests/test_e2_fast_path.py`` checks that on random and mutated PDUs). The same shape written
fast, as the mock E2 node sends it, is ``cli/indication_writer.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from kpi_forecast.xapp.ric.e2 import e2ap, kpm_indication
from kpi_forecast.xapp.ric.e2.e2ap import E2apMessage
from kpi_forecast.xapp.ric.e2.kpm import Bytes, IndicationMessage

MAX_UINT32 = 2**32 - 1
NAME_MAX = 150  # measName PrintableString (SIZE (1..150, ...))
NO_LABEL_ONLY = 1 << 20  # a LabelInfoItem whose MeasLabel holds noLabel alone (21 bits)
PRINTABLE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                       b"0123456789 '()+,-./:=?")
_SPECIAL_REALS = {0x40: float("inf"), 0x41: float("-inf"), 0x42: float("nan"), 0x43: -0.0}
_KNOWN_IES = frozenset({
    e2ap.ID_REQUEST_ID, e2ap.ID_RAN_FUNCTION_ID, e2ap.ID_ACTION_ID, e2ap.ID_INDICATION_SN,
    e2ap.ID_INDICATION_TYPE, e2ap.ID_INDICATION_HEADER, e2ap.ID_INDICATION_MESSAGE,
})


class NotFast(Exception):
    """The octets are not of the shape this path reads; the general decoders take them."""


# --- E2AP ---------------------------------------------------------------------------------------


def _length(data: bytes, at: int) -> tuple[int, int]:
    """An aligned length determinant at octet ``at``: (length, where its content starts).
    Fragmented lengths (16K and more) are left to the general decoder."""
    if at >= len(data):
        raise NotFast
    first = data[at]
    if first < 0x80:
        return first, at + 1
    if first < 0xC0 and at + 1 < len(data):
        return ((first & 0x3F) << 8) | data[at + 1], at + 2
    raise NotFast


def _octet_string(value: bytes) -> bytes:
    """An unconstrained OCTET STRING that fills its open type exactly."""
    length, start = _length(value, 0)
    if start + length != len(value):
        raise NotFast
    return value[start:]


def fast_e2ap(data: bytes) -> E2apMessage:
    """A RICindication, the seven IEs a KPM report carries; ``NotFast`` for any other PDU."""
    size = len(data)
    # initiatingMessage (no extension), procedure RIC indication, a criticality it can have.
    if size < 4 or data[0] & 0xE0 or data[1] != e2ap.RIC_INDICATION or data[2] >> 6 == 3:
        raise NotFast
    length, at = _length(data, 3)
    if at + length != size or length < 3 or data[at] & 0x80:  # RICindication's extension
        raise NotFast
    count = (data[at + 1] << 8) | data[at + 2]
    at += 3
    values: dict[int, bytes] = {}
    for _ in range(count):
        # id (2 octets), criticality (2 bits and padding), the value's length determinant:
        # one octet below 128, the usual case, read here rather than by _length.
        if at + 4 > size:
            raise NotFast
        ie_id = (data[at] << 8) | data[at + 1]
        if ie_id not in _KNOWN_IES or ie_id in values or data[at + 2] >> 6 == 3:
            raise NotFast
        length = data[at + 3]
        if length < 0x80:
            start = at + 4
        else:
            length, start = _length(data, at + 3)
        at = start + length
        if at > size:
            raise NotFast
        values[ie_id] = data[start:at]
    if at != size or len(values) != len(_KNOWN_IES) - (e2ap.ID_INDICATION_SN not in values):
        raise NotFast
    request, function = values[e2ap.ID_REQUEST_ID], values[e2ap.ID_RAN_FUNCTION_ID]
    action, kind = values[e2ap.ID_ACTION_ID], values[e2ap.ID_INDICATION_TYPE]
    number = values.get(e2ap.ID_INDICATION_SN)
    if (len(request) != 5 or request[0] & 0x80 or len(function) != 2 or len(action) != 1
            or len(kind) != 1 or kind[0] & 0x80 or (number is not None and len(number) != 2)):
        raise NotFast
    ran_function = (function[0] << 8) | function[1]
    if ran_function > 4095:
        raise NotFast
    return E2apMessage(
        kind="indication",
        requestor_id=(request[1] << 8) | request[2],
        instance_id=(request[3] << 8) | request[4],
        ran_function_id=ran_function,
        action_id=action[0],
        sequence_number=None if number is None else (number[0] << 8) | number[1],
        header=_octet_string(values[e2ap.ID_INDICATION_HEADER]),
        message=_octet_string(values[e2ap.ID_INDICATION_MESSAGE]),
    )


# --- E2SM-KPM -----------------------------------------------------------------------------------


def fast_header_stamp(data: bytes) -> bytes:
    """colletStartTime of a format-1 header with none of its optional fields: 8 octets (v3+)
    or 4 (v2). The first octet holds the extension bits and the presence bitmap, all clear."""
    if len(data) in (9, 5) and not data[0] & 0xFE:
        return data[1:]
    raise NotFast


class _Bits:
    """A reading position, in bits, over aligned-PER octets."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos, self.end = data, 0, len(data) * 8

    def bits(self, count: int) -> int:
        start, stop = self.pos, self.pos + count
        if stop > self.end:
            raise NotFast
        first, last = start >> 3, (stop + 7) >> 3
        chunk = int.from_bytes(self.data[first:last], "big")
        self.pos = stop
        return (chunk >> ((last << 3) - stop)) & ((1 << count) - 1)

    def octets(self, count: int) -> bytes:
        start = (self.pos + 7) >> 3
        stop = start + count
        if stop << 3 > self.end:
            raise NotFast
        self.pos = stop << 3
        return self.data[start:stop]

    def length(self) -> int:
        length, start = _length(self.data, (self.pos + 7) >> 3)
        self.pos = start << 3
        return length


def _real(octets: bytes) -> float:
    """A REAL in the binary form (base 2, one- or two-octet exponent) or a special value,
    computed as asn1tools computes it, so that both give the same float."""
    if not octets:
        return 0.0
    control = octets[0]
    if control in (0x80, 0xC0) and len(octets) > 2:
        exponent, mantissa = octets[1] - ((octets[1] & 0x80) << 1), octets[2:]
    elif control in (0x81, 0xC1) and len(octets) > 3:
        raw = (octets[1] << 8) | octets[2]
        exponent, mantissa = raw - ((raw & 0x8000) << 1), octets[3:]
    elif control in _SPECIAL_REALS and len(octets) == 1:
        return _SPECIAL_REALS[control]
    else:
        raise NotFast
    try:
        value = float(int.from_bytes(mantissa, "big") * 2**exponent)
    except OverflowError:
        raise NotFast from None
    return -value if control & 0x40 else value


def _record(reader: _Bits) -> float | None:
    choice = reader.bits(3)  # extension bit, then one of the three root alternatives
    if choice == 0:  # integer (0..4294967295): its octet count, then the octets
        return float(int.from_bytes(reader.octets(reader.bits(2) + 1), "big"))
    if choice == 1:
        return _real(reader.octets(reader.length()))
    if choice == 2:  # noValue
        return None
    raise NotFast


def _names(reader: _Bits) -> list[str]:
    names = []
    for _ in range(int.from_bytes(reader.octets(2), "big") + 1):
        # Item, measType extension bits and measType's alternative (measName), measName's
        # size extension: all clear; then its size, 1 to 150, in 8 bits.
        if reader.bits(4):
            raise NotFast
        size = reader.bits(8) + 1
        name = reader.octets(size)
        if size > NAME_MAX or not PRINTABLE.issuperset(name):
            raise NotFast
        labels = reader.length()
        if not labels:
            raise NotFast
        for _ in range(labels):
            # Item and MeasLabel extension bits, the 21-bit presence bitmap, noLabel's
            # extension bit: noLabel alone.
            if reader.bits(23) != NO_LABEL_ONLY or reader.bits(1):
                raise NotFast
        names.append(name.decode("ascii"))
    return names


def fast_message(data: bytes, subscribed: Sequence[str] | None) -> IndicationMessage:
    """An indication message of format 1 in its usual shape; ``NotFast`` otherwise."""
    reader = _Bits(data)
    head = reader.bits(6)  # extension bits, format 1 of 2, presence of measInfoList, granul
    if head & 0b111100:
        raise NotFast
    periods: list[tuple[list[float | None], bool]] = []
    for _ in range(int.from_bytes(reader.octets(2), "big") + 1):
        flags = reader.bits(2)  # extension bit, presence of incompleteFlag
        if flags & 2:
            raise NotFast
        count = reader.length()
        if not count:
            raise NotFast
        records = [_record(reader) for _ in range(count)]
        if flags and reader.bits(1):  # incompleteFlag's extension bit
            raise NotFast
        periods.append((records, bool(flags)))
    if head & 2:  # measInfoList starts on an octet: the rest is the tail a node repeats
        names, granularity = _tail(data[(reader.pos + 7) >> 3:], bool(head & 1))
    else:
        names, granularity = None, _granularity(reader) if head & 1 else None
        _at_end(reader)
    return kpm_indication.indication_message(names, subscribed, periods, granularity)


def _granularity(reader: _Bits) -> int:
    granularity = int.from_bytes(reader.octets(reader.bits(2) + 1), "big") + 1
    if granularity > MAX_UINT32:
        raise NotFast
    return granularity


def _at_end(reader: _Bits) -> None:
    if (reader.pos + 7) >> 3 != len(reader.data):
        raise NotFast


TAILS_KEPT = 4096  # distinct measInfoList + granulPeriod tails: a few per subscription kind


@lru_cache(maxsize=TAILS_KEPT)
def _tail(octets: bytes, has_granularity: bool) -> tuple[tuple[str, ...], int | None]:
    """measInfoList and granulPeriod, read once per distinct octets: a node sends the same
    ones in every report of a subscription, and reading the names is most of a message's
    cost. The result is a function of the octets alone, so a kept one is exact."""
    reader = _Bits(octets)
    names = tuple(_names(reader))
    granularity = _granularity(reader) if has_granularity else None
    _at_end(reader)
    return names, granularity


# --- either path --------------------------------------------------------------------------------


def decode_e2ap(data: Bytes) -> E2apMessage:
    """``e2ap.decode``, by the fast path where it can."""
    try:
        return fast_e2ap(data if isinstance(data, bytes) else bytes(memoryview(data)))
    except (NotFast, TypeError):
        return e2ap.decode(data)


def decode_header_us(data: bytes) -> int:
    """colletStartTime in UNIX microseconds: ``kpm_indication.decode_indication_header``, fast
    where it can."""
    try:
        return kpm_indication.stamp_us(fast_header_stamp(data))
    except NotFast:
        return kpm_indication.decode_header_us(data)


def decode_message(data: bytes, subscribed: Sequence[str] | None = None) -> IndicationMessage:
    """``kpm_indication.decode_indication_message``, by the fast path where it can."""
    try:
        return fast_message(data, subscribed)
    except NotFast:
        return kpm_indication.decode_indication_message(data, subscribed)

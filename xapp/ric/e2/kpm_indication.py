"""E2SM-KPM indication header (colletStartTime) and message (format 1): the general codec, over
``kpm``'s ASN.1 module; the fast path for the usual shape is ``fast_indication.py``'s."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from kpi_forecast.xapp.ric.e2.kpm import (
    ASN1_FAILURES,
    MAX_UINT32,
    Bytes,
    DecodeError,
    IndicationMessage,
    Measurement,
    as_bytes,
    decode,
    encode,
    format1,
    meas_info_list,
    meas_names,
    spec,
)

# --- indication header: colletStartTime ----------------------------------------------------------
# KPM v3+ (8 octets): the 64-bit NTP timestamp of RFC 5905, seconds since 1900-01-01 in the first
# four octets and the fraction of a second in the last four, big-endian. The 32-bit seconds wrap
# in 2036; the RFC 4330 rule places a value with the top bit clear in the era starting then.
#
# KPM v2 (4 octets): big-endian UNIX seconds, since 1970-01-01, is what v2 nodes are known to
# write (ONF's ran-simulator, for one); the seconds half of an NTP timestamp, the form v3 made
# 8 octets long, is accepted too. The two do not collide for 1970-2036: NTP seconds have the top
# bit set from 1968 to 2036, UNIX seconds have it clear until 2038. So a set top bit reads as
# NTP seconds, a clear one as UNIX seconds.

_NTP_EPOCH = datetime(1900, 1, 1, tzinfo=UTC)
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TOP_BIT = 2**31
_ERA = 2**32
_NTP_TO_UNIX_S = (_UNIX_EPOCH - _NTP_EPOCH) // timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)

_HEADER_TYPES = ("KpmIndicationHeader", "KpmIndicationHeaderV2")


def _ntp_timestamp(moment: datetime) -> bytes:
    micros = (moment - _NTP_EPOCH) // _MICROSECOND
    seconds, micro = divmod(micros, 1_000_000)
    # Representable window of the RFC 4330 rule: 1968-01-20 to 2104-02-26.
    if not _TOP_BIT <= seconds < _TOP_BIT + _ERA:
        raise ValueError(f"{moment} is outside the NTP timestamp window (1968-2104)")
    fraction = (micro * _ERA + 500_000) // 1_000_000  # nearest; at most 2**32 - 4295
    return (seconds % _ERA).to_bytes(4, "big") + fraction.to_bytes(4, "big")


def _ntp_us(stamp: bytes) -> int:
    seconds = int.from_bytes(stamp[:4], "big")
    if seconds < _TOP_BIT:  # era 1, from 2036-02-07
        seconds += _ERA
    micros = (int.from_bytes(stamp[4:], "big") * 1_000_000 + _TOP_BIT) >> 32
    return (seconds - _NTP_TO_UNIX_S) * 1_000_000 + micros


def _kpm_v2_us(stamp: bytes) -> int:
    seconds = int.from_bytes(stamp, "big")
    return (seconds - _NTP_TO_UNIX_S if seconds >= _TOP_BIT else seconds) * 1_000_000


def stamp_us(stamp: bytes) -> int:
    """A colletStartTime of 8 octets (NTP) or 4 (KPM v2) in UNIX microseconds."""
    return _ntp_us(stamp) if len(stamp) == 8 else _kpm_v2_us(stamp)


def encode_indication_header(collect_start: datetime, version: int = 3) -> bytes:
    """Indication header format 1 with the 8-octet (KPM v3+) NTP colletStartTime, or (KPM
    v2) its first four octets, the NTP seconds."""
    if collect_start.tzinfo is None:
        raise ValueError("collect_start must be timezone-aware")
    stamp = _ntp_timestamp(collect_start)
    format1 = {"colletStartTime": stamp if version >= 3 else stamp[:4]}
    return encode(
        _HEADER_TYPES[version < 3],
        {"indicationHeader-formats": ("indicationHeader-Format1", format1)})


def _collet_start_time(data: bytes) -> bytes:
    """colletStartTime read as 8 octets or, failing that, as the 4 of KPM v2.

    Both readings can succeed on the same bytes, since a fixed-size octet string carries no
    length; the one that re-encodes to exactly the input (accounts for every byte) wins, the
    8-octet one first. Without an exact reading (unknown extensions, trailing bytes) the first
    that decodes at all is taken.
    """
    readings: list[tuple[bytes, bool]] = []
    for type_name in _HEADER_TYPES:
        try:
            value = spec().decode(type_name, data)
        except ASN1_FAILURES:
            continue
        body = format1(value["indicationHeader-formats"], "indicationHeader-Format1")
        try:
            exact = spec().encode(type_name, value) == data
        except ASN1_FAILURES:
            exact = False
        readings.append((body["colletStartTime"], exact))
    if not readings:
        raise DecodeError("per", "not an E2SM-KPM indication header")
    return next((stamp for stamp, exact in readings if exact), readings[0][0])


def decode_header_us(data: Bytes) -> int:
    """colletStartTime in UNIX microseconds, from an 8-octet (v3+) or 4-octet (v2) header."""
    return stamp_us(_collet_start_time(as_bytes(data)))


def decode_indication_header(data: Bytes) -> datetime:
    """colletStartTime as an aware UTC datetime, from an 8-octet (v3+) or 4-octet (v2) header."""
    return _UNIX_EPOCH + timedelta(microseconds=decode_header_us(data))


# --- indication message -------------------------------------------------------------------------


def _record(value: float | None) -> tuple[str, Any]:
    if value is None:
        return "noValue", None
    # Integral values go as integer records, the form nodes use for counts and PRBs.
    if float(value).is_integer() and 0 <= value <= MAX_UINT32:
        return "integer", int(value)
    return "real", float(value)


def _value(record: tuple[str | None, Any]) -> float | None:
    kind, value = record
    if kind in ("integer", "real"):
        return float(value)
    # noValue, notSatisfied (a condition not met) and unknown future alternatives carry no value.
    return None


def encode_indication_message(msg: IndicationMessage) -> bytes:
    """Indication message format 1, with measInfoList (and granulPeriod when given)."""
    periods = {len(m.values) for m in msg.measurements}
    if len(periods) != 1:
        raise ValueError("need at least one measurement, all with the same number of periods")
    (count,) = periods
    meas_data = [
        {"measRecord": [_record(m.values[period]) for m in msg.measurements]}
        for period in range(count)
    ]
    format1: dict[str, Any] = {
        "measData": meas_data,
        "measInfoList": meas_info_list([m.name for m in msg.measurements]),
    }
    if msg.granularity_ms is not None:
        format1["granulPeriod"] = msg.granularity_ms
    return encode(
        "KpmIndicationMessage",
        {"indicationMessage-formats": ("indicationMessage-Format1", format1)},
    )


def decode_indication_message(
    data: Bytes, subscribed: Sequence[str] | None = None
) -> IndicationMessage:
    """An indication message (format 1) as one value series per measurement.

    The standard's layout is period-major: measData has one item per granularity period, oldest
    first, and each item's measRecord has one value per measInfoList entry, in that list's order.
    So measurement j's series is record j of every item. A node may leave measInfoList out, in
    which case the list of the subscription applies: pass it as `subscribed`.

    A period flagged incompleteFlag gives None for every measurement: the node says its values
    are unreliable, and a forecaster is better served by a gap than by a wrong number.
    """
    value = decode("KpmIndicationMessage", data)
    body = format1(value["indicationMessage-formats"], "indicationMessage-Format1")
    names = meas_names(body["measInfoList"]) if "measInfoList" in body else None
    periods = [([_value(record) for record in item["measRecord"]], "incompleteFlag" in item)
               for item in body["measData"]]
    return indication_message(names, subscribed, periods, body.get("granulPeriod"))


def indication_message(
    names: Sequence[str] | None, subscribed: Sequence[str] | None,
    periods: list[tuple[list[float | None], bool]], granularity_ms: int | None,
) -> IndicationMessage:
    """The message's series from its periods (each: its records, and whether it is flagged
    incomplete), under the measInfoList's ``names`` or, without one, the ``subscribed``."""
    if names is None:
        if subscribed is None:
            raise DecodeError("measurement-mismatch", "no measInfoList and no subscribed names")
        names = list(subscribed)
    width = len(names)
    for period, (records, _) in enumerate(periods):
        if len(records) != width:
            raise DecodeError(
                "measurement-mismatch",
                f"period {period} has {len(records)} values for {width} measurements",
            )
    rows = [[None] * width if incomplete else records for records, incomplete in periods]
    series = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in names]
    return IndicationMessage(
        measurements=[Measurement(n, v) for n, v in zip(names, series, strict=True)],
        granularity_ms=granularity_ms,
    )

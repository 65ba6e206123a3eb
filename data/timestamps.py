"""A KPI export's timestamps: ISO 8601 text (or datetime columns) as UTC microseconds, and the
calendar zone the data itself implies (a zone name, one UTC offset, or none where offsets are
mixed, as across a DST switch)."""

from __future__ import annotations

import datetime
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd

from kpi_forecast.data.files import TIMESTAMP, row_error
from kpi_forecast.data.panel import DataError
from kpi_forecast.model.features import calendar_zone

logger = logging.getLogger(__name__)

# A UTC offset at the end of an ISO 8601 timestamp that has a time part (the time part is
# required so that the "-01" of a bare date is not taken for an offset).
_TRAILING_OFFSET = re.compile(
    r"[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s*(Z|[+-]\d{2}(?::?\d{2})?)$"
)


def checked_zone(name: str) -> datetime.tzinfo:
    try:
        return calendar_zone(name)
    except ValueError as exc:
        raise DataError(str(exc)) from None


def parse_timestamps(column: pd.Series, path: Path) -> tuple[np.ndarray, str | None]:
    """UTC microseconds per row, and the calendar zone the data itself implies.

    The zone is a name, ``"+HH:MM"``, ``"UTC"``, or None when the offsets are mixed.
    """
    if isinstance(column.dtype, pd.DatetimeTZDtype):
        _reject_missing_timestamps(column.isna().to_numpy(), column, path)
        stamps = pd.DatetimeIndex(column)
        return stamps.tz_convert("UTC").as_unit("us").asi8, _zone_name(stamps.tz)
    if pd.api.types.is_datetime64_dtype(column.dtype):
        _reject_missing_timestamps(column.isna().to_numpy(), column, path)
        return pd.DatetimeIndex(column).as_unit("us").asi8, "UTC"

    # Exports repeat each timestamp once per cell, so parse every distinct string once.
    codes, uniques = pd.factorize(column.astype(str), use_na_sentinel=False)
    parsed = pd.to_datetime(uniques, utc=True, format="ISO8601", errors="coerce")
    bad = np.flatnonzero(parsed.isna()[codes])
    if bad.size:
        row = int(bad[0])
        raise row_error(
            path,
            row + 1,
            TIMESTAMP,
            "not an ISO 8601 timestamp (e.g. 2013-11-01T00:00:00+01:00)",
            column.iloc[row],
        )
    ts_us = parsed.as_unit("us").asi8[codes]

    offsets = pd.Series(uniques).str.extract(_TRAILING_OFFSET, expand=False)
    distinct = {_normalise_offset(o) for o in offsets.dropna().unique()}
    if offsets.isna().all():
        return ts_us, "UTC"
    if len(distinct) == 1 and offsets.notna().all():
        (offset,) = distinct
        return ts_us, "UTC" if offset == "+00:00" else offset
    return ts_us, None


def _reject_missing_timestamps(missing: np.ndarray, column: pd.Series, path: Path) -> None:
    if missing.any():
        row = int(np.argmax(missing))
        raise row_error(path, row + 1, TIMESTAMP, "missing timestamp", column.iloc[row])


def _normalise_offset(text: str) -> str:
    """``Z``, ``+01``, ``+0100`` and ``+01:00`` all as ``+01:00``."""
    if text == "Z":
        return "+00:00"
    digits = text[1:].replace(":", "")
    return f"{text[0]}{digits[:2]}:{digits[2:] or '00'}"


def _zone_name(tz: datetime.tzinfo) -> str:
    """A :func:`calendar_zone` name for the zone of a tz-aware datetime column."""
    # A fixed offset: datetime.timezone, or pytz's FixedOffset (pandas 2 with pytz) whose
    # ``zone`` is None.
    if isinstance(tz, datetime.timezone) or (hasattr(tz, "zone") and tz.zone is None):
        offset = tz.utcoffset(None)
        if not offset:
            return "UTC"
        sign = "-" if offset < datetime.timedelta(0) else "+"
        minutes = abs(offset) // datetime.timedelta(minutes=1)
        return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    # zoneinfo names its zone in ``key``, pytz in ``zone``; both print as the name too.
    return getattr(tz, "key", None) or getattr(tz, "zone", None) or str(tz)


def zone_of_data(data_tz: str | None, path: Path) -> str:
    if data_tz is None:
        logger.warning(
            "%s: timestamps carry mixed UTC offsets (e.g. across a DST switch); calendar "
            "features use UTC, pass --tz (e.g. --tz Europe/Rome) to use local time",
            path,
        )
        return "UTC"
    try:
        checked_zone(data_tz)
    except DataError:
        # A zone the data names but this machine cannot resolve must not fail the load.
        logger.warning("%s: unknown time zone %r in the data; calendar uses UTC", path, data_tz)
        return "UTC"
    return data_tz

"""Schemathesis hooks (``SCHEMATHESIS_HOOKS=tests.schemathesis_hooks``): what it cannot draw
well on its own.

- Arrow bodies. The batch route takes an Arrow IPC stream, which a JSON Schema cannot describe.
  It gets arbitrary bytes, and Arrow streams of well-formed tables whose contents are not:
  empty or odd cell ids, starts from 1900 to 2260, values of any float32 (negative, infinite,
  NaN, huge) and lists of any length, empty included.
- Date-times. A series starts in the years 1970 to 2199 (``format: date-time`` and a pattern
  on the year); drawn from every year a date-time can have, almost all would be filtered out.
  They are drawn from 1900 to 2299 instead, in any UTC offset: in range or just outside it.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import schemathesis
from hypothesis import strategies as st

from kpi_forecast.xapp.http import arrow_ipc

_rows = st.lists(
    st.tuples(
        st.text(max_size=12),
        st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2260, 1, 1),
                     timezones=st.just(dt.UTC)),
        st.lists(st.none() | st.floats(width=32), max_size=400),
    ),
    max_size=4,
)


def _arrow(rows: list[tuple[str, dt.datetime, list[float | None]]]) -> bytes:
    return arrow_ipc.write_request([cell for cell, _, _ in rows],
                                [pd.Timestamp(start) for _, start, _ in rows],
                                [values for _, _, values in rows])


schemathesis.openapi.media_type(arrow_ipc.ARROW_STREAM, st.binary(max_size=512) | _rows.map(_arrow))

_offsets = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes)))
schemathesis.openapi.format("date-time", st.datetimes(
    min_value=dt.datetime(1900, 1, 2), max_value=dt.datetime(2299, 12, 30), timezones=_offsets,
).map(dt.datetime.isoformat))

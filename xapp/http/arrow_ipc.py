"""Arrow IPC bodies for large batch calls: no JSON parsing of hundreds of thousands of numbers.

Request (``Content-Type: application/vnd.apache.arrow.stream``): one table with columns
``cell_id`` (string), ``start`` (timestamp with a time zone) and ``values`` (list of floats,
null = missing); ``freq`` and ``horizon`` come as query parameters. Response: the same media
type, a long table ``cell_id, timestamp, pNN...`` (one row per cell and step) with the model
version, source and latency in headers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

ARROW_STREAM = "application/vnd.apache.arrow.stream"
COLUMNS = ("cell_id", "start", "values")


class BodyError(ValueError):
    """An Arrow body that cannot be read as a batch request; the message says why."""


def read_request(body: bytes) -> tuple[list[str], pd.DatetimeIndex, np.ndarray, np.ndarray]:
    """cell ids, start times, [B, n] float32 values (NaN = missing, left-padded) and the
    length of each series."""
    try:
        table = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise BodyError(f"not an Arrow IPC stream: {exc}") from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise BodyError(f"Arrow table lacks column(s) {missing}; it has {table.column_names}")
    if table.num_rows == 0:
        raise BodyError("Arrow table has no rows")
    start_type = table.schema.field("start").type
    if not pa.types.is_timestamp(start_type) or start_type.tz is None:
        raise BodyError(f"column start must be a timestamp with a time zone, not {start_type}")
    values_type = table.schema.field("values").type
    if not (pa.types.is_list(values_type) or pa.types.is_large_list(values_type)) or not (
            pa.types.is_floating(values_type.value_type)
            or pa.types.is_integer(values_type.value_type)):
        raise BodyError(f"column values must be a list of numbers, not {values_type}")
    cells = table.column("cell_id").to_pylist()
    if any(not isinstance(c, str) or not c for c in cells):
        raise BodyError("column cell_id must hold non-empty strings")
    starts = table.column("start").combine_chunks()
    if starts.null_count:
        raise BodyError("column start has nulls")
    start = pd.DatetimeIndex(starts.to_pandas()).tz_convert("UTC")
    lists = table.column("values").combine_chunks()
    values, lengths = _padded(lists)
    return cells, start, values, lengths


def _padded(lists: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """[B, longest] float32, each series right-aligned (its last value in the last column)."""
    if lists.null_count:
        raise BodyError("column values has a null list (use an empty list of nulls instead)")
    offsets = lists.offsets.to_numpy()
    lengths = np.diff(offsets).astype(np.int64)
    if (lengths == 0).any():
        raise BodyError(f"series {int(np.argmax(lengths == 0))} has no values")
    flat = lists.flatten().cast(pa.float32()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    longest = int(lengths.max())
    out = np.full((len(lengths), longest), np.nan, np.float32)
    if (lengths == longest).all():
        return flat.reshape(len(lengths), longest), lengths
    for row, (begin, end) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        out[row, longest - (end - begin) :] = flat[begin:end]
    return out, lengths


def write_response(cells: list[str], stamps: np.ndarray, quantiles: np.ndarray,
                   names: list[str]) -> bytes:
    """``stamps`` [B, H] UTC nanoseconds, ``quantiles`` [B, H, Q] -> an Arrow IPC stream."""
    batch, horizon = stamps.shape
    columns = {
        "cell_id": pa.DictionaryArray.from_arrays(
            np.repeat(np.arange(batch, dtype=np.int32), horizon), pa.array(cells)),
        "timestamp": pa.array(stamps.reshape(-1), pa.timestamp("ns", tz="UTC")),
    }
    flat = quantiles.reshape(batch * horizon, -1)
    for column, name in enumerate(names):
        columns[name] = pa.array(np.ascontiguousarray(flat[:, column]), pa.float32())
    return stream(pa.table(columns))


def write_request(cells: list[str], starts: list[pd.Timestamp],
                  values: list[list[float | None]]) -> bytes:
    """A batch request body: what a client sends (the tests and benchmarks among them)."""
    return stream(pa.table({
        "cell_id": cells,
        "start": pa.array(starts, pa.timestamp("ns", tz="UTC")),
        "values": pa.array(values, pa.list_(pa.float32())),
    }))


def stream(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()

"""Load a long-format per-cell KPI export into a :class:`Panel`.

The input is one row per (timestamp, cell) with columns ``timestamp``, ``cell_id`` and one or
more numeric KPI columns, as CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, ``.pq``).
Every problem with the user's data surfaces as a one-line :class:`DataError` that names the
file and, where there is one, the column, the 1-based data row (row 1 is the first row after
the header; blank lines are not counted) and the offending value. Everything the loader fixes
up silently instead (sorting, exact duplicates, off-grid samples, short cells) is counted in
``Panel.log``.

Timestamps are read as ISO 8601 only (``2013-11-01T00:00:00+01:00``, ``2013-11-01 00:00``, a
trailing ``Z``): other layouts such as ``01/11/2013`` are ambiguous between day-first and
month-first, and guessing would silently shift data by months. Reading the file (or a rank's
block of a dataset) is ``files.py``'s; the timestamps and the zone they imply ``timestamps.py``'s.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

from kpi_forecast.data.files import (
    CELL_ID,
    NA_STRINGS,
    TIMESTAMP,
    DatasetFiles,
    read_dataset,
    read_table,
    row_error,
)
from kpi_forecast.data.influx import InfluxSource, is_influx
from kpi_forecast.data.panel import DataError, Panel
from kpi_forecast.data.timestamps import checked_zone, parse_timestamps, zone_of_data
from kpi_forecast.model.kpi import kpi_problem, not_kpis

logger = logging.getLogger(__name__)

_US = pd.Timedelta(1, "us")

# Units for frequency aliases, largest first, so that 60 minutes reads "1h", not "60min".
_ALIAS_UNITS = [
    (86_400_000_000, "D"),
    (3_600_000_000, "h"),
    (60_000_000, "min"),
    (1_000_000, "s"),
    (1_000, "ms"),
    (1, "us"),
]

# A typo such as year 2031 in one row would otherwise ask for a grid of millions of steps per
# cell and exhaust memory; 250M float32 values is 1 GB.
_MAX_GRID_VALUES = 250_000_000


def load_panel(
    path: str | Path,
    target: str,
    freq: str | None = None,
    tz: str | None = None,
    min_steps: int = 1,
    shard: tuple[int, int] = (0, 1),
    recent: int | None = None,
) -> Panel:
    """Read a long-format KPI file and return the ``target`` KPI as a regular UTC panel.

    Args:
        path: ``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq`` file with columns ``timestamp``,
            ``cell_id`` and KPI columns; columns other than ``target`` are ignored. Or a
            directory of Parquet files (a ``pyarrow.dataset``, hive-partitioned or not) in
            which each cell's rows lie in one file, e.g. partitioned by a cell bucket. Or an
            InfluxDB measurement, ``influx://HOST:PORT/DATABASE?measurement=M&cell=C``
            (``influx.InfluxSource``), ``target`` one of its fields.
        shard: ``(k, n)`` reads only the k-th of n blocks of the directory's files (in path
            order): what one rank of data-parallel training holds. Its grid spans its own
            cells; :func:`training.distributed.aligned` puts the ranks on one grid.
        target: the KPI column to load. Values must be numbers from 0 to MAX_KPI_VALUE; empty
            cells and NaN-like spellings ("NA", "null", ...) are missing values.
        freq: grid step as a pandas offset alias of fixed length ("1h", "15min"); inferred
            as the most common positive gap between consecutive samples of a cell if None.
        tz: zone whose wall clock drives calendar features (``Panel.calendar_tz``), any form
            that :func:`calendar_zone` accepts. It does not change how timestamps are read:
            timestamps with an offset are converted to UTC, naive ones are taken as UTC.
            If None: the zone of a tz-aware Parquet column; else the one UTC offset shared by
            all timestamps, as ``"+HH:MM"`` (``"UTC"`` for +00:00); else ``"UTC"`` with a
            warning (mixed offsets, e.g. across a DST switch, do not identify a zone).
        min_steps: cells with fewer observed grid steps are dropped with a warning.
        recent: where given (with ``freq``), an InfluxDB source reads only the points of
            the last ``recent`` steps up to its newest one (a file is read whole).

    The grid runs from the earliest to the latest timestamp of any cell, anchored on the
    most common phase of the timestamps so that on-grid samples keep their time; off-grid
    samples are floored onto it and samples sharing a step are averaged. Steps without a
    sample are NaN. Fixed-length steps in UTC cannot follow local midnight across a DST
    switch, so daily data stamped at local midnight is better given in UTC.

    ``Panel.log`` counts (all keys always present):
        ``ignored_columns``: columns other than timestamp, cell_id and target.
        ``missing_values``: rows whose target value is empty / NaN.
        ``unsorted_rows``: rows whose timestamp is earlier than that of an earlier row of the
        same cell (the number of rows out of order, not a 0/1 flag).
        ``duplicate_rows``: rows repeating the cell, timestamp and value of an earlier row;
        dropped.
        ``aggregated_rows``: rows averaged into a grid step that another row already
        occupies (rows minus occupied steps).
        ``gap_steps``: NaN steps between the first and last observed value of kept cells.
        ``dropped_short_cells``: cells with fewer than ``min_steps`` observed steps.

    Raises:
        DataError: for anything wrong with the file or its contents; the message is one line.
    """
    # Cheap argument checks first, so a typo does not cost a read of a large file.
    step_us = _parse_freq(freq) if freq is not None else None
    if tz is not None:
        checked_zone(tz)

    if recent is not None and step_us is None:
        raise ValueError("recent needs freq")
    span_ns = None if recent is None or step_us is None else recent * step_us * 1000
    if is_influx(path):
        path = InfluxSource.parse(str(path))
        frame, ignored = path.read(target, span_ns)
    elif (path := Path(path)).is_dir():
        frame, ignored, path = read_dataset(path, target, shard)
    else:
        frame, ignored = read_table(path, target)
    if ignored:
        logger.info("%s: ignoring columns %s", path, ", ".join(map(repr, ignored)))
    if frame.empty:
        raise DataError(f"{path}: no data rows")

    ts_us, data_tz = parse_timestamps(frame[TIMESTAMP], path)
    cell_codes, cell_ids = _parse_cells(frame[CELL_ID], path)
    cell_codes_all = cell_codes  # per row in read order, before sorting and de-duplication
    values = _parse_values(frame[target], path, target, cell_codes, cell_ids)
    log = {
        "ignored_columns": len(ignored),
        "missing_values": int(np.isnan(values).sum()),
        "unsorted_rows": _count_unsorted(ts_us, cell_codes),
    }

    # Stable, so among equal (cell, timestamp) rows the file order survives for reporting.
    order = np.lexsort((ts_us, cell_codes))
    ts_us, cell_codes, values, rows = ts_us[order], cell_codes[order], values[order], order + 1
    keep = _duplicates_to_keep(ts_us, cell_codes, values, rows, cell_ids, path)
    log["duplicate_rows"] = int((~keep).sum())
    ts_us, cell_codes, values, rows = ts_us[keep], cell_codes[keep], values[keep], rows[keep]

    if step_us is None:
        step_us = _infer_step(ts_us, cell_codes, path)
    freq_alias = _alias(step_us)
    grid, start_us, aggregated = _to_grid(
        ts_us, cell_codes, values, rows, len(cell_ids), step_us, freq_alias, path
    )
    log["aggregated_rows"] = aggregated

    observed = (~np.isnan(grid)).sum(axis=1)
    short = observed < min_steps
    if short.all():
        raise DataError(
            f"{path}: no cell has enough data: the longest series has {observed.max()} "
            f"observed steps at freq {freq_alias}, min_steps is {min_steps}"
        )
    if short.any():
        logger.warning(
            "%s: dropping %d cells with fewer than %d observed steps: %s",
            path,
            short.sum(),
            min_steps,
            ", ".join(_preview([cell_ids[i] for i in np.flatnonzero(short)])),
        )
        grid = grid[~short]
        cell_ids = [c for c, s in zip(cell_ids, short, strict=True) if not s]
    log["dropped_short_cells"] = int(short.sum())
    log["gap_steps"] = _count_gaps(grid)
    if isinstance(path, DatasetFiles):
        # Cells in file order, then by id: the ranks' blocks of files, concatenated in rank
        # order, then give exactly the cell order that one process reading every file has.
        first_file = np.full(len(cell_codes_all), len(path.files))
        np.minimum.at(first_file, cell_codes_all, path.file_of_rows())
        first_file = first_file[np.flatnonzero(~short)]
        order = np.lexsort((np.arange(len(cell_ids)), first_file))
        grid, cell_ids = grid[order], [cell_ids[i] for i in order]

    calendar_tz = tz if tz is not None else zone_of_data(data_tz, path)
    index = pd.date_range(
        pd.Timestamp(start_us, unit="us", tz="UTC"), periods=grid.shape[1], freq=freq_alias
    )
    logger.info(
        "%s: %d cells x %d steps at %s from %s (calendar %s); %s",
        path,
        len(cell_ids),
        len(index),
        freq_alias,
        index[0].isoformat(),
        calendar_tz,
        ", ".join(f"{k}={v}" for k, v in log.items()),
    )
    return Panel(
        cell_ids=cell_ids,
        index=index,
        values=grid,
        freq=freq_alias,
        target=target,
        calendar_tz=calendar_tz,
        log=log,
    )


def _parse_freq(freq: str) -> int:
    """The grid step in microseconds for a user-given pandas offset alias."""
    try:
        step = pd.Timedelta(to_offset(freq))
    except (ValueError, TypeError):
        raise DataError(
            f"invalid freq {freq!r}: use a fixed-length pandas offset alias such as "
            "'1h', '15min' or '1D'"
        ) from None
    if step <= pd.Timedelta(0) or step % _US:
        raise DataError(f"invalid freq {freq!r}: must be a positive whole number of microseconds")
    return step // _US


def _alias(step_us: int) -> str:
    for unit_us, unit in _ALIAS_UNITS:
        if step_us % unit_us == 0:
            return f"{step_us // unit_us}{unit}"
    raise AssertionError("every step is a whole number of microseconds")


def _parse_cells(column: pd.Series, path: Path) -> tuple[np.ndarray, list[str]]:
    """Per-row codes into the returned cell ids, which are sorted as strings."""
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    names = [str(u).strip() for u in uniques]
    empty = np.array([not n for n in names] + [True])[codes]  # code -1 (missing) -> last
    if empty.any():
        row = int(np.argmax(empty))
        raise row_error(path, row + 1, CELL_ID, "empty cell_id", column.iloc[row])
    # Stripping can merge ids that differed only in padding, so re-code on the cleaned names.
    cell_ids = sorted(set(names))
    position = {name: i for i, name in enumerate(cell_ids)}
    remap = np.array([position[n] for n in names], dtype=np.int64)
    return remap[codes], cell_ids


def _parse_values(
    column: pd.Series, path: Path, target: str, cell_codes: np.ndarray, cell_ids: list[str]
) -> np.ndarray:
    """Target values as float64 with NaN = missing; refuses anything a KPI cannot be."""
    if pd.api.types.is_numeric_dtype(column.dtype):
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
        not_numeric = np.zeros(len(values), dtype=bool)
    else:
        text = column.astype(object).where(column.notna(), None)
        # Parquet string columns have not been through the CSV reader's NA spellings.
        text = text.where(~text.isin(NA_STRINGS), None)
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
        not_numeric = np.isnan(values) & text.notna().to_numpy()

    for mask in (not_numeric, not_kpis(values)):
        if mask.any():
            row = int(np.argmax(mask))
            problem = "not a number" if not_numeric[row] else f"value {kpi_problem(values[row])}"
            raise row_error(path, row + 1, target,
                             f"{problem} for cell {cell_ids[cell_codes[row]]!r}",
                             column.iloc[row])
    return values


def _count_unsorted(ts_us: np.ndarray, cell_codes: np.ndarray) -> int:
    """Rows earlier than some earlier row of the same cell, in file order."""
    ts = pd.Series(ts_us)
    # An int fill keeps int64: float64 would round microsecond timestamps.
    latest_before = (
        ts.groupby(cell_codes).cummax().groupby(cell_codes).shift(fill_value=np.iinfo(np.int64).min)
    )
    return int((ts < latest_before).sum())


def _duplicates_to_keep(
    ts_us: np.ndarray,
    cell_codes: np.ndarray,
    values: np.ndarray,
    rows: np.ndarray,
    cell_ids: list[str],
    path: Path,
) -> np.ndarray:
    """Mask of rows to keep; input sorted by (cell, timestamp) with ties in file order."""
    repeat = np.zeros(len(ts_us), dtype=bool)
    repeat[1:] = (cell_codes[1:] == cell_codes[:-1]) & (ts_us[1:] == ts_us[:-1])
    same_value = np.zeros(len(ts_us), dtype=bool)
    same_value[1:] = (values[1:] == values[:-1]) | (np.isnan(values[1:]) & np.isnan(values[:-1]))
    conflict = np.flatnonzero(repeat & ~same_value)
    if conflict.size:
        # Report the pair whose later row comes first in the file.
        i = conflict[np.argmin(np.maximum(rows[conflict], rows[conflict - 1]))]
        first, second = sorted((int(rows[i - 1]), int(rows[i])))
        when = pd.Timestamp(ts_us[i], unit="us", tz="UTC").isoformat()
        raise DataError(
            f"{path}: rows {first} and {second} give different values for cell "
            f"{cell_ids[cell_codes[i]]!r} at {when}: {values[i - 1]:g} vs {values[i]:g}"
        )
    return ~repeat


def _infer_step(ts_us: np.ndarray, cell_codes: np.ndarray, path: Path) -> int:
    """Most common positive gap between consecutive samples of one cell (the smaller on ties)."""
    gaps = np.diff(ts_us)[cell_codes[1:] == cell_codes[:-1]]
    gaps = gaps[gaps > 0]
    if not gaps.size:
        raise DataError(
            f"{path}: cannot infer the frequency, every cell has a single timestamp; "
            "pass freq (e.g. --freq 1h)"
        )
    steps, counts = np.unique(gaps, return_counts=True)
    return int(steps[np.argmax(counts)])


def _to_grid(
    ts_us: np.ndarray,
    cell_codes: np.ndarray,
    values: np.ndarray,
    rows: np.ndarray,
    n_cells: int,
    step_us: int,
    freq_alias: str,
    path: Path,
) -> tuple[np.ndarray, int, int]:
    """Values on the grid [n_cells, n_steps], its first step in UTC microseconds, and the
    number of rows that were averaged into an already occupied step."""
    phases, counts = np.unique(ts_us % step_us, return_counts=True)
    phase = int(phases[np.argmax(counts)])
    step = (ts_us - phase) // step_us
    first, last = int(step.min()), int(step.max())
    n_steps = last - first + 1
    if n_cells * n_steps > _MAX_GRID_VALUES:
        earliest, latest = int(np.argmin(ts_us)), int(np.argmax(ts_us))
        raise DataError(
            f"{path}: timestamps span {_utc(ts_us[earliest])} (row {rows[earliest]}) to "
            f"{_utc(ts_us[latest])} (row {rows[latest]}), {n_steps} steps of {freq_alias} "
            f"for {n_cells} cells is too large; check those timestamps or use a coarser freq"
        )
    slot = cell_codes * n_steps + (step - first)
    slots, slot_of_row = np.unique(slot, return_inverse=True)
    seen = ~np.isnan(values)
    total = np.bincount(slot_of_row[seen], weights=values[seen], minlength=len(slots))
    count = np.bincount(slot_of_row[seen], minlength=len(slots))
    grid = np.full(n_cells * n_steps, np.nan, dtype=np.float32)
    # A step whose only samples are missing values stays NaN rather than 0/0.
    grid[slots[count > 0]] = total[count > 0] / count[count > 0]
    return grid.reshape(n_cells, n_steps), first * step_us + phase, len(ts_us) - len(slots)


def _utc(ts_us: int) -> str:
    return pd.Timestamp(ts_us, unit="us", tz="UTC").isoformat()


def _count_gaps(grid: np.ndarray) -> int:
    """NaN steps strictly inside each cell's first..last observed step."""
    seen = ~np.isnan(grid)
    has_any = seen.any(axis=1)
    first = np.argmax(seen, axis=1)
    last = grid.shape[1] - 1 - np.argmax(seen[:, ::-1], axis=1)
    span = np.where(has_any, last - first + 1, 0)
    return int((span - seen.sum(axis=1)).sum())


def _preview(names: list[str], limit: int = 10) -> list[str]:
    """At most ``limit`` quoted names for a log line, then how many more there were."""
    shown = [repr(n) for n in names[:limit]]
    if len(names) > limit:
        shown.append(f"... {len(names) - limit} more")
    return shown

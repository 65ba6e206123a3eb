"""Reading the columns of a KPI export: one file (CSV, ``.csv.gz``, Parquet), or a rank's block
of a Parquet dataset directory (only the timestamp, cell and target columns of its own files),
and saying where a row of what was read came from, in one line (``row_error``)."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from kpi_forecast.data.panel import DataError

TIMESTAMP = "timestamp"
CELL_ID = "cell_id"

_CSV_SUFFIXES = (".csv", ".csv.gz")
_PARQUET_SUFFIXES = (".parquet", ".pq")

# Spellings of "no value" in KPI exports; the timestamp and cell columns get none of these so
# that a cell literally named "NA" stays a cell.
NA_STRINGS = ["", "nan", "NaN", "NAN", "NA", "N/A", "n/a", "null", "NULL", "None", "#N/A"]

# pandas writes a non-default DataFrame index into Parquet under these names; it is not data.
_PANDAS_INDEX_COLUMN = re.compile(r"__index_level_\d+__")


def read_table(path: Path, target: str) -> tuple[pd.DataFrame, list[str]]:
    """The timestamp, cell and target columns of ``path``, and the names of the other ones."""
    name = path.name.lower()
    is_csv = name.endswith(_CSV_SUFFIXES)
    if not is_csv and not name.endswith(_PARQUET_SUFFIXES):
        raise DataError(
            f"{path}: unsupported file type; use {', '.join(_CSV_SUFFIXES + _PARQUET_SUFFIXES)}"
        )
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        if is_csv:
            columns = list(pd.read_csv(path, nrows=0).columns)
        else:
            columns = [
                c for c in pq.read_schema(path).names if not _PANDAS_INDEX_COLUMN.fullmatch(c)
            ]
        for required in (TIMESTAMP, CELL_ID, target):
            if required not in columns:
                what = "target column" if required == target else "column"
                raise DataError(
                    f"{path}: {what} {required!r} not found; available columns: "
                    f"{', '.join(map(repr, columns))}"
                )
        if target in (TIMESTAMP, CELL_ID):
            raise DataError(f"{path}: target {target!r} must be a KPI column")
        wanted = [TIMESTAMP, CELL_ID, target]
        if is_csv:
            frame = pd.read_csv(
                path,
                usecols=wanted,
                dtype={TIMESTAMP: str, CELL_ID: str},
                keep_default_na=False,
                na_values={target: NA_STRINGS},
            )
        else:
            frame = pd.read_parquet(path, columns=wanted)
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        # pandas / pyarrow / gzip messages can span lines; the first one says what broke.
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{path}: cannot read file: {first_line}") from None
    return frame.reset_index(drop=True), [c for c in columns if c not in wanted]


def row_error(path: Path, row: int, column: str, message: str, value: object) -> DataError:
    # Numbers print as in the file (-3, inf); text is quoted so blanks and commas show.
    shown = repr(value.item() if isinstance(value, np.generic) else value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    where = path.locate(row) if isinstance(path, DatasetFiles) else f"{path}: row {row}"
    return DataError(f"{where}, column {column!r}: {message}: {shown}")


class DatasetFiles(type(Path())):
    """A dataset directory that can name the file and row behind a row of its read frame."""

    files: list[str]
    first_rows: np.ndarray  # 1-based row of the frame where each file starts
    n_rows: int

    def file_of_rows(self) -> np.ndarray:
        """Index into ``files`` of every row of the frame, in read order."""
        rows = np.arange(1, self.n_rows + 1)
        return np.searchsorted(self.first_rows, rows, side="right") - 1

    def locate(self, row: int) -> str:
        which = int(np.searchsorted(self.first_rows, row, side="right")) - 1
        return f"{self.files[which]}: row {row - self.first_rows[which] + 1}"


def read_dataset(
    directory: Path, target: str, shard: tuple[int, int]
) -> tuple[pd.DataFrame, list[str], DatasetFiles]:
    """The timestamp, cell and target columns of a block of a Parquet dataset's files.

    Only those columns of those files are read (``pyarrow.dataset`` projection), so a rank's
    memory holds its own cells and nothing else.
    """
    rank, world = shard
    try:
        dataset = ds.dataset(directory, format="parquet", partitioning="hive")
    except (OSError, ValueError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{directory}: cannot read Parquet dataset: {first_line}") from None
    fragments = sorted(dataset.get_fragments(), key=lambda fragment: fragment.path)
    files = [fragment.path for fragment in fragments]
    if not files:
        raise DataError(f"{directory}: no Parquet files in this directory")
    if len(files) < world:
        raise DataError(f"{directory}: {len(files)} files for {world} ranks: every rank needs "
                        "at least one (write the dataset in more files, or use fewer ranks)")
    columns = [c for c in dataset.schema.names if not _PANDAS_INDEX_COLUMN.fullmatch(c)]
    for required in (TIMESTAMP, CELL_ID, target):
        if required not in columns:
            what = "target column" if required == target else "column"
            raise DataError(f"{directory}: {what} {required!r} not found; available columns: "
                            f"{', '.join(map(repr, columns))}")
    if target in (TIMESTAMP, CELL_ID):
        raise DataError(f"{directory}: target {target!r} must be a KPI column")
    block = slice(rank * len(files) // world, (rank + 1) * len(files) // world)
    mine = files[block]
    wanted = [TIMESTAMP, CELL_ID, target]
    try:
        # With the dataset's schema a partition key (cell_id=...) comes back as a column.
        tables = [fragment.to_table(schema=dataset.schema, columns=wanted)
                  for fragment in fragments[block]]
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{directory}: cannot read file: {first_line}") from None
    source = DatasetFiles(directory)
    source.files = mine
    source.first_rows = np.cumsum([1] + [t.num_rows for t in tables[:-1]])
    source.n_rows = sum(t.num_rows for t in tables)
    frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    frame[CELL_ID] = frame[CELL_ID].astype(str)
    return frame, [c for c in columns if c not in wanted], source

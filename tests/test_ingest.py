"""Tests for kpi_forecast.data.ingest: every documented handling of a user's KPI export."""

from __future__ import annotations

import datetime
import gzip
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.panel import DataError
from kpi_forecast.model.features import calendar_zone

MILAN = Path(__file__).resolve().parents[1].parent / "shared/data/milan/milan_hourly.csv.gz"


def write_csv(tmp_path: Path, lines: list[str], name: str = "kpi.csv") -> Path:
    path = tmp_path / name
    text = "\n".join(lines) + "\n"
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def hourly_rows(cell: str, start: str, values: list[float], offset: str = "+00:00") -> list[str]:
    stamps = pd.date_range(start, periods=len(values), freq="h")
    return [
        f"{t.strftime('%Y-%m-%dT%H:%M:%S')}{offset},{cell},{v}"
        for t, v in zip(stamps, values, strict=True)
    ]


def assert_error(exc: pytest.ExceptionInfo[DataError], path: Path, *parts: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    for part in (str(path), *parts):
        assert part in message, f"{part!r} not in {message!r}"


# --- formats ---------------------------------------------------------------------------------


SIMPLE = [
    "timestamp,cell_id,traffic",
    "2024-01-01T00:00:00Z,b,5",
    "2024-01-01T01:00:00Z,b,6",
    "2024-01-01T00:00:00Z,a,1",
    "2024-01-01T01:00:00Z,a,2",
    "2024-01-01T02:00:00Z,a,3",
]


def check_simple(panel) -> None:
    assert panel.cell_ids == ["a", "b"]
    assert panel.freq == "1h"
    assert panel.target == "traffic"
    assert panel.values.dtype == np.float32
    assert panel.values.shape == (2, 3)
    assert str(panel.index.tz) == "UTC"
    assert panel.index[0] == pd.Timestamp("2024-01-01", tz="UTC")
    assert (panel.index[1:] - panel.index[:-1] == pd.Timedelta("1h")).all()
    np.testing.assert_array_equal(panel.values[0], [1, 2, 3])
    np.testing.assert_array_equal(panel.values[1], [5, 6, np.nan])


def test_csv(tmp_path: Path) -> None:
    panel = load_panel(write_csv(tmp_path, SIMPLE), "traffic")
    check_simple(panel)
    assert panel.calendar_tz == "UTC"
    assert panel.log == {
        "ignored_columns": 0,
        "missing_values": 0,
        "unsorted_rows": 0,
        "duplicate_rows": 0,
        "aggregated_rows": 0,
        "dropped_short_cells": 0,
        "gap_steps": 0,
    }


def test_csv_gz(tmp_path: Path) -> None:
    check_simple(load_panel(write_csv(tmp_path, SIMPLE, "kpi.csv.gz"), "traffic"))


def test_parquet_with_string_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "kpi.parquet"
    pd.read_csv(write_csv(tmp_path, SIMPLE), dtype=str).astype({"traffic": float}).to_parquet(path)
    check_simple(load_panel(path, "traffic"))


def test_parquet_pq_suffix_with_pandas_index(tmp_path: Path) -> None:
    path = tmp_path / "kpi.pq"
    frame = pd.read_csv(write_csv(tmp_path, SIMPLE), dtype={"timestamp": str})
    frame.index = frame.index + 100  # stored by pandas as an extra column, which is not data
    frame.to_parquet(path)
    panel = load_panel(path, "traffic")
    check_simple(panel)
    assert panel.log["ignored_columns"] == 0


def parquet_with_datetimes(tmp_path: Path, stamps: pd.DatetimeIndex) -> Path:
    path = tmp_path / "kpi.parquet"
    frame = pd.DataFrame({"timestamp": stamps, "cell_id": "a", "traffic": np.arange(len(stamps))})
    frame.to_parquet(path)
    return path


def test_parquet_naive_datetimes_are_utc(tmp_path: Path) -> None:
    path = parquet_with_datetimes(tmp_path, pd.date_range("2024-01-01", periods=4, freq="15min"))
    panel = load_panel(path, "traffic")
    assert panel.index[0] == pd.Timestamp("2024-01-01", tz="UTC")
    assert panel.freq == "15min"
    assert panel.calendar_tz == "UTC"


def test_parquet_named_zone_becomes_calendar(tmp_path: Path) -> None:
    stamps = pd.date_range("2024-03-30", "2024-04-01", freq="h", tz="Europe/Paris")
    panel = load_panel(parquet_with_datetimes(tmp_path, stamps), "traffic")
    assert panel.calendar_tz == "Europe/Paris"
    assert panel.n_steps == len(stamps) == 24 + 23 + 1  # 30 Mar 00:00 .. 1 Apr 00:00
    assert panel.index[0] == pd.Timestamp("2024-03-29T23:00", tz="UTC")
    assert not np.isnan(panel.values).any()


def test_parquet_fixed_offset_becomes_calendar(tmp_path: Path) -> None:
    stamps = pd.date_range("2024-01-01", periods=3, freq="h", tz="-05:30")
    panel = load_panel(parquet_with_datetimes(tmp_path, stamps), "traffic")
    assert panel.calendar_tz == "-05:30"
    assert panel.index[0] == pd.Timestamp("2024-01-01T05:30", tz="UTC")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "no such file")


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "kpi.xlsx"
    path.write_text("x")
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "unsupported", ".parquet")


@pytest.mark.parametrize("name", ["kpi.parquet", "kpi.csv.gz"])
def test_unreadable_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"this is not what the suffix promises\n")
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "cannot read")


def test_header_only(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["timestamp,cell_id,traffic"])
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "no data rows")


# --- columns ---------------------------------------------------------------------------------


def test_missing_target_lists_available_columns(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["timestamp,cell_id,prb_util,users", "2024-01-01,a,1,2"])
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "'traffic'", "'prb_util'", "'users'", "'timestamp'")


@pytest.mark.parametrize("missing", ["timestamp", "cell_id"])
def test_missing_key_column(tmp_path: Path, missing: str) -> None:
    header = "timestamp,cell_id,traffic".replace(missing, "other")
    path = write_csv(tmp_path, [header, "2024-01-01,a,1"])
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, repr(missing), "'other'", "'traffic'")


def test_unknown_columns_ignored_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_csv(
        tmp_path,
        [
            "site,timestamp,cell_id,traffic,prb_util",
            "s1,2024-01-01T00:00:00Z,a,1,oops",
            "s1,2024-01-01T01:00:00Z,a,2,",
        ],
    )
    with caplog.at_level(logging.INFO, logger="kpi_forecast.data.ingest"):
        panel = load_panel(path, "traffic")
    assert panel.log["ignored_columns"] == 2
    np.testing.assert_array_equal(panel.values, [[1, 2]])
    ignored = [r for r in caplog.records if r.levelno == logging.INFO and "ignoring" in r.message]
    assert ignored and "'site'" in ignored[0].message and "'prb_util'" in ignored[0].message


def test_summary_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_csv(tmp_path, SIMPLE)
    with caplog.at_level(logging.INFO, logger="kpi_forecast.data.ingest"):
        load_panel(path, "traffic")
    summary = [r.message for r in caplog.records if "cells x" in r.message]
    assert len(summary) == 1
    for part in (str(path), "2 cells x 3 steps", "1h", "gap_steps=0", "duplicate_rows=0"):
        assert part in summary[0]


# --- timestamps ------------------------------------------------------------------------------


def paris_day_rows(day: str) -> list[str]:
    """Hourly rows for three local days around ``day`` stamped with Paris local offsets."""
    start = pd.Timestamp(day) - pd.Timedelta("1D")
    stamps = pd.date_range(
        start, start + pd.Timedelta("3D"), freq="h", tz="Europe/Paris", inclusive="left"
    )
    return ["timestamp,cell_id,traffic"] + [f"{t.isoformat()},a,{i}" for i, t in enumerate(stamps)]


def test_dst_spring_forward_gap_free(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = paris_day_rows("2024-03-31")
    assert any("+01:00" in x for x in lines) and any("+02:00" in x for x in lines)
    with caplog.at_level(logging.WARNING, logger="kpi_forecast.data.ingest"):
        panel = load_panel(write_csv(tmp_path, lines), "traffic")
    assert panel.n_steps == 24 + 23 + 24 == len(lines) - 1
    assert panel.index.is_unique
    assert (np.diff(panel.index.asi8) == np.diff(panel.index.asi8)[0]).all()
    assert panel.freq == "1h"
    assert not np.isnan(panel.values).any()
    np.testing.assert_array_equal(panel.values[0], np.arange(panel.n_steps))
    assert panel.log["gap_steps"] == 0 and panel.log["duplicate_rows"] == 0
    local = panel.index.tz_convert("Europe/Paris")
    on_day = local[local.normalize() == pd.Timestamp("2024-03-31", tz="Europe/Paris")]
    assert len(on_day) == 23 and on_day.hour.nunique() == 23 and 2 not in on_day.hour
    # Mixed offsets do not name a zone: UTC calendar and a hint to pass --tz.
    assert panel.calendar_tz == "UTC"
    assert any("--tz" in r.message for r in caplog.records if r.levelno == logging.WARNING)


def test_dst_fall_back_no_duplicate_steps(tmp_path: Path) -> None:
    lines = paris_day_rows("2024-10-27")
    panel = load_panel(write_csv(tmp_path, lines), "traffic", tz="Europe/Paris")
    assert panel.n_steps == 24 + 25 + 24 == len(lines) - 1
    assert panel.index.is_unique
    assert not np.isnan(panel.values).any()
    assert panel.log["duplicate_rows"] == 0 and panel.log["aggregated_rows"] == 0
    local = panel.index.tz_convert("Europe/Paris")
    on_day = local[local.normalize() == pd.Timestamp("2024-10-27", tz="Europe/Paris")]
    assert len(on_day) == 25 and list(on_day.hour).count(2) == 2
    assert panel.calendar_tz == "Europe/Paris"


def test_naive_timestamps_are_utc(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path, ["timestamp,cell_id,traffic", "2024-06-01 00:00:00,a,1", "2024-06-01 01:00,a,2"]
    )
    panel = load_panel(path, "traffic")
    assert list(panel.index) == [
        pd.Timestamp("2024-06-01T00:00", tz="UTC"),
        pd.Timestamp("2024-06-01T01:00", tz="UTC"),
    ]
    assert panel.calendar_tz == "UTC"


def test_single_offset_gives_fixed_calendar(tmp_path: Path) -> None:
    rows = hourly_rows("a", "2024-01-01", [1, 2, 3], offset="+01:00")
    panel = load_panel(write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic")
    assert panel.calendar_tz == "+01:00"
    assert panel.index[0] == pd.Timestamp("2023-12-31T23:00", tz="UTC")
    # Other modules turn it back into a zone; local midnight must come out as hour 0.
    assert panel.index.tz_convert(calendar_zone(panel.calendar_tz))[0].hour == 0
    assert panel.index.tz_convert(panel.calendar_tz)[0].hour == 0


def test_utc_offset_gives_utc_calendar(tmp_path: Path) -> None:
    rows = hourly_rows("a", "2024-01-01", [1, 2], offset="+00:00")
    panel = load_panel(write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic")
    assert panel.calendar_tz == "UTC"


def test_explicit_tz_overrides_calendar(tmp_path: Path) -> None:
    rows = hourly_rows("a", "2024-01-01", [1, 2], offset="+01:00")
    panel = load_panel(
        write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic", tz="Europe/Rome"
    )
    assert panel.calendar_tz == "Europe/Rome"
    assert panel.index[0] == pd.Timestamp("2023-12-31T23:00", tz="UTC")


def test_bad_tz_name(tmp_path: Path) -> None:
    path = write_csv(tmp_path, SIMPLE)
    with pytest.raises(DataError, match="Europe/Pariss"):
        load_panel(path, "traffic", tz="Europe/Pariss")


def test_unparseable_timestamp(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T00:00:00Z,a,1",
            "2024-01-01T01:00:00Z,a,2",
            "01/13/2024 02:00,a,3",
            "garbage,a,4",
        ],
    )
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "'timestamp'", "row 3", "'01/13/2024 02:00'")


def test_empty_timestamp(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["timestamp,cell_id,traffic", "2024-01-01T00:00:00Z,a,1", ",a,2"])
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "'timestamp'", "row 2")


# --- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("abc", "not a number"),
        ("12,5", "not a number"),
        ("-3", "negative"),
        ("inf", "infinite"),
        ("-inf", "infinite"),
    ],
)
def test_invalid_values(tmp_path: Path, bad: str, problem: str) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T00:00:00Z,a,1",
            f'2024-01-01T01:00:00Z,cell-7,"{bad}"',
            f'2024-01-01T02:00:00Z,a,"{bad}"',
        ],
    )
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "'traffic'", "row 2", "'cell-7'", bad, problem)


def test_invalid_value_in_parquet(tmp_path: Path) -> None:
    path = tmp_path / "kpi.parquet"
    frame = pd.DataFrame(
        {"timestamp": ["2024-01-01T00:00Z", "2024-01-01T01:00Z"], "cell_id": "a", "v": [1.0, -2.5]}
    )
    frame.to_parquet(path)
    with pytest.raises(DataError) as exc:
        load_panel(path, "v")
    assert_error(exc, path, "'v'", "row 2", "negative", "-2.5")


def test_empty_values_are_missing(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T00:00:00Z,a,1",
            "2024-01-01T01:00:00Z,a,",
            "2024-01-01T02:00:00Z,a,NaN",
            "2024-01-01T03:00:00Z,a,4",
        ],
    )
    panel = load_panel(path, "traffic")
    np.testing.assert_array_equal(panel.values, [[1, np.nan, np.nan, 4]])
    assert panel.log["missing_values"] == 2
    assert panel.log["gap_steps"] == 2


def test_empty_cell_id(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        ["timestamp,cell_id,traffic", "2024-01-01T00:00:00Z,a,1", "2024-01-01T01:00:00Z,,2"],
    )
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "'cell_id'", "row 2", "empty")


def test_cell_named_na_is_a_cell(tmp_path: Path) -> None:
    rows = hourly_rows("NA", "2024-01-01", [1, 2])
    panel = load_panel(write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic")
    assert panel.cell_ids == ["NA"]


# --- ordering and duplicates -----------------------------------------------------------------


def test_unsorted_rows_sorted_and_counted(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T02:00:00Z,a,3",
            "2024-01-01T00:00:00Z,a,1",  # out of order
            "2024-01-01T01:00:00Z,a,2",  # out of order (earlier than 02:00 above)
            "2024-01-01T00:00:00Z,b,7",  # earlier than a's rows, but b's own order is fine
            "2024-01-01T01:00:00Z,b,8",
        ],
    )
    panel = load_panel(path, "traffic")
    np.testing.assert_array_equal(panel.values, [[1, 2, 3], [7, 8, np.nan]])
    assert panel.log["unsorted_rows"] == 2


def test_exact_duplicates_dropped(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T00:00:00Z,a,1",
            "2024-01-01T01:00:00Z,a,2",
            "2024-01-01T00:00:00Z,a,1",
            "2024-01-01T01:00:00+01:00,a,1",  # the same instant as 00:00Z
            "2024-01-01T02:00:00Z,a,",
            "2024-01-01T02:00:00Z,a,",
        ],
    )
    panel = load_panel(path, "traffic")
    np.testing.assert_array_equal(panel.values, [[1, 2, np.nan]])
    assert panel.log["duplicate_rows"] == 3
    assert panel.log["aggregated_rows"] == 0


def test_value_and_empty_at_one_timestamp_conflict(tmp_path: Path) -> None:
    # Which of the two rows is right is a guess, so it is refused like any other conflict.
    path = write_csv(
        tmp_path,
        ["timestamp,cell_id,traffic", "2024-01-01T00:00:00Z,a,", "2024-01-01T00:00:00Z,a,4"],
    )
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "rows 1 and 2", "'a'")


def test_conflicting_duplicates(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T00:00:00Z,a,1",
            "2024-01-01T01:00:00Z,cell-9,2",
            "2024-01-01T02:00:00Z,a,3",
            "2024-01-01T01:00:00Z,cell-9,5",
        ],
    )
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "rows 2 and 4", "'cell-9'", "2024-01-01T01:00:00+00:00")


# --- frequency and grid ----------------------------------------------------------------------


@pytest.mark.parametrize("freq", ["1h", "15min", "30min"])
def test_freq_inferred(tmp_path: Path, freq: str) -> None:
    step = pd.Timedelta(freq)
    start = pd.Timestamp("2024-01-01", tz="UTC")
    stamps = [start + k * step for k in (0, 1, 2, 3, 5, 6)]  # one gap of one step
    lines = ["timestamp,cell_id,traffic"] + [f"{t.isoformat()},a,1" for t in stamps]
    panel = load_panel(write_csv(tmp_path, lines), "traffic")
    assert panel.freq == freq
    assert panel.n_steps == 7
    assert panel.step == step


def test_freq_inferred_from_most_common_gap_across_cells(tmp_path: Path) -> None:
    lines = ["timestamp,cell_id,traffic"]
    lines += [f"2024-01-01T{h:02d}:00:00Z,a,1" for h in (0, 2, 4, 6, 8)]  # 2h gaps
    lines += [f"2024-01-01T{h:02d}:00:00Z,b,1" for h in (0, 1, 2)]  # 1h gaps
    panel = load_panel(write_csv(tmp_path, lines), "traffic")
    assert panel.freq == "2h"


def test_freq_cannot_be_inferred(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        ["timestamp,cell_id,traffic", "2024-01-01T00:00:00Z,a,1", "2024-01-01T05:00:00Z,b,2"],
    )
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic")
    assert_error(exc, path, "frequency", "freq")
    assert load_panel(path, "traffic", freq="1h").n_steps == 6


def test_explicit_freq_aggregates_by_mean(tmp_path: Path) -> None:
    rows = hourly_rows("a", "2024-01-01", [1, 3, 5, 7, 9])
    panel = load_panel(write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic", "2h")
    assert panel.freq == "2h"
    np.testing.assert_array_equal(panel.values, [[2, 6, 9]])
    assert panel.log["aggregated_rows"] == 2


def test_explicit_freq_finer_than_data_leaves_gaps(tmp_path: Path) -> None:
    rows = hourly_rows("a", "2024-01-01", [1, 2, 3])
    panel = load_panel(
        write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic", freq="30min"
    )
    np.testing.assert_array_equal(panel.values, [[1, np.nan, 2, np.nan, 3]])
    assert panel.log["gap_steps"] == 2


def test_explicit_freq_is_normalised(tmp_path: Path) -> None:
    path = write_csv(tmp_path, SIMPLE)
    assert load_panel(path, "traffic", freq="60min").freq == "1h"


@pytest.mark.parametrize("freq", ["xx", "W", "MS", "0h"])
def test_bad_freq(tmp_path: Path, freq: str) -> None:
    with pytest.raises(DataError, match="freq"):
        load_panel(write_csv(tmp_path, SIMPLE), "traffic", freq=freq)


def test_off_grid_samples_floored_and_averaged(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        [
            "timestamp,cell_id,traffic",
            "2024-01-01T00:00:00Z,a,1",
            "2024-01-01T00:15:00Z,a,2",
            "2024-01-01T00:22:30Z,a,4",  # off-grid: floored into 00:15
            "2024-01-01T00:30:00Z,a,3",
            "2024-01-01T00:45:00Z,a,4",
            "2024-01-01T01:00:00Z,a,5",
            "2024-01-01T01:15:00Z,a,6",
        ],
    )
    panel = load_panel(path, "traffic")
    assert panel.freq == "15min"
    assert panel.index[0] == pd.Timestamp("2024-01-01", tz="UTC")
    np.testing.assert_array_equal(panel.values, [[1, 3, 3, 4, 5, 6]])
    assert panel.log["aggregated_rows"] == 1


def test_grid_keeps_phase_of_on_grid_timestamps(tmp_path: Path) -> None:
    # Local midnight in India is 18:30 UTC: the hourly grid must stay on the half hour.
    rows = hourly_rows("a", "2024-01-01", [1, 2, 3, 4], offset="+05:30")
    panel = load_panel(write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows]), "traffic")
    assert panel.index[0] == pd.Timestamp("2023-12-31T18:30", tz="UTC")
    assert panel.calendar_tz == "+05:30"
    np.testing.assert_array_equal(panel.values, [[1, 2, 3, 4]])


def test_gaps_are_nan_and_counted(tmp_path: Path) -> None:
    lines = ["timestamp,cell_id,traffic"]
    lines += hourly_rows("a", "2024-01-01", [1, 2, 3, 4, 5, 6])
    lines = [x for x in lines if "T02:00" not in x and "T03:00" not in x]  # a: 2-step hole
    lines += hourly_rows("b", "2024-01-01T02:00", [0, 0])  # b: outside its span is not a gap
    panel = load_panel(write_csv(tmp_path, lines), "traffic")
    np.testing.assert_array_equal(
        panel.values, [[1, 2, np.nan, np.nan, 5, 6], [np.nan, np.nan, 0, 0, np.nan, np.nan]]
    )
    assert panel.log["gap_steps"] == 2


def test_grid_too_large_names_the_outlier(tmp_path: Path) -> None:
    rows = hourly_rows("a", "2024-01-01", [1, 2])
    path = write_csv(tmp_path, ["timestamp,cell_id,traffic", *rows, "2224-01-01T00:00:00Z,a,3"])
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic", freq="1s")
    assert_error(exc, path, "row 3", "2224-01-01")


# --- short cells -----------------------------------------------------------------------------


def test_short_cells_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = ["timestamp,cell_id,traffic"]
    lines += hourly_rows("long", "2024-01-01", [1, 2, 3, 4])
    lines += hourly_rows("short", "2024-01-01", [1, 2, 3])
    lines += hourly_rows("empty", "2024-01-01", ["", ""])
    with caplog.at_level(logging.WARNING, logger="kpi_forecast.data.ingest"):
        panel = load_panel(write_csv(tmp_path, lines), "traffic", min_steps=4)
    assert panel.cell_ids == ["long"]
    assert panel.values.shape == (1, 4)
    assert panel.log["dropped_short_cells"] == 2
    warning = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'short'" in m and "'empty'" in m for m in warning)


def test_all_cells_too_short(tmp_path: Path) -> None:
    lines = ["timestamp,cell_id,traffic"]
    lines += hourly_rows("a", "2024-01-01", [1, 2, 3])
    lines += hourly_rows("b", "2024-01-01", [1, 2])
    path = write_csv(tmp_path, lines)
    with pytest.raises(DataError) as exc:
        load_panel(path, "traffic", min_steps=10)
    assert_error(exc, path, "longest series has 3", "min_steps is 10")


# --- calendar_zone ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "offset_in_january"),
    [
        ("UTC", datetime.timedelta(0)),
        ("Europe/Rome", datetime.timedelta(hours=1)),
        ("+01:00", datetime.timedelta(hours=1)),
        ("-05:30", -datetime.timedelta(hours=5, minutes=30)),
    ],
)
def test_calendar_zone(name: str, offset_in_january: datetime.timedelta) -> None:
    zone = calendar_zone(name)
    assert isinstance(zone, datetime.tzinfo)
    assert datetime.datetime(2024, 1, 15, tzinfo=zone).utcoffset() == offset_in_january
    stamp = pd.Timestamp("2024-01-15T12:00", tz="UTC").tz_convert(zone)
    assert stamp.utcoffset() == offset_in_january


def test_calendar_zone_named_zone_follows_dst() -> None:
    assert datetime.datetime(2024, 7, 1, tzinfo=calendar_zone("Europe/Rome")).utcoffset() == (
        datetime.timedelta(hours=2)
    )


@pytest.mark.parametrize("name", ["Mars/Olympus", "Europe", "", "+1:00", "+24:00", "+01:60"])
def test_calendar_zone_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="time zone"):
        calendar_zone(name)


# --- the real Milan export -------------------------------------------------------------------


@pytest.mark.slow
def test_milan() -> None:
    if not MILAN.exists():
        pytest.skip("../shared/data/milan not present")
    panel = load_panel(MILAN, "traffic")
    assert panel.n_cells == 281
    assert panel.n_steps == 62 * 24 == 1488
    assert panel.freq == "1h"
    assert panel.calendar_tz == "+01:00"
    assert panel.index[0] == pd.Timestamp("2013-10-31T23:00", tz="UTC")  # 1 Nov, Rome midnight
    assert panel.values.dtype == np.float32
    missing = np.isnan(panel.values)
    # 352,344 rows on 281 x 1488 steps: every absent hour is NaN, none is a filled-in zero.
    assert missing.sum() == 281 * 1488 - 352_344
    assert missing.any(axis=1).sum() == 70
    assert (missing.sum(axis=1) % 24 == 0).all()  # whole missing days
    assert np.nanmin(panel.values) >= 0
    # The missing days all come at the end of a square's series, not between samples.
    assert panel.log["gap_steps"] == 0
    assert panel.log["duplicate_rows"] == 0 and panel.log["aggregated_rows"] == 0

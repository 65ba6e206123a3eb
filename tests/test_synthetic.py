"""Behaviour of the synthetic KPI generator and the sample data set committed with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.data.synthetic import KPI_COLUMNS, cell_profiles, generate, main

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample" / "cells_hourly.csv.gz"
# Must match the command in data/sample/README.md.
SAMPLE_ARGS = dict(
    n_cells=24, days=56, freq="1h", seed=0, start="2024-03-04", tz="Europe/Paris", missing=True
)
TZ = "Europe/Paris"


@pytest.fixture(scope="module")
def complete() -> pd.DataFrame:
    """The sample's eight weeks with every row kept, for the seasonality checks."""
    return generate(**{**SAMPLE_ARGS, "missing": False})


def _wide(frame: pd.DataFrame, kpi: str) -> np.ndarray:
    return frame.pivot(index="cell_id", columns="timestamp", values=kpi).to_numpy()


def _autocorr(rows: np.ndarray, lag: int) -> float:
    """Lag-``lag`` autocorrelation of each row, averaged over rows."""
    centred = rows - rows.mean(axis=1, keepdims=True)
    num = (centred[:, :-lag] * centred[:, lag:]).sum(axis=1)
    return float(np.mean(num / (centred**2).sum(axis=1)))


def _read_csv(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    stamps = pd.to_datetime(frame["timestamp"], utc=True).dt.tz_convert(TZ)
    return frame.assign(timestamp=stamps.dt.as_unit("ns"))


def test_same_seed_same_frame_other_seed_other_frame() -> None:
    first = generate(n_cells=6, days=14, seed=3)
    pd.testing.assert_frame_equal(first, generate(n_cells=6, days=14, seed=3))
    other = generate(n_cells=6, days=14, seed=4)
    assert not first.equals(other)
    # Different rows go missing too, so compare values on the instants both seeds kept.
    both = first.merge(other, on=["timestamp", "cell_id"], suffixes=("", "_other"))
    assert (both["traffic_mb"] != both["traffic_mb_other"]).mean() > 0.99


def test_columns_and_dtypes(complete: pd.DataFrame) -> None:
    assert list(complete.columns) == ["timestamp", "cell_id", *KPI_COLUMNS]
    assert complete["timestamp"].dtype == pd.DatetimeTZDtype("ns", TZ)
    assert pd.api.types.is_string_dtype(complete["cell_id"])
    assert sorted(complete["cell_id"].unique()) == [f"cell-{i:03d}" for i in range(24)]
    for kpi in KPI_COLUMNS:
        assert complete[kpi].dtype == np.float64, kpi


def test_value_ranges(complete: pd.DataFrame) -> None:
    kpis = complete[list(KPI_COLUMNS)]
    assert not kpis.isna().any().any()
    assert (kpis >= 0).all().all()
    assert complete["prb_util"].max() <= 100.0
    assert complete["prb_util"].max() > 95.0, "bursts should push some cells near saturation"
    ues = complete["active_ues"]
    assert (ues == ues.round()).all()
    # Cells differ in scale by about an order of magnitude.
    per_cell = complete.groupby("cell_id")["traffic_mb"].mean()
    assert per_cell.max() / per_cell.min() > 5.0


def test_throughput_per_ue_falls_as_prb_fills(complete: pd.DataFrame) -> None:
    compared = 0
    for _, cell in complete.groupby("cell_id"):
        busy = cell.loc[cell["prb_util"] > 80.0, "dl_throughput_mbps"]
        quiet = cell.loc[cell["prb_util"] < 20.0, "dl_throughput_mbps"]
        if len(busy) and len(quiet):
            compared += 1
            assert busy.mean() < 0.6 * quiet.mean()
    assert compared >= 12


def test_daily_seasonality(complete: pd.DataFrame) -> None:
    traffic = _wide(complete, "traffic_mb")
    day, half_day = _autocorr(traffic, 24), _autocorr(traffic, 12)
    assert day > 0.5
    assert day > half_day + 0.5


def test_weekly_pattern_by_profile(complete: pd.DataFrame) -> None:
    profile = complete["cell_id"].map(cell_profiles(24, 0))
    local = complete["timestamp"].dt.tz_localize(None)
    weekend = local.dt.day_of_week >= 5
    holiday = local.dt.normalize() == pd.Timestamp("2024-04-01")  # Easter Monday
    weekday = ~weekend & ~holiday
    mean = complete["traffic_mb"].groupby([profile, weekend]).mean().unstack()
    assert mean.loc["business", True] < 0.6 * mean.loc["business", False]
    assert mean.loc["residential", True] > mean.loc["residential", False]

    business = complete["traffic_mb"][profile == "business"]
    on_holiday = business[holiday].mean()
    on_weekend = business[weekend].mean()
    on_weekday = business[weekday].mean()
    assert abs(on_holiday - on_weekend) < abs(on_holiday - on_weekday)

    assert _autocorr(_wide(complete, "traffic_mb"), 24 * 7) > 0.6


def test_missing_rows_only_when_asked(complete: pd.DataFrame) -> None:
    steps = complete["timestamp"].nunique()
    assert (complete.groupby("cell_id").size() == steps).all()

    gappy = generate(**SAMPLE_ARGS)
    assert len(gappy) < len(complete)
    assert not gappy[list(KPI_COLUMNS)].isna().any().any(), "missing means absent, not NaN"
    per_cell_missing = steps - gappy.groupby("cell_id").size()
    assert 0.002 < per_cell_missing.sum() / len(complete) < 0.05
    # Outage stretches: some cells lose at least 3 hours in a row.
    longest_gap = gappy.groupby("cell_id")["timestamp"].apply(lambda s: s.diff().max())
    assert (longest_gap >= pd.Timedelta(hours=4)).sum() >= 2


def test_fifteen_minutes_gives_four_times_the_rows_on_the_same_wall_clock() -> None:
    hourly = generate(n_cells=6, days=14, freq="1h", seed=1, missing=False)
    quarter = generate(n_cells=6, days=14, freq="15min", seed=1, missing=False)
    assert len(quarter) == 4 * len(hourly)
    assert (quarter.groupby("cell_id").size() == 4 * 24 * 14).all()
    # Seasonality follows local hour, not step count: both grids peak at the same hours.
    by_hour = [f.groupby(f["timestamp"].dt.hour)["active_ues"].mean() for f in (hourly, quarter)]
    assert np.corrcoef(by_hour[0], by_hour[1])[0, 1] > 0.95
    # Traffic is a volume per step, so a quarter-hour carries about a quarter as much.
    ratio = quarter["traffic_mb"].mean() / hourly["traffic_mb"].mean()
    assert 0.2 < ratio < 0.3


@pytest.mark.parametrize(
    ("start", "day", "hours"), [("2024-03-25", "2024-03-31", 23), ("2024-10-21", "2024-10-27", 25)]
)
def test_dst_crossing_keeps_instants_unique(start: str, day: str, hours: int) -> None:
    frame = generate(n_cells=3, days=14, freq="30min", start=start, missing=False)
    for _, cell in frame.groupby("cell_id"):
        stamps = cell["timestamp"]
        assert stamps.is_unique
        utc = stamps.dt.tz_convert("UTC")
        assert utc.is_unique
        assert (utc.diff().dropna() == pd.Timedelta(minutes=30)).all()
        on_day = stamps.dt.tz_localize(None).dt.normalize() == pd.Timestamp(day)
        assert on_day.sum() == 2 * hours


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="freq"):
        generate(freq="MS")
    with pytest.raises(ValueError, match="n_cells"):
        generate(n_cells=0)


def test_committed_sample_matches_generator() -> None:
    raw = pd.read_csv(SAMPLE, usecols=["timestamp"])["timestamp"]
    assert raw.str.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d").all()
    assert raw.str.endswith("+01:00").any() and raw.str.endswith("+02:00").any()

    expected = generate(**SAMPLE_ARGS)
    # Floats are written with at most 4 decimals, so parsing may differ by one unit in the
    # last place at most.
    pd.testing.assert_frame_equal(_read_csv(SAMPLE), expected, check_exact=False, rtol=1e-12)
    assert SAMPLE.stat().st_size < 1_000_000


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_cli_round_trip(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"cells{suffix}"
    main(
        ["--out", str(out), "--cells", "3", "--days", "8", "--seed", "5"]
        + ["--start", "2024-10-21", "--freq", "30min"]
    )
    expected = generate(n_cells=3, days=8, freq="30min", seed=5, start="2024-10-21")
    written = pd.read_parquet(out) if suffix == ".parquet" else _read_csv(out)
    pd.testing.assert_frame_equal(written, expected, check_exact=False, rtol=1e-12)


def test_a_short_single_series_keeps_most_of_its_rows() -> None:
    for seed in range(5):
        frame = generate(n_cells=1, days=1, seed=seed, start="2024-03-04", tz="UTC")
        assert len(frame) >= 24 // 2 - 2  # at most two outages of a quarter each

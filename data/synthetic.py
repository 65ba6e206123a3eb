"""Seeded synthetic per-cell RAN KPI series, in long format.

Every cell carries a latent demand process, the expected number of active UEs, built as

    level x daily shape (weekday / weekend-or-holiday) x slow trend x day-to-day wobble
          x short bursts x multiplicative noise

on the wall clock of ``tz``: hour of day, day of week and holidays come from local time, so
the series stay aligned with human behaviour across DST switches and at any sub-hourly step.
The four KPIs are drawn from that latent load, each with its own noise:

* ``active_ues``: Poisson count around the latent load (integer-valued floats);
* ``traffic_mb``: volume served during the step; offered load is capped smoothly at the
  cell's capacity, so it scales with the step length;
* ``prb_util``: PRB utilisation percent, a saturating function of offered load over
  capacity on top of a control-channel floor, clipped to [0, 100];
* ``dl_throughput_mbps``: mean DL throughput per active UE, falling as PRB utilisation rises.

Cells come in three profiles (residential, business, transport hub) whose busy hours and
weekend behaviour differ, with per-cell levels spanning about an order of magnitude. With
``missing=True`` a few cells lose stretches of a few hours to two days and about 0.5% of
all rows go missing at random; missing rows are absent, never NaN.

CLI (writes CSV, CSV.gz or Parquet, by suffix)::

    python -m kpi_forecast.data.synthetic --out cells.csv.gz --cells 24 --days 56 --seed 0
"""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

import holidays as holiday_data
import numpy as np
import pandas as pd

KPI_COLUMNS = ("prb_util", "dl_throughput_mbps", "active_ues", "traffic_mb")
PROFILES = ("residential", "business", "transport_hub")

# Values are rounded to this many decimals so that a written CSV reads back equal to the frame.
DECIMALS = 4

# Daily shapes as (peak hour, width in hours, height) bumps on the 24 h circle plus a night
# floor; heights put the weekday busy hour near 1 so that a cell's level is its peak load.
_Bump = tuple[float, float, float]
_SHAPES: dict[str, dict[str, tuple[float, tuple[_Bump, ...]]]] = {
    # Evening peak every day; weekends add a broad daytime plateau, so they run higher.
    "residential": {
        "weekday": (0.12, ((8.0, 1.2, 0.35), (13.0, 2.5, 0.3), (21.0, 2.2, 0.95))),
        "weekend": (0.15, ((12.0, 2.8, 0.6), (21.0, 2.2, 1.0))),
    },
    # Office hours with a lunch dip; weekends are a fraction of weekday load.
    "business": {
        "weekday": (0.06, ((10.5, 1.8, 0.95), (15.0, 1.8, 0.9))),
        "weekend": (0.06, ((13.0, 3.0, 0.22),)),
    },
    # Commuter peaks on weekdays only; weekends keep a moderate midday crowd.
    "transport_hub": {
        "weekday": (0.05, ((8.0, 1.0, 0.95), (18.0, 1.2, 0.9), (13.0, 3.0, 0.4))),
        "weekend": (0.05, ((14.0, 3.5, 0.55),)),
    },
}
# Median peak active UEs per profile; hubs serve crowds, homes and offices far fewer.
_PROFILE_LEVEL = {"residential": 10.0, "business": 14.0, "transport_hub": 35.0}

HOLIDAYS = "FR"  # the public holidays that get weekend-like load (``train --holidays FR``)


def holidays(years: range) -> list[date]:
    """The public holidays of :data:`HOLIDAYS` in ``years``."""
    return sorted(holiday_data.country_holidays(HOLIDAYS, years=list(years)))


def _cell_profiles(rng: np.random.Generator, n_cells: int) -> np.ndarray:
    # A shuffled round-robin keeps the profile mix balanced even for a handful of cells.
    return rng.permutation(np.arange(n_cells) % len(PROFILES))


def cell_profiles(n_cells: int = 24, seed: int = 0) -> dict[str, str]:
    """The profile ``generate(n_cells=n_cells, seed=seed)`` gives each cell, by cell id."""
    codes = _cell_profiles(np.random.default_rng(seed), n_cells)
    return {_cell_id(i, n_cells): PROFILES[c] for i, c in enumerate(codes)}


def _cell_id(i: int, n_cells: int) -> str:
    return f"cell-{i:0{max(3, len(str(n_cells - 1)))}d}"


def _time_grid(start: str, days: int, freq: str, tz: str) -> pd.DatetimeIndex:
    t0 = pd.Timestamp(start).tz_localize(tz, nonexistent="shift_forward", ambiguous=False)
    t1 = t0 + pd.DateOffset(days=days)  # wall-clock days: a DST day lasts 23 or 25 hours
    # Stepping in UTC keeps steps equally spaced in real time, so DST repeats no instant.
    grid = pd.date_range(t0.tz_convert("UTC"), t1.tz_convert("UTC"), freq=freq, inclusive="left")
    return grid.tz_convert(tz).as_unit("ns")


def daily_shape(hour: np.ndarray, floor: float, bumps: tuple[_Bump, ...]) -> np.ndarray:
    shape = np.full_like(hour, floor)
    for peak, width, height in bumps:
        dist = (hour - peak + 12.0) % 24.0 - 12.0  # circular, so a 23 h bump spills past 0 h
        shape += height * np.exp(-0.5 * (dist / width) ** 2)
    return shape


def _latent_load(
    rng: np.random.Generator,
    profiles: np.ndarray,
    local: pd.DatetimeIndex,
    step_h: float,
) -> np.ndarray:
    """Expected active UEs, shape [n_cells, n_steps]."""
    n_cells, n_steps = len(profiles), len(local)
    hour = np.asarray(local.hour + local.minute / 60.0, dtype=float)
    day = local.normalize()
    years = range(day[0].year, day[-1].year + 1)
    holiday = np.isin(day.values, np.array(holidays(years), dtype="datetime64[ns]"))
    weekend = (np.asarray(local.day_of_week) >= 5) | holiday

    # Busy hours shift a little from cell to cell, so no two cells peak in lockstep.
    cell_hour = hour[None, :] - rng.normal(0.0, 0.5, n_cells)[:, None]
    shape = np.empty((n_cells, n_steps))
    for code, name in enumerate(PROFILES):
        rows = profiles == code
        week = daily_shape(cell_hour[rows], *_SHAPES[name]["weekday"])
        wend = daily_shape(cell_hour[rows], *_SHAPES[name]["weekend"])
        shape[rows] = np.where(weekend[None, :], wend, week)

    base = np.array([_PROFILE_LEVEL[PROFILES[c]] for c in profiles])
    log_level = np.log(base) + rng.normal(0.0, 0.4, n_cells)

    elapsed_days = np.asarray((local - local[0]) / pd.Timedelta(days=1), dtype=float)
    growth_per_year = rng.uniform(-0.3, 0.9, n_cells)
    trend = growth_per_year[:, None] * elapsed_days[None, :] / 365.0

    # AR(1) over calendar days: busy and quiet days come in runs, as with weather or events.
    day_index = np.asarray((day - day[0]) / pd.Timedelta(days=1)).round().astype(int)
    innovations = rng.normal(0.0, 0.06, (n_cells, day_index[-1] + 1))
    wobble = np.empty_like(innovations)
    wobble[:, 0] = innovations[:, 0]
    for d in range(1, wobble.shape[1]):
        wobble[:, d] = 0.7 * wobble[:, d - 1] + innovations[:, d]

    log_load = (
        log_level[:, None]
        + np.log(shape)
        + trend
        + wobble[:, day_index]
        + _bursts(rng, n_cells, n_steps, step_h)
        + rng.normal(0.0, 0.08, (n_cells, n_steps))
    )
    return np.exp(log_load)


def _bursts(rng: np.random.Generator, n_cells: int, n_steps: int, step_h: float) -> np.ndarray:
    """Log-load boosts of x1.5 to x3 lasting 1-4 hours, about one per cell every three days."""
    n_days = n_steps * step_h / 24.0
    count = rng.poisson(n_days / 3.0 * n_cells)
    cell = rng.integers(0, n_cells, count)
    start = rng.integers(0, n_steps, count)
    length = np.maximum(1, np.round(rng.uniform(1.0, 4.0, count) / step_h)).astype(int)
    height = rng.uniform(np.log(1.5), np.log(3.0), count)
    # Box pulses as +h / -h edges, summed up by one cumulative sum along time.
    edges = np.zeros((n_cells, n_steps + 1))
    np.add.at(edges, (cell, start), height)
    np.add.at(edges, (cell, np.minimum(start + length, n_steps)), -height)
    return np.cumsum(edges, axis=1)[:, :n_steps]


def _kpis(rng: np.random.Generator, load: np.ndarray, step_h: float) -> dict[str, np.ndarray]:
    n_cells, n_steps = load.shape
    demand_mbps = rng.uniform(1.0, 2.5, n_cells)[:, None]  # offered load per active UE
    # Capacity is dimensioned to the cell's own busy hour, as operators do, so the busiest
    # hours run near saturation whatever the cell's absolute scale.
    peak_load = np.quantile(load, 0.95, axis=1)[:, None]
    capacity_mbps = peak_load * demand_mbps * rng.uniform(0.8, 2.0, n_cells)[:, None]
    overhead_pct = rng.uniform(2.0, 6.0, n_cells)[:, None]  # control channels, always on
    peak_ue_mbps = rng.uniform(40.0, 150.0, n_cells)[:, None]

    offered = load * demand_mbps * rng.lognormal(0.0, 0.10, (n_cells, n_steps))
    rho = offered / capacity_mbps
    served = offered / (1.0 + rho**4) ** 0.25  # smooth cap: bursts cannot exceed capacity
    traffic_mb = served * step_h * 3600.0 / 8.0 * rng.lognormal(0.0, 0.05, (n_cells, n_steps))

    rho_prb = rho * rng.lognormal(0.0, 0.06, (n_cells, n_steps))
    prb = overhead_pct + (100.0 - overhead_pct) * (1.0 - np.exp(-1.4 * rho_prb))
    prb = np.clip(prb + rng.normal(0.0, 1.0, (n_cells, n_steps)), 0.0, 100.0)

    # Users share the scheduler, so each gets less as the PRBs fill up.
    per_ue = peak_ue_mbps * (1.0 - 0.92 * (prb / 100.0) ** 1.5)
    per_ue *= rng.lognormal(0.0, 0.12, (n_cells, n_steps))

    return {
        "prb_util": prb,
        "dl_throughput_mbps": per_ue,
        "active_ues": rng.poisson(load).astype(float),
        "traffic_mb": traffic_mb,
    }


def _missing_mask(
    rng: np.random.Generator, n_cells: int, n_steps: int, step_h: float
) -> np.ndarray:
    """True where a row is dropped: outage stretches on a few cells plus scattered rows."""
    missing = rng.random((n_cells, n_steps)) < 0.005
    n_gap_cells = max(1, round(0.15 * n_cells))
    for cell in rng.choice(n_cells, n_gap_cells, replace=False):
        for _ in range(rng.integers(1, 3)):
            # At most a quarter of the series, so that a short one is never wiped out.
            length = min(max(1, n_steps // 4), max(1, round(rng.uniform(3.0, 48.0) / step_h)))
            start = rng.integers(0, n_steps - length + 1)
            missing[cell, start : start + length] = True
    return missing


def generate(
    n_cells: int = 24,
    days: int = 56,
    freq: str = "1h",
    seed: int = 0,
    start: str = "2024-01-01",
    tz: str = "Europe/Paris",
    missing: bool = True,
) -> pd.DataFrame:
    """Synthetic KPIs for ``n_cells`` cells over ``days`` wall-clock days from ``start``.

    Returns a long frame sorted by cell then time with columns ``timestamp``
    (datetime64[ns, tz]), ``cell_id`` ("cell-000", ...) and the float columns of
    ``KPI_COLUMNS``, rounded to ``DECIMALS``. The same arguments always give the same frame.
    """
    if n_cells < 1 or days < 1:
        raise ValueError(f"need n_cells >= 1 and days >= 1, got {n_cells} and {days}")
    try:
        step = pd.to_timedelta(pd.tseries.frequencies.to_offset(freq))
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"freq must be a fixed duration such as '1h' or '15min': {freq!r}"
        ) from err
    step_h = step / pd.Timedelta(hours=1)

    rng = np.random.default_rng(seed)
    profiles = _cell_profiles(rng, n_cells)
    grid = _time_grid(start, days, freq, tz)
    local = grid.tz_localize(None)  # wall-clock times drive every calendar effect
    load = _latent_load(rng, profiles, local, step_h)
    kpis = _kpis(rng, load, step_h)
    n_steps = len(grid)

    keep = np.ones(n_cells * n_steps, dtype=bool)
    if missing:
        keep = ~_missing_mask(rng, n_cells, n_steps, step_h).ravel()
    cell_ids = np.array([_cell_id(i, n_cells) for i in range(n_cells)], dtype=object)
    frame = pd.DataFrame(
        {
            "timestamp": grid[np.tile(np.arange(n_steps), n_cells)[keep]],
            "cell_id": np.repeat(cell_ids, n_steps)[keep],
            **{name: np.round(values.ravel()[keep], DECIMALS) for name, values in kpis.items()},
        }
    )
    return frame.reset_index(drop=True)


def write(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as Parquet (``.parquet``) or CSV (``.csv``, ``.csv.gz``).

    CSV timestamps are ISO 8601 with their UTC offset (``2024-03-31T03:00:00+02:00``), so
    the repeated wall-clock hour of an autumn DST switch stays unambiguous.
    """
    name = path.name.lower()
    if name.endswith(".parquet"):
        frame.to_parquet(path, index=False)
        return
    if not name.endswith((".csv", ".csv.gz")):
        raise ValueError(f"unsupported output suffix (use .csv, .csv.gz or .parquet): {path}")
    stamps = frame["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%S%z")
    stamps = stamps.str.replace(r"([+-]\d\d)(\d\d)$", r"\1:\2", regex=True)
    # A fixed gzip mtime makes the same data produce the same bytes, keeping diffs honest.
    compression = {"method": "gzip", "mtime": 0} if name.endswith(".gz") else None
    frame.assign(timestamp=stamps).to_csv(path, index=False, compression=compression)


def write_dataset(directory: Path, n_cells: int, files: int, cells_per_chunk: int = 1000,
                  **options: object) -> int:
    """Write a partitioned Parquet dataset (``cell_bucket=K/``, one file per bucket) of
    ``n_cells`` cells, generated ``cells_per_chunk`` at a time so memory stays bounded.

    Each chunk is ``generate`` with its own seed (``seed + chunk``); cell ``i`` lands in bucket
    ``i % files``, so every cell's rows lie in one file, as data-parallel training needs.
    Returns the number of rows written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if files < 1:
        raise ValueError(f"need files >= 1, got {files}")
    seed = int(options.pop("seed", 0))
    writers: dict[int, pq.ParquetWriter] = {}
    rows = 0
    try:
        for chunk_start in range(0, n_cells, cells_per_chunk):
            count = min(cells_per_chunk, n_cells - chunk_start)
            frame = generate(n_cells=count, seed=seed + chunk_start // cells_per_chunk,
                             **options)
            local = frame["cell_id"].str.slice(5).astype(int).to_numpy()
            index = chunk_start + local
            frame["cell_id"] = [_cell_id(i, n_cells) for i in index]
            for bucket in np.unique(index % files):
                table = pa.Table.from_pandas(frame[index % files == bucket], preserve_index=False)
                if bucket not in writers:
                    folder = directory / f"cell_bucket={bucket}"
                    folder.mkdir(parents=True, exist_ok=True)
                    writers[bucket] = pq.ParquetWriter(folder / "part-0.parquet", table.schema)
                writers[bucket].write_table(table)
            rows += len(frame)
    finally:
        for writer in writers.values():
            writer.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kpi_forecast.data.synthetic",
        description="Write a synthetic per-cell KPI data set.")
    parser.add_argument("--out", type=Path, required=True,
                        help=".csv, .csv.gz or .parquet; a directory with --files")
    parser.add_argument("--files", type=int,
                        help="write a partitioned Parquet dataset of this many files into OUT")
    parser.add_argument("--cells", type=int, default=24)
    parser.add_argument("--days", type=int, default=56)
    parser.add_argument("--freq", default="1h", help="fixed step, e.g. 1h, 30min, 15min")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", default="2024-01-01", help="first local day, YYYY-MM-DD")
    parser.add_argument("--tz", default="Europe/Paris", help="IANA zone of the wall clock")
    parser.add_argument("--no-missing", action="store_true", help="keep every row")
    args = parser.parse_args(argv)
    if args.files is not None:
        rows = write_dataset(args.out, args.cells, args.files, days=args.days, freq=args.freq,
                             seed=args.seed, start=args.start, tz=args.tz,
                             missing=not args.no_missing)
        print(f"wrote {rows} rows for {args.cells} cells in {args.files} files to {args.out}")
        return

    frame = generate(
        n_cells=args.cells,
        days=args.days,
        freq=args.freq,
        seed=args.seed,
        start=args.start,
        tz=args.tz,
        missing=not args.no_missing,
    )
    try:
        write(frame, args.out)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {len(frame)} rows for {args.cells} cells to {args.out}")


if __name__ == "__main__":
    main()

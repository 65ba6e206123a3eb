"""Seeded single series shaped like aggregate electricity load: a smooth daily curve with a
weekday and a weekend form, a season over the year, weather-like runs of busier and quieter
days, and little noise.

Such a series is not a RAN KPI, and that is its use: the generalisation suite
(``benchmarks/generalisation.py``) tries the defaults on shapes nobody tuned them for. With
``repeating=True`` the weeks repeat almost exactly (no season, no weather, a tenth of the
noise): a series where last week is the forecast to copy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kpi_forecast.data.synthetic import daily_shape

# (peak hour, width in hours, height) bumps over a night floor, as in a regional grid's load.
_WEEKDAY = (0.55, ((8.5, 2.0, 0.35), (13.0, 3.0, 0.25), (19.0, 2.0, 0.45)))
_WEEKEND = (0.55, ((11.0, 3.0, 0.25), (19.5, 2.2, 0.35)))


def load_like(days: int, freq: str = "30min", seed: int = 0, start: str = "2024-09-02",
              repeating: bool = False, cell_id: str = "load-0") -> pd.DataFrame:
    """A long frame (``timestamp`` UTC, ``cell_id``, ``load_mw``) of ``days`` days at ``freq``;
    the same arguments always give the same frame."""
    rng = np.random.default_rng(seed)
    grid = pd.date_range(pd.Timestamp(start, tz="UTC"), periods=int(pd.Timedelta(f"{days}D")
                         / pd.Timedelta(freq)), freq=freq)
    hour = np.asarray(grid.hour + grid.minute / 60.0, dtype=float)
    weekend = np.asarray(grid.day_of_week) >= 5
    shape = np.where(weekend, daily_shape(hour, *_WEEKEND), daily_shape(hour, *_WEEKDAY))
    day = np.asarray((grid.normalize() - grid[0].normalize()) / pd.Timedelta("1D")).astype(int)
    noise = 0.002 if repeating else 0.02
    log_load = np.log(1000.0 * shape) + rng.normal(0.0, noise, len(grid))
    if not repeating:
        # Winter runs higher; the phase is seeded, so the series starts anywhere in the year.
        phase = rng.uniform(0.0, 2.0 * np.pi)
        log_load += 0.12 * np.cos(2.0 * np.pi * day / 365.0 + phase)
        wobble = np.zeros(day[-1] + 1)
        for d in range(1, len(wobble)):
            wobble[d] = 0.8 * wobble[d - 1] + rng.normal(0.0, 0.025)
        log_load += wobble[day]
    return pd.DataFrame({"timestamp": grid, "cell_id": cell_id,
                         "load_mw": np.round(np.exp(log_load), 3)})

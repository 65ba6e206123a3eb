"""Training windows cut from a Panel: (context values, calendar, target) per (cell, origin).

Where the panel's calendar changes its UTC offset (DST), the windows are cut from the panel
on that wall clock (``model.features.wall_clock_places``): the hour a clock skips is a
missing step, of an hour it repeats the later reading is kept. Load follows people's hours,
so a window a week after a switch then holds days that line up with its calendar features,
as the runtime reads a window across a switch (``model.features.wall_clock_windows``).
Read in UTC steps, the days before the switch were an hour off
(docs/decisions/wall-clock-windows.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.data.panel import Panel
from kpi_forecast.model.features import calendar_features, calendar_zone, wall_clock_places

# A window is kept when at least this share of its context and of its target is observed;
# below that it teaches the model more about gaps than about load.
MIN_OBSERVED = 0.5


@dataclass
class Windows:
    """Every usable (cell, origin) pair of a panel; origin = index of the first target step."""

    values: np.ndarray  # [n_cells, n_steps] float32, NaN = missing
    calendar: np.ndarray  # [n_steps, N_CALENDAR]
    context: int
    horizon: int
    # The panel step of each step here (the first at or after it on the wall clock); None:
    # the panel's own steps.
    panel_steps: np.ndarray | None = None

    @classmethod
    def from_panel(cls, panel: Panel, context: int, horizon: int,
                   holiday_as_sunday: bool = False, wall_clock: bool = False) -> Windows:
        """The panel's windows, on the calendar's wall clock with ``wall_clock``."""
        places = wall_clock_places(panel.index, panel.calendar_tz) if wall_clock else None
        if places is None:
            calendar = calendar_features(panel.index, panel.calendar_tz, panel.holidays,
                                         holiday_as_sunday)
            return cls(panel.values, calendar, context, horizon)
        values = np.full((panel.n_cells, int(places[-1]) + 1), np.nan, np.float32)
        later = np.append(places[1:] != places[:-1], True)  # a repeated hour's later reading
        values[:, places[later]] = panel.values[:, later]
        first = panel.index[0].tz_convert(calendar_zone(panel.calendar_tz)).tz_localize(None)
        clock = pd.date_range(first, periods=values.shape[1], freq=panel.step, tz="UTC")
        calendar = calendar_features(clock, "UTC", panel.holidays, holiday_as_sunday)
        return cls(values, calendar, context, horizon,
                   np.searchsorted(places, np.arange(values.shape[1])))

    def panel_step(self, step: int) -> int:
        """The panel's step at (or first after) ``step`` of these windows."""
        return step if self.panel_steps is None else int(self.panel_steps[step])

    def pairs(self, first_origin: int, last_origin: int, stride: int = 1) -> np.ndarray:
        """[n, 2] (cell, origin) pairs with origin in [first_origin, last_origin], usable only."""
        n_steps = self.values.shape[1]
        first = max(first_origin, self.context)
        last = min(last_origin, n_steps - self.horizon)
        if last < first:
            return np.zeros((0, 2), dtype=np.int64)
        origins = np.arange(first, last + 1, stride)
        observed = np.concatenate(
            [np.zeros((self.values.shape[0], 1)), np.cumsum(~np.isnan(self.values), axis=1)],
            axis=1,
        )
        in_context = observed[:, origins] - observed[:, origins - self.context]
        in_target = observed[:, origins + self.horizon] - observed[:, origins]
        usable = (in_context >= MIN_OBSERVED * self.context) & (
            in_target >= MIN_OBSERVED * self.horizon
        )
        cells, positions = np.nonzero(usable)
        return np.stack([cells, origins[positions]], axis=1).astype(np.int64)

    def batch(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """values [B, context], calendar [B, context + horizon, C], target [B, horizon] for
        ``pairs``."""
        cells, origins = pairs[:, 0:1], pairs[:, 1:2]
        past = origins + np.arange(-self.context, 0)
        future = origins + np.arange(self.horizon)
        calendar = self.calendar[origins + np.arange(-self.context, self.horizon)]
        return self.values[cells, past], calendar, self.values[cells, future]

"""Training windows cut from a Panel: (context values, calendar, target) per (cell, origin)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kpi_forecast.data.panel import Panel
from kpi_forecast.model.features import calendar_features

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

    @classmethod
    def from_panel(cls, panel: Panel, context: int, horizon: int,
                   holiday_as_sunday: bool = False) -> Windows:
        calendar = calendar_features(panel.index, panel.calendar_tz, panel.holidays,
                                     holiday_as_sunday)
        return cls(panel.values, calendar, context, horizon)

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

"""The in-memory form of a KPI data set: many cells on one regular time grid."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kpi_forecast.model.errors import UserError


class DataError(UserError, ValueError):
    """A problem with the user's input data; its message is one readable line."""


def observed_spans(values: np.ndarray) -> np.ndarray:
    """[n_cells] steps from each row's first observed step to its last, both counted (0 for a
    row with none): cells from different periods share a grid but not its length."""
    observed = ~np.isnan(values)
    n_steps = values.shape[1]
    first = observed.argmax(axis=1)
    last = n_steps - 1 - observed[:, ::-1].argmax(axis=1)
    return np.where(observed.any(axis=1), last - first + 1, 0)


@dataclass
class Panel:
    """Per-cell series of one target KPI on a shared regular UTC grid.

    ``values[i, t]`` is cell ``cell_ids[i]`` at ``index[t]``; NaN marks a missing step
    (a gap in the source, or a step before the cell's first / after its last sample),
    so the missing mask is ``np.isnan(values)`` and never a silent zero.
    """

    cell_ids: list[str]
    index: pd.DatetimeIndex  # tz-aware UTC, regular at ``freq``
    values: np.ndarray  # float32 [n_cells, n_steps]
    freq: str  # pandas offset alias, e.g. "1h", "15min"
    target: str
    calendar_tz: str = "UTC"  # zone whose wall clock drives hour-of-day / day-of-week
    holidays: str = ""  # public-holiday calendar of the cells (model.features.check_holidays)
    log: dict[str, int] = field(default_factory=dict)  # counts of documented handlings

    @property
    def n_cells(self) -> int:
        return len(self.cell_ids)

    @property
    def n_steps(self) -> int:
        return len(self.index)

    @property
    def step(self) -> pd.Timedelta:
        return pd.Timedelta(pd.tseries.frequencies.to_offset(self.freq))

    @property
    def spans(self) -> np.ndarray:
        """Steps from each cell's first observed step to its last, both counted (0: none)."""
        return observed_spans(self.values)

    def steps_per(self, period: str) -> int:
        """How many grid steps make up ``period`` ("1D", "7D"); at least 1."""
        return max(1, int(pd.Timedelta(period) / self.step))

    def slice_steps(self, stop: int) -> Panel:
        """The panel truncated to its first ``stop`` steps (for time-based splits)."""
        return Panel(
            cell_ids=list(self.cell_ids),
            index=self.index[:stop],
            values=self.values[:, :stop],
            freq=self.freq,
            target=self.target,
            calendar_tz=self.calendar_tz,
            holidays=self.holidays,
            log=dict(self.log),
        )

    def first_cells(self, count: int) -> Panel:
        """The panel restricted to its first ``count`` cells."""
        return self.cells(slice(0, count))

    def cells(self, block: slice) -> Panel:
        """The panel restricted to a block of its cells, on the same grid."""
        return Panel(
            cell_ids=list(self.cell_ids[block]),
            index=self.index,
            values=self.values[block],
            freq=self.freq,
            target=self.target,
            calendar_tz=self.calendar_tz,
            holidays=self.holidays,
            log=dict(self.log),
        )

    def on_grid(self, index: pd.DatetimeIndex) -> Panel:
        """The panel on a longer ``index`` of the same step and phase, NaN where it had none."""
        offset = index.get_loc(self.index[0]) if len(self.index) else 0
        values = np.full((self.n_cells, len(index)), np.nan, dtype=self.values.dtype)
        values[:, offset : offset + self.n_steps] = self.values
        return Panel(
            cell_ids=list(self.cell_ids),
            index=index,
            values=values,
            freq=self.freq,
            target=self.target,
            calendar_tz=self.calendar_tz,
            holidays=self.holidays,
            log=dict(self.log),
        )


"""The controls of the served forecasts' accuracy: the quantiles recalibrated on the recent
history, the forecasts scored live against the actuals, and a model's guard on its live score
(parts of ``controls.Controls``, and the guard of ``controls.ModelControls``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kpi_forecast.xapp.descriptor.fields import MODEL_CONFIG


class RecalibrationControls(BaseModel):
    """Background recalibration of the quantiles on the recent history of the cells held, as
    `kpi-forecast predict` does: the offsets are refreshed in the background and a forecast
    only applies them."""

    model_config = MODEL_CONFIG

    every_seconds: float = Field(3600.0, ge=0, le=7 * 86400)
    """Seconds between refreshes (0: serve the model's own calibration)."""
    max_cells: int = Field(256, ge=1, le=100_000)
    """Most cells a refresh reads: the most recently reported ones."""


class ScoringControls(BaseModel):
    """Live scoring: at each origin (every horizon of the model, from midnight UTC on its
    grid) the xApp records a forecast of each cell it holds and scores the one recorded a
    horizon before against the actuals the history now holds, beside the seasonal naives;
    GET /v1/models/{name}/accuracy and the kpi_forecast_live_* metrics show the scores."""

    model_config = MODEL_CONFIG

    enabled: bool = True
    """Record and score forecasts (false: no live scores)."""
    max_cells: int = Field(100_000, ge=1, le=10_000_000)
    """Most cells a round forecasts and scores: the most recently reported ones."""
    worst_cells: int = Field(10, ge=0, le=100)
    """Cells of lowest skill over the last week that the accuracy route and the metrics
    name (a bounded top k, not a series per cell)."""


class Guard(BaseModel):
    """A model's guard: while its live skill (controls.scoring) over ``window`` is below
    ``minSkill``, its forecasts are the seasonal-naive fallback's, flagged source "fallback",
    reason "live_skill"; the model is still recorded and scored, so the guard lifts once its
    skill recovers."""

    model_config = MODEL_CONFIG

    enabled: bool = False
    """Serve the fallback while the model's live skill is below minSkill."""
    window: Literal["day", "week"] = "day"
    """The live scores' window the guard reads."""
    min_skill: float = Field(0.0, ge=-10.0, le=1.0)
    """Skill (1 - MAE / the better seasonal naive's) below which the fallback answers."""
    min_points: int = Field(24, ge=1, le=10_000_000)
    """Points scored over the window before the guard judges."""


WEEK_DAYS = 7  # live scores are kept for a week (the longest window)


class Promotion(BaseModel):
    """A model's promotion rule: its candidate (a version shadowed beside the one served)
    is promoted once, over the horizons both have been scored on within the last week, it
    has ``minPoints`` scored points spanning ``minDays`` days, a lower MAE than the version
    served, and a P10-P90 coverage no further from 0.8."""

    model_config = MODEL_CONFIG

    enabled: bool = False
    """Promote the candidate when the rule holds (false: by a call only)."""
    min_points: int = Field(168, ge=1, le=10**9)
    """Scored points of the candidate before it is judged."""
    min_days: float = Field(1.0, gt=0, le=WEEK_DAYS)
    """Days of scored horizons before the candidate is judged (live scores are kept for
    a week)."""

    def never_met(self, steps_kept: int, steps_per_day: int, max_cells: int) -> str | None:
        """Why the rule can never hold for a model whose live scores keep ``steps_kept`` steps
        of a cell (a week, or fewer for a fine grid) at ``steps_per_day``, over ``max_cells``
        cells (None: it can)."""
        if not self.enabled:
            return None
        days = steps_kept / steps_per_day
        if self.min_days > days:
            return (f"promotion.minDays {self.min_days:g} can never be met: the live scores "
                    f"keep {days:.3g} days of this model's horizons")
        most = steps_kept * max_cells
        if self.min_points > most:
            return (f"promotion.minPoints {self.min_points} can never be met: the live scores "
                    f"hold at most {most} points ({max_cells} cells, scoring.maxCells, x "
                    f"{steps_kept} steps kept a cell)")
        return None

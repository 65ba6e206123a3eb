"""Request and response bodies of the model routes (``http.model_routes``): the repository
index and its replicas, a model's data contract, its live accuracy, and the deployment's
decisions about it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kpi_forecast.model.artifact import HolidayReading


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: str | None = Field(default=None, description="default: the configured one")


class RecalibrationOut(BaseModel):
    """The offsets applied to the served model's quantiles (``model.recalibration``)."""

    model_weight: float  # the model's share of the median
    # Each simple forecast's share (model.naive: last_day, last_week, weekly_profile).
    naive_weights: dict[str, float]
    offsets: dict[str, float]  # pNN -> offset in units of the forecast's outer band
    # pNN -> the level its recent residuals were read at: as asked, or further out where
    # windows held out in turn needed it (model.recalibration.covering_level).
    read_at: dict[str, float]
    # pNN -> offset in units of the cell's day-to-day change, for the points whose band is
    # zero wide (every quantile the same); empty where the recent windows had none.
    zero_width_offsets: dict[str, float]
    windows: int  # recent horizons they come from; 0: the model's own calibration
    residuals: int
    cells: int  # cells read for them
    refreshed_at: str | None  # ISO 8601, UTC


class WindowAccuracy(BaseModel):
    """Live scores over a window (``model.scores.Accuracy``); null where nothing is scored."""

    points: int  # steps scored: the actual and both naives known
    mae: float | None  # of the recorded forecasts' median
    naive_mae: dict[str, float | None]  # last_day, last_week: the seasonal naives
    skill: float | None  # 1 - mae / the better naive's; below 0: worse than that naive
    pinball: float | None  # mean over the quantiles
    coverage: float | None  # share of the actuals inside P10-P90


class WorstCell(BaseModel):
    cell_id: str
    week: WindowAccuracy


class CandidateAccuracy(BaseModel):
    """The live accuracy of the candidate shadowed beside the version served."""

    model_version: str
    scored_until: str | None = Field(description="ISO 8601, UTC: its last round's origin")
    cells: int = Field(description="cells with a scored point over the week")
    windows: dict[str, WindowAccuracy]


class AccuracyOut(BaseModel):
    """A model's live accuracy, from its last scoring round (``serving.scoring``), and its
    candidate's beside it."""

    model: str
    model_version: str
    cell_id: str | None = Field(description="the cell asked for; null: the model's cells")
    scored_until: str | None = Field(
        description="ISO 8601, UTC: the last round's origin; the scores cover the horizons "
        "before it (null: no round yet)")
    scored_at: str | None  # ISO 8601, UTC: when that round ran
    cells: int = Field(description="cells with a scored point over the week")
    windows: dict[str, WindowAccuracy] = Field(description="day, week: the steps before "
                                               "scored_until")
    worst_cells: list[WorstCell] = Field(description="lowest skill over the week first "
                                         "(controls.scoring.worstCells); empty for one cell")
    candidate: CandidateAccuracy | None = Field(
        None, description="the candidate shadowed beside it (null: none)")


class ModelOut(BaseModel):
    name: str = Field(description="the model's name: its directory's in the repository")
    model_version: str
    model_dir: str
    target: str
    freq: str
    context: int
    horizon: int
    quantiles: list[float]
    calendar_tz: str
    holidays: str = Field(description="public-holiday calendar of the calendar features; "
                          "empty for none")
    holiday_reading: HolidayReading = Field(
        description="how a holiday on a working day is read: as_sunday (as a Sunday: models "
        "with horizon tokens), from_sunday (the forecast of the horizon's nearest Sunday: "
        "models without), none (no holiday calendar)")
    load_seconds: float
    runtime: dict
    recalibration: RecalibrationOut


class ModelState(BaseModel):
    """One model of the repository, as Triton's repository index lists it."""

    name: str
    state: Literal["READY", "LOADING", "UNAVAILABLE"]
    reason: str | None = Field(None, description="why it is not ready")
    default: bool = Field(description="answers the routes without a model name")
    kpi: str | None = Field(description="the KPI it forecasts (null: not readable)")
    version: str | None = Field(description="the version served (null: none loaded)")
    candidate_version: str | None = Field(
        None, description="the candidate shadowed beside it (null: none)")
    decision: int | None = Field(
        None, description="the deployment's last decision about it that this replica "
        "followed, by sequence (null: none)")
    measurement: str | None = Field(
        description="the E2SM-KPM measurement its KPI's history is filled from "
        "(controls.e2.kpis); null: none maps its KPI, and it is served over REST only")


class ReplicaModel(BaseModel):
    """What one replica serves of one model."""

    version: str | None
    candidate_version: str | None
    decision: int | None


class ReplicaOut(BaseModel):
    replica: str = Field(description="host name, process id and a random part")
    models: dict[str, ReplicaModel]


class ModelsOut(BaseModel):
    models: list[ModelState]
    replicas: list[ReplicaOut] = Field(
        [], description="every replica alive and what it serves, as it last reported")


class CandidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: str = Field(min_length=1, description="the candidate's model directory, in "
                           "controls.modelRoot")


class DecisionOut(BaseModel):
    """The deployment's decision about a model, as kept in the shared state."""

    model: str
    sequence: int
    action: Literal["load", "unload", "candidate", "drop_candidate", "promote", "rollback"]
    served_version: str | None
    candidate_version: str | None
    previous_version: str | None = Field(description="what a rollback serves again")
    reason: str = Field(description="call, or why the promotion rule promoted")
    by: str = Field(description="the replica that made it")
    at: str  # ISO 8601, UTC

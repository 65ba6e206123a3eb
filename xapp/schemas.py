"""Request and response bodies of the REST API: the service boundary, validated by pydantic."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

MAX_VALUES = 100_000  # steps in one series: a year of 5-minute samples
MAX_BATCH_ITEMS = 100_000

Kpi = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class SeriesIn(BaseModel):
    """Consecutive samples of one cell on a regular grid; ``null`` marks a missing step."""

    model_config = ConfigDict(extra="forbid")

    start: AwareDatetime = Field(description="time of values[0], with its UTC offset")
    freq: str = Field(description="grid step, e.g. 1h or 15min; must be the model's")
    values: list[Kpi | None] = Field(min_length=1, max_length=MAX_VALUES)


class ForecastRequest(SeriesIn):
    cell_id: str = Field(min_length=1, max_length=256)
    horizon: int | None = Field(
        default=None, ge=1, description="steps to forecast; default from config, at most the "
        "model's horizon",
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{
            "cell_id": "c1", "start": "2013-12-01T00:00:00+01:00", "freq": "1h",
            "values": [12.0, None, 14.0], "horizon": 24,
        }]},
    )


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[ForecastRequest] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class CellsForecastRequest(BaseModel):
    """Forecasts for cells whose history the xApp holds (from E2 or POSTed history)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"cell_ids": ["c1", "c2"], "horizon": 24}]},
    )

    cell_ids: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        min_length=1, max_length=MAX_BATCH_ITEMS)
    horizon: int | None = Field(
        default=None, ge=1, description="steps to forecast; default from config, at most the "
        "model's horizon",
    )


class ForecastResponse(BaseModel):
    cell_id: str
    forecasts: list[dict[str, float | str]] = Field(
        description="one entry per step: timestamp (ISO 8601) and one pNN key per quantile"
    )
    model_version: str | None
    source: Literal["model", "fallback"]
    reason: str | None = Field(default=None, description="why the fallback answered")
    latency_ms: float = Field(description="server-side latency, arrival to response")


class BatchResponse(BaseModel):
    items: list[ForecastResponse]
    latency_ms: float


class CellOut(BaseModel):
    cell_id: str
    steps_held: int
    first: str
    last: str


class CellsResponse(BaseModel):
    count: int
    freq: str
    history_length: int
    cells: list[CellOut]


class HistoryAccepted(BaseModel):
    cell_id: str
    kept: int = Field(description="samples stored (older than the window held are dropped)")


class CellHistoryIn(SeriesIn):
    cell_id: str = Field(min_length=1, max_length=256)


class CellsHistoryRequest(BaseModel):
    """Many cells' history at once, e.g. to seed the xApp from a PM export at roll-out."""

    model_config = ConfigDict(extra="forbid")

    items: list[CellHistoryIn] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class CellsHistoryAccepted(BaseModel):
    items: list[HistoryAccepted]


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: str | None = Field(default=None, description="default: the configured one")


class RecalibrationOut(BaseModel):
    """The offsets applied to the served model's quantiles (``model.recalibration``)."""

    model_weight: float  # the model's share of the median; the rest is the last day's
    offsets: dict[str, float]  # pNN -> offset in units of the forecast's outer band
    windows: int  # recent horizons they come from; 0: the model's own calibration
    residuals: int
    cells: int  # cells read for them
    refreshed_at: str | None  # ISO 8601, UTC


class ModelOut(BaseModel):
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
    load_seconds: float
    runtime: dict
    recalibration: RecalibrationOut


class ErrorOut(BaseModel):
    error: str
    detail: list[dict] | None = None

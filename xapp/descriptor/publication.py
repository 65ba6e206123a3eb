"""The controls of publication: each held cell's next forecast by each model, delivered after
each reporting period where the RIC's other apps look (a part of ``controls.Controls``)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from kpi_forecast.xapp.descriptor.fields import MODEL_CONFIG, ON_RESTART, ModelName, Quantile


class SdlPublication(BaseModel):
    """Forecasts written to the RIC's Shared Data Layer (the Redis of controls.historyStore's
    host, port and database): one key per model and cell, ``{namespace},<model>,<cell>``, its
    value the forecast as JSON, expiring unless the next period rewrites it."""

    model_config = MODEL_CONFIG

    enabled: bool = False
    """Write each period's forecasts to the SDL."""
    # The braces and comma delimit SDL keys ({namespace},key): not allowed inside a namespace.
    namespace: str = Field("kpi-forecast-forecasts", min_length=1, max_length=100,
                           pattern=r"^[^{},]+$")
    """SDL namespace of the forecasts (apart from the history's, so that a consumer's
    listing finds forecasts only)."""


class Trigger(BaseModel):
    """When a cell's forecast is sent over RMR: its ``quantile`` below (or above) ``level`` for
    the first ``steps`` steps of the horizon, e.g. P90 below a level for the next 6 hours (a
    low-load window an energy-saving app may switch a carrier off in), or P50 above one (a
    coming peak)."""

    model_config = MODEL_CONFIG

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    """Named in the message (its trigger field), so a consumer tells its conditions apart."""
    quantile: Quantile
    """One of the model's quantiles."""
    below: float | None = None
    """The quantile is below this level (in the KPI's unit) at each of the steps."""
    above: float | None = None
    """The quantile is above this level at each of the steps."""
    steps: int = Field(1, ge=1, le=100_000)
    """Steps from the first of the horizon the condition holds over (at most the horizon)."""

    @model_validator(mode="after")
    def _one_level(self) -> Trigger:
        if (self.below is None) == (self.above is None):
            raise ValueError("a trigger names one of below and above")
        return self


class RmrPublication(BaseModel):
    """Forecasts sent as RMR messages (type KPI_FORECAST, 30200; the document's JSON) to
    whoever the RIC's route table names; a consumer may answer each with KPI_FORECAST_ACK
    (30201), which is counted and never waited for."""

    model_config = MODEL_CONFIG

    enabled: bool = False
    """Send each period's forecasts over RMR (on the rmr-data port)."""
    triggers: dict[ModelName, list[Trigger]] = Field(
        {}, json_schema_extra={"additionalProperties": False})
    """A model's triggers, by its name: a cell's forecast is sent once per trigger it meets
    (and not otherwise). A model not named here: every cell's forecast, every period."""


class InfluxPublication(BaseModel):
    """Forecasts written back to the RIC's InfluxDB, beside the reports they forecast (for
    Grafana): a point per cell and step, tagged model and cell_id, a field per quantile."""

    model_config = MODEL_CONFIG

    url: str | None = Field(None, pattern=r"^influx://[^/?#]+/[^/?#]+\?measurement=[^&#]+$")
    """Where: influx://[USER:PASSWORD@]HOST:PORT/DATABASE?measurement=NAME; null: not
    written."""


class Publication(BaseModel):
    """After each reporting period (once the history holds a report of a later step), each
    held cell's forecast of the model's horizon from that step, made as a request is
    answered (the recalibration in force; the fallback while the guard holds; cells an A1
    policy excludes left out), by one replica, delivered to each destination enabled."""

    model_config = MODEL_CONFIG

    sdl: SdlPublication = Field(SdlPublication(), json_schema_extra=ON_RESTART)
    rmr: RmrPublication = Field(RmrPublication(), json_schema_extra=ON_RESTART)
    influx: InfluxPublication = Field(InfluxPublication(), json_schema_extra=ON_RESTART)
    ttl_periods: int = Field(2, ge=1, le=10_000)
    """A publication expires after this many of the model's steps unless renewed: a consumer
    finds no forecast, rather than a stale one, once publication stops."""
    max_cells: int = Field(100_000, ge=1, le=10_000_000)
    """Most cells a period publishes: the most recently reported ones."""


"""The controls of publication: each held cell's next forecast by each model, delivered after
each reporting period where the RIC's other apps look (a part of ``controls.Controls``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from kpi_forecast.xapp.descriptor.fields import MODEL_CONFIG, ON_RESTART


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


class Publication(BaseModel):
    """After each reporting period (once the history holds a report of a later step), each
    held cell's forecast of the model's horizon from that step, made as a request is
    answered (the recalibration in force; the fallback while the guard holds; cells an A1
    policy excludes left out), by one replica, delivered to each destination enabled."""

    model_config = MODEL_CONFIG

    sdl: SdlPublication = Field(SdlPublication(), json_schema_extra=ON_RESTART)
    ttl_periods: int = Field(2, ge=1, le=10_000)
    """A publication expires after this many of the model's steps unless renewed: a consumer
    finds no forecast, rather than a stale one, once publication stops."""
    max_cells: int = Field(100_000, ge=1, le=10_000_000)
    """Most cells a period publishes: the most recently reported ones."""

    @property
    def enabled(self) -> bool:
        return self.sdl.enabled

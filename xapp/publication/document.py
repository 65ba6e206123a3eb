"""What a publication delivers: one cell's next forecast by one model, the same JSON however it
travels (an SDL value, an RMR payload). ``PublishedForecast`` is the contract (its schema is
in the docs' reference); ``Forecasts.documents`` builds the JSON of a round's cells directly, as
the forecast routes build their answers, without validating checked parts again."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import orjson
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

DECIMALS = 4  # as the forecast routes answer: a tenth of a thousandth of any KPI unit


class PublishedForecast(BaseModel):
    """One cell's forecast by one model, published after a reporting period."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "cell_id": "cell-0017", "model": "traffic_mb", "kpi": "traffic_mb", "unit": "MB",
        "model_version": "20261206T101500Z-3f2a9c1d", "source": "model", "reason": None,
        "made_at": "2026-12-07T10:00:02.118000+00:00", "freq": "1h",
        "forecasts": [{"timestamp": "2026-12-07T10:00:00+00:00", "p10": 41.2, "p50": 55.9,
                       "p90": 73.4}]}]})

    cell_id: str
    model: str = Field(description="the model's name (its directory in the repository)")
    kpi: str = Field(description="the KPI forecast: the model's target column")
    unit: str = Field(description="the KPI's unit, from controls.e2.kpis (empty: not mapped)")
    model_version: str
    source: Literal["model", "fallback"]
    reason: str | None = Field(description="why the fallback answered: live_skill (the "
                               "model's guard) or model_error")
    made_at: str = Field(description="when the forecast was made (ISO 8601, UTC)")
    freq: str = Field(description="the step between the forecast's timestamps")
    forecasts: list[dict[str, float | str]] = Field(
        description="one entry per step from the newest step reported (which may still be "
                    "filling): its timestamp (ISO 8601, UTC) and one pNN key per quantile")


@dataclass(frozen=True)
class Forecasts:
    """One model's forecasts of one period: every cell's from the same first step."""

    model: str
    kpi: str
    unit: str
    model_version: str
    source: Literal["model", "fallback"]
    reason: str | None
    first_step: pd.Timestamp  # of every cell's forecast, UTC
    freq: str
    names: Sequence[str]  # pNN of each quantile column
    made_at: dt.datetime
    cells: Sequence[str]
    quantiles: np.ndarray  # [cells, horizon, quantiles]

    @property
    def step_ns(self) -> int:
        return pd.Timedelta(self.freq).value

    def timestamps(self) -> list[str]:
        return [pd.Timestamp(self.first_step.value + k * self.step_ns, tz="UTC").isoformat()
                for k in range(self.quantiles.shape[1])]

    @functools.cached_property
    def documents(self) -> list[bytes]:
        """Each cell's ``PublishedForecast``, as JSON: built once, by the first to ask (the
        publisher, off the event loop), for every destination. The text every cell's document
        shares (its fields, each step's timestamp and keys) is laid out once, and each cell's
        numbers put in it: encoding a dict per step and cell cost several times as much at
        10^4 cells a period. A number that is not finite, which JSON cannot hold, is null."""
        common = orjson.dumps({
            "model": self.model, "kpi": self.kpi, "unit": self.unit,
            "model_version": self.model_version, "source": self.source, "reason": self.reason,
            "made_at": self.made_at.isoformat(), "freq": self.freq})[1:-1].decode()
        common = common.replace("%", "%%")  # the layout's own text: a unit may be "%"
        points = ",".join('{"timestamp":"' + stamp + '",' + ",".join(
            f'"{name}":%s' for name in self.names) + "}" for stamp in self.timestamps())
        layout = '{"cell_id":%s,' + common + ',"forecasts":[' + points + "]}"
        rows = np.round(self.quantiles.astype(np.float64), DECIMALS)
        numbers = rows.reshape(len(rows), -1).tolist()
        if not np.isfinite(rows).all():
            numbers = [[v if np.isfinite(v) else None for v in row] for row in numbers]
        return [(layout % (orjson.dumps(cell).decode(), *map(_number, row))).encode()
                for cell, row in zip(self.cells, numbers, strict=True)]


def _number(value: float | None) -> str:
    return "null" if value is None else repr(value)

"""Forecasts written back to the RIC's InfluxDB, beside the cell reports they forecast, for
Grafana to chart them together: each round's forecasts as points of one measurement
(``publication.influx.url``, ``influx://HOST:PORT/DATABASE?measurement=M``), one per cell and
step, tagged ``model`` and ``cell_id``, a field per quantile (``p10``, ``p50``, ...) and
``made_at``, at the step's time. A later period's forecast of a step replaces the earlier one
(InfluxDB keeps one point per series and time), so the measurement holds the newest forecast of
every step. Written over the HTTP API (line protocol) in one request per round."""

from __future__ import annotations

import asyncio

import numpy as np

from kpi_forecast.data.influx import InfluxSource
from kpi_forecast.data.panel import DataError
from kpi_forecast.xapp.publication.document import Forecasts
from kpi_forecast.xapp.publication.publisher import Delivery


def _tag(text: str) -> str:
    """A tag key or value in line protocol: commas, equals signs and spaces escaped."""
    for char in "\\,= ":
        text = text.replace(char, "\\" + char)
    return text


class InfluxForecasts:
    """The InfluxDB destination of ``publisher.Publisher``."""

    name = "influx"

    def __init__(self, url: str) -> None:
        self.target = InfluxSource.parse(url, cell_needed=False)

    def lines(self, forecasts: Forecasts) -> bytes:
        """The round's points in line protocol."""
        step_ns = forecasts.step_ns
        first = forecasts.first_step.value
        made_at = forecasts.made_at.isoformat()
        head = f"{_tag(self.target.measurement)},model={_tag(forecasts.model)},cell_id="
        names = list(forecasts.names)
        rows = np.round(forecasts.quantiles.astype(np.float64), 4)
        out = []
        for cell, steps in zip(forecasts.cells, rows, strict=True):
            series = head + _tag(cell)
            for k, values in enumerate(steps):
                fields = ",".join(f"{n}={v!r}" for n, v in zip(names, values.tolist(),
                                                                strict=True))
                out.append(f'{series} {fields},made_at="{made_at}" {first + k * step_ns}')
        return "\n".join(out).encode()

    async def publish(self, forecasts: Forecasts, ttl_s: float) -> Delivery:
        try:
            await asyncio.to_thread(self.target.write, self.lines(forecasts))
        except DataError as exc:
            raise OSError(str(exc)) from None
        return Delivery(len(forecasts.cells))

    async def close(self) -> None:
        pass

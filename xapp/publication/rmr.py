"""Forecasts as RMR messages: each cell's ``PublishedForecast`` as the JSON payload of a
KPI_FORECAST message (30200), routed by the RIC's route table to whoever consumes it, as
traffic steering receives predictions. A model's triggers (``publication.rmr.triggers``) send
only the cells whose forecast meets one, once per trigger met, the document naming it in
``trigger``; a model without triggers sends every cell. A consumer may answer with
KPI_FORECAST_ACK (30201, JSON naming the cell and model): counted, never waited for."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import orjson

from kpi_forecast.xapp.descriptor.publication import Trigger
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.publication.document import Forecasts
from kpi_forecast.xapp.publication.publisher import Delivery
from kpi_forecast.xapp.ric.transport import KPI_FORECAST, Frame, Transport
from kpi_forecast.xapp.serving.forecasting import quantile_name

log = logging.getLogger(__name__)


def met(forecasts: Forecasts, trigger: Trigger) -> np.ndarray:
    """Which cells' forecasts meet ``trigger`` (a mask over ``forecasts.cells``); none where
    the model has not its quantile."""
    name = quantile_name(trigger.quantile)
    if name not in forecasts.names or trigger.steps > forecasts.quantiles.shape[1]:
        return np.zeros(len(forecasts.cells), bool)
    values = forecasts.quantiles[:, :trigger.steps, list(forecasts.names).index(name)]
    held = values < trigger.below if trigger.below is not None else values > trigger.above
    return held.all(axis=1)


class RmrForecasts:
    """The RMR destination of ``publisher.Publisher``."""

    name = "rmr"

    def __init__(self, transport: Transport, triggers: Mapping[str, Sequence[Trigger]],
                 metrics: Metrics) -> None:
        self._transport = transport
        self._triggers = triggers
        self.metrics = metrics

    def frames(self, forecasts: Forecasts) -> list[Frame]:
        """The messages of a round: every cell's, or one per trigger a cell meets."""
        documents = forecasts.documents
        triggers = self._triggers.get(forecasts.model)
        if not triggers:
            return [Frame(KPI_FORECAST, -1, document) for document in documents]
        frames = []
        for trigger in triggers:
            for row in np.flatnonzero(met(forecasts, trigger)):
                payload = orjson.loads(documents[row])
                payload["trigger"] = trigger.name
                frames.append(Frame(KPI_FORECAST, -1, orjson.dumps(payload)))
        return frames

    async def publish(self, forecasts: Forecasts, ttl_s: float) -> Delivery:
        frames = self.frames(forecasts)
        sent, error = await self._transport.route_many(frames)
        return Delivery(sent, len(frames) - sent, None if error is None else str(error))

    async def acknowledged(self, frame: Frame) -> None:
        """A consumer's KPI_FORECAST_ACK: counted by model; one that cannot be read too."""
        try:
            model = str(json.loads(frame.payload)["model"])
        except (ValueError, KeyError, TypeError):
            model = "unknown"
        self.metrics.publication_acks.labels(model=model).inc()

    async def close(self) -> None:
        pass  # the transport is the RMR endpoint's, closed with it

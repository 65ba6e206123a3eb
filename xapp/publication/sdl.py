"""Forecasts in the RIC's Shared Data Layer: each cell's ``PublishedForecast`` by each model
under ``{namespace},<model>,<cell>``, as O-RAN SC's SDL clients key and read values (ricsdl's
``SyncStorage.get(namespace, {"<model>,<cell>"})``, sdlgo's ``Get``), with a TTL. A round is
one pipeline of SETs: one write per cell and model per period."""

from __future__ import annotations

import os
from collections.abc import Mapping

import redis.asyncio as aioredis

from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.publication.document import Forecasts
from kpi_forecast.xapp.publication.publisher import Delivery
from kpi_forecast.xapp.store.sdl import connect, errors


def key(model: str, cell_id: str) -> str:
    """A forecast's key within the namespace."""
    return f"{model},{cell_id}"


class SdlForecasts:
    """The SDL destination of ``publisher.Publisher``."""

    name = "sdl"

    def __init__(self, client: aioredis.Redis, namespace: str) -> None:
        self._redis = client
        self._prefix = f"{{{namespace}}},"

    @classmethod
    def open(cls, settings: HistoryStore, namespace: str,
             environ: Mapping[str, str] = os.environ) -> SdlForecasts:
        """On the Redis of the history's settings (or of the RIC's DBAAS variables)."""
        return cls(connect(settings, environ), namespace)

    async def publish(self, forecasts: Forecasts, ttl_s: float) -> Delivery:
        ttl_ms = max(1, round(ttl_s * 1000))
        async with (errors(f"publishing the forecasts of {forecasts.model} to the SDL"),
                    self._redis.pipeline(transaction=False) as pipe):
            for cell, document in zip(forecasts.cells, forecasts.documents, strict=True):
                pipe.set(self._prefix + key(forecasts.model, cell), document, px=ttl_ms)
            await pipe.execute()
        return Delivery(len(forecasts.cells))

    async def close(self) -> None:
        await self._redis.aclose()

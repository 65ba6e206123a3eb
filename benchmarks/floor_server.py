"""The least a single-cell forecast server does with the model: the yardstick between the
no-op handler (``benchmarks.noop_server``) and the xApp.

The same server (`xapp.server.run`) and framework as both, and the same route: its handler
parses the body with the xApp's request model, gathers the requests that arrive together into
one call of the model's contract (``OnnxForecaster.forecast``: the window, the calendar, the
graph) in a worker thread, so that the event loop keeps reading, and answers the quantiles
and their timestamps in the xApp's shape, encoded by orjson. Nothing else: no admission, no
latency budget or fallback, no A1 policy, no metrics, no model repository. What it takes
beyond the no-op, under the same load, is what any server pays for this model on this machine;
what the xApp takes beyond it is the cost of its own layers.

    python -m benchmarks.floor_server MODEL_DIR PRECISION PORT
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import orjson
import pandas as pd
from fastapi import FastAPI, Request, Response

from kpi_forecast.model.artifact import Precision
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions
from kpi_forecast.xapp.http.schemas import ForecastRequest
from kpi_forecast.xapp.server import run
from kpi_forecast.xapp.serving.forecasting import quantile_name

DECIMALS = 4  # the xApp's rounding of the quantiles it answers


@functools.lru_cache(maxsize=256)
def timestamps(last: dt.datetime, step: dt.timedelta, horizon: int) -> tuple[str, ...]:
    """The forecast steps' ISO timestamps after ``last``, in its zone, added in UTC."""
    utc = last.astimezone(dt.UTC)
    return tuple((utc + (k + 1) * step).astimezone(last.tzinfo).isoformat()
                 for k in range(horizon))


@dataclass
class Burst:
    """The requests of one burst: each its history [1, n], last step and answer's future."""

    model: OnnxForecaster
    worker: ThreadPoolExecutor
    histories: list[np.ndarray] = field(default_factory=list)
    last: list[pd.Timestamp] = field(default_factory=list)
    futures: list[asyncio.Future[np.ndarray]] = field(default_factory=list)

    async def call(self) -> None:
        """Wait while requests keep joining (two passes of the loop: one reads the sockets,
        the next runs their handlers), then answer them all from one model call."""
        joined = -1
        while len(self.futures) != joined:
            joined = len(self.futures)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        histories, last, futures = self.histories, self.last, self.futures
        self.histories, self.last, self.futures = [], [], []
        quantiles = await asyncio.get_running_loop().run_in_executor(
            self.worker, self.model.forecast, histories, pd.DatetimeIndex(last))
        for row, future in enumerate(futures):
            future.set_result(quantiles[row])

    def join(self, history: np.ndarray, last: pd.Timestamp) -> asyncio.Future[np.ndarray]:
        future = asyncio.get_running_loop().create_future()
        self.histories.append(history)
        self.last.append(last)
        self.futures.append(future)
        if len(self.futures) == 1:  # the burst's first request starts its call
            asyncio.ensure_future(self.call())
        return future


def create_app(model_dir: str, precision: Precision) -> FastAPI:
    model = OnnxForecaster(model_dir, RuntimeOptions(precision=precision))
    step = model.step.to_pytimedelta()
    keys = ("timestamp", *(quantile_name(q) for q in model.metadata.quantiles))
    burst = Burst(model, ThreadPoolExecutor(1, "model"))
    app = FastAPI()

    @app.post("/v1/forecast")
    async def forecast(request: Request) -> Response:
        body = ForecastRequest.model_validate_json(await request.body())
        history = np.array([np.nan if v is None else v for v in body.values], np.float32)
        last = body.start + (len(body.values) - 1) * step
        quantiles = await burst.join(history[None], pd.Timestamp(last).tz_convert("UTC"))
        rows = np.round(quantiles[: body.horizon].astype(np.float64), DECIMALS).tolist()
        points = [dict(zip(keys, (stamp, *row), strict=True))
                  for stamp, row in zip(timestamps(last, step, len(rows)), rows, strict=True)]
        return Response(orjson.dumps({
            "cell_id": body.cell_id, "forecasts": points,
            "model_version": model.metadata.model_version, "source": "model", "reason": None,
            "latency_ms": 0.0}), media_type="application/json")

    @app.get("/ric/v1/health/ready")
    async def ready() -> dict:
        return {"status": "ready"}

    return app


if __name__ == "__main__":
    run(create_app(sys.argv[1], sys.argv[2]), "127.0.0.1", int(sys.argv[3]))  # type: ignore[arg-type]

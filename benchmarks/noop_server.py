"""The serving stack with nothing behind it: the yardstick of the xApp's own cost.

The same server (`xapp.server.run`: uvicorn with uvloop and httptools, one process), the same
framework (FastAPI) and the same route, whose handler reads the body and answers a stored
forecast of the default model's size without parsing, forecasting or encoding anything. What
`kpi-forecast serve` takes beyond this, under the same load, is the serving path's own cost.

    python -m benchmarks.noop_server ANSWER_FILE PORT
"""

from __future__ import annotations

import sys
from pathlib import Path

from fastapi import FastAPI, Request, Response

from kpi_forecast.xapp.server import run


def create_app(answer: bytes) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/forecast")
    async def forecast(request: Request) -> Response:
        await request.body()
        return Response(answer, media_type="application/json")

    @app.get("/ric/v1/health/ready")
    async def ready() -> dict:
        return {"status": "ready"}

    return app


if __name__ == "__main__":
    run(create_app(Path(sys.argv[1]).read_bytes()), "127.0.0.1", int(sys.argv[2]))

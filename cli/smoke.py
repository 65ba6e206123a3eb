"""Start the xApp on a model directory or a repository, ask each model for one cell's
forecast, stop it.

A smoke test of freshly trained models as a user would query them (`make demo` ends with it):

    python -m kpi_forecast.cli.smoke MODEL_DIR_OR_REPOSITORY DATA_FILE [--port 18080]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.artifact import METADATA_FILE, load_metadata, models_at


def wait_ready(url: str, server: subprocess.Popen, seconds: float = 60.0) -> bool:
    """Poll the readiness probe until it answers 200; False if the process dies or times out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"{url}/ric/v1/health/ready").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


def request_for(model_dir: Path, data: Path) -> dict:
    """A forecast request of the data's first cell, the model's context long, of its KPI."""
    meta = load_metadata(model_dir)
    panel = load_panel(data, meta.target, freq=meta.freq, tz=meta.calendar_tz)
    history = panel.values[0, -meta.context :]
    start = panel.index[-meta.context].tz_convert(meta.calendar_tz).isoformat()
    return {"cell_id": panel.cell_ids[0], "start": start, "freq": meta.freq,
            "values": [None if np.isnan(v) else round(float(v), 3) for v in history]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a model directory or a repository of them")
    parser.add_argument("data", type=Path)
    parser.add_argument("--port", type=int, default=18080)
    args = parser.parse_args()
    models = models_at(args.model)
    one = (args.model / METADATA_FILE).is_file()
    requests = {name: request_for(model_dir, args.data) for name, model_dir in models.items()}
    url = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "kpi_forecast.cli", "serve", "--model" if one else "--models",
         str(args.model), "--host", "127.0.0.1", "--port", str(args.port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        if not wait_ready(url, server):
            print(server.stderr.read(), file=sys.stderr)
            return 1
        for name, request in requests.items():
            route = "/v1/forecast" if one else f"/v1/models/{name}/forecast"
            print(f"$ curl -X POST {url}{route} -d '{{\"cell_id\": \"{request['cell_id']}\", "
                  f"\"start\": \"{request['start']}\", \"freq\": \"{request['freq']}\", "
                  f"\"values\": [{len(request['values'])} values]}}'")
            answer = httpx.post(f"{url}{route}", json=request).json()
            shown = {**answer, "forecasts": answer["forecasts"][:3] + ["..."]}
            print(json.dumps(shown, indent=2))
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

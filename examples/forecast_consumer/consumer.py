"""An xApp that consumes kpi-forecast's forecasts over RMR, built on O-RAN SC's Python xApp
framework (ricxappframe): it takes each KPI_FORECAST message (30200), prints its JSON on one
line, and answers it with KPI_FORECAST_ACK (30201) to its sender. A real consumer acts on it:
an energy-saving app switches a carrier off for a forecast low-load window.

    python consumer.py --rmr-port 4590            # librmr on LD_LIBRARY_PATH, a route table
                                                  # in RMR_SEED_RT (or from the routing manager)

SIGTERM stops it as ricxappframe stops an xApp: it deregisters from the appmgr and waits 10 s.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import threading

from ricxappframe.rmr import rmr
from ricxappframe.xapp_frame import RMRXapp

KPI_FORECAST = 30200
KPI_FORECAST_ACK = 30201


def on_forecast(xapp: RMRXapp, summary: dict, sbuf, acknowledge: bool = True) -> None:
    """A forecast: printed, then acknowledged, naming the cell, model and when it was made."""
    forecast = json.loads(summary[rmr.RMR_MS_PAYLOAD])
    print(json.dumps(forecast), flush=True)
    if acknowledge:
        ack = {key: forecast[key] for key in ("cell_id", "model", "made_at")}
        xapp.rmr_rts(sbuf, new_payload=json.dumps(ack).encode(), new_mtype=KPI_FORECAST_ACK)
    xapp.rmr_free(sbuf)


def on_other(xapp: RMRXapp, summary: dict, sbuf) -> None:
    xapp.rmr_free(sbuf)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rmr-port", type=int, default=4590, help="RMR port to listen on")
    parser.add_argument("--no-ack", action="store_true",
                        help="take the forecasts without acknowledging them (it is optional)")
    args = parser.parse_args()
    stop = threading.Event()
    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, lambda *_: stop.set())
    xapp = RMRXapp(on_other, rmr_port=args.rmr_port, use_fake_sdl=True)
    xapp.register_callback(functools.partial(on_forecast, acknowledge=not args.no_ack),
                           KPI_FORECAST)
    xapp.run(thread=True, rmr_timeout=1)
    print(f"listening for KPI_FORECAST on RMR port {args.rmr_port}", file=sys.stderr, flush=True)
    stop.wait()
    xapp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`kpi-forecast serve`: the xApp's command line (the process itself: ``xapp/server.py``, imported
when the command runs, so that the other commands need no serving dependencies)."""

from __future__ import annotations

import argparse


def cmd_serve(args: argparse.Namespace) -> None:
    from kpi_forecast.xapp.server import serve

    serve(args.model, args.config, args.host, args.port, args.submgr, args.e2_port, args.a1,
          args.e2_client_host, args.e2mgr, args.models)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """serve."""
    xapp = commands.add_parser("serve", help="run the xApp: forecasts over RIC-style REST")
    source = xapp.add_mutually_exclusive_group()
    source.add_argument("--model", help="model directory: the one model served (default: "
                        "controls.modelDir)")
    source.add_argument("--models", metavar="DIR", help="model repository: one model per "
                        "subdirectory, named by it (kpi-forecast train --target a,b writes one; "
                        "default: controls.modelRepository)")
    xapp.add_argument("--config", help="xApp descriptor config-file.json (default: $CONFIG_FILE, "
                      "$XAPP_DESCRIPTOR_PATH/config-file.json, else the packaged one)")
    xapp.add_argument("--host", default="0.0.0.0")
    xapp.add_argument("--port", type=int, default=8080)
    xapp.add_argument("--submgr", metavar="URL", help="the subscription manager's REST base "
                      "(.../ric/v1): subscribe to the E2 nodes' KPIs")
    xapp.add_argument("--e2mgr", metavar="URL", help="the E2 Manager's REST base (.../v1), "
                      "where the E2 nodes and their cells are listed (default: controls.e2)")
    xapp.add_argument("--e2-port", type=int, help="rmr-data port for E2 frames (default 4560)")
    xapp.add_argument("--e2-client-host", metavar="HOST",
                      help="where the E2 side sends this replica's frames (the chart passes "
                           "the pod's IP: each replica receives its own nodes' reports)")
    xapp.add_argument("--a1", action="store_true",
                      help="take A1 policies over RMR on the rmr-data port (controls.a1)")
    xapp.set_defaults(run=cmd_serve)

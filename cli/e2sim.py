"""`kpi-forecast e2sim`: a mock E2 node that replays a KPI file (or synthetic load) over E2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from kpi_forecast.data.panel import DataError
from kpi_forecast.model.errors import UserError


def parse_faults(text: str) -> dict[str, float]:
    from kpi_forecast.cli.mock_e2_node import FAULTS

    faults = {}
    for item in filter(None, text.split(",")):
        name, _, probability = item.partition("=")
        if name not in FAULTS:
            raise argparse.ArgumentTypeError(f"unknown fault {name!r}; known: {FAULTS}")
        try:
            faults[name] = float(probability)
        except ValueError:
            raise argparse.ArgumentTypeError(f"fault {name}: {probability!r} is not a "
                                             "probability") from None
    return faults


def synthetic_panel(column: str, cells: int, seed: int):  # -> Panel
    """Seeded synthetic load from two weeks ago to two weeks ahead: the node catches up on the
    past (history for the model), then sends the rest live, as it happens."""
    import tempfile

    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.data.synthetic import generate

    start = (pd.Timestamp.now(tz="UTC") - pd.Timedelta("14D")).floor("D")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.csv"
        generate(n_cells=cells, days=28, seed=seed, start=str(start.date()), tz="UTC").to_csv(
            path, index=False)
        return load_panel(path, column)


def cmd_e2sim(args: argparse.Namespace) -> None:
    from kpi_forecast.cli.mock_e2_node import MockE2Node
    from kpi_forecast.cli.mock_ric import create_app
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.xapp.ric.rmr import RmrTransport

    pairs = [kpi.partition("=") for kpi in args.kpi]
    for (column, _, measurement), text in zip(pairs, args.kpi, strict=True):
        if not column or not measurement:
            raise UserError(f"--kpi {text!r}: write COLUMN=MEASUREMENT, e.g. "
                            "prb_util=RRU.PrbTotDl")
    live_from = None
    panels = []
    for column, _, _ in pairs:
        if args.data == "synthetic":
            panel = synthetic_panel(column, args.cells or 24, args.seed)
            live_from = int(panel.index.searchsorted(pd.Timestamp.now(tz="UTC")))
        else:
            panel = load_panel(args.data, column, freq=args.freq)
        panels.append(panel.first_cells(args.cells) if args.cells else panel)
    panel = panels[0]
    for other, (column, _, _) in zip(panels[1:], pairs[1:], strict=True):
        if other.cell_ids != panel.cell_ids or not other.index.equals(panel.index):
            raise DataError(f"{args.data}: column {column} covers other cells or times than "
                            f"{pairs[0][0]}; give each KPI its own mock node")
    measurement = pairs[0][2]
    extra = {name: other.values for other, (_, _, name) in zip(panels[1:], pairs[1:],
                                                               strict=True)}
    step = {name: panel.index.searchsorted(pd.Timestamp(value), side="left")
            for name, value in (("start", args.start), ("end", args.end)) if value}
    from kpi_forecast.xapp.server import run

    host, _, port = args.listen.rpartition(":")
    node = MockE2Node(panel, measurement, RmrTransport(args.rmr_port), extra=extra,
                      cells_per_node=args.cells_per_node, speed=args.speed,
                      pace_ms=args.period_ms, start=int(step.get("start", 0)),
                      end=int(step["end"]) if "end" in step else None, faults=args.faults,
                      seed=args.seed, live_from=live_from, wall_clock=args.wall_clock,
                      catch_up_rate=args.catch_up_rate, cells_from=args.cells_from,
                      kpm_version=args.kpm_version)
    reported = ", ".join(f"{column} as {name}" for column, _, name in pairs)
    names = ", ".join(f"{cell} is {name}" for cell, name in
                      zip(panel.cell_ids[:3], node.cell_ids, strict=False))
    print(f"mock E2 node: {panel.n_cells} cells in {len(node.node_names())} node(s), "
          f"{reported}; E2 Manager API on http://{args.listen}/v1, subscription API on "
          f"http://{args.listen}/ric/v1, RMR on port {args.rmr_port}; cells named as e2mgr "
          f"names them: {names}{', ...' if panel.n_cells > 3 else ''}")
    # Nothing lingers to wait for: a subscription is answered at once, the rest is background.
    run(create_app(node), host or "127.0.0.1", int(port), graceful_s=2.0)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """e2sim."""
    sim = commands.add_parser("e2sim", help="mock E2 node: replay a KPI file over E2")
    sim.add_argument("--data", required=True, help="long CSV, CSV.gz or Parquet, or "
                     "'synthetic': two weeks of seeded history, caught up on, then live load")
    sim.add_argument("--kpi", required=True, action="append", help="COLUMN=MEASUREMENT, "
                     "e.g. prb_util=RRU.PrbTotDl (a TS 28.552 name); repeat for more KPIs")
    sim.add_argument("--listen", default="127.0.0.1:8090", help="subscription API HOST:PORT")
    sim.add_argument("--rmr-port", type=int, default=38000, help="the port librmr sends from "
                     "(default 38000, the E2 termination's rmr-data port on a RIC)")
    sim.add_argument("--freq", help="grid step of the file (inferred when absent)")
    sim.add_argument("--start", help="first timestamp replayed")
    sim.add_argument("--end", help="timestamp where the replay stops")
    sim.add_argument("--speed", type=float, default=1.0,
                     help="replay speed against real time; 0: as fast as possible")
    sim.add_argument("--period-ms", type=float, help="wall-clock ms between reports "
                     "(overrides --speed)")
    sim.add_argument("--wall-clock", action="store_true", help="report as a live node does: "
                     "each period's values when it ends by this machine's clock, a new "
                     "subscription from the next period on (the file's times must span now)")
    sim.add_argument("--catch-up-rate", type=float, default=5000.0, metavar="N",
                     help="with --data synthetic: reports a second, over all subscriptions, "
                          "while the history is sent, as a node catching up sends its backlog "
                          "(default 5000)")
    sim.add_argument("--cells", type=int, help="replay only the first N cells")
    sim.add_argument("--cells-per-node", type=int, default=8)
    sim.add_argument("--cells-from", choices=("served", "f1", "none"), default="served",
                     help="where the E2 Manager shows each node's cells: servedNrCells (as "
                          "after an EN-DC setup or an operator's PUT), the F1 Setup Request "
                          "of its E2 setup (gnb.nodeConfigs), or nowhere (the node reports "
                          "as a whole)")
    sim.add_argument("--kpm-version", type=int, choices=(2, 3), default=3,
                     help="the E2SM-KPM version the nodes declare: 2 (its RAN function "
                          "description lists the cells; 4-octet report times) or 3 (and later)")
    sim.add_argument("--faults", type=parse_faults, default={},
                     help="e.g. malformed=0.01,duplicate=0.01,late=0.01,gap=0.01")
    sim.add_argument("--seed", type=int, default=0)
    sim.set_defaults(run=cmd_e2sim)

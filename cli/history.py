"""`kpi-forecast history export`: what the xApp holds of a KPI, from the RIC's Redis, as the
training input (``timestamp``, ``cell_id`` and the KPI's column, Parquet): retrain on the
cells' own recent history with ``kpi-forecast train --data FILE --target KPI``. The store's
settings come from the xApp's descriptor, as the replicas read them."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pandas as pd

from kpi_forecast.model.errors import UserError


async def _held(config: str | None, kpi: str) -> tuple[pd.DataFrame, str]:
    from kpi_forecast.xapp.descriptor.config_file import descriptor_path, load_descriptor
    from kpi_forecast.xapp.store.cell_history import HistoryError, HistoryUnavailable
    from kpi_forecast.xapp.store.sdl import RedisCellHistory, address

    path = descriptor_path(config)
    controls = load_descriptor(path).controls
    settings = controls.history_store
    if settings.backend != "redis":
        raise UserError(f"{path}: controls.historyStore.backend is {settings.backend}: the "
                        "history lives in each replica's memory; export needs the shared "
                        "history (backend redis)")
    host, port = address(settings)
    where = f"history store {host}:{port} (namespace {settings.namespace})"
    source = controls.e2.kpis.get(kpi)
    try:
        store = await RedisCellHistory.existing(settings, kpi, controls.history_length,
                                                source.aggregate if source else "mean")
        try:
            return await store.held(), f"{where}, {store.freq} grid"
        finally:
            await store.close()
    except (HistoryError, HistoryUnavailable) as exc:
        raise UserError(f"{where}: {exc}") from None


def cmd_export(args: argparse.Namespace) -> None:
    frame, source = asyncio.run(_held(args.config, args.kpi))
    out = Path(args.out)
    try:
        frame.to_parquet(out, index=False)
    except OSError as exc:
        raise UserError(f"{out}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {len(frame)} values of {frame['cell_id'].nunique()} cells ({args.kpi}) from "
          f"the {source} to {out}")


def add_commands(commands: argparse._SubParsersAction) -> None:
    """history export."""
    history = commands.add_parser("history", help="the history the xApp holds")
    verbs = history.add_subparsers(dest="history_command", required=True)
    export = verbs.add_parser("export", help="a KPI's history from the RIC's Redis, as the "
                              "training input (Parquet)")
    export.add_argument("--kpi", required=True, help="the KPI (a model's target)")
    export.add_argument("--out", required=True, help="Parquet file to write")
    export.add_argument("--config", help="xApp descriptor config-file.json, whose "
                        "controls.historyStore names the Redis (default: $CONFIG_FILE, "
                        "$XAPP_DESCRIPTOR_PATH/config-file.json, else the packaged one)")
    export.set_defaults(run=cmd_export)

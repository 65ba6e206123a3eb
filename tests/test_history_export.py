"""`kpi-forecast history export`: what the xApp holds of a KPI in the RIC's Redis, written as
the training input, read back by the training's own reader; bad settings in one line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.ports import free_port
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME
from tests.processes import BIN, ROOT
from tests.readme import blocks
from tests.redis_server import redis_server
from tests.test_shared_history import redis_store
from tests.xapp_helpers import descriptor, make_model, running

KPI = "kpi"  # the test model's target


def export(config: Path, out: Path, kpi: str = KPI) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kpi-forecast"), "history", "export", "--config",
                           str(config), "--kpi", kpi, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)


def test_the_pages_retraining_block_exports_what_the_replicas_hold_and_trains_on_it(
        tmp_path: Path) -> None:
    """docs/accuracy.md's block, as printed, on the sample's last four weeks of three cells
    written into a replica's shared history."""
    [block] = [b for b in blocks(ROOT / "docs" / "accuracy.md") if b.language == "bash"]
    sample = load_panel(ROOT / "data/sample/cells_hourly.csv.gz", "prb_util")
    length = 672  # the descriptor's historyLength
    values, start = sample.values[:3, -length:], sample.index[-length]
    with redis_server(tmp_path) as port:
        model = make_model(tmp_path / "model", target="prb_util")
        desc = descriptor(tmp_path, model, historyStore=redis_store(port, "export"))

        async def write() -> None:
            async with running(desc) as client:
                items = [{"cell_id": cell, "start": start.isoformat(), "freq": "1h",
                          "values": [None if np.isnan(v) else float(v) for v in row]}
                         for cell, row in zip(sample.cell_ids[:3], values, strict=True)]
                response = await client.post("/v1/cells/history", json={"items": items})
                assert response.status_code == 200, response.text

        asyncio.run(write())
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, env={
                                  **os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
                                  "CONFIG_FILE": str(tmp_path / "config" / CONFIG_FILE_NAME)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {np.count_nonzero(~np.isnan(values))} values of 3 "
                                  "cells (prb_util)"), done.stdout
    frame = pd.read_parquet(tmp_path / "recent.parquet")
    assert list(frame.columns) == ["timestamp", "cell_id", "prb_util"]
    held = load_panel(tmp_path / "recent.parquet", "prb_util")
    assert held.cell_ids == sample.cell_ids[:3] and held.freq == "1h"
    first = int(np.argmax(~np.isnan(values).all(axis=0)))  # the export's first observed step
    assert held.index[0] == sample.index[-length + first]
    np.testing.assert_allclose(held.values, values[:, first:], rtol=1e-6)
    trained = json.loads((tmp_path / "models" / "prb-recent" / "metadata.json").read_text())
    assert trained["target"] == "prb_util" and trained["freq"] == "1h"


def test_what_cannot_be_exported_is_said_in_one_line(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    memory = descriptor(tmp_path / "memory", model)
    unreachable = descriptor(tmp_path / "away", model,
                             historyStore=redis_store(free_port(), "export"))
    del memory, unreachable  # written beside the model: the command reads the files
    outcomes = {
        "memory": export(tmp_path / "memory" / "config" / CONFIG_FILE_NAME, tmp_path / "a.pq"),
        "away": export(tmp_path / "away" / "config" / CONFIG_FILE_NAME, tmp_path / "b.pq"),
    }
    with redis_server(tmp_path) as port:
        descriptor(tmp_path / "empty", model, historyStore=redis_store(port, "export"))
        outcomes["no such KPI"] = export(tmp_path / "empty" / "config" / CONFIG_FILE_NAME,
                                         tmp_path / "c.pq", kpi="prb_util")
    for name, done in outcomes.items():
        assert done.returncode == 2, (name, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kpi-forecast: error: "), (name, lines)
    assert "historyStore.backend is memory" in outcomes["memory"].stderr
    assert "history store 127.0.0.1:" in outcomes["away"].stderr
    assert "namespace export holds no history of KPI prb_util" in \
        outcomes["no such KPI"].stderr
    assert not any((tmp_path / name).exists() for name in ("a.pq", "b.pq", "c.pq"))

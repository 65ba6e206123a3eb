"""Retraining on the RIC's own history, as docs/lifecycle.md prints it: the KPI's history
exported from the replicas' Redis, a model trained on it, and a running xApp asked over HTTP
to shadow it as the candidate (`kpi-forecast models candidate`); refusals in one line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from benchmarks.ports import free_port
from kpi_forecast.data.ingest import load_panel
from tests.processes import BIN, ROOT, answers, running
from tests.readme import blocks
from tests.redis_server import redis_server
from tests.test_shared_history import redis_store
from tests.xapp_helpers import make_model, write_descriptor

LENGTH = 672  # the descriptor's historyLength: four weeks of hours


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kpi-forecast"), *args], capture_output=True, text=True,
                          timeout=120)


def test_the_pages_retraining_block_shadows_a_model_of_the_exported_history(
        tmp_path: Path) -> None:
    [block] = [b for b in blocks(ROOT / "docs" / "lifecycle.md") if b.language == "bash"]
    sample = load_panel(ROOT / "data/sample/cells_hourly.csv.gz", "prb_util")
    models = tmp_path / "models"
    served = make_model(models / "prb", target="prb_util")
    other_kpi = make_model(models / "candidates" / "other", version="other", target="dl_mbps")
    with redis_server(tmp_path) as redis_port:
        config = write_descriptor(tmp_path / "config", served,
                                  historyStore=redis_store(redis_port, "retraining"))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host",
                 "127.0.0.1", "--port", str(port)]
        with running(serve, answers(f"{url}/ric/v1/health/ready"), tmp_path / "xapp.log"):
            items = [{"cell_id": cell, "start": sample.index[-LENGTH].isoformat(),
                      "freq": "1h", "values": [None if np.isnan(v) else float(v)
                                               for v in row[-LENGTH:]]}
                     for cell, row in zip(sample.cell_ids[:3], sample.values[:3], strict=True)]
            written = httpx.post(f"{url}/v1/cells/history", json={"items": items}, timeout=30)
            assert written.status_code == 200, written.text
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.text], cwd=tmp_path,
                capture_output=True, text=True, timeout=600,
                env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "XAPP": url,
                     "MODELS": str(models), "CONFIG_FILE": str(config)})
            index = httpx.get(f"{url}/v1/models", timeout=30).json()
            refused = cli("models", "candidate", "--xapp", url, "--model", "prb",
                          "--model-dir", str(other_kpi))
            unknown = cli("models", "promote", "--xapp", url, "--model", "nope")
        away = cli("models", "rollback", "--xapp", f"http://127.0.0.1:{free_port()}",
                   "--model", "prb")
    assert done.returncode == 0, done.stderr
    # The export is what the replica holds: the observed steps, as the training reads them.
    values = sample.values[:3, -LENGTH:]
    assert done.stdout.startswith(f"wrote {np.count_nonzero(~np.isnan(values))} values of 3 "
                                  "cells (prb_util)"), done.stdout
    frame = pd.read_parquet(tmp_path / "recent.parquet")
    assert list(frame.columns) == ["timestamp", "cell_id", "prb_util"]
    exported = load_panel(tmp_path / "recent.parquet", "prb_util")
    assert exported.cell_ids == sample.cell_ids[:3] and exported.freq == "1h"
    first = int(np.argmax(~np.isnan(values).all(axis=0)))  # the export's first observed step
    assert exported.index[0] == sample.index[-LENGTH + first]
    np.testing.assert_allclose(exported.values, values[:, first:], rtol=1e-6)
    trained = json.loads((models / "candidates" / "prb-recent" / "metadata.json")
                         .read_text())["model_version"]
    assert done.stdout.splitlines()[-1] == (
        f"prb: decision 1 (candidate): serving test, candidate {trained}, before None")
    [model] = index["models"]
    assert (model["version"], model["candidate_version"]) == ("test", trained)
    for outcome, says in ((refused, "422: model rejected, the previous one keeps serving: "),
                          (unknown, "404: no model 'nope'"),
                          (away, "cannot reach the xApp")):
        assert outcome.returncode == 2, outcome.stderr
        [line] = outcome.stderr.strip().splitlines()
        assert line.startswith("kpi-forecast: error: ") and says in line, line
    assert "candidate KPI dl_mbps differs from model prb's prb_util" in refused.stderr


"""`kpi-forecast history export`: bad settings in one line (what it writes, read back by the
training's own reader and trained on, is tested with docs/lifecycle.md's block, in
tests/test_retraining.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.ports import free_port
from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME
from tests.processes import BIN
from tests.redis_server import redis_server
from tests.test_shared_history import redis_store
from tests.xapp_helpers import descriptor, make_model

KPI = "kpi"  # the test model's target


def export(config: Path, out: Path, kpi: str = KPI) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kpi-forecast"), "history", "export", "--config",
                           str(config), "--kpi", kpi, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)


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

"""A repository through the command line: train several KPIs into one (a model each, named by
its KPI), then predict and backtest it as a whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kpi_forecast.cli.main import main
from kpi_forecast.data.synthetic import generate
from kpi_forecast.model.artifact import load_metadata
from tests.beside import EPOCHS_NOT_CLOCK

KPIS = ["traffic_mb", "prb_util"]


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "cells.csv"
    generate(n_cells=4, days=21, seed=5, start="2024-05-06").to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def repository(data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("repository") / "kpis"
    assert main(["train", "--data", str(data_file), "--target", ",".join(KPIS), "--out",
                 str(out), "--context", "7D", "--horizon", "24h", "--max-epochs", "1",
                 "--quiet", "--no-gpu-graph", *EPOCHS_NOT_CLOCK]) == 0
    return out


def test_train_writes_a_model_per_target_named_by_it(repository: Path) -> None:
    assert sorted(p.name for p in repository.iterdir()) == sorted(KPIS)
    for kpi in KPIS:
        meta = load_metadata(repository / kpi)
        assert meta.target == kpi
        assert (repository / kpi / "model.onnx").is_file()
        assert (repository / kpi / "report.md").is_file()


def test_predict_and_backtest_take_the_repository(repository: Path, data_file: Path,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "forecast.csv"
    assert main(["predict", "--model", str(repository), "--data", str(data_file), "--out",
                 str(out)]) == 0
    forecasts = pd.read_csv(out)
    assert forecasts.groupby("kpi").size().to_dict() == {kpi: 4 * 24 for kpi in KPIS}
    # Each KPI's forecasts are its own model's: as predict gives them for that model alone.
    alone = tmp_path / "prb.csv"
    assert main(["predict", "--model", str(repository / "prb_util"), "--data", str(data_file),
                 "--out", str(alone)]) == 0
    pd.testing.assert_frame_equal(
        forecasts[forecasts["kpi"] == "prb_util"].drop(columns="kpi").reset_index(drop=True),
        pd.read_csv(alone))
    assert main(["backtest", "--model", str(repository), "--data", str(data_file), "--folds",
                 "2", "--out", str(tmp_path / "bt")]) == 0
    for kpi in KPIS:
        assert "kpi-forecast" in pd.read_csv(tmp_path / "bt" / kpi / "overall.csv")[
            "model"].tolist()


@pytest.mark.parametrize(("target", "problem"), [
    ("traffic_mb,,prb_util", "KPI columns separated by commas, none empty"),
    ("traffic_mb,traffic_mb", "a column named twice"),
])
def test_a_bad_target_list_is_one_line(data_file: Path, tmp_path: Path, target: str,
                                       problem: str) -> None:
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", "train", "--data",
                           str(data_file), "--target", target, "--out", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"kpi-forecast: error: --target {target!r}: {problem}")


def test_a_folder_that_is_neither_a_model_nor_a_repository_is_named(tmp_path: Path,
                                                                     data_file: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "kpi_forecast.cli", "predict", "--model",
                           str(tmp_path), "--data", str(data_file), "--out",
                           str(tmp_path / "f.csv")], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "neither a model directory (metadata.json) nor a repository" in done.stderr

"""Public holidays as a calendar feature: the model is told which days of its window and of
its horizon are holidays, and forecasts a holiday it never saw with weekend-like load."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import cell_profiles, generate
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.model.features import HOLIDAY, forecast_calendar
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.training.fit import load_network
from tests.beside import EPOCHS_NOT_CLOCK

N_CELLS, SEED = 12, 2
# Ten weeks of French data with five public holidays: Easter Monday, 1 May, 8 and 9 May
# (a Wednesday and a Thursday) to learn from, and Whit Monday (20 May) to forecast.
START, DAYS = "2024-03-18", 70
UNSEEN = pd.Timestamp("2024-05-20", tz="Europe/Paris")


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The whole series, and the part before the unseen holiday that the models train on."""
    frame = generate(n_cells=N_CELLS, days=DAYS, seed=SEED, start=START, tz="Europe/Paris")
    folder = tmp_path_factory.mktemp("holidays")
    stamps = pd.to_datetime(frame["timestamp"], utc=True)
    frame.to_csv(folder / "all.csv", index=False)
    frame[stamps < UNSEEN].to_csv(folder / "train.csv", index=False)
    return folder / "all.csv", folder / "train.csv"


def train_command(data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kpi_forecast.cli", "train", "--data", str(data),
            "--target", "traffic_mb", "--out", str(out), "--tz", "Europe/Paris",
            "--context", "7D", "--horizon", "24h", "--max-epochs", "6", "--quiet",
            "--no-gpu-graph", *EPOCHS_NOT_CLOCK, *extra]


@pytest.fixture(scope="module")
def models(frames: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, Path]:
    """The model told the holidays and the one not, trained side by side on one thread each:
    two small models train faster so than one after the other on both cores."""
    folder = tmp_path_factory.mktemp("models")
    outs = {"told": folder / "told", "blind": folder / "blind"}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {name: subprocess.Popen(
        train_command(frames[1], out, *(["--holidays", "FR"] if name == "told" else [])),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for name, out in outs.items()}
    for name, run in runs.items():
        _, stderr = run.communicate(timeout=900)
        assert run.returncode == 0, f"{name}: {stderr[-3000:]}"
    return outs


@pytest.fixture(scope="module")
def told(models: dict[str, Path]) -> Path:
    return models["told"]


@pytest.fixture(scope="module")
def blind(models: dict[str, Path]) -> Path:
    return models["blind"]


def unseen_window(data: Path, context: int) -> tuple[np.ndarray, pd.DatetimeIndex, np.ndarray]:
    """History before the unseen holiday, its last timestamps, and the holiday's values."""
    panel = load_panel(data, "traffic_mb")
    origin = panel.index.get_loc(UNSEEN.tz_convert("UTC"))
    last = pd.DatetimeIndex([panel.index[origin - 1]] * panel.n_cells)
    return (panel.values[:, origin - context : origin], last,
            panel.values[:, origin : origin + 24])


def unseen_day_mae(model_dir: Path, data: Path) -> np.ndarray:
    """MAE per cell of the day-ahead forecast of the unseen holiday."""
    forecaster = OnnxForecaster(model_dir)
    history, last, actual = unseen_window(data, forecaster.metadata.context)
    median = forecaster.forecast(history, last)[..., forecaster.metadata.quantiles.index(0.5)]
    return np.nanmean(np.abs(median - actual), axis=1)


@pytest.mark.slow
def test_the_calendar_forecasts_an_unseen_holiday_like_a_weekend(
    frames: tuple[Path, Path], told: Path, blind: Path
) -> None:
    told_meta, blind_meta = load_metadata(told), load_metadata(blind)
    assert told_meta.holidays == "FR" and told_meta.config.horizon_tokens
    # Read as Sundays where the horizon has tokens, not by taking a Sunday's forecast.
    assert told_meta.holiday_reading == "as_sunday"
    assert "public holidays FR, those on working days read as Sundays" in (
        told / "report.md").read_text()
    assert blind_meta.holidays == "" and not blind_meta.config.horizon_tokens
    with_calendar, without = unseen_day_mae(told, frames[0]), unseen_day_mae(blind, frames[0])
    # Offices empty on a holiday: told, the model forecasts the drop it has no other way to see.
    business = [i for i, profile in enumerate(cell_profiles(N_CELLS, SEED).values())
                if profile == "business"]
    assert with_calendar[business].mean() < 0.6 * without[business].mean()
    assert with_calendar.mean() < 0.8 * without.mean()


@pytest.mark.slow
def test_onnx_runtime_gives_the_holidays_to_the_graph_as_torch_does(
    frames: tuple[Path, Path], told: Path
) -> None:
    network, meta = load_network(told)
    history, last, _ = unseen_window(frames[0], meta.context)
    calendar = forecast_calendar(last, meta.context, meta.horizon, pd.Timedelta(meta.freq),
                                 meta.calendar_tz, meta.holidays, meta.holiday_as_sunday)
    assert calendar[:, meta.context:, HOLIDAY].all()  # the whole horizon is the holiday
    with torch.no_grad():
        expected = network(torch.from_numpy(history), torch.from_numpy(calendar)).numpy()
    got = OnnxForecaster(told).forecast(history, last)
    assert np.abs(got - expected).max() <= 1e-4 * np.nanstd(history)

"""ONNX Runtime against torch, and fused against math attention, on real-shaped inputs."""

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
import torch

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import forecast_calendar
from kpi_forecast.model.network import Forecaster, instance_stats
from kpi_forecast.model.runtime import CPU, OnnxForecaster, RuntimeOptions
from kpi_forecast.training.windows import Windows
from tests.exported_model import exported
from tests.tolerance import network_tolerance

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data/sample/cells_hourly.csv.gz"
MILAN = ROOT.parent / "shared/data/milan/milan_hourly.csv.gz"
CONTEXT, HORIZON = 168, 24


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    base = tmp_path_factory.mktemp("onnx")
    models = {kind: exported(base / kind, CONTEXT, HORIZON, kind) for kind in ("fused", "math")}
    # The skip through its bottleneck (ModelConfig.skip_rank), as at high frequency.
    models["factorised"] = exported(base / "factorised", CONTEXT, HORIZON, skip_rank=6)
    assert isinstance(models["factorised"][0].members[0].skip, torch.nn.Sequential)
    return models


def windows(path: Path, target: str, batch: int, context: int = CONTEXT,
            horizon: int = HORIZON) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """``batch`` real context windows (with their gaps) ending at varied times."""
    panel = load_panel(path, target)
    usable = Windows.from_panel(panel, context, horizon).pairs(context, panel.n_steps)
    picked = usable[np.random.default_rng(0).choice(len(usable), batch, replace=False)]
    cells, origins = picked[:, :1], picked[:, 1]
    values = panel.values[cells, origins[:, None] + np.arange(-context, 0)].copy()
    values[0, 20:60] = np.nan  # a long gap in every batch, whatever the data has
    return values, panel.index[origins - 1]


def lower_precision(model_dir: Path, source: str, precision: str
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``precision`` graph's forecast of 256 real windows of ``source`` (synthetic or
    milan), the float32 graph's, and their distance in units of each window's scale, both on
    ONNX Runtime's CPU provider."""
    if source == "milan" and not MILAN.is_file():
        pytest.skip("../shared/data/milan not present")
    path, target = (SAMPLE, "traffic_mb") if source == "synthetic" else (MILAN, "traffic")
    meta = load_metadata(model_dir)
    values, last = windows(path, target, 256, meta.context, meta.horizon)
    full = OnnxForecaster(model_dir, RuntimeOptions(provider="cpu"))
    low = OnnxForecaster(model_dir, RuntimeOptions(provider="cpu", precision=precision))
    assert (full.precision, low.precision, low.provider) == ("float32", precision, CPU)
    got, expected = low.forecast(values, last), full.forecast(values, last)
    _, _, scale, _ = instance_stats(torch.from_numpy(values))
    return got, expected, np.abs(got - expected) / scale.numpy()[:, :, None]


def torch_forecast(network: Forecaster, values: np.ndarray, calendar: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return network(torch.from_numpy(values), torch.from_numpy(calendar)).numpy()


def within(values: np.ndarray, cfg: ModelConfig) -> np.ndarray:
    """Per window: two float32 evaluations of ``cfg``'s network may differ by this much."""
    return network_tolerance(cfg, np.nanmax(np.abs(values), axis=1))[:, None, None]


@pytest.mark.parametrize("batch", [1, 256])
@pytest.mark.parametrize("source", ["synthetic", "milan"])
def test_onnx_runtime_matches_torch(models: dict, batch: int, source: str) -> None:
    if source == "milan" and not MILAN.is_file():
        pytest.skip("../shared/data/milan not present")
    path, target = (SAMPLE, "traffic_mb") if source == "synthetic" else (MILAN, "traffic")
    values, last = windows(path, target, batch)
    # The graph on the inputs torch is given (the runtime's wall-clock reading of a window
    # across a DST switch: tests/test_wall_clock_network.py).
    calendar = forecast_calendar(last, CONTEXT, HORIZON, pd.Timedelta("1h"), "Europe/Paris")
    for network, forecaster in models.values():
        expected = torch_forecast(network, values, calendar)
        got = forecaster.run(values, calendar)
        assert np.isfinite(got).all()
        assert (np.abs(got - expected) <= within(values, network.cfg)).all()


def test_fused_and_math_attention_agree_in_onnx_runtime(models: dict) -> None:
    values, last = windows(SAMPLE, "traffic_mb", 64)
    fused = models["fused"][1].forecast(values, last)
    plain = models["math"][1].forecast(values, last)
    assert (np.abs(fused - plain) <= within(values, models["fused"][0].cfg)).all()


def test_fused_export_has_one_attention_node_per_layer(models: dict) -> None:
    kinds = {}
    for kind in ("fused", "math"):
        forecaster = models[kind][1]
        graph = onnx.load(str(forecaster.model_dir / "model.onnx"))
        kinds[kind] = [node.op_type for node in graph.graph.node].count("Attention")
        assert forecaster.metadata.onnx["opset"] == 23
    layers = ModelConfig(context=CONTEXT, horizon=HORIZON)
    assert kinds["fused"] == layers.n_layers * layers.ensemble
    assert kinds["math"] == 0

"""Conformal calibration brings validation coverage to the nominal level without crossing."""

from pathlib import Path

import numpy as np
import torch

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.network import Forecaster
from kpi_forecast.training.calibrate import calibrate
from kpi_forecast.training.windows import Windows

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/cells_hourly.csv.gz"


def coverage(network: Forecaster, windows: Windows, pairs: np.ndarray) -> float:
    values, calendar, target = windows.batch(pairs)
    with torch.no_grad():
        forecast = network(torch.from_numpy(values), torch.from_numpy(calendar)).numpy()
    observed = ~np.isnan(target)
    inside = (target >= forecast[..., 0]) & (target <= forecast[..., -1])
    return float(inside[observed].mean())


def test_calibration_reaches_nominal_coverage_and_keeps_order() -> None:
    panel = load_panel(SAMPLE, "traffic_mb")
    torch.manual_seed(0)
    # An untrained network: its intervals are arbitrary, which is what calibration must fix.
    network = Forecaster(ModelConfig(context=168, horizon=24)).eval()
    windows = Windows.from_panel(panel, 168, 24)
    pairs = windows.pairs(panel.n_steps - 200, panel.n_steps, stride=6)
    before = coverage(network, windows, pairs)
    offsets = calibrate(network, windows, pairs)
    after = coverage(network, windows, pairs)
    assert offsets[0] <= 0.0 and offsets[1] == 0.0 and offsets[2] >= 0.0
    assert before < 0.7
    assert 0.78 <= after <= 0.9
    values, calendar, _ = windows.batch(pairs)
    with torch.no_grad():
        forecast = network(torch.from_numpy(values), torch.from_numpy(calendar))
    assert (forecast.diff(dim=-1) >= 0).all()

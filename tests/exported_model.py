"""A randomly initialised forecaster exported to a model directory, for runtime tests."""

from pathlib import Path

import torch

from kpi_forecast.model.artifact import ModelMetadata
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.export import export_onnx
from kpi_forecast.model.network import Forecaster
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions


def exported(
    model_dir: Path, context: int, horizon: int, attention: str = "fused",
    options: RuntimeOptions | None = None, **config: object,
) -> tuple[Forecaster, OnnxForecaster]:
    torch.manual_seed(0)
    network = Forecaster(ModelConfig(context=context, horizon=horizon, attention=attention,
                                     **config))
    with torch.no_grad():
        network.calibration.copy_(torch.tensor([-0.2, 0.0, 0.3]))  # exported with the graph
    meta = ModelMetadata(
        model_version="test", target="kpi", freq="1h", calendar_tz="Europe/Paris",
        config=network.cfg, data_fingerprint="0" * 64, created="2026-01-01T00:00:00+00:00",
    )
    model_dir.mkdir()
    export_onnx(network, model_dir, meta)
    meta.save(model_dir)
    return network.eval(), OnnxForecaster(model_dir, options)

"""A randomly initialised forecaster exported to a model directory, for runtime tests."""

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

from kpi_forecast.model.artifact import ModelMetadata
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.export import export_onnx
from kpi_forecast.model.network import Forecaster
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions


def exported(
    model_dir: Path, context: int, horizon: int, attention: str = "fused",
    options: RuntimeOptions | None = None, seed: int = 0, **config: object,
) -> tuple[Forecaster, OnnxForecaster]:
    """The float32 graph only: the float16 graph's tests use the GPU check's bundle; weights
    drawn from ``seed``."""
    torch.manual_seed(seed)
    network = Forecaster(ModelConfig(context=context, horizon=horizon, attention=attention,
                                     **config))
    with torch.no_grad():
        network.calibration.copy_(torch.tensor([-0.2, 0.0, 0.3]))  # exported with the graph
    meta = ModelMetadata(
        model_version="test", target="kpi", freq="1h", calendar_tz="Europe/Paris",
        config=network.cfg, data_fingerprint="0" * 64, created="2026-01-01T00:00:00+00:00",
        holidays="", holiday_reading="none", weights_sha256="",  # no weights.pt
    )
    model_dir.mkdir()
    export_onnx(network, model_dir, meta, gpu_graph=False)
    meta.save(model_dir)
    return network.eval(), OnnxForecaster(model_dir, options)


@functools.cache
def _exported_once(context: int, horizon: int, seed: int) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="kpi-forecast-model-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    exported(folder / "model", context, horizon, seed=seed)
    return folder / "model"


def exported_copy(model_dir: Path, context: int, horizon: int, seed: int = 0) -> Path:
    """``exported(model_dir, context, horizon, seed=seed)``'s directory, exported once per test
    process: the exporter takes seconds, and with the same seed it writes the same graph every
    time."""
    shutil.copytree(_exported_once(context, horizon, seed), model_dir)
    return model_dir

"""The int8 graph for CPUs: what the export writes and records, its distance from the
float32 graph, and when the runtime and the xApp's controls serve it."""

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from pydantic import ValidationError

from kpi_forecast.cli.deployment import package
from kpi_forecast.model.artifact import INT8_ONNX_FILE, ArtifactError, load_metadata
from kpi_forecast.model.precision import INT8_BOUND
from kpi_forecast.model.runtime import CPU, OnnxForecaster, RuntimeOptions
from kpi_forecast.xapp.descriptor.controls import Controls
from tests.exported_model import exported_copy
from tests.test_onnx_parity import lower_precision
from tests.test_runtime import with_metadata
from tests.test_xapp_api import CONFIG, START, body, series
from tests.tolerance import answer_tolerance
from tests.xapp_helpers import CONTEXT, descriptor, make_model, running


@pytest.fixture
def model_dir(gpu_bundle: Path) -> Path:
    """The default network (untrained), exported as training exports it."""
    return gpu_bundle / "model"


def test_the_export_records_the_int8_graph_with_its_checksum_and_bound(model_dir: Path) -> None:
    meta = load_metadata(model_dir)
    entry = meta.onnx["int8"]
    assert entry["file"] == INT8_ONNX_FILE and len(entry["sha256"]) == 64
    assert entry["bound_per_scale"] == INT8_BOUND
    assert "int8" in meta.precisions and entry["sha256"] != meta.onnx["sha256"]


def test_its_weight_products_are_integer_and_its_attention_float(model_dir: Path) -> None:
    full = Counter(n.op_type for n in onnx.load(str(model_dir / "model.onnx")).graph.node)
    graph = onnx.load(str(model_dir / INT8_ONNX_FILE))
    ops = Counter(node.op_type for node in graph.graph.node)
    # Every product of the fused-attention graph has a weight matrix: all become integer.
    assert ops["MatMulInteger"] == full["MatMul"] + full["Gemm"] > 0
    assert ops["MatMul"] == ops["Gemm"] == 0
    assert onnx.TensorProto.INT8 in {t.data_type for t in graph.graph.initializer}
    assert ops["Attention"] == full["Attention"] > 0
    # Smaller on disk: most of the float32 graph's bytes are weights, now a quarter the size.
    assert (model_dir / INT8_ONNX_FILE).stat().st_size < 0.5 * (
        model_dir / "model.onnx").stat().st_size


@pytest.mark.parametrize("source", ["synthetic", "milan"])
def test_the_int8_graph_is_within_its_bound_of_the_float32_graph(
        model_dir: Path, source: str) -> None:
    got, _, per_scale = lower_precision(model_dir, source, "int8")
    assert np.isfinite(got).all()
    assert per_scale.max() <= INT8_BOUND
    # Rounded, not the float32 graph under another name.
    assert per_scale.max() > 1e-4


def test_int8_is_served_on_the_cpu_only_when_asked(tmp_path: Path) -> None:
    model_dir = exported_copy(tmp_path / "model", 72, 12)
    assert OnnxForecaster(model_dir).precision == "float32"
    forecaster = OnnxForecaster(model_dir, RuntimeOptions(provider="auto", precision="int8"))
    assert forecaster.describe()["precision"] == "int8"
    assert forecaster.session.get_providers() == [CPU]
    with pytest.raises(ValueError, match="int8 is the CPU's graph"):
        RuntimeOptions(provider="cuda", precision="int8")
    with pytest.raises(ValidationError, match="int8 is the CPU's graph"):
        Controls(model_dir=str(model_dir), execution_provider="cuda", precision="int8")
    assert Controls(model_dir=str(model_dir), precision="int8").precision == "int8"


def test_a_model_exported_before_the_int8_graph_refuses_it(tmp_path: Path) -> None:
    model_dir = exported_copy(tmp_path / "model", 72, 12)
    old = with_metadata(model_dir, tmp_path / "old", lambda meta: meta["onnx"].pop("int8"))
    assert load_metadata(old).precisions == ["float32"]
    OnnxForecaster(old)  # its float32 graph serves as before
    with pytest.raises(ArtifactError, match="no int8 graph recorded; run 'kpi-forecast export"):
        OnnxForecaster(old, RuntimeOptions(precision="int8"))


def test_a_changed_int8_graph_is_refused_by_the_runtime_and_the_packager(
        tmp_path: Path) -> None:
    model_dir = exported_copy(tmp_path / "model", 72, 12)
    broken = model_dir / INT8_ONNX_FILE
    broken.write_bytes(broken.read_bytes()[:-100])
    OnnxForecaster(model_dir)  # the float32 graph: untouched
    with pytest.raises(ArtifactError, match="model.int8.onnx: sha256 does not match"):
        OnnxForecaster(model_dir, RuntimeOptions(precision="int8"))
    with pytest.raises(ArtifactError, match="model.int8.onnx: sha256 does not match"):
        package(model_dir, tmp_path / "model.tar.gz")


def test_the_xapp_serves_the_int8_graph_when_its_controls_say_so(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    values = np.array([np.nan if v is None else v for v in series()], np.float32)
    last = pd.Timestamp(START) + (CONTEXT - 1) * pd.Timedelta("1h")
    options = {name: RuntimeOptions(precision=name) for name in ("float32", "int8")}
    expected = {name: OnnxForecaster(model_dir, o).forecast(values[None], pd.DatetimeIndex([last]))
                for name, o in options.items()}
    tolerance = answer_tolerance(CONFIG, np.nanmax(values))
    # The two graphs differ by more than an answer's rounding, so the answer tells them apart.
    assert np.abs(expected["int8"] - expected["float32"]).max() > 2 * tolerance

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir, precision="int8")) as client:
            answer = (await client.post("/v1/forecast", json=body())).json()
            got = np.array([[p["p10"], p["p50"], p["p90"]] for p in answer["forecasts"]])
            np.testing.assert_allclose(got, expected["int8"][0], rtol=0, atol=tolerance)
            text = (await client.get("/ric/v1/metrics")).text
            assert 'precision="int8"' in text and 'provider="CPUExecutionProvider"' in text

    asyncio.run(go())

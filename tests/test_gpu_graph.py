"""The float16 graph for GPUs: what the export writes and records, its parity with
the float32 graph on ONNX Runtime's CPU provider, and when the runtime serves it."""

from pathlib import Path

import numpy as np
import onnx
import pytest

from benchmarks.attention_kernels import BATCHES, attention_nodes, kernels_named
from kpi_forecast.cli.deployment import package
from kpi_forecast.model import runtime
from kpi_forecast.model.artifact import FLOAT16_ONNX_FILE, ArtifactError, load_metadata
from kpi_forecast.model.precision import FLOAT16_BOUND
from kpi_forecast.model.runtime import CPU, CUDA, OnnxForecaster, RuntimeOptions
from tests.exported_model import exported_copy
from tests.test_onnx_parity import lower_precision
from tests.test_runtime import with_metadata


@pytest.fixture
def model_dir(gpu_bundle: Path) -> Path:
    """The default network (untrained) with both graphs, as the GPU check's bundle has it."""
    return gpu_bundle / "model"


def value_types(graph: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(graph)
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    types.update({t.name: t.data_type for t in inferred.graph.initializer})
    return types


def test_the_export_records_the_float16_graph_with_its_checksum_and_bound(
        model_dir: Path) -> None:
    meta = load_metadata(model_dir)
    entry = meta.onnx["float16"]
    assert entry["file"] == FLOAT16_ONNX_FILE and len(entry["sha256"]) == 64
    assert entry["bound_per_scale"] == FLOAT16_BOUND
    assert meta.precisions == ["float32", "float16", "int8"]
    assert entry["sha256"] != meta.onnx["sha256"]


def test_its_attention_runs_in_float16_between_float32_inputs_and_outputs(
        model_dir: Path) -> None:
    graph = onnx.load(str(model_dir / FLOAT16_ONNX_FILE))
    types = value_types(graph)
    attention = [node for node in graph.graph.node if node.op_type == "Attention"]
    assert attention, "no ONNX Attention node in the float16 graph"
    for node in attention:
        assert {types[name] for name in node.input if name} == {onnx.TensorProto.FLOAT16}
    for value in [*graph.graph.input, *graph.graph.output]:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


@pytest.mark.parametrize("source", ["synthetic", "milan"])
def test_the_float16_graph_is_within_its_bound_of_the_float32_graph(
        model_dir: Path, source: str) -> None:
    got, expected, per_scale = lower_precision(model_dir, source, "float16")
    assert np.isfinite(got).all()
    assert per_scale.max() <= FLOAT16_BOUND
    # A bound that holds only because both are zero would say nothing.
    assert np.abs(expected).max() > 0 and per_scale.max() > 0


def test_cpu_serves_the_float32_graph_and_cuda_asks_for_the_float16_one(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    assert OnnxForecaster(model_dir).precision == "float32"
    opened: list[str] = []
    verify = runtime.verified_graph

    def spy(model_dir: Path, metadata, precision: str = "float32") -> Path:
        opened.append(precision)
        return verify(model_dir, metadata, precision)

    monkeypatch.setattr(runtime, "verified_graph", spy)
    # This onnxruntime build has no CUDA provider: asked for it first, ONNX Runtime falls
    # back to the CPU, and the runtime then serves the float32 graph, as on a GPU node whose
    # driver failed.
    monkeypatch.setattr(runtime, "execution_providers", lambda choice: [CUDA, CPU])
    forecaster = OnnxForecaster(model_dir)
    assert opened == ["float16", "float32"]
    assert (forecaster.provider, forecaster.precision) == (CPU, "float32")
    assert forecaster.describe()["precision"] == "float32"


def test_a_model_without_a_float16_graph_serves_float32_on_cuda_and_refuses_float16(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The helper's models have no float16 graph (as with train --no-gpu-graph).
    model_dir = exported_copy(tmp_path / "model", 72, 12)
    assert not (model_dir / FLOAT16_ONNX_FILE).exists()
    assert load_metadata(model_dir).precisions == ["float32", "int8"]
    with pytest.raises(ArtifactError, match="no float16 graph recorded; run 'kpi-forecast export"):
        OnnxForecaster(model_dir, RuntimeOptions(precision="float16"))
    opened: list[str] = []
    verify = runtime.verified_graph
    monkeypatch.setattr(runtime, "verified_graph",
                        lambda d, m, p="float32": opened.append(p) or verify(d, m, p))
    monkeypatch.setattr(runtime, "execution_providers", lambda choice: [CUDA, CPU])
    OnnxForecaster(model_dir)
    assert opened == ["float32"]


def test_a_changed_float16_graph_is_refused_by_the_runtime_and_the_packager(
        model_dir: Path, tmp_path: Path) -> None:
    copy = with_metadata(model_dir, tmp_path / "copy", lambda meta: None)
    broken = copy / FLOAT16_ONNX_FILE
    broken.write_bytes(broken.read_bytes()[:-100])
    OnnxForecaster(copy)  # the float32 graph on the CPU: untouched
    with pytest.raises(ArtifactError, match="model.fp16.onnx: sha256 does not match"):
        OnnxForecaster(copy, RuntimeOptions(precision="float16"))
    with pytest.raises(ArtifactError, match="model.fp16.onnx: sha256 does not match"):
        package(copy, tmp_path / "model.tar.gz")


@pytest.mark.parametrize(("precision", "dtype"), [("float32", "float"), ("float16", "float16")])
def test_the_kernel_check_names_the_provider_and_type_of_every_attention_node(
        model_dir: Path, precision: str, dtype: str) -> None:
    table, described = attention_nodes(model_dir, RuntimeOptions(precision=precision))
    cfg = load_metadata(model_dir).config
    assert described["precision"] == precision
    assert len(table) == cfg.n_layers * cfg.ensemble
    assert set(table["provider"]) == {CPU} and set(table["dtype"]) == {dtype}
    assert (table["calls"] == len(BATCHES)).all() and (table["mean_us"] > 0).all()


def test_the_kernel_check_reads_both_forms_of_the_attention_debug_lines() -> None:
    # The CUDA provider's two forms: one backend named, or a flag per backend.
    output = ("Operator=Attention Node=node_sdpa_3 DataType=fp16 SdpaKernel=FLASH_ATTENTION\n"
              "unrelated line\n"
              "Operator=MultiHeadAttention Node=mha DataType=fp16 TRT_FUSED_ATTENTION=0 "
              "EFFICIENT_ATTENTION=1 FLASH_ATTENTION=0\n")
    assert kernels_named(output) == {"node_sdpa_3": "FLASH_ATTENTION",
                                     "mha": "EFFICIENT_ATTENTION"}

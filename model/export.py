"""ONNX export of a trained forecaster (torch.onnx dynamo exporter): the float32 graph every
runtime can serve, a float16 one for GPUs, whose fused attention kernels take only 16-bit
floats, and an int8 one for CPUs (ONNX Runtime's dynamic quantisation of the float32 graph)."""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from torch.onnx import ONNXProgram

from kpi_forecast.model.artifact import (
    FLOAT16_ONNX_FILE,
    INT8_ONNX_FILE,
    ONNX_FILE,
    ModelMetadata,
    replaced_atomically,
    sha256_file,
)
from kpi_forecast.model.features import N_CALENDAR
from kpi_forecast.model.network import Forecaster
from kpi_forecast.model.precision import FLOAT16_BOUND, INT8_BOUND

log = logging.getLogger(__name__)

# Opset 23 has the ONNX `Attention` operator: the whole of SDPA becomes one node that GPU
# execution providers can dispatch to fused kernels instead of materialising n x n scores.
OPSET = 23
INPUT_NAMES = ["values", "calendar"]
# The exporter reports every rewrite pass at INFO; a user wants one line, not hundreds.
CHATTY_LOGGERS = ("onnxscript", "onnx_ir", "torch.onnx", "torch._dynamo", "torch.export")
OUTPUT_NAME = "quantiles"
# The products with a weight matrix, most of the work; the quantiser leaves a product of two
# activations (decomposed attention's) in float32 by default.
QUANTISED_OPS = ["MatMul", "Gemm"]


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in CHATTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def low_precision(network: Forecaster) -> Forecaster:
    """A copy whose ensemble members compute in float16; the instance normalisation around
    them stays float32 (``Forecaster._normalised``), so the graph's inputs and outputs are
    those of the float32 graph."""
    half = copy.deepcopy(network).eval()
    for member in half.members:
        member.half()
    return half


@contextlib.contextmanager
def _quiet_quantiser() -> Iterator[None]:
    """The quantiser advises pre-processing on the root logger; its shape inference does not
    read the ONNX Attention operator, so the advice cannot be taken."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _quantised(source: Path, path: Path) -> None:
    """Write the int8 form of the float32 graph at ``source``: weights int8 with a scale per
    output channel (nearer the float32 graph than one per matrix, at the same speed),
    activations quantised at run time (ONNX Runtime's dynamic quantisation).

    Weights take 7 bits (``reduce_range``), as ONNX Runtime advises for CPUs without VNNI: their
    AVX2 kernels add pairs of uint8 x int8 products in int16, which full-range weights
    overflow, far off the float32 graph on such CPUs (docs/decisions/precision-bounds.md)."""
    with _quiet_quantiser(), replaced_atomically(path) as partial:
        quantize_dynamic(source, partial, weight_type=QuantType.QInt8,
                         op_types_to_quantize=QUANTISED_OPS, per_channel=True, reduce_range=True)


def _trace(network: Forecaster) -> ONNXProgram:
    """The network's graph, its weights still named as in the state dict: the exporter's
    optimiser (constant folding, fusion) runs in ``_write`` once the weights are final."""
    cfg = network.cfg
    values = torch.rand(2, cfg.context) * 10.0
    calendar = torch.zeros(2, cfg.context + cfg.horizon, N_CALENDAR)
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    with _quiet_exporter():
        return torch.onnx.export(
            network.eval(),
            (values, calendar),
            dynamo=True,
            optimize=False,
            opset_version=OPSET,
            input_names=INPUT_NAMES,
            output_names=[OUTPUT_NAME],
            dynamic_shapes={"values": {0: batch}, "calendar": {0: batch}},
            verbose=False,
        )


def _write(program: ONNXProgram, network: Forecaster, path: Path) -> str:
    """Write ``program`` with ``network``'s weights to ``path``; returns how its attention was
    exported."""
    with _quiet_exporter():
        program.apply_weights(network.state_dict())
        program.optimize()
        with replaced_atomically(path) as partial:
            program.save(str(partial))
    ops = {node.op_type for node in program.model.graph}  # as saved, without reading it back
    return "onnx-attention" if "Attention" in ops else "decomposed"


def _shapes(network: Forecaster) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in network.state_dict().items()}


@dataclass
class TracedGraphs:
    """A network's graphs traced ahead of its weights. Tracing is most of an export's time
    (6-9 s a graph on two cores, against about 1 s for applying the weights, optimising and
    saving), so training traces before its loop, where the time budget sees what it took, and
    writes the trained weights into these graphs after it."""

    float32: ONNXProgram
    float16: ONNXProgram | None
    seconds: float
    shapes: dict[str, tuple[int, ...]]  # the traced network's weights
    written: bool = False  # the optimiser renames weights: a second write would miss them

    @classmethod
    def of(cls, network: Forecaster, gpu_graph: bool = True,
           stop: threading.Event | None = None) -> TracedGraphs:
        """Trace ``network`` (any weights: only its architecture is read); with ``gpu_graph``
        also its float16 form, unless ``stop`` is set by then: a stop request wants an exit
        within seconds, and ``kpi-forecast export`` adds that graph later."""
        started = time.monotonic()
        float32 = _trace(network)
        float16 = None
        if gpu_graph and stop is not None and stop.is_set():
            log.info("stopping: model.fp16.onnx is left out; 'kpi-forecast export --model DIR' "
                     "adds it")
        elif gpu_graph:
            float16 = _trace(low_precision(network))
        return cls(float32, float16, time.monotonic() - started, _shapes(network))

    def write(self, network: Forecaster, model_dir: Path, metadata: ModelMetadata) -> Path:
        """Write DIR/model.onnx, DIR/model.int8.onnx and, when traced, DIR/model.fp16.onnx with
        ``network``'s weights (of the traced architecture); record their form and checksums in
        ``metadata.onnx``. Returns the float32 graph's path. Writes once: the graphs keep the
        weights and the optimiser's rewrites."""
        if self.written:
            raise RuntimeError("these graphs are written already: trace the network again")
        shapes = _shapes(network)
        unlike = sorted(set(shapes.items()) ^ set(self.shapes.items()))
        if unlike:  # the graph would keep weights of its own, or take misshapen ones
            raise ValueError(f"the network is not of the traced architecture: weights "
                             f"{[name for name, _ in unlike[:3]]} differ")
        network = network.eval()
        path, half = Path(model_dir) / ONNX_FILE, Path(model_dir) / FLOAT16_ONNX_FILE
        int8 = Path(model_dir) / INT8_ONNX_FILE
        self.written = True
        attention_form = _write(self.float32, network, path)
        if attention_form != "onnx-attention" and network.cfg.attention == "fused":
            log.warning("export: no ONNX Attention node was written; attention is decomposed")
        metadata.onnx = {
            "file": ONNX_FILE,
            "sha256": sha256_file(path),
            "opset": OPSET,
            "attention": attention_form,
            "exporter": f"torch.onnx dynamo (torch {torch.__version__})",
        }
        _quantised(path, int8)
        metadata.onnx["int8"] = {"file": INT8_ONNX_FILE, "sha256": sha256_file(int8),
                                 "bound_per_scale": INT8_BOUND,
                                 "quantised": f"{' '.join(QUANTISED_OPS)} weights per channel"}
        half.unlink(missing_ok=True)  # a re-export without it leaves no stale GPU graph
        if self.float16 is not None:
            _write(self.float16, low_precision(network), half)
            metadata.onnx["float16"] = {"file": FLOAT16_ONNX_FILE, "sha256": sha256_file(half),
                                        "bound_per_scale": FLOAT16_BOUND}
        return path


def export_onnx(network: Forecaster, model_dir: Path, metadata: ModelMetadata,
                gpu_graph: bool = True) -> Path:
    """Trace and write at once (see ``TracedGraphs``): DIR/model.onnx, DIR/model.int8.onnx and,
    with ``gpu_graph``, DIR/model.fp16.onnx. Returns the float32 graph's path."""
    return TracedGraphs.of(network, gpu_graph).write(network, model_dir, metadata)

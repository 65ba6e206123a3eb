"""ONNX export of a trained forecaster (torch.onnx dynamo exporter)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import onnx
import torch

from kpi_forecast.model.artifact import ONNX_FILE, ModelMetadata, sha256_file
from kpi_forecast.model.features import N_CALENDAR
from kpi_forecast.model.network import Forecaster

log = logging.getLogger(__name__)

# Opset 23 has the ONNX `Attention` operator: the whole of SDPA becomes one node that GPU
# execution providers can dispatch to fused kernels instead of materialising n x n scores.
OPSET = 23
INPUT_NAMES = ["values", "calendar"]
# The exporter reports every rewrite pass at INFO; a user wants one line, not hundreds.
CHATTY_LOGGERS = ("onnxscript", "onnx_ir", "torch.onnx", "torch._dynamo", "torch.export")
OUTPUT_NAME = "quantiles"


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


def export_onnx(network: Forecaster, model_dir: Path, metadata: ModelMetadata) -> Path:
    """Write DIR/model.onnx and record its form and checksum in ``metadata.onnx``."""
    network = network.eval()
    cfg = network.cfg
    values = torch.rand(2, cfg.context) * 10.0
    calendar = torch.zeros(2, cfg.context + cfg.horizon, N_CALENDAR)
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    path = Path(model_dir) / ONNX_FILE
    with _quiet_exporter():
        program = torch.onnx.export(
            network,
            (values, calendar),
            dynamo=True,
            opset_version=OPSET,
            input_names=INPUT_NAMES,
            output_names=[OUTPUT_NAME],
            dynamic_shapes={"values": {0: batch}, "calendar": {0: batch}},
            verbose=False,
        )
        program.save(str(path))
    graph = onnx.load(str(path))
    ops = {node.op_type for node in graph.graph.node}
    attention_form = "onnx-attention" if "Attention" in ops else "decomposed"
    if attention_form != "onnx-attention" and cfg.attention == "fused":
        log.warning("export: no ONNX Attention node was written; attention is decomposed")
    metadata.onnx = {
        "file": ONNX_FILE,
        "sha256": sha256_file(path),
        "opset": OPSET,
        "attention": attention_form,
        "exporter": f"torch.onnx dynamo (torch {torch.__version__})",
    }
    return path

"""Graphs traced before training and written with the trained weights after it
(``model.export.TracedGraphs``, as ``fit`` uses them): the files an export of the trained
network writes, and a network of another architecture refused."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from kpi_forecast.model.artifact import (
    FLOAT16_ONNX_FILE,
    INT8_ONNX_FILE,
    ONNX_FILE,
    ModelMetadata,
)
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.export import TracedGraphs, export_onnx
from kpi_forecast.model.features import N_CALENDAR
from kpi_forecast.model.network import Forecaster
from tests.tolerance import network_tolerance

CONTEXT, HORIZON = 48, 12


def seeded(seed: int, **config: object) -> Forecaster:
    """A network with its own weights and calibration; with horizon tokens, so that every
    kind of weight the network can have is in the graph."""
    torch.manual_seed(seed)
    network = Forecaster(ModelConfig(context=CONTEXT, horizon=HORIZON, horizon_tokens=True,
                                     **config))
    with torch.no_grad():
        network.calibration.uniform_(-0.3, 0.3)
    return network.eval()


def metadata(network: Forecaster) -> ModelMetadata:
    return ModelMetadata(
        model_version="test", target="kpi", freq="1h", calendar_tz="UTC", config=network.cfg,
        data_fingerprint="0" * 64, created="2026-01-01T00:00:00+00:00", holidays="",
        holiday_reading="none", weights_sha256="")


def test_graphs_traced_from_other_weights_are_written_as_the_trained_networks_export(
        tmp_path: Path) -> None:
    untrained, trained = seeded(0), seeded(1)
    graphs = TracedGraphs.of(untrained, gpu_graph=True)
    traced, direct = tmp_path / "traced", tmp_path / "direct"
    traced.mkdir(), direct.mkdir()
    traced_meta, direct_meta = metadata(trained), metadata(trained)
    graphs.write(trained, traced, traced_meta)
    export_onnx(trained, direct, direct_meta, gpu_graph=True)
    for name in (ONNX_FILE, FLOAT16_ONNX_FILE, INT8_ONNX_FILE):
        assert (traced / name).read_bytes() == (direct / name).read_bytes(), name
    assert traced_meta.onnx == direct_meta.onnx
    with pytest.raises(RuntimeError, match="written already"):
        graphs.write(trained, traced, traced_meta)

    # The same bytes, and they are the trained network's: not the weights it was traced with.
    rng = np.random.default_rng(0)
    values = (rng.random((8, CONTEXT)) * 10).astype(np.float32)
    calendar = rng.random((8, CONTEXT + HORIZON, N_CALENDAR)).astype(np.float32)
    session = ort.InferenceSession(traced / ONNX_FILE, providers=["CPUExecutionProvider"])
    got = session.run(None, {"values": values, "calendar": calendar})[0]
    with torch.no_grad():
        expected, other = (network(torch.from_numpy(values), torch.from_numpy(calendar)).numpy()
                           for network in (trained, untrained))
    bound = network_tolerance(trained.cfg, np.abs(values).max(axis=1))[:, None, None]
    assert (np.abs(got - expected) <= bound).all()
    assert (np.abs(got - other) > bound).any()


def test_a_network_of_another_architecture_is_refused(tmp_path: Path) -> None:
    graphs = TracedGraphs.of(seeded(0), gpu_graph=False)
    more_quantiles = seeded(0, quantiles=[0.05, 0.1, 0.5, 0.9, 0.95])
    shallower = seeded(0, n_layers=2)  # its weights are a subset of the traced ones
    for network in (more_quantiles, shallower):
        with pytest.raises(ValueError, match="not of the traced architecture"):
            graphs.write(network, tmp_path, metadata(network))
    with pytest.raises(ValueError, match=r"members\.0\.blocks\.2\."):
        graphs.write(shallower, tmp_path, metadata(shallower))
    assert not (tmp_path / ONNX_FILE).exists()


def test_a_stop_asked_while_tracing_leaves_the_float16_graph_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A stop request wants an exit within seconds: the second trace would double the wait."""
    stop = threading.Event()
    stop.set()
    with caplog.at_level(logging.INFO, logger="kpi_forecast.model.export"):
        graphs = TracedGraphs.of(seeded(0), gpu_graph=True, stop=stop)
    assert graphs.float16 is None
    assert "model.fp16.onnx is left out; 'kpi-forecast export --model DIR' adds it" in caplog.text
    meta = metadata(seeded(1))
    graphs.write(seeded(1), tmp_path, meta)
    assert (tmp_path / ONNX_FILE).is_file() and not (tmp_path / FLOAT16_ONNX_FILE).exists()
    assert "float16" not in meta.onnx

"""From a Panel to a complete model directory: train, save, export, validate, report."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import importlib.metadata
import io
import logging
import threading
import time
from pathlib import Path

import numpy as np
import torch

from kpi_forecast.data.panel import Panel
from kpi_forecast.model.artifact import (
    WEIGHTS_FILE,
    ArtifactError,
    ModelMetadata,
    load_metadata,
    replaced_atomically,
    sha256_file,
)
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.export import TracedGraphs, export_onnx
from kpi_forecast.model.features import calendar_zone, holiday_flags
from kpi_forecast.model.network import Forecaster
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.training.backtest import MODEL_NAME, BacktestResult, backtest
from kpi_forecast.training.checkpoint import CHECKPOINT_FILE
from kpi_forecast.training.defaults import validation_steps
from kpi_forecast.training.device import resolve_device
from kpi_forecast.training.distributed import Group
from kpi_forecast.training.report import write_report
from kpi_forecast.training.train import TrainConfig, train

log = logging.getLogger(__name__)

# The work after training that does not grow with the data (writing the trained weights into
# the traced graphs, optimising and quantising them, the report's plots) is reckoned as a share
# of tracing the graphs, which fit times before training: a ratio of two pieces of work of
# the same run, so that it holds on any machine (docs/decisions/time-budget.md).
FINISH_PER_TRACE = 0.5
LIBRARIES = ["torch", "numpy", "pandas", "onnx", "onnxruntime", "onnxscript"]


def fingerprint(panel: Panel) -> str:
    """sha256 of exactly what the model was trained on (cells, grid, values, target)."""
    digest = hashlib.sha256()
    digest.update("\n".join(panel.cell_ids).encode())
    digest.update(panel.index.as_unit("ns").asi8.tobytes())
    digest.update(np.ascontiguousarray(panel.values).tobytes())
    digest.update(f"{panel.target}|{panel.freq}|{panel.calendar_tz}|{panel.holidays}".encode())
    return digest.hexdigest()


def horizon_tokens_wanted(panel: Panel, model_cfg: ModelConfig, train_cfg: TrainConfig) -> bool:
    """Whether the horizon's calendar gets tokens of its own (only with a holiday calendar:
    without one it follows from the window's).

    Where a public holiday on a working day falls among the steps training windows forecast,
    the tokens learn what a holiday ahead does. Where none does, a horizon of one patch (a
    day-ahead model) still gets its one token: a holiday ahead reads there as a Sunday
    (``model.features``), which the network learns from every week. Longer horizons' tokens
    cost more than they tell (docs/decisions/holidays.md).
    """
    if not panel.holidays:
        return False
    if model_cfg.horizon <= model_cfg.patch_len:
        return True
    validation_start = panel.n_steps - validation_steps(int(panel.spans.max()), model_cfg.horizon,
                                                        train_cfg.validation_fraction)
    targets = panel.index[model_cfg.context:validation_start]
    local = targets.tz_convert(calendar_zone(panel.calendar_tz)).tz_localize(None)
    working_days = local[local.day_of_week < 5].normalize().unique()
    return bool(holiday_flags(working_days.values.astype("datetime64[D]"), panel.holidays).any())


def library_versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in LIBRARIES}


def fit(
    panel: Panel,
    out_dir: Path,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    source: str,
    progress: bool = True,
    group: Group | None = None,
    block: Panel | None = None,
    started: float | None = None,
    stop: threading.Event | None = None,
    gpu_graph: bool = True,
    context_choice: str = "",
) -> tuple[ModelMetadata, BacktestResult] | None:
    """Train and write the model directory; None on every rank but rank 0, which writes.

    ``train_cfg.max_minutes`` bounds the run from ``started`` (``time.monotonic()``; by default
    now) to the written directory.

    Under data parallelism ``block`` is this rank's cells (by default its block of ``panel``);
    rank 0 validates and reports on ``panel``, the cells it holds. ``stop`` set ends training
    early (see ``train``); the directory is written all the same. ``gpu_graph``: export
    the float16 graph for CUDA beside the float32 one.
    """
    group = group or Group(device=resolve_device(train_cfg.device))
    if block is None:
        block = panel.cells(group.block(panel.n_cells)) if group.distributed else panel
    out_dir = Path(out_dir)
    model_cfg = dataclasses.replace(
        model_cfg, horizon_tokens=horizon_tokens_wanted(panel, model_cfg, train_cfg))
    if panel.holidays and not model_cfg.horizon_tokens and group.main:
        log.info("no public holiday of %s falls on a working day before the validation span, "
                 "and the horizon is longer than a patch: the horizon's calendar is left out, "
                 "and such a holiday in the horizon takes the forecast of its nearest Sunday",
                 panel.holidays)
    started = time.monotonic() if started is None else started
    graphs, finish_s = None, 0.0
    if group.main:
        graphs = TracedGraphs.of(Forecaster(model_cfg), gpu_graph, stop)
        finish_s = graphs.seconds * FINISH_PER_TRACE
        log.info("ONNX graphs traced for the export in %.1f s; the trained weights go into them "
                 "after training", graphs.seconds)
    # The validation backtest after training forecasts the validation windows again: one pass.
    result = train(block, model_cfg, train_cfg, progress=progress, group=group,
                   checkpoint=out_dir / CHECKPOINT_FILE,
                   reserve_s=time.monotonic() - started + finish_s, reserve_passes=1, stop=stop)
    if graphs is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    weights_sha256 = save_weights(result.network, out_dir)
    created = dt.datetime.now(dt.UTC).replace(microsecond=0)
    data_fingerprint = fingerprint(panel)
    meta = ModelMetadata(
        model_version=f"{panel.target}-{created:%Y%m%dT%H%M%SZ}-{data_fingerprint[:8]}",
        target=panel.target,
        freq=panel.freq,
        calendar_tz=panel.calendar_tz,
        config=model_cfg,
        data_fingerprint=data_fingerprint,
        created=created.isoformat(),
        holidays=panel.holidays,
        # As train() built its windows: a holiday read as a Sunday where the horizon has
        # tokens; else the horizon's nearest Sunday's forecast.
        holiday_reading=("none" if not panel.holidays else
                         "as_sunday" if model_cfg.horizon_tokens else "from_sunday"),
        training={
            "epochs": result.epochs,
            "seconds": round(result.seconds, 1),
            "stopped_by": result.stopped_by,
            "best_validation_loss": round(result.best_validation_loss, 5),
            "train_windows": result.train_windows,
            "validation_windows": result.validation_windows,
            "seed": train_cfg.seed,
            "max_minutes": train_cfg.max_minutes,
            "ranks": group.world,
            "samples_per_second": round(result.samples_per_second, 1),
            "batch_size": result.batch_size,
            "batch_choice": result.batch_choice,
            "context_choice": context_choice or f"context {model_cfg.context} steps, as asked",
        },
        libraries=library_versions(),
        weights_sha256=weights_sha256,
    )
    graphs.write(result.network, out_dir, meta)
    meta.save(out_dir)
    validation = backtest(OnnxForecaster(out_dir), panel, folds=0,
                          first_origin=result.validation_start)
    scores = validation.overall
    meta.validation = {k: round(float(v), 5) for k, v in scores.loc[MODEL_NAME].items()}
    meta.validation["mae_vs_seasonal_naive_week"] = round(
        float(scores.loc[MODEL_NAME, "mae"] / scores.loc["seasonal_naive_week", "mae"]), 5
    )
    meta.save(out_dir)
    write_report(out_dir, panel, meta, validation, result.curve, source)
    return meta, validation


def save_weights(network: Forecaster, model_dir: Path) -> str:
    """Write DIR/weights.pt whole or not at all; its sha256."""
    buffer = io.BytesIO()
    torch.save(network.state_dict(), buffer)
    with replaced_atomically(Path(model_dir) / WEIGHTS_FILE) as partial:
        partial.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def load_network(model_dir: Path) -> tuple[Forecaster, ModelMetadata]:
    """The trained network of a model directory, once weights.pt's checksum matches
    metadata.json (of this schema version, or of the one before: export writes it anew);
    weights load as tensors only."""
    meta = load_metadata(model_dir, reexport=True)
    path = Path(model_dir) / WEIGHTS_FILE
    if not path.is_file():
        raise ArtifactError(f"{path}: missing")
    if sha256_file(path) != meta.weights_sha256:
        raise ArtifactError(f"{path}: sha256 does not match metadata.json (the weights of "
                            "another training, or a replaced file?)")
    network = Forecaster(meta.config)
    try:
        network.load_state_dict(torch.load(path, weights_only=True))
    except (RuntimeError, OSError, EOFError) as exc:
        raise ArtifactError(f"{path}: cannot load weights ({exc})") from exc
    return network.eval(), meta


def export_model(model_dir: Path) -> Path:
    network, meta = load_network(model_dir)
    path = export_onnx(network, model_dir, meta)
    meta.save(model_dir)
    return path

"""Torch-free inference with ONNX Runtime: the one path used by predict, backtest and the xApp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd

from model.artifact import ONNX_FILE, ArtifactError, ModelMetadata, load_metadata, sha256_file
from model.features import N_CALENDAR, window_calendar

MAX_BATCH = 4096  # keeps peak memory flat when forecasting tens of thousands of cells


class OnnxForecaster:
    """A verified model directory loaded into an ONNX Runtime session."""

    def __init__(
        self, model_dir: str | Path, providers: list[str] | None = None, threads: int = 0
    ) -> None:
        self.model_dir = Path(model_dir)
        self.metadata: ModelMetadata = load_metadata(self.model_dir)
        path = self.model_dir / ONNX_FILE
        if not path.is_file():
            raise ArtifactError(f"{path}: missing; run 'kpi-forecast export --model {model_dir}'")
        expected = self.metadata.onnx.get("sha256")
        if sha256_file(path) != expected:
            raise ArtifactError(
                f"{path}: sha256 does not match metadata.json (truncated or replaced file?)"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(
                str(path), options, providers=providers or ["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises its own exception types for corrupt graphs
            raise ArtifactError(f"{path}: ONNX Runtime cannot load it ({exc})") from exc
        self._check_signature(path)
        self.step = pd.Timedelta(pd.tseries.frequencies.to_offset(self.metadata.freq))

    def _check_signature(self, path: Path) -> None:
        context = self.metadata.context
        expected = {"values": [context], "calendar": [context, N_CALENDAR]}
        found = {i.name: list(i.shape[1:]) for i in self.session.get_inputs()}
        if found != expected:
            raise ArtifactError(f"{path}: inputs {found} do not match metadata {expected}")

    def forecast(self, history: np.ndarray, last: pd.DatetimeIndex) -> np.ndarray:
        """Quantile forecasts [B, horizon, Q] for the steps after each row of ``history``.

        ``history`` is [B, n] (NaN = missing) whose last column falls at ``last[b]``; it is cut
        to the model's context, or left-padded with missing steps when shorter.
        """
        context = self.metadata.context
        history = np.asarray(history, dtype=np.float32)
        if history.ndim != 2 or len(last) != history.shape[0]:
            raise ValueError(f"history must be [B, n] with B = len(last); got {history.shape}")
        if history.shape[1] >= context:
            window = history[:, -context:]
        else:
            pad = np.full((history.shape[0], context - history.shape[1]), np.nan, np.float32)
            window = np.concatenate([pad, history], axis=1)
        outputs = []
        for start in range(0, len(window), MAX_BATCH):
            chunk = slice(start, start + MAX_BATCH)
            calendar = window_calendar(last[chunk], context, self.step, self.metadata.calendar_tz)
            feeds = {"values": np.ascontiguousarray(window[chunk]), "calendar": calendar}
            outputs.append(self.session.run(None, feeds)[0])
        if not outputs:
            return np.zeros((0, self.metadata.horizon, len(self.metadata.quantiles)), np.float32)
        return np.concatenate(outputs, axis=0)

"""Torch-free inference with ONNX Runtime, and the one forecast contract that predict,
backtest, the xApp and the benchmarks share: history in (NaN = missing, any length), quantiles
out, recalibrated when a Recalibration is given. The input rules and the cut to the model's
context live here and nowhere else."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import onnxruntime as ort
import pandas as pd

from kpi_forecast.model.artifact import (
    METADATA_FILE,
    ArtifactError,
    ModelMetadata,
    Precision,
    load_metadata,
    verified_graph,
)
from kpi_forecast.model.features import (
    N_CALENDAR,
    check_holidays,
    forecast_calendar,
    sunday_sources,
    wall_clock_windows,
)
from kpi_forecast.model.kpi import kpi_problem, not_kpis
from kpi_forecast.model.naive import PROFILE_WEEKS
from kpi_forecast.model.recalibration import Recalibration, calendar_sources

log = logging.getLogger(__name__)

MAX_BATCH = 4096  # keeps peak memory flat when forecasting tens of thousands of cells
# Below this many rows a call runs on one core: splitting a few rows costs more in hand-offs
# than it saves, and a serving process needs its other core for the event loop.
SPLIT_ROWS = 256
CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
OUTPUT_NAME = "quantiles"

Provider = Literal["auto", "cuda", "cpu"]
OPTIMISATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class InputError(ValueError):
    """Inputs a caller got wrong; the message says which and how."""


@dataclass
class RuntimeOptions:
    """How the ONNX Runtime session is built; the xApp fills it from its config controls."""

    provider: Provider = "auto"  # auto = CUDA when this onnxruntime build has it, else CPU
    # 0 = automatic: each model call on one thread (no ONNX Runtime thread pool, whose
    # threads spin between calls and take the CPU the event loop needs), and a large batch
    # split across the CPUs available; N = N threads inside every call, ONNX Runtime's own.
    intra_op_threads: int = 0
    inter_op_threads: int = 1  # the graph is a chain: parallel branches gain nothing
    graph_optimization: Literal["disable", "basic", "extended", "all"] = "all"
    io_binding: Literal["auto", "on", "off"] = "auto"  # auto = on with CUDA
    # auto = the float16 graph on CUDA (where it has one), the float32 graph elsewhere;
    # int8 = the quantised graph, on the CPU provider
    precision: Literal["auto"] | Precision = "auto"
    warmup: bool = True
    # Where ONNX Runtime writes its per-node profile (which provider ran each node), if set.
    profile_dir: str | None = None

    def __post_init__(self) -> None:
        if self.provider not in ("auto", "cuda", "cpu"):
            raise ValueError(f"provider must be auto, cuda or cpu, not {self.provider!r}")
        if self.graph_optimization not in OPTIMISATION_LEVELS:
            raise ValueError(
                f"graph_optimization must be one of {sorted(OPTIMISATION_LEVELS)}, "
                f"not {self.graph_optimization!r}"
            )
        if self.io_binding not in ("auto", "on", "off"):
            raise ValueError(f"io_binding must be auto, on or off, not {self.io_binding!r}")
        choices = ("auto", *get_args(Precision))
        if self.precision not in choices:
            raise ValueError(f"precision must be {', '.join(choices[:-1])} or {choices[-1]}, "
                             f"not {self.precision!r}")
        if self.precision == "int8" and self.provider == "cuda":
            raise ValueError("precision int8 is the CPU's graph: it needs provider cpu or auto")
        if self.intra_op_threads < 0 or self.inter_op_threads < 0:
            raise ValueError("thread counts must be >= 0")


def available_cpus(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU limit (a pod's
    ``resources.limits.cpu``), which the affinity does not show."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = cgroup.read_text().split()
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    return max(1, min(cpus, math.ceil(int(quota) / int(period))))


def execution_providers(choice: Provider) -> list[str]:
    """The provider list to ask ONNX Runtime for, most preferred first."""
    available = ort.get_available_providers()
    if choice == "cpu":
        return [CPU]
    if CUDA in available:
        return [CUDA, CPU]
    if choice == "cuda":
        raise ArtifactError(
            f"the CUDA execution provider was asked for, but this onnxruntime build offers "
            f"only {available} (install onnxruntime-gpu on a node with an NVIDIA GPU)"
        )
    return [CPU]


class OnnxForecaster:
    """A verified model directory loaded into an ONNX Runtime session, warmed up."""

    def __init__(self, model_dir: str | Path, options: RuntimeOptions | None = None) -> None:
        self.model_dir = Path(model_dir)
        self.options = options or RuntimeOptions()
        self.metadata: ModelMetadata = load_metadata(self.model_dir)
        # The quantised graph's integer products have CPU kernels only.
        requested = execution_providers(
            "cpu" if self.options.precision == "int8" else self.options.provider)
        self.precision = self._precision(requested[0])
        path = self._open(requested)
        # ORT falls back to CPU silently when a GPU provider fails to initialise (no driver,
        # missing CUDA libraries): what is active is what the session reports, not the ask.
        self.provider = self.session.get_providers()[0]
        if self.provider != requested[0]:
            log.warning("onnxruntime: %s was requested, %s is active", requested[0], self.provider)
            if self.options.precision == "auto" and self.precision != "float32":
                self.precision = "float32"  # the GPU graph was chosen for the GPU only
                path = self._open([self.provider])
        self.io_binding = self.options.io_binding == "on" or (
            self.options.io_binding == "auto" and self.provider == CUDA
        )
        self._check_signature(path)
        try:
            # This also loads the country's holiday rules (tens of milliseconds) now, rather
            # than in the first request's latency budget.
            check_holidays(self.metadata.holidays)
        except ValueError as exc:
            raise ArtifactError(f"{self.model_dir / METADATA_FILE}: {exc}") from None
        # ONNX Runtime sessions take concurrent run() calls; a GPU gains nothing from them.
        self.workers = (available_cpus()
                        if self.options.intra_op_threads == 0 and self.provider == CPU else 1)
        self._pool = ThreadPoolExecutor(self.workers, "onnx") if self.workers > 1 else None
        self.step = pd.Timedelta(pd.tseries.frequencies.to_offset(self.metadata.freq))
        self.warmup_ms = self._warm_up() if self.options.warmup else 0.0

    def _precision(self, provider: str) -> Precision:
        if self.options.precision != "auto":
            return self.options.precision
        gpu_graph = provider == CUDA and "float16" in self.metadata.precisions
        return "float16" if gpu_graph else "float32"

    def _open(self, providers: list[str]) -> Path:
        """A session on the graph in ``self.precision``, verified against its checksum."""
        path = verified_graph(self.model_dir, self.metadata, self.precision)
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = self.options.intra_op_threads or 1
        session_options.inter_op_num_threads = self.options.inter_op_threads
        session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session_options.graph_optimization_level = OPTIMISATION_LEVELS[
            self.options.graph_optimization
        ]
        if self.options.profile_dir:
            session_options.enable_profiling = True
            session_options.profile_file_prefix = str(Path(self.options.profile_dir) / "onnx")
        try:
            self.session = ort.InferenceSession(str(path), session_options, providers=providers)
        except Exception as exc:  # ORT raises its own exception types for corrupt graphs
            raise ArtifactError(f"{path}: ONNX Runtime cannot load it ({exc})") from exc
        return path

    def _check_signature(self, path: Path) -> None:
        context, horizon = self.metadata.context, self.metadata.horizon
        expected = {"values": [context], "calendar": [context + horizon, N_CALENDAR]}
        found = {i.name: list(i.shape[1:]) for i in self.session.get_inputs()}
        if found != expected:
            raise ArtifactError(f"{path}: inputs {found} do not match metadata {expected}")
        outputs = {o.name: list(o.shape[1:]) for o in self.session.get_outputs()}
        wanted = {OUTPUT_NAME: [self.metadata.horizon, len(self.metadata.quantiles)]}
        if outputs != wanted:
            raise ArtifactError(f"{path}: outputs {outputs} do not match metadata {wanted}")

    def _warm_up(self) -> float:
        """One call at load, so the first real request does not pay for allocations."""
        started = time.perf_counter()
        context, horizon = self.metadata.context, self.metadata.horizon
        values = np.ones((1, context), np.float32)
        calendar = np.zeros((1, context + horizon, N_CALENDAR), np.float32)
        self.run(values, calendar)
        return (time.perf_counter() - started) * 1000.0

    def describe(self) -> dict:
        """What is running: for logs, the xApp's /ric/v1/config and the benchmarks."""
        return {
            "provider": self.provider,
            "available_providers": ort.get_available_providers(),
            "onnxruntime": ort.__version__,
            "io_binding": self.io_binding,
            "parallel_calls": self.workers,  # how many parts a large batch is split into
            "warmup_ms": round(self.warmup_ms, 3),
            "attention": self.metadata.onnx.get("attention"),
            "precision": self.precision,
            "options": asdict(self.options),
        }

    def run(self, values: np.ndarray, calendar: np.ndarray) -> np.ndarray:
        """The raw graph: values [B, context] and calendar [B, context + H, N_CALENDAR]
        -> [B, H, Q]."""
        out = np.empty((len(values), self.metadata.horizon, len(self.metadata.quantiles)),
                       np.float32)
        if self._pool is None or len(values) < SPLIT_ROWS:
            self._run_chunks(values, calendar, out)
            return out
        bounds = np.linspace(0, len(values), self.workers + 1).astype(int)
        parts = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        for done in [self._pool.submit(self._run_chunks, values[part], calendar[part], out[part])
                     for part in parts]:
            done.result()
        return out

    def _run_chunks(self, values: np.ndarray, calendar: np.ndarray, out: np.ndarray) -> None:
        for start in range(0, len(values), MAX_BATCH):
            chunk = slice(start, start + MAX_BATCH)
            feeds = {
                "values": np.ascontiguousarray(values[chunk], np.float32),
                "calendar": np.ascontiguousarray(calendar[chunk], np.float32),
            }
            if self.io_binding:
                self._run_bound(feeds, out[chunk])
            else:
                out[chunk] = self.session.run([OUTPUT_NAME], feeds)[0]

    def _run_bound(self, feeds: dict[str, np.ndarray], out: np.ndarray) -> None:
        # The result is written straight into the caller's array: on CUDA, one device-to-host
        # copy and no intermediate output allocation per call.
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, array)
        binding.bind_output(OUTPUT_NAME, "cpu", 0, np.float32, list(out.shape),
                            out.__array_interface__["data"][0])
        self.session.run_with_iobinding(binding)

    @property
    def reach(self) -> int:
        """The most steps of history a forecast reads: the model's context (and a day before
        it, where a clock gone back makes a wall-clock window longer), or the weeks the
        recalibration's weekly profile averages, if longer."""
        day = int(pd.Timedelta("1D") // self.step)
        return max(self.metadata.context + day,
                   PROFILE_WEEKS * int(pd.Timedelta("7D") // self.step))

    def forecast(self, history: np.ndarray | Sequence[np.ndarray], last: pd.DatetimeIndex,
                 recalibration: Recalibration | None = None) -> np.ndarray:
        """Quantile forecasts [B, horizon, Q] for the steps after each row of ``history``.

        ``history`` is [B, n] (NaN = missing), or a sequence of such blocks of different
        lengths (the requests of one batch), their rows B in all; row b's last step falls at
        ``last[b]``. The model reads each row's last ``context`` steps, left-padded with
        missing steps when shorter; ``recalibration`` then moves each block's quantiles on
        that block's own history (``model.recalibration``).
        """
        meta = self.metadata
        context, horizon = meta.context, meta.horizon
        blocks = [np.asarray(block, dtype=np.float32) for block in (
            [history] if isinstance(history, np.ndarray) else history)]
        validate(blocks, last)
        wall = wall_clock_windows(last, context, horizon, self.step, meta.calendar_tz,
                                  meta.holidays, meta.holiday_as_sunday)
        width = context if wall is None else wall.reach
        window = np.concatenate([fit_to_width(block, width) for block in blocks])
        if wall is not None:
            window = wall.read(window)
        out = np.empty((len(window), horizon, len(meta.quantiles)), np.float32)
        # Calendar features per chunk too: for 10^5 cells at once they would take half a GB.
        for start in range(0, len(window), MAX_BATCH):
            chunk = slice(start, start + MAX_BATCH)
            calendar = forecast_calendar(last[chunk], context, horizon, self.step,
                                         meta.calendar_tz, meta.holidays, meta.holiday_as_sunday)
            if wall is None:
                out[chunk] = self.run(window[chunk], calendar)
            else:
                out[chunk] = wall.to_utc(
                    self.run(window[chunk], wall.place_calendar(calendar, chunk)), chunk)
            if meta.holiday_reading == "from_sunday":
                sources = sunday_sources(last[chunk], horizon, self.step, meta.calendar_tz,
                                         meta.holidays)
                out[chunk] = np.take_along_axis(out[chunk], sources[..., None], axis=1)
        if recalibration is None or recalibration.windows == 0:
            return out
        bounds = np.cumsum([0] + [len(block) for block in blocks])
        sources = (calendar_sources(self.metadata, self.step, last)
                   if recalibration.weight < 1.0 else None)
        return np.concatenate([
            recalibration.apply(out[a:b], block, None if sources is None else sources.rows(
                slice(a, b)))
            for a, b, block in zip(bounds[:-1], bounds[1:], blocks, strict=True)])


def fit_to_width(history: np.ndarray, width: int) -> np.ndarray:
    """The last ``width`` steps of each row, left-padded with missing steps when shorter."""
    if history.shape[1] >= width:
        return history[:, history.shape[1] - width :]
    pad = np.full((history.shape[0], width - history.shape[1]), np.nan, np.float32)
    return np.concatenate([pad, history], axis=1)


def validate(blocks: list[np.ndarray], last: pd.DatetimeIndex) -> None:
    """Reject what the graph would silently turn into a wrong forecast."""
    for history in blocks:
        if history.ndim != 2:
            raise InputError(f"history must be [cells, steps], got {history.ndim} dimension(s)")
        if history.shape[1] == 0:
            raise InputError("history has no steps")
    if not isinstance(last, pd.DatetimeIndex) or last.tz is None:
        raise InputError("last must be a timezone-aware DatetimeIndex")
    rows = sum(len(history) for history in blocks)
    if len(last) != rows:
        raise InputError(f"history has {rows} row(s) but {len(last)} last timestamp(s)")
    first = 0
    for history in blocks:
        bad = not_kpis(history)
        if bad.any():
            row, column = (int(i) for i in np.argwhere(bad)[0])
            value = float(history[row, column])
            raise InputError(f"history row {first + row} step {column} is {value:g}: "
                             f"{kpi_problem(value)} (NaN is a missing value)")
        first += len(history)

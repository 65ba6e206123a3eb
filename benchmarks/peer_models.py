"""The models of the peer comparison, each behind one contract.

A runner takes a :class:`Task` (one data set, one protocol) and returns an :class:`Outcome`:
P10/P50/P90 forecasts for every fold and cell, and what they cost. Everything a peer sees is
built here from the same :class:`~kpi_forecast.data.panel.Panel`, so every model trains on the same
steps and forecasts the same origins. The peers' libraries (the optional ``bench`` extra) are
imported inside their runners only.
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kpi_forecast.data.panel import Panel

QUANTILES = (0.1, 0.5, 0.9)
INTERVAL = 80  # the central interval the peers are asked for: P10-P90

# Seconds per optimiser step of the deep peers on this machine (2 cores), measured with their
# defaults at context 336. Their step budget is the time budget divided by these, so that a
# run is deterministic for a seed; Lightning's max_time still stops a slower machine in time.
STEP_SECONDS = {"patchtst": 2.2, "nhits": 0.15}


@dataclass(frozen=True)
class Task:
    dataset: str
    protocol: str
    panel: Panel
    origins: list[int]  # step index of the first forecast step of each fold
    context: int
    horizon: int
    budget_s: float  # training time budget every trained model gets
    seed: int

    @property
    def train_steps(self) -> int:
        """Every model trains on the steps before the first origin, and only those."""
        return self.origins[0]

    @property
    def steps_per_day(self) -> int:
        return self.panel.steps_per("1D")


@dataclass
class Outcome:
    forecasts: np.ndarray  # [folds, cells, horizon, len(QUANTILES)]; NaN where none is given
    train_s: float
    predict_ms_one: float  # one call for one cell
    predict_ms_all: float  # one call for every cell
    details: dict = field(default_factory=dict)


def median_ms(call: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls after one warm-up call, in milliseconds."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def imputed(panel: Panel, train_steps: int) -> np.ndarray:
    """The panel's values with gaps filled from the past only, for peers that refuse NaN.

    A gap takes the value one week earlier, else one day earlier, else the last observed
    value; what is still missing (before a cell's first sample) takes the cell's median over
    the training steps. No filled value depends on anything after it, so no fold sees its
    future. Scoring uses the observed values only.
    """
    values = panel.values.astype(np.float64)
    for lag in (7 * panel.steps_per("1D"), panel.steps_per("1D")):
        for t in range(lag, values.shape[1]):
            column = values[:, t]
            gap = np.isnan(column)
            if gap.any():
                column[gap] = values[gap, t - lag]
    values = pd.DataFrame(values).ffill(axis=1).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a cell with no training sample
        median = np.nanmedian(panel.values[:, :train_steps], axis=1)
    fill = np.where(np.isnan(median), 0.0, median)
    return np.where(np.isnan(values), fill[:, None], values)


def long_frame(panel: Panel, values: np.ndarray, start: int, stop: int,
               cells: slice = slice(None)) -> pd.DataFrame:
    """Nixtla's long format (``unique_id``, ``ds``, ``y``, ``available_mask``) of a step range.

    ``available_mask`` is 0 where the panel has no observation (the value was imputed):
    neuralforecast leaves those points out of its loss and input; statsforecast ignores it.
    """
    ids = np.asarray(panel.cell_ids, dtype=object)[cells]
    block = values[cells, start:stop]
    observed = ~np.isnan(panel.values[cells, start:stop])
    stamps = panel.index[start:stop].tz_convert(None)
    return pd.DataFrame({
        "unique_id": np.repeat(ids, block.shape[1]),
        "ds": np.tile(stamps, len(ids)),
        "y": block.reshape(-1),
        "available_mask": observed.reshape(-1).astype(np.float64),
    })


def frame_to_array(frame: pd.DataFrame, columns: tuple[str, str, str], cell_ids: list[str],
                   stamps: pd.DatetimeIndex) -> np.ndarray:
    """A Nixtla forecast frame of one fold as [cells, horizon, 3], ordered like the panel.

    ``columns`` name the P10, P50 and P90 columns; an empty name gives NaN (a point-only
    model). A cell or step the frame lacks raises, rather than being scored as missing.
    """
    keyed = frame.set_index(["unique_id", "ds"])
    wanted = pd.MultiIndex.from_product([list(cell_ids), stamps.tz_convert(None)])
    missing = wanted.difference(keyed.index)
    if len(missing):
        raise ValueError(f"the forecast lacks {len(missing)} (cell, step) pairs, e.g. {missing[0]}")
    keyed = keyed.loc[wanted]
    out = np.full((len(cell_ids), len(stamps), len(QUANTILES)), np.nan, np.float32)
    for q, column in enumerate(columns):
        if column:
            out[:, :, q] = keyed[column].to_numpy().reshape(len(cell_ids), len(stamps))
    return out


def fold_stamps(task: Task, origin: int) -> pd.DatetimeIndex:
    return task.panel.index[origin : origin + task.horizon]


def run_ours(task: Task, holidays: bool = True) -> Outcome:
    """kpi-forecast: ``fit`` (train, calibrate, export, report), then ONNX Runtime per fold,
    the quantiles recalibrated on the week before each origin. Without ``holidays`` it is
    not told the panel's public holidays."""
    from kpi_forecast.model.config import ModelConfig
    from kpi_forecast.model.recalibration import recalibration, week_of_windows
    from kpi_forecast.model.runtime import OnnxForecaster
    from kpi_forecast.training.fit import fit
    from kpi_forecast.training.train import TrainConfig

    panel = task.panel
    train_panel = panel.slice_steps(task.train_steps)
    if not holidays:
        train_panel.holidays = ""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        meta, _ = fit(train_panel, Path(tmp),
                      ModelConfig(context=task.context, horizon=task.horizon),
                      TrainConfig(max_minutes=task.budget_s / 60.0, seed=task.seed),
                      source=task.dataset, progress=False)
        train_s = time.perf_counter() - started
        forecaster = OnnxForecaster(tmp)

    # As `kpi-forecast backtest` does by default: the quantiles recalibrated on the week before
    # each origin, once for all cells; a call then only applies the offsets.
    windows = week_of_windows(task.horizon, forecaster.step)
    recalibrated = {
        origin: recalibration(forecaster, panel.values[:, :origin],
                              pd.DatetimeIndex([panel.index[origin - 1]] * panel.n_cells), windows)
        for origin in task.origins
    }

    def at(origin: int, cells: slice = slice(None)) -> np.ndarray:
        history = panel.values[cells, :origin]
        last = pd.DatetimeIndex([panel.index[origin - 1]] * len(history))
        return forecaster.forecast(history, last, recalibrated[origin])

    forecasts = np.stack([at(origin) for origin in task.origins])
    last_origin = task.origins[-1]
    return Outcome(
        forecasts=forecasts,
        train_s=train_s,
        predict_ms_one=median_ms(lambda: at(last_origin, slice(0, 1)), 200),
        predict_ms_all=median_ms(lambda: at(last_origin), 20),
        details={"epochs": meta.training["epochs"], "stopped_by": meta.training["stopped_by"],
                 "train_loop_s": meta.training["seconds"]},
    )


def _quiet_lightning() -> None:
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning_fabric", "lightning", "neuralforecast"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run_neural(task: Task, name: str) -> Outcome:
    """neuralforecast PatchTST or NHITS: its defaults, our context and horizon, MQLoss.

    The multi-quantile loss gives the P10/P50/P90 the other models are scored on. NHITS takes
    the robust scaler of neuralforecast's documented multi-series examples (its default,
    identity, leaves cells of very different sizes unscaled); PatchTST normalises each window
    itself (RevIN, on by default).
    """
    _quiet_lightning()
    from neuralforecast import NeuralForecast
    from neuralforecast.losses.pytorch import MQLoss
    from neuralforecast.models import NHITS, PatchTST

    model_class = {"patchtst": PatchTST, "nhits": NHITS}[name]
    default_steps = {"patchtst": 5000, "nhits": 1000}[name]
    steps = min(default_steps, int(task.budget_s / STEP_SECONDS[name]))
    extra = {"scaler_type": "robust"} if name == "nhits" else {}
    model = model_class(
        h=task.horizon, input_size=task.context, loss=MQLoss(quantiles=list(QUANTILES)),
        max_steps=steps, random_seed=task.seed, alias=name, **extra,
        # Lightning trainer settings: CPU, quiet, and the same wall-clock budget as ours.
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, max_time=dt.timedelta(seconds=task.budget_s),
    )
    panel, values = task.panel, imputed(task.panel, task.train_steps)
    forecaster = NeuralForecast(models=[model], freq=panel.freq)
    started = time.perf_counter()
    forecaster.fit(df=long_frame(panel, values, 0, task.train_steps))
    train_s = time.perf_counter() - started
    columns = (f"{name}-lo-{INTERVAL:.1f}", f"{name}-median", f"{name}-hi-{INTERVAL:.1f}")

    def at(origin: int, cells: slice = slice(None)) -> pd.DataFrame:
        return forecaster.predict(df=long_frame(panel, values, origin - task.context, origin,
                                                cells))

    forecasts = np.stack([
        frame_to_array(at(origin), columns, panel.cell_ids, fold_stamps(task, origin))
        for origin in task.origins
    ])
    last_origin = task.origins[-1]
    return Outcome(
        forecasts=forecasts,
        train_s=train_s,
        predict_ms_one=median_ms(lambda: at(last_origin, slice(0, 1)), 20),
        predict_ms_all=median_ms(lambda: at(last_origin), 5),
        details={"max_steps": steps,
                 "steps_run": len(forecaster.models[0].train_trajectories)},
    )


def _stats_model(name: str, steps_per_day: int):
    from statsforecast.models import MSTL, AutoETS, HistoricAverage, SeasonalNaive

    day, week = steps_per_day, 7 * steps_per_day
    return {
        # MSTL with an AutoETS trend: statsforecast's recipe for multiple seasonalities.
        "mstl": lambda: MSTL(season_length=[day, week], trend_forecaster=AutoETS(model="ZZN"),
                             alias=name),
        "autoets": lambda: AutoETS(season_length=day, alias=name),
        "seasonal_naive_day": lambda: SeasonalNaive(season_length=day, alias=name),
        "seasonal_naive_week": lambda: SeasonalNaive(season_length=week, alias=name),
        "historic_average": lambda: HistoricAverage(alias=name),
    }[name]()


def run_stats(task: Task, name: str) -> Outcome:
    """A statsforecast model: local, fitted per cell on the training steps.

    Folds come from ``cross_validation``: fitted once on the steps before the first origin,
    then ``forward`` (the fitted parameters applied to each fold's longer history), or refitted
    per fold for a model without ``forward`` (the historical average, which costs nothing).
    Its training time is that whole run. A call to predict is ``forecast`` on the history,
    since a local model fits whatever series it is asked about.
    """
    warnings.filterwarnings("ignore")
    from statsforecast import StatsForecast

    panel, values = task.panel, imputed(task.panel, task.train_steps)
    model = _stats_model(name, task.steps_per_day)
    refit = not hasattr(model, "forward")
    forecaster = StatsForecast(models=[model], freq=panel.freq, n_jobs=-1)
    last_origin = task.origins[-1]
    frame = long_frame(panel, values, 0, last_origin + task.horizon).drop(
        columns="available_mask")
    started = time.perf_counter()
    folds = forecaster.cross_validation(
        df=frame, h=task.horizon, n_windows=len(task.origins),
        step_size=task.origins[1] - task.origins[0] if len(task.origins) > 1 else 1,
        refit=refit, level=[INTERVAL],
    )
    train_s = time.perf_counter() - started
    columns = (f"{name}-lo-{INTERVAL}", name, f"{name}-hi-{INTERVAL}")
    columns = tuple(c if c in folds.columns else "" for c in columns)
    forecasts = []
    for origin in task.origins:
        cutoff = panel.index[origin - 1].tz_convert(None)
        forecasts.append(frame_to_array(folds[folds["cutoff"] == cutoff], columns,
                                        panel.cell_ids, fold_stamps(task, origin)))

    def at(cells: slice) -> pd.DataFrame:
        history = long_frame(panel, values, 0, last_origin, cells).drop(
            columns="available_mask")
        return forecaster.forecast(df=history, h=task.horizon, level=[INTERVAL])

    # Every cell at once costs a fit of every cell: timed once, not repeated. With one fold
    # the cross-validation was exactly that call (fit every cell, forecast), so it is reused.
    predict_ms_all = (1000.0 * train_s if len(task.origins) == 1
                      else _once_ms(lambda: at(slice(None))))
    return Outcome(
        forecasts=np.stack(forecasts),
        train_s=train_s,
        predict_ms_one=median_ms(lambda: at(slice(0, 1)), 3),
        predict_ms_all=predict_ms_all,
        details={"refit_per_fold": refit},
    )


def _once_ms(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return 1000.0 * (time.perf_counter() - start)


OURS, BLIND = "kpi-forecast", "kpi-forecast-no-holidays"
DEEP = ("patchtst", "nhits")
STATS = ("mstl", "autoets", "seasonal_naive_day", "seasonal_naive_week", "historic_average")
MODELS = (OURS, BLIND, *DEEP, *STATS)
# Not run on the task as given: ours again with the fastest deep peer's training time as its
# budget, which says whether ours is still the most accurate at no more training time.
AT_PEER_TIME = "kpi-forecast-at-peer-time"
OUR_RUNS = (OURS, BLIND, AT_PEER_TIME)  # our model, however it is run: never a peer


def run(task: Task, model: str) -> Outcome:
    if model in OUR_RUNS:
        return run_ours(task, holidays=model != BLIND)
    if model in DEEP:
        return run_neural(task, model)
    if model in STATS:
        return run_stats(task, model)
    raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}, {AT_PEER_TIME}")

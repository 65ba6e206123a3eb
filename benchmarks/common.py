"""Shared by the benchmarks: held-out evaluation and writing a run's section."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from benchmarks.results import DOCS, RESULTS, Results
from kpi_forecast.data.panel import Panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.recalibration import week_of_windows
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions
from kpi_forecast.training.backtest import MODEL_NAME, BacktestResult, backtest

if TYPE_CHECKING:
    from kpi_forecast.training.train import TrainConfig


@dataclass
class HeldOut:
    table: pd.DataFrame  # overall metrics per model, plus mae_vs_snaive_week and train_s
    result: BacktestResult
    training: dict
    validation: dict  # the model's own scores on its validation span (metadata.json)
    plain: BacktestResult  # the same folds, the model's own forecasts (not recalibrated)
    int8: BacktestResult | None = None  # the same folds and recalibration, the int8 graph's


def held_out(
    panel: Panel, train_steps: int, model_cfg: ModelConfig, train_cfg: TrainConfig,
    folds: int, step: int, source: str, int8: bool = False,
) -> HeldOut:
    """Train on the first ``train_steps`` only, then backtest folds ending at the last step;
    with ``int8`` the model's int8 graph too."""
    # Imported here so that the benchmarks that never train do not load torch.
    from kpi_forecast.training.fit import fit

    with tempfile.TemporaryDirectory() as tmp:
        # The float16 graph is the GPU's; these benchmarks score the float32 one on CPU.
        meta, _ = fit(panel.slice_steps(train_steps), Path(tmp), model_cfg, train_cfg, source,
                      progress=False, gpu_graph=False)
        forecaster = OnnxForecaster(tmp)
        # As `kpi-forecast backtest` does by default.
        windows = week_of_windows(forecaster.metadata.horizon, forecaster.step)
        result = backtest(forecaster, panel, folds=folds, step=step, recalibrate_windows=windows)
        plain = backtest(forecaster, panel, folds=folds, step=step)
        quantised = backtest(OnnxForecaster(tmp, RuntimeOptions(precision="int8")), panel,
                             folds=folds, step=step, recalibrate_windows=windows) if int8 else None
    table = result.overall.copy()
    table["mse"] = table["rmse"] ** 2
    table["mae_vs_snaive_week"] = table["mae"] / table.loc["seasonal_naive_week", "mae"]
    table["train_s"] = [meta.training["seconds"] if m == MODEL_NAME else 0.0 for m in table.index]
    return HeldOut(table, result, meta.training, meta.validation, plain, quantised)


def write_section(results: Results, section: str) -> None:
    """Write the run's results file and replace (or append) its section between the markers on
    its page (of docs/); the section quotes the run's measured line."""
    if results.measured not in section:
        raise ValueError(f"{results.name}: the section does not say where it was measured")
    missing = [name for name in results.tables if not (RESULTS / f"{name}.csv").is_file()]
    if missing:
        raise FileNotFoundError(f"{results.name}: no table {missing} in {RESULTS}")
    results.write(RESULTS)
    path = DOCS / results.page
    start, end = f"<!-- {results.section}:start -->", f"<!-- {results.section}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{start}\n{section.rstrip()}\n{end}"
    if start in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)

"""The training report: report.md with PNG plots, from a backtest over the validation span."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: training runs on headless machines
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kpi_forecast.data.panel import Panel  # noqa: E402
from kpi_forecast.model.artifact import REPORT_FILE, ModelMetadata  # noqa: E402
from kpi_forecast.model.features import wall_clock_places  # noqa: E402
from kpi_forecast.training.backtest import MODEL_NAME, BacktestResult  # noqa: E402

PLOTS = "plots"
SAMPLE_CELLS = 4


def write_report(
    model_dir: Path,
    panel: Panel,
    meta: ModelMetadata,
    result: BacktestResult,
    curve: list[tuple[float, float]],
    source: str,
) -> Path:
    plots = Path(model_dir) / PLOTS
    plots.mkdir(parents=True, exist_ok=True)
    _plot_samples(plots / "forecast_samples.png", panel, meta, result)
    _plot_by_step(plots / "error_by_step.png", result)
    _plot_baselines(plots / "error_vs_baselines.png", result)
    _plot_curve(plots / "learning_curve.png", curve)
    table = result.overall.copy()
    table.insert(0, "MAE vs weekly naive", table["mae"] / table.loc["seasonal_naive_week", "mae"])
    lines = [
        f"# kpi-forecast training report: {meta.target}",
        "",
        f"Model version `{meta.model_version}`, created {meta.created}.",
        "",
        "## Data",
        f"- Source: `{source}`; {panel.n_cells} cells, {panel.n_steps} steps of {panel.freq} "
        f"from {panel.index[0]} to {panel.index[-1]} (calendar zone {panel.calendar_tz}, "
        f"public holidays {panel.holidays or 'none'}"
        f"{holiday_reading(meta)}{clock_reading(panel, meta)}).",
        f"- Handling counts: {panel.log or 'none'}.",
        f"- Fingerprint `{meta.data_fingerprint[:16]}`.",
        "",
        "## Model and training",
        f"- Context {meta.context} steps, horizon {meta.horizon} steps, quantiles "
        f"{meta.quantiles}, patch {meta.config.patch_len} steps "
        f"({meta.config.n_patches} window tokens and {meta.config.n_future} for the horizon), "
        f"{meta.config.n_layers} layers of width {meta.config.d_model}, attention "
        f"`{meta.config.attention}`; {meta.config.describe_skip()}.",
        f"- What was chosen, and why: {meta.training.get('context_choice', 'not recorded')}; "
        f"{meta.training.get('batch_choice', 'not recorded')}.",
        f"- {meta.training.get('epochs')} epochs in {meta.training.get('seconds')} s, stopped by "
        f"{meta.training.get('stopped_by')}; best validation pinball loss "
        f"{meta.training.get('best_validation_loss')}.",
        "",
        "## Validation backtest",
        f"{len(result.origins)} origins one horizon apart, from {result.origins[0]} to "
        f"{result.origins[-1]}, inside the validation span that early stopping watched "
        "(so slightly optimistic; run `kpi-forecast backtest` on held-out data for a clean "
        "figure). Coverage is of the outermost quantile pair.",
        "",
        table.to_markdown(floatfmt=".3f"),
        "",
        "![forecast samples](plots/forecast_samples.png)",
        "",
        "![error by step](plots/error_by_step.png)",
        "",
        "![error against baselines](plots/error_vs_baselines.png)",
        "",
        "![learning curve](plots/learning_curve.png)",
        "",
    ]
    path = Path(model_dir) / REPORT_FILE
    path.write_text("\n".join(lines))
    return path


def _sample_cells(result: BacktestResult) -> list[int]:
    """Cells spread across the load range: the busiest, the quietest and some in between."""
    observed = ~np.isnan(result.actual[-1])
    total = np.where(observed, result.actual[-1], 0.0).sum(axis=1)
    count = observed.sum(axis=1)
    volume = np.divide(total, count, out=np.full(len(count), np.nan), where=count > 0)
    ranked = [i for i in np.argsort(-np.nan_to_num(volume, nan=-1.0)) if np.isfinite(volume[i])]
    if not ranked:
        return []
    picks = np.linspace(0, len(ranked) - 1, min(SAMPLE_CELLS, len(ranked))).round().astype(int)
    return [ranked[p] for p in dict.fromkeys(picks)]


def _plot_samples(path: Path, panel: Panel, meta: ModelMetadata, result: BacktestResult) -> None:
    cells = _sample_cells(result)
    fig, axes = plt.subplots(max(1, len(cells)), 1, figsize=(10, 2.6 * max(1, len(cells))))
    axes = np.atleast_1d(axes)
    origin = panel.index.get_loc(result.origins[-1])
    shown = min(origin, 3 * meta.horizon)
    past = panel.index[origin - shown : origin]
    future = panel.index[origin : origin + meta.horizon]
    for ax, cell in zip(axes, cells, strict=False):
        q = result.quantiles[-1, cell]
        ax.plot(past, panel.values[cell, origin - shown : origin], color="0.4", label="history")
        ax.plot(future, result.actual[-1, cell], color="k", label="actual")
        ax.plot(future, q[:, len(meta.quantiles) // 2], color="C0", label="forecast (median)")
        ax.fill_between(future, q[:, 0], q[:, -1], color="C0", alpha=0.25,
                        label=f"{meta.quantile_names()[0]}-{meta.quantile_names()[-1]}")
        ax.set_title(f"cell {panel.cell_ids[cell]}", fontsize=9)
        ax.set_ylabel(meta.target)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_by_step(path: Path, result: BacktestResult) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    for name in result.by_step.columns:
        ax.plot(result.by_step.index, result.by_step[name], label=name,
                linewidth=2.5 if name == MODEL_NAME else 1.2)
    ax.set_xlabel("horizon step")
    ax.set_ylabel("MAE")
    ax.set_title("Error by horizon step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_baselines(path: Path, result: BacktestResult) -> None:
    frame: pd.DataFrame = result.overall[["mae", "rmse"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    frame.plot.bar(ax=ax, rot=15)
    ax.set_title("Error against the baselines")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_curve(path: Path, curve: list[tuple[float, float]]) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    epochs = np.arange(1, len(curve) + 1)
    ax.plot(epochs, [c[0] for c in curve], label="train")
    ax.plot(epochs, [c[1] for c in curve], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("pinball loss (scaled)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def clock_reading(panel: Panel, meta: ModelMetadata) -> str:
    """Whether the windows were read on a wall clock that changes within the data."""
    if wall_clock_places(panel.index, panel.calendar_tz) is not None:
        return ("; its UTC offset changes within the data (DST): the windows are read on its "
                "wall clock")
    return ""


def holiday_reading(meta: ModelMetadata) -> str:
    """How the model treats a public holiday on a working day, for the data line."""
    if meta.holiday_reading == "as_sunday":
        return ", those on working days read as Sundays"
    if meta.holiday_reading == "from_sunday":
        return (", those on working days in the horizon forecast as the horizon's nearest "
                "Sunday")
    return ""

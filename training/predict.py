"""Forecasts after each cell's last sample, as a long table. Torch-free."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kpi_forecast.data.panel import DataError, Panel
from kpi_forecast.model.features import calendar_zone, window_timestamps
from kpi_forecast.model.recalibration import Recalibration, recalibration
from kpi_forecast.model.runtime import OnnxForecaster


def check_compatible(forecaster: OnnxForecaster, panel: Panel) -> None:
    meta = forecaster.metadata
    if pd.Timedelta(panel.step) != forecaster.step:
        raise DataError(
            f"data frequency {panel.freq} does not match the model's {meta.freq} "
            f"(pass --freq {meta.freq} to resample)"
        )


def last_windows(panel: Panel, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's last ``context`` steps up to its last observed sample, and that step."""
    observed = ~np.isnan(panel.values)
    last = panel.n_steps - 1 - np.argmax(observed[:, ::-1], axis=1)
    steps = last[:, None] + np.arange(-context + 1, 1)
    padded = np.concatenate([np.full((panel.n_cells, context), np.nan), panel.values], axis=1)
    return padded[np.arange(panel.n_cells)[:, None], steps + context], last


def predict_frame(forecaster: OnnxForecaster, panel: Panel,
                  recalibrate_windows: int = 0) -> tuple[pd.DataFrame, Recalibration]:
    """Columns cell_id, timestamp (ISO 8601 in the calendar zone), one per quantile; the
    quantiles recalibrated on up to ``recalibrate_windows`` horizons before each cell's last
    sample (``model.recalibration``)."""
    check_compatible(forecaster, panel)
    meta = forecaster.metadata
    windows, last = last_windows(panel, forecaster.reach + recalibrate_windows * meta.horizon)
    last_stamps = panel.index[last]
    recalibrated = recalibration(forecaster, windows, last_stamps, recalibrate_windows)
    forecast = forecaster.forecast(windows, last_stamps, recalibrated)
    stamps = window_timestamps(last_stamps + meta.horizon * forecaster.step, meta.horizon,
                               forecaster.step)
    local = stamps.tz_convert(calendar_zone(meta.calendar_tz))
    frame = pd.DataFrame(
        {
            "cell_id": np.repeat(np.asarray(panel.cell_ids, dtype=object), meta.horizon),
            "timestamp": local.map(pd.Timestamp.isoformat),
        }
    )
    flat = forecast.reshape(-1, len(meta.quantiles))
    for column, name in enumerate(meta.quantile_names()):
        frame[name] = np.round(flat[:, column], 6)
    return frame, recalibrated

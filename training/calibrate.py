"""Conformal calibration of the quantiles on held-out validation windows.

A network fitted by pinball loss on training windows tends to give intervals that are too
narrow out of sample. For each quantile level q we find the offset c (in units of each
window's scale) such that a fraction q of validation targets fall below forecast + c * scale,
as in conformalized quantile regression, and store it in the network's ``calibration`` buffer,
so it is part of the exported graph. Offsets only widen (lower quantiles move down, upper ones
up, the median stays), which keeps the quantiles from crossing. Under data-parallel training
every rank contributes the residuals of its own cells and all get the same offsets.
"""

from __future__ import annotations

import numpy as np
import torch

from kpi_forecast.model.network import Forecaster, instance_stats
from kpi_forecast.training.device import mixed_precision, to_tensors
from kpi_forecast.training.distributed import Group
from kpi_forecast.training.windows import Windows


@torch.no_grad()
def calibrate(network: Forecaster, windows: Windows, pairs: np.ndarray,
              batch_size: int = 2048, group: Group | None = None) -> np.ndarray:
    """Set ``network.calibration`` from the validation ``pairs`` (this rank's, with ``group``)
    and returns the offsets."""
    network.eval()
    network.calibration.zero_()
    device = network.calibration.device
    residuals = []
    for start in range(0, len(pairs), batch_size):
        values, calendar, target = to_tensors(windows.batch(pairs[start : start + batch_size]),
                                              device)
        _, _, scale, _ = instance_stats(values)
        with mixed_precision(device):
            forecast = network(values, calendar).float()
        residuals.append(((target.unsqueeze(-1) - forecast) / scale.unsqueeze(-1)).cpu().numpy())
    n_levels = len(network.cfg.quantiles)
    mine = (np.concatenate(residuals).reshape(-1, n_levels) if residuals
            else np.zeros((0, n_levels), np.float32))
    stacked = np.concatenate((group or Group()).gather(mine))
    stacked = stacked[~np.isnan(stacked).any(axis=1)]
    levels = np.asarray(network.cfg.quantiles)
    offsets = np.array([np.quantile(stacked[:, i], q) for i, q in enumerate(levels)])
    median = int(np.argmin(np.abs(levels - 0.5)))
    offsets[median] = 0.0
    # Widen only, and more for outer quantiles than inner ones, so the order is kept.
    offsets[:median] = np.minimum.accumulate(np.minimum(offsets[:median], 0.0)[::-1])[::-1]
    offsets[median + 1 :] = np.maximum.accumulate(np.maximum(offsets[median + 1 :], 0.0))
    network.calibration.copy_(torch.from_numpy(offsets.astype(np.float32)).to(device))
    return offsets

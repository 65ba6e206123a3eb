"""What a training run takes from its data when the command line leaves it open. Torch-free,
so that the CLI reads it before it knows whether it trains."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kpi_forecast.data.panel import Panel

DEFAULT_HORIZON = "1D"
# Two weeks see both seasons of cell load twice; shorter histories get the longest that fits.
DEFAULT_CONTEXTS = ("14D", "7D", "3D", "1D")


def validation_steps(longest_span: int, horizon: int, fraction: float) -> int:
    """The last steps of the grid kept for validation: ``fraction`` of the longest cell's
    observed span (``Panel.spans``), not of the grid, which cells from different periods
    stretch to the union of their spans (three 2-minute cells of a few weeks each, months
    apart, would otherwise validate on months and train on none of the last cell)."""
    return max(horizon, round(fraction * longest_span))


def default_context(panel: Panel, horizon: int, validation_fraction: float) -> tuple[int, str]:
    """The first of DEFAULT_CONTEXTS (in steps) that the typical cell's history holds twice over
    with two horizons and the validation span after it, and why. Measured on each cell's own
    observed span, not on the grid: cells from different periods share a grid as long as all of
    their spans together, while each window lies within one cell's.

    Twice: a window model learns only from the steps after each cell's first context, so a
    context that takes most of a short history leaves a few days to learn from
    (docs/decisions/default-context.md).
    """
    spans = panel.spans[panel.spans > 0]
    typical = int(np.median(spans)) if len(spans) else 0
    val = validation_steps(int(spans.max(initial=0)), horizon, validation_fraction)
    candidates = [int(pd.Timedelta(c) // panel.step) for c in DEFAULT_CONTEXTS]
    for name, steps in zip(DEFAULT_CONTEXTS, candidates, strict=True):
        if steps >= 1 and 2 * steps + 2 * horizon + val <= typical:
            return steps, (f"context {name} ({steps} steps): the median cell spans {typical} "
                           f"steps, enough for it, as many steps again to learn from, 2 "
                           f"horizons and {val} validation steps")
    steps = max(1, candidates[-1])
    return steps, (f"context {DEFAULT_CONTEXTS[-1]} ({steps} steps), the shortest default: the "
                   f"median cell spans only {typical} steps")

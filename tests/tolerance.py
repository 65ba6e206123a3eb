"""How far apart two evaluations of the same computation may be, from the float rounding of
that computation: never from what one machine happened to give.

Two evaluations in float32 that order, fuse or block their operations differently (ONNX
Runtime against torch, fused against plain attention, a batch split across threads, another
CPU's kernels) each lie within Higham's gamma_n = n u / (1 - n u) of the exact result, relative to
the magnitudes involved, where n is the number of roundings on the way and u float32's unit
roundoff. So they lie within twice that of each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kpi_forecast.model.config import ModelConfig
from kpi_forecast.xapp.http.schemas import DECIMALS

UNIT_ROUNDOFF_32 = 2.0**-24
# Two answers rounded to DECIMALS places can differ by one unit of the last place more than
# the numbers they were rounded from.
ANSWER_ROUNDING = 10.0**-DECIMALS


def gamma(roundings: int, unit: float = UNIT_ROUNDOFF_32) -> float:
    """Higham's bound on the relative error of a chain of ``roundings`` operations."""
    assert roundings * unit < 1, roundings
    return roundings * unit / (1 - roundings * unit)


def rounding_tolerance(roundings: int, magnitude: ArrayLike) -> Any:
    """Two float32 evaluations of a computation of ``roundings`` operations on values of
    ``magnitude``: each within gamma of the exact result, so within twice that of each other.
    A float for one magnitude (what pytest.approx takes), an array for several."""
    bound = 2 * gamma(roundings) * np.asarray(magnitude, dtype=np.float64)
    return float(bound) if bound.ndim == 0 else bound


def network_roundings(cfg: ModelConfig) -> int:
    """The roundings on the longest path from the window's values to a quantile: the summed
    lengths of the inner products and reductions a value passes through."""
    tokens = cfg.n_patches + cfg.n_future
    skip_rank = cfg.skip_rank if cfg.skip_factorised else 0
    layer = (2 * cfg.d_model  # layer norm: mean and variance over the model width
             + cfg.d_model  # the query, key and value projections
             + cfg.d_model // cfg.n_heads + 2 * tokens  # scores, softmax, weighted values
             + cfg.d_model  # the attention's output projection
             + 2 * cfg.d_model  # the second layer norm
             + cfg.d_model + cfg.d_ff)  # the feed-forward's two products
    return (2 * cfg.context  # the window's mean and variance (instance normalisation)
            + 3 * cfg.patch_len  # a patch's values, mask and calendar into its token
            + cfg.n_layers * layer
            + tokens * cfg.d_model  # the flatten head
            + cfg.context + skip_rank  # the skip, from the context to the level
            + cfg.ensemble + 2)  # the members' mean, calibration and de-normalisation


def network_tolerance(cfg: ModelConfig, magnitude: ArrayLike) -> Any:
    """Two float32 forecasts of the same window, for windows whose values reach
    ``magnitude``: every quantity on the way is of that size or normalised by the window's
    scale, which the values bound."""
    return rounding_tolerance(network_roundings(cfg), magnitude)


def answer_tolerance(cfg: ModelConfig, magnitude: ArrayLike) -> Any:
    """Two forecasts as the API answers them, rounded to DECIMALS places."""
    return network_tolerance(cfg, magnitude) + ANSWER_ROUNDING

# Float64 arithmetic of a few terms (metrics, baselines, the mock's encodings) is compared with
# pytest.approx's default, 1e-6 relative: 10^9 times float64's rounding, far below what a wrong
# formula gives. Sampling bounds (dropout rates, a sample of cells) are not rounding: those
# tests say how many standard deviations they allow, and draw from fixed seeds.

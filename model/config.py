"""Hyper-parameters of the forecaster; importable without torch (metadata, runtime)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

AttentionKind = Literal["fused", "math"]

# Aim for this many patch tokens whatever the data frequency, so that hourly and 15-minute
# data cost the same work and the defaults need no hand-tuning; with the default two-week
# context a patch is one day, the dominant season of cell load.
TARGET_TOKENS = 14

# The skip goes through its bottleneck only where that is this many times narrower than both
# the context and the horizon (ModelConfig.skip_rank).
BOTTLENECK_SHARE = 4


@dataclass
class ModelConfig:
    context: int  # input steps
    horizon: int  # forecast steps
    patch_len: int = 0  # steps per patch token; 0 = derived from context
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 3
    d_ff: int = 128
    dropout: float = 0.1
    quantiles: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    attention: AttentionKind = "fused"
    ensemble: int = 3  # independently initialised members whose quantiles are averaged
    # One token per patch of the horizon, carrying its calendar. Set by training when the data
    # has a holiday calendar: without one the horizon's calendar follows from the window's,
    # and those tokens would only cost time (on Milan's week-ahead protocol, 21 tokens not 14).
    horizon_tokens: bool = False
    # Width of the bottleneck of the linear path from the context to the level (the skip)
    # where it is at most a quarter of both the context and the horizon; 0 = full rank;
    # -1 = d_model. Full rank, its weights grow with the
    # square of the steps per day; the head stays full rank (docs/decisions/low-rank-skip.md).
    skip_rank: int = -1

    def __post_init__(self) -> None:
        if self.context < 1 or self.horizon < 1:
            raise ValueError(f"context ({self.context}) and horizon ({self.horizon}) must be >= 1")
        if self.patch_len <= 0:
            self.patch_len = max(1, round(self.context / TARGET_TOKENS))
        self.patch_len = min(self.patch_len, self.context)
        qs = self.quantiles
        if not qs or any(not 0.0 < q < 1.0 for q in qs) or sorted(set(qs)) != list(qs):
            raise ValueError(f"quantiles must be increasing, unique and inside (0, 1): {qs}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {self.dropout}")
        if self.skip_rank < 0:
            self.skip_rank = self.d_model
        if self.ensemble < 1:
            raise ValueError(f"ensemble must be >= 1, not {self.ensemble}")
        if self.attention not in ("fused", "math"):
            raise ValueError(f"attention must be 'fused' or 'math', not {self.attention!r}")

    @property
    def n_patches(self) -> int:
        return math.ceil(self.context / self.patch_len)

    @property
    def n_future(self) -> int:
        """Tokens that carry the horizon's calendar, one per patch of it, if any."""
        return math.ceil(self.horizon / self.patch_len) if self.horizon_tokens else 0

    @property
    def n_tokens(self) -> int:
        return self.n_patches + self.n_future

    @property
    def skip_factorised(self) -> bool:
        """Whether the skip goes through its bottleneck of ``skip_rank``."""
        return 0 < BOTTLENECK_SHARE * self.skip_rank <= min(self.context, self.horizon)

    def describe_skip(self) -> str:
        """One line for the training log and report: the skip's shape, and why."""
        if self.skip_factorised:
            return (f"skip {self.context} -> {self.skip_rank} -> {self.horizon}: the context and "
                    f"the horizon are both at least {BOTTLENECK_SHARE}x its bottleneck")
        if not self.skip_rank:
            return f"skip {self.context} -> {self.horizon}, full rank (skip_rank 0)"
        return (f"skip {self.context} -> {self.horizon}, full rank: the context or the horizon "
                f"is under {BOTTLENECK_SHARE}x the bottleneck of {self.skip_rank}")

    def to_dict(self) -> dict:
        return asdict(self)

"""The forecaster: a PatchTST-style Transformer shared by all cells.

Input: a window of ``context`` raw KPI values per cell (NaN = missing) and the calendar
features of each step of the window and of the horizon after it. Output: ``horizon`` steps ×
quantiles, in the KPI's own units.

Everything between the raw values and the final quantiles lives in this graph (instance
normalisation, the missing mask, quantile ordering, de-normalisation), so the exported ONNX
model needs nothing but the calendar features from the caller.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import HOLIDAY, N_CALENDAR, N_CYCLIC


def instance_stats(
    values: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zero-filled values, mean and scale of each window's observed values, and its mask.

    The scale has a floor relative to the mean so a flat (or all-zero) window does not blow
    up the normalised values.
    """
    observed = ~torch.isnan(values)
    mask = observed.to(values.dtype)
    filled = torch.where(observed, values, torch.zeros_like(values))
    count = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    mean = filled.sum(dim=1, keepdim=True) / count
    var = (((filled - mean) * mask) ** 2).sum(dim=1, keepdim=True) / count
    scale = torch.maximum(torch.sqrt(var), 1e-3 * mean.abs() + 1e-4)
    return filled, mean, scale, mask


class ByteDropout(nn.Module):
    """Dropout whose mask comes from random bytes, eight per 64-bit draw.

    PyTorch's CPU ``bernoulli_`` (behind ``nn.Dropout``) draws one random number per element,
    which made dropout a fifth of a training step on two cores; one draw per eight elements
    costs about a tenth of that. The drop probability is rounded to a multiple of 1/256.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.threshold = round(p * 256)
        self.keep = 1.0 - self.threshold / 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.threshold == 0:
            return x
        # The full int64 range: random_() alone leaves every eighth byte below 128.
        words = torch.empty((x.numel() + 7) // 8, dtype=torch.int64,
                            device=x.device).random_(-(2**63), None)
        kept = words.view(torch.uint8)[: x.numel()].view(x.shape) >= self.threshold
        return x * kept * (1.0 / self.keep)


class SelfAttention(nn.Module):
    """Multi-head self-attention. No dropout on the attention weights (PatchTST's default):
    it would take SDPA off its fused CPU kernel and brought no accuracy on Milan."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attention = cfg.attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, tokens, self.n_heads, width // self.n_heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if self.attention == "fused":
            # FlashAttention / memory-efficient kernels on CUDA, fused kernels on CPU.
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, tokens, width))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff),
            nn.GELU(),
            nn.Linear(cfg.d_ff, cfg.d_model),
            ByteDropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class PatchTransformer(nn.Module):
    """One ensemble member: patch tokens -> Transformer -> ordered quantiles, all normalised."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_quantiles = len(cfg.quantiles)
        # Each token: the normalised values and the observed mask of its patch, the cyclic
        # calendar features of its last step and the share of its steps on a holiday.
        self.embed = nn.Linear(2 * cfg.patch_len + N_CALENDAR, cfg.d_model)
        # The holiday share starts with no weight: a calendar whose holidays never appear in
        # the training windows then changes nothing, rather than adding untrained noise.
        with torch.no_grad():
            self.embed.weight[:, -1] = 0.0
        self.position = nn.Parameter(torch.randn(1, cfg.n_tokens, cfg.d_model) * 0.02)
        self.dropout = ByteDropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.n_tokens * cfg.d_model, cfg.horizon * self.n_quantiles)
        # A linear path from the normalised context straight to the forecast level (as in
        # NLinear): the seasonal carry-over is linear, so the Transformer only models the rest.
        # Through a bottleneck where the context and horizon are long (ModelConfig.skip_rank).
        self.skip = (nn.Sequential(nn.Linear(cfg.context, cfg.skip_rank, bias=False),
                                   nn.Linear(cfg.skip_rank, cfg.horizon))
                     if cfg.skip_factorised else nn.Linear(cfg.context, cfg.horizon))

    def forward(self, tokens: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """tokens [B, n_tokens, 2 * patch_len + N_CALENDAR], context [B, context] -> [B, H, Q]."""
        x = self.dropout(self.embed(tokens) + self.position)
        for block in self.blocks:
            x = block(x)
        batch = tokens.shape[0]
        raw = self.head(self.ln_f(x).flatten(1)).view(batch, self.cfg.horizon, self.n_quantiles)
        level = self.skip(context).unsqueeze(-1)
        # Lowest quantile, then strictly positive steps upwards: quantiles can never cross.
        ordered = torch.cat([raw[..., :1], F.softplus(raw[..., 1:])], dim=-1).cumsum(dim=-1)
        return ordered + level


class Forecaster(nn.Module):
    """Instance normalisation and calendar tokens around an ensemble of PatchTransformers."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.pad = cfg.n_patches * cfg.patch_len - cfg.context
        # The calendar steps the tokens read: the window's, then the horizon's if it has tokens.
        self.calendar_steps = cfg.context + (cfg.horizon if cfg.n_future else 0)
        self.future_pad = cfg.n_future * cfg.patch_len - (self.calendar_steps - cfg.context)
        self.members = nn.ModuleList(PatchTransformer(cfg) for _ in range(cfg.ensemble))
        # Per-quantile offsets, in units of the window's scale, set after training by
        # conformal calibration on validation windows (training.calibrate); zero until then.
        self.register_buffer("calibration", torch.zeros(len(cfg.quantiles)))
        # Calendar steps (window, then horizon) that give each token its cyclic features: the
        # last step of its patch; and how many of its steps are real, not padding.
        patch, window_ends = cfg.patch_len, torch.arange(1, cfg.n_patches + 1) * cfg.patch_len
        future_ends = torch.arange(1, cfg.n_future + 1) * patch
        last_steps = torch.cat([window_ends - 1 - self.pad,
                                cfg.context + future_ends.clamp(max=cfg.horizon) - 1])
        steps = torch.cat([(window_ends - self.pad).clamp(max=patch).clamp(min=1),
                           (cfg.horizon - future_ends + patch).clamp(max=patch)])
        self.register_buffer("token_last_step", last_steps, persistent=False)
        self.register_buffer("token_steps", steps.to(torch.get_default_dtype()), persistent=False)

    def set_attention(self, kind: str) -> None:
        """Switch every layer between the fused and the plain-math attention."""
        for member in self.members:
            for block in member.blocks:
                block.attn.attention = kind
        self.cfg.attention = kind

    def _normalised(
        self, values: torch.Tensor, calendar: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Member outputs [K, B, H, Q] in units of each window's scale, with its mean/scale.

        With ``horizon_tokens`` the window's patches are followed by one token per patch of
        the horizon: no values and a zero mask, but the calendar, so a holiday ahead is known
        before it arrives.
        """
        filled, mean, scale, mask = instance_stats(values)
        normed = (filled - mean) / scale * mask
        batch, patch, cfg = values.shape[0], self.cfg.patch_len, self.cfg
        around = (self.pad, cfg.n_future * patch)  # the horizon's tokens have no values
        holiday = F.pad(calendar[:, : self.calendar_steps, HOLIDAY], (self.pad, self.future_pad))
        tokens = torch.cat(
            [
                F.pad(normed, around).view(batch, cfg.n_tokens, patch),
                F.pad(mask, around).view(batch, cfg.n_tokens, patch),
                calendar[:, self.token_last_step, :N_CYCLIC],
                (holiday.view(batch, cfg.n_tokens, patch).sum(-1) / self.token_steps)
                .unsqueeze(-1),
            ],
            dim=-1,
        )
        # The members may compute in a lower precision than the window (the GPU graph,
        # model.export.low_precision): the statistics and the de-normalisation stay in the
        # window's, where raw KPI values keep their digits and cannot overflow float16.
        body = self.members[0].embed.weight.dtype
        outputs = torch.stack([member(tokens.to(body), normed.to(body))
                               for member in self.members]).to(values.dtype)
        return outputs, mean.unsqueeze(-1), scale.unsqueeze(-1)

    def forward(self, values: torch.Tensor, calendar: torch.Tensor,
                members: bool = False) -> torch.Tensor:
        """values [B, context] (NaN = missing), calendar [B, context + horizon, N_CALENDAR]
        -> [B, horizon, Q]. The horizon's calendar is read only with ``horizon_tokens``.

        With ``members`` it returns each member's own forecast [K, B, H, Q] instead: what
        training fits, member by member (a forward call, so DistributedDataParallel sees it).
        """
        outputs, mean, scale = self._normalised(values, calendar)
        if members:
            return F.relu(outputs * scale + mean)
        # Averaging ordered quantiles keeps them ordered; so does a widening calibration.
        combined = outputs.mean(dim=0) + self.calibration
        # KPIs are non-negative; relu keeps the quantile order.
        return F.relu(combined * scale + mean)


def pinball_terms(
    forecast: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed pinball loss over observed targets, in units of each window's scale, and how
    many terms it sums: kept apart so that ranks holding different batches can pool them.

    Dividing by the window's own scale weighs a quiet cell and a busy one alike, which is what
    a global model across cells of very different load needs.
    """
    observed = ~torch.isnan(target)
    target = torch.where(observed, target, torch.zeros_like(target))
    error = (target.unsqueeze(-1) - forecast) / scale.unsqueeze(-1)
    loss = torch.maximum(quantiles * error, (quantiles - 1.0) * error)
    weight = observed.unsqueeze(-1).to(loss.dtype).expand_as(loss)
    return (loss * weight).sum(), weight.sum()

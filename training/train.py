"""The training loop: sampled windows, pinball loss, time-based early stopping."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from model.config import ModelConfig
from model.network import Forecaster, instance_stats, pinball_loss
from training.calibrate import calibrate
from training.device import mixed_precision, resolve_device, seed_everything, to_tensors
from training.panel import DataError, Panel
from training.windows import Windows

log = logging.getLogger(__name__)

MAX_VALIDATION_WINDOWS = 8192


@dataclass
class TrainConfig:
    max_minutes: float = 5.0
    max_epochs: int = 60
    steps_per_epoch: int = 100
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    patience: int = 6
    ema_decay: float = 0.995  # 0 disables the weight average
    validation_fraction: float = 0.15
    seed: int = 0
    device: str = "auto"  # auto = cuda when torch sees a GPU, else cpu


@dataclass
class TrainResult:
    network: Forecaster
    best_validation_loss: float
    epochs: int
    seconds: float
    stopped_by: str  # "early-stopping", "time-budget" or "max-epochs"
    train_windows: int
    validation_windows: int
    validation_start: int  # first step whose values only validation windows forecast
    curve: list[tuple[float, float]] = field(default_factory=list)  # (train, validation)


def validation_steps(n_steps: int, horizon: int, fraction: float) -> int:
    return max(horizon, round(fraction * n_steps))


def _loss(
    network: Forecaster, batch: tuple[np.ndarray, ...], quantiles: torch.Tensor
) -> torch.Tensor:
    device = quantiles.device
    values, calendar, target = to_tensors(batch, device)
    _, _, scale, _ = instance_stats(values)
    with mixed_precision(device):
        if not network.training:
            forecast = network(values, calendar).float()
            return pinball_loss(forecast, target, quantiles, scale)
        # Each member fits on its own, so the members stay diverse and their average gains.
        members = network.member_forecasts(values, calendar).float()
    return torch.stack([pinball_loss(m, target, quantiles, scale) for m in members]).mean()


def split_windows(
    windows: Windows, cfg: TrainConfig, rng: np.random.Generator
) -> tuple[int, np.ndarray, np.ndarray]:
    """First validation step, training pairs, validation pairs: split in time, no overlap."""
    n_steps, context, horizon = windows.values.shape[1], windows.context, windows.horizon
    val_steps = validation_steps(n_steps, horizon, cfg.validation_fraction)
    val_start = n_steps - val_steps
    train_pairs = windows.pairs(0, val_start - horizon)
    val_pairs = windows.pairs(val_start, n_steps, stride=max(1, horizon // 4))
    if len(train_pairs) == 0 or len(val_pairs) == 0:
        raise DataError(
            f"too little usable history for context {context} + horizon {horizon} + "
            f"validation {val_steps} steps: the longest series has {n_steps} steps, at least "
            f"{context + horizon + val_steps} with half of them observed are needed "
            "(lower --context or --horizon)"
        )
    if len(val_pairs) > MAX_VALIDATION_WINDOWS:
        keep = rng.choice(len(val_pairs), MAX_VALIDATION_WINDOWS, replace=False)
        val_pairs = val_pairs[np.sort(keep)]
    return val_start, train_pairs, val_pairs


def train(
    panel: Panel, model_cfg: ModelConfig, cfg: TrainConfig, progress: bool = True
) -> TrainResult:
    """Fit a forecaster on ``panel``; the last ``validation_fraction`` of time validates."""
    device = resolve_device(cfg.device)
    seed_everything(cfg.seed, device)
    rng = np.random.default_rng(cfg.seed)
    windows = Windows.from_panel(panel, model_cfg.context, model_cfg.horizon)
    val_start, train_pairs, val_pairs = split_windows(windows, cfg, rng)
    log.info("training windows %d, validation windows %d", len(train_pairs), len(val_pairs))

    network = Forecaster(model_cfg).to(device)
    # An exponential moving average of the weights is what gets validated and kept: on small,
    # noisy KPI data it smooths out the last steps' noise like an ensemble would, for free.
    averaged = (
        torch.optim.swa_utils.AveragedModel(
            network, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(cfg.ema_decay)
        )
        if cfg.ema_decay > 0
        else None
    )
    kept = averaged.module if averaged is not None else network
    optimiser = torch.optim.AdamW(
        network.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=0.5, patience=2)
    quantiles = torch.tensor(model_cfg.quantiles, device=device)
    steps_per_epoch = min(cfg.steps_per_epoch, math.ceil(len(train_pairs) / cfg.batch_size))
    best_loss, best_state, best_epoch = math.inf, None, 0
    curve: list[tuple[float, float]] = []
    started = time.monotonic()
    deadline = started + cfg.max_minutes * 60.0
    stopped_by = "max-epochs"
    bar = tqdm(
        total=cfg.max_epochs * steps_per_epoch, disable=not progress, unit="batch",
        desc="train", dynamic_ncols=True, mininterval=1.0,
    )
    epoch = 0
    for epoch in range(1, cfg.max_epochs + 1):
        network.train()
        losses = []
        for _ in range(steps_per_epoch):
            picked = train_pairs[rng.integers(0, len(train_pairs), cfg.batch_size)]
            loss = _loss(network, windows.batch(picked), quantiles)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
            optimiser.step()
            if averaged is not None:
                averaged.update_parameters(network)
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", val=f"{best_loss:.4f}", epoch=epoch)
        val_loss = evaluate_loss(kept, windows, val_pairs, quantiles, cfg.batch_size * 8)
        curve.append((float(np.mean(losses)), val_loss))
        scheduler.step(val_loss)
        if val_loss < best_loss:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: v.detach().clone() for k, v in kept.state_dict().items()}
        if epoch - best_epoch >= cfg.patience:
            stopped_by = "early-stopping"
            break
        now = time.monotonic()
        if now >= deadline:
            stopped_by = "time-budget"
            break
        # Let the bar's ETA reflect the time budget, not only the epoch cap.
        per_epoch = (now - started) / epoch
        fits = epoch + max(1, math.ceil((deadline - now) / per_epoch))
        bar.total = min(cfg.max_epochs, fits) * steps_per_epoch
        bar.refresh()
    bar.close()
    network.load_state_dict(best_state)
    offsets = calibrate(network, windows, val_pairs)
    log.info("calibration offsets (scale units) %s", np.round(offsets, 3).tolist())
    seconds = time.monotonic() - started
    log.info(
        "stopped by %s after %d epochs in %.0f s on %s; best validation loss %.4f (epoch %d)",
        stopped_by, epoch, seconds, device, best_loss, best_epoch,
    )
    return TrainResult(
        network.cpu(), best_loss, epoch, seconds, stopped_by, len(train_pairs), len(val_pairs),
        val_start, curve,
    )


@torch.no_grad()
def evaluate_loss(
    network: Forecaster,
    windows: Windows,
    pairs: np.ndarray,
    quantiles: torch.Tensor,
    batch_size: int,
) -> float:
    network.eval()
    total, count = 0.0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        total += _loss(network, windows.batch(chunk), quantiles).item() * len(chunk)
        count += len(chunk)
    return total / max(count, 1)

"""The training loop: sampled windows, pinball loss, time-based early stopping."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from kpi_forecast.data.panel import DataError, Panel, observed_spans
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.network import Forecaster, instance_stats, pinball_terms
from kpi_forecast.training.averaging import WeightAverage
from kpi_forecast.training.calibrate import calibrate
from kpi_forecast.training.checkpoint import Checkpoint
from kpi_forecast.training.defaults import validation_steps
from kpi_forecast.training.device import (
    mixed_precision,
    resolve_device,
    seed_everything,
    to_tensors,
)
from kpi_forecast.training.distributed import Group, ShardedPairs
from kpi_forecast.training.windows import Windows

log = logging.getLogger(__name__)

MAX_VALIDATION_WINDOWS = 8192
EVALUATION_BATCH = 2048
MAX_AUTO_BATCH, MIN_AUTO_BATCH = 256, 32


@dataclass
class TrainConfig:
    max_minutes: float = 5.0
    max_epochs: int = 60
    steps_per_epoch: int = 100
    batch_size: int = 0  # windows per optimiser step; 0 = auto_batch_size
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    patience: int = 3  # the EMA and the best epoch kept make a longer wait buy nothing on Milan
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
    stopped_by: str  # "early-stopping", "time-budget", "max-epochs" or "signal"
    train_windows: int
    validation_windows: int
    validation_start: int  # first step whose values only validation windows forecast
    curve: list[tuple[float, float]] = field(default_factory=list)  # (train, validation)
    samples_per_second: float = 0.0  # training windows per second of optimiser steps, all ranks
    batch_size: int = 0  # windows per optimiser step, all ranks
    batch_choice: str = ""  # the batch size and why (describe_batch)
    validation_pass_s: float = 0.0  # the last pass over the validation windows, as measured


def auto_batch_size(train_windows: int, steps_per_epoch: int) -> int:
    """Windows per optimiser step when none is given: 256, halved (down to 32) while a pass
    over the training windows would take fewer than ``steps_per_epoch`` steps.

    A small training set (a few dozen cells, a single series) otherwise gets only a few hundred
    optimiser steps from a time budget or the epoch cap: on the sample's 24 cells under a
    1-minute budget, batches of 64 gave a day-ahead MAE 8 % lower than batches of 256. A large
    one (Milan's 281 cells) keeps 256, where smaller batches stopped early and scored worse.
    """
    batch = MAX_AUTO_BATCH
    while batch > MIN_AUTO_BATCH and batch * steps_per_epoch > train_windows:
        batch //= 2
    return batch


def describe_batch(batch: int, train_windows: int, steps_per_epoch: int, asked: int) -> str:
    """Why the batch is the size it is, for the training log and report."""
    if asked:
        return f"batch {batch} windows, as asked"
    if batch == MAX_AUTO_BATCH:
        return (f"batch {batch} windows: the {train_windows} training windows fill "
                f"{steps_per_epoch} steps of it")
    if batch * steps_per_epoch > train_windows:
        return (f"batch {batch} windows, the smallest the automatic choice takes: the "
                f"{train_windows} training windows fill fewer than {steps_per_epoch} steps")
    return (f"batch {batch} windows, halved from {MAX_AUTO_BATCH} so that the "
            f"{train_windows} training windows fill {steps_per_epoch} steps a pass: few "
            "windows get more optimiser steps")


def _terms(
    model: torch.nn.Module, batch: tuple[np.ndarray, ...], quantiles: torch.Tensor,
    members: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed pinball loss of ``batch`` and its number of terms.

    In training each ensemble member fits on its own (``members``), so the members stay
    diverse and their average gains; their sums are averaged.
    """
    device = quantiles.device
    values, calendar, target = to_tensors(batch, device)
    _, _, scale, _ = instance_stats(values)
    with mixed_precision(device):
        forecast = model(values, calendar, members=members).float()
    if not members:
        return pinball_terms(forecast, target, quantiles, scale)
    terms = [pinball_terms(member, target, quantiles, scale) for member in forecast]
    return torch.stack([total for total, _ in terms]).mean(), terms[0][1]


def split_windows(
    windows: Windows, cfg: TrainConfig, rng: np.random.Generator, group: Group
) -> tuple[int, ShardedPairs, ShardedPairs]:
    """First validation step, training pairs, validation pairs: split in time, no overlap."""
    n_steps, context, horizon = windows.values.shape[1], windows.context, windows.horizon
    longest = max(group.gather(int(observed_spans(windows.values).max(initial=0))))
    val_steps = validation_steps(longest, horizon, cfg.validation_fraction)
    val_start = n_steps - val_steps
    train_pairs = ShardedPairs.across(windows.pairs(0, val_start - horizon), group)
    val_pairs = ShardedPairs.across(
        windows.pairs(val_start, n_steps, stride=max(1, horizon // 4)), group)
    if len(train_pairs) == 0 or len(val_pairs) == 0:
        raise DataError(
            f"too little usable history for context {context} + horizon {horizon} + "
            f"validation {val_steps} steps: the longest series spans {longest} steps, at least "
            f"{context + horizon + val_steps} with half of them observed are needed "
            "(lower --context or --horizon)"
        )
    if len(val_pairs) > MAX_VALIDATION_WINDOWS:
        keep = rng.choice(len(val_pairs), MAX_VALIDATION_WINDOWS, replace=False)
        val_pairs = val_pairs.subset(np.sort(keep))
    return val_start, train_pairs, val_pairs


def train(
    panel: Panel, model_cfg: ModelConfig, cfg: TrainConfig, progress: bool = True,
    group: Group | None = None, checkpoint: Path | None = None, reserve_s: float = 0.0,
    reserve_passes: int = 0, stop: threading.Event | None = None,
) -> TrainResult:
    """Fit a forecaster on ``panel``; the last ``validation_fraction`` of time validates.

    ``cfg.max_minutes`` bounds the whole run, less what the caller keeps for its own work:
    ``reserve_s`` seconds (reading the data before, export and report after) and the time of
    ``reserve_passes`` passes over the validation windows (work after that scales with them,
    such as a validation backtest). The calibration after the loop, one more pass, is kept
    too; a pass is timed at each epoch's validation. An epoch that would end past that point
    is not started, and at least one always is.

    With a distributed ``group``, ``panel`` is this rank's block of cells (every rank on the
    same time grid) and the result is the same on every rank. With ``checkpoint`` the state is
    saved there after each epoch, and a run with the same data and settings resumes from it.

    ``stop`` set (SIGTERM, Ctrl-C) ends the run after the optimiser step under way, on every
    rank at the same step: that epoch is validated, and the best weights so far are kept as
    at the end of the budget.
    """
    group = group or Group(device=resolve_device(cfg.device))
    device = group.device
    seed_everything(cfg.seed, device)
    rng = np.random.default_rng(cfg.seed)
    windows = Windows.from_panel(panel, model_cfg.context, model_cfg.horizon,
                                 holiday_as_sunday=model_cfg.horizon_tokens, wall_clock=True)
    if windows.panel_steps is not None and group.main:
        log.info("windows read on the %s wall clock: its UTC offset changes within the data "
                 "(DST)", panel.calendar_tz)
    val_start, train_pairs, val_pairs = split_windows(windows, cfg, rng, group)
    batch_size = cfg.batch_size or auto_batch_size(len(train_pairs), cfg.steps_per_epoch)
    batch_choice = describe_batch(batch_size, len(train_pairs), cfg.steps_per_epoch,
                                  cfg.batch_size)
    if group.main:
        log.info("training windows %d, validation windows %d, ranks %d; %s",
                 len(train_pairs), len(val_pairs), group.world, batch_choice)

    network = Forecaster(model_cfg).to(device)
    # DDP sums the gradients of the ranks (with the weighting in the step below) and starts
    # every rank from rank 0's weights.
    model = (
        torch.nn.parallel.DistributedDataParallel(
            network, device_ids=[device.index] if device.type == "cuda" else None)
        if group.distributed else network
    )
    # An exponential moving average of the weights is what gets validated and kept: on small,
    # noisy KPI data it smooths out the last steps' noise like an ensemble would, for free.
    averaged = WeightAverage(network, cfg.ema_decay) if cfg.ema_decay > 0 else None
    kept = averaged.module if averaged is not None else network
    # The fused kernel updates every parameter in one call, faster than the per-tensor loop
    # and the same update up to float rounding.
    parameters = list(network.parameters())  # gathered once: a module walk a step adds up
    optimiser = torch.optim.AdamW(
        parameters, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, fused=True
    )
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=0.5, patience=2)
    quantiles = torch.tensor(model_cfg.quantiles, device=device)
    steps_per_epoch = min(cfg.steps_per_epoch, math.ceil(len(train_pairs) / batch_size))
    best_loss, best_state, best_epoch = math.inf, None, 0
    curve: list[tuple[float, float]] = []
    first_epoch, spent, step_seconds, pass_s, after_s = 1, 0.0, 0.0, 0.0, 0.0
    saver = None
    if checkpoint is not None:
        saver = Checkpoint(checkpoint, Checkpoint.key_of(
            model=model_cfg.to_dict(), train={**asdict(cfg), "max_minutes": None,
                                              "max_epochs": None, "device": None},
            steps=panel.n_steps, start=panel.index[0], train_pairs=len(train_pairs),
            val_pairs=len(val_pairs)))
        if (state := saver.load()) is not None:
            network.load_state_dict(state["network"])
            if averaged is not None:
                averaged.load_state_dict(state["averaged"])
            optimiser.load_state_dict(state["optimiser"])
            scheduler.load_state_dict(state["scheduler"])
            best_loss, best_epoch, best_state = state["best_loss"], state["best_epoch"], \
                state["best_state"]
            curve = [tuple(point) for point in state["curve"]]
            rng.bit_generator.state = state["rng"]
            if len(state["torch_rng"]) == group.world:  # dropout streams, one per rank
                torch.set_rng_state(state["torch_rng"][group.rank])
            first_epoch, spent = state["epoch"] + 1, state["seconds"]
            step_seconds = state["step_seconds"]
            if group.main:
                log.info("resuming from %s after epoch %d", checkpoint, state["epoch"])
    started = time.monotonic() - spent
    deadline = started + cfg.max_minutes * 60.0 - reserve_s
    stopped_by = "max-epochs"
    bar = tqdm(
        total=cfg.max_epochs * steps_per_epoch, disable=not (progress and group.main),
        unit="batch", desc="train", dynamic_ncols=True, mininterval=1.0,
        initial=(first_epoch - 1) * steps_per_epoch,
    )
    epoch = first_epoch - 1
    steps_taken = epoch * steps_per_epoch
    for epoch in range(first_epoch, cfg.max_epochs + 1):
        network.train()
        losses = []
        stopping: str | None = None
        for _ in range(steps_per_epoch):
            tick = time.monotonic()
            picked = train_pairs.take(rng.integers(0, len(train_pairs), batch_size))
            weight = 1.0
            if len(picked) == 0:  # no part of this batch is ours: join the reduction anyway
                picked, weight = train_pairs.local[:1], 0.0
            total, count = _terms(model, windows.batch(picked), quantiles, members=True)
            # The stop request, and the deadline passed within an epoch (an epoch that alone
            # takes longer than the budget, as with many tokens per window), ride on the
            # reduction every step makes anyway: one rank told is every rank told, at the
            # same step.
            asked = float(stop is not None and stop.is_set())
            late = float(time.monotonic() + pass_s + after_s > deadline)
            pooled_total, pooled_count, stops, lates = group.sum(
                [weight * total.item(), weight * count.item(), asked, late])
            # Each rank's share of the global mean; DDP averages over ranks, hence the world.
            loss = total * (weight * group.world / max(pooled_count, 1.0))
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimiser.step()
            if averaged is not None:
                averaged.update()
            step_seconds += time.monotonic() - tick
            steps_taken += 1
            losses.append(pooled_total / max(pooled_count, 1.0))
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", val=f"{best_loss:.4f}", epoch=epoch)
            if stops > 0 or lates > 0:
                stopping = "signal" if stops > 0 else "time-budget"
                break
        validating = time.monotonic()
        val_loss = evaluate_loss(kept, windows, val_pairs, quantiles, EVALUATION_BATCH, group)
        pass_s = time.monotonic() - validating
        after_s = (1 + reserve_passes) * pass_s  # the calibration's pass and the caller's
        curve.append((float(np.mean(losses)), val_loss))
        scheduler.step(val_loss)
        if val_loss < best_loss:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: v.detach().clone() for k, v in kept.state_dict().items()}
        if stopping:
            stopped_by = stopping
            break
        if saver is not None:
            torch_rng = group.gather(torch.get_rng_state())  # a collective: every rank joins
        if saver is not None and group.main:
            saver.save({
                "epoch": epoch, "seconds": time.monotonic() - started,
                "network": network.state_dict(),
                "averaged": averaged.state_dict() if averaged is not None else {},
                "optimiser": optimiser.state_dict(), "scheduler": scheduler.state_dict(),
                "best_loss": best_loss, "best_epoch": best_epoch, "best_state": best_state,
                "curve": curve, "rng": rng.bit_generator.state, "torch_rng": torch_rng,
                "step_seconds": step_seconds,
            })
        if epoch - best_epoch >= cfg.patience:
            stopped_by = "early-stopping"
            break
        now = time.monotonic()
        per_epoch = (now - started) / epoch
        # Every rank must stop at the same epoch: one rank that could not finish the next
        # epoch in time stops them all.
        if group.any(now + per_epoch + after_s > deadline):
            stopped_by = "time-budget"
            break
        # Let the bar's ETA reflect the time budget, not only the epoch cap.
        fits = epoch + max(1, math.floor((deadline - after_s - now) / per_epoch))
        bar.total = min(cfg.max_epochs, fits) * steps_per_epoch
        bar.refresh()
    bar.close()
    if saver is not None and group.main:
        saver.remove()
    network.load_state_dict(best_state)
    offsets = calibrate(network, windows, val_pairs.local, group=group)
    seconds = time.monotonic() - started
    if group.main:
        log.info("calibration offsets (scale units) %s", np.round(offsets, 3).tolist())
        log.info(
            "stopped by %s after %d epochs in %.0f s on %s x %d; best validation loss %.4f "
            "(epoch %d)", stopped_by, epoch, seconds, device, group.world, best_loss, best_epoch,
        )
    return TrainResult(
        network.cpu(), best_loss, epoch, seconds, stopped_by, len(train_pairs), len(val_pairs),
        windows.panel_step(val_start), curve, steps_taken * batch_size / max(step_seconds, 1e-9),
        batch_size, batch_choice, pass_s,
    )


@torch.no_grad()
def evaluate_loss(
    network: Forecaster,
    windows: Windows,
    pairs: ShardedPairs,
    quantiles: torch.Tensor,
    batch_size: int,
    group: Group | None = None,
) -> float:
    """Mean pinball loss over every observed target of ``pairs``, pooled across ranks."""
    network.eval()
    total, count = 0.0, 0.0
    for start in range(0, len(pairs.local), batch_size):
        chunk = pairs.local[start : start + batch_size]
        chunk_total, chunk_count = _terms(network, windows.batch(chunk), quantiles,
                                          members=False)
        total += chunk_total.item()
        count += chunk_count.item()
    pooled_total, pooled_count = (group or Group()).sum([total, count])
    return float(pooled_total / max(pooled_count, 1.0))

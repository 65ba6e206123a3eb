"""The training loop's own rules: the weight average, the time budget, and when the horizon's
calendar is worth tokens."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

import kpi_forecast.training.train as train_loop
from kpi_forecast.data.panel import Panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.network import Forecaster
from kpi_forecast.training.averaging import WeightAverage
from kpi_forecast.training.fit import fit, horizon_tokens_wanted
from kpi_forecast.training.train import TrainConfig, train


def panel(start: str = "2024-01-01", days: int = 21, holidays: str = "") -> Panel:
    rng = np.random.default_rng(0)
    steps = days * 24
    hours = np.arange(steps) % 24
    values = 10 + 5 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 0.5, (4, steps))
    index = pd.date_range(start, periods=steps, freq="1h", tz="Europe/Paris").tz_convert("UTC")
    return Panel([f"c{i}" for i in range(4)], index, values.astype(np.float32), "1h", "load",
                 calendar_tz="Europe/Paris", holidays=holidays)


def test_the_weight_average_is_torchs_exponential_average() -> None:
    torch.manual_seed(0)
    network = Forecaster(ModelConfig(context=48, horizon=12))
    ours = WeightAverage(network, 0.9)
    reference = torch.optim.swa_utils.AveragedModel(
        network, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    for _ in range(5):
        with torch.no_grad():
            for parameter in network.parameters():
                parameter.add_(torch.randn_like(parameter))
        ours.update()
        reference.update_parameters(network)
    averaged, expected = ours.module.state_dict(), reference.module.state_dict()
    assert all(torch.equal(averaged[name], expected[name]) for name in expected)
    head = "members.0.head.weight"
    assert not torch.equal(averaged[head], network.state_dict()[head])  # an average, not a copy

    restored = WeightAverage(network, 0.9)
    restored.load_state_dict(ours.state_dict())
    assert restored.updates == 5
    assert torch.equal(restored.module.state_dict()[head], averaged[head])


class StepClock:
    """A monotonic clock that moves on by ``tick`` seconds each time it is read."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now


@pytest.mark.parametrize(("reserve_s", "reserve_passes"), [(0.0, 0), (0.3, 0), (0.3, 4)])
def test_no_epoch_is_started_that_would_end_past_the_budget(
    monkeypatch: pytest.MonkeyPatch, reserve_s: float, reserve_passes: int
) -> None:
    """Past the loop come the calibration and the caller's work, one validation pass each,
    timed as the loop validates: room is kept for them."""
    clock = StepClock(1 / 64)  # exact in binary: no rounding to blur the bound
    monkeypatch.setattr(train_loop, "time", SimpleNamespace(monotonic=clock.monotonic))
    budget_s = 1.0
    cfg = TrainConfig(max_minutes=budget_s / 60, max_epochs=100, steps_per_epoch=5,
                      batch_size=16, patience=100)
    result = train(panel(), ModelConfig(context=7 * 24, horizon=24), cfg, progress=False,
                   reserve_s=reserve_s, reserve_passes=reserve_passes)
    # The loop ends in time (the result's clock reading is one tick after the loop's)...
    loop_s, per_epoch = result.seconds - clock.tick, result.seconds / result.epochs
    after_s = (1 + reserve_passes) * result.validation_pass_s
    assert result.stopped_by == "time-budget" and result.validation_pass_s > 0
    assert loop_s + after_s <= budget_s - reserve_s
    assert loop_s + per_epoch + after_s > budget_s - reserve_s  # ...not an epoch early


def test_an_epoch_longer_than_the_budget_stops_at_the_step_that_passes_it(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with many tokens per window: the first epoch alone would take several budgets."""
    clock = StepClock(1 / 64)
    monkeypatch.setattr(train_loop, "time", SimpleNamespace(monotonic=clock.monotonic))
    steps: list[int] = []
    real_terms = train_loop._terms

    def counted(*args, **kwargs):
        if kwargs["members"]:
            steps.append(1)
        return real_terms(*args, **kwargs)

    monkeypatch.setattr(train_loop, "_terms", counted)
    budget_s, steps_per_epoch = 1.0, 500
    cfg = TrainConfig(max_minutes=budget_s / 60, max_epochs=3, steps_per_epoch=steps_per_epoch,
                      batch_size=16, patience=100)
    result = train(panel(), ModelConfig(context=7 * 24, horizon=24), cfg, progress=False)
    assert result.stopped_by == "time-budget" and result.epochs == 1
    # The clock is read a few times a step: the step that passed the deadline was the last.
    assert 0 < len(steps) < budget_s / clock.tick < steps_per_epoch
    assert np.isfinite(result.best_validation_loss)


def test_a_stop_request_ends_the_run_after_the_step_under_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    steps: list[int] = []

    def counted(*args, **kwargs):  # the request comes during the third optimiser step
        if kwargs["members"]:  # a training step; validation asks without
            steps.append(1)
            if len(steps) == 3:
                stop.set()
        return real_terms(*args, **kwargs)

    real_terms = train_loop._terms
    monkeypatch.setattr(train_loop, "_terms", counted)
    cfg = TrainConfig(max_minutes=10, max_epochs=100, steps_per_epoch=5, batch_size=16,
                      patience=100)
    result = train(panel(), ModelConfig(context=7 * 24, horizon=24), cfg, progress=False,
                   stop=stop)
    assert (result.stopped_by, result.epochs, len(steps)) == ("signal", 1, 3)
    assert len(result.curve) == 1  # the stopped epoch was validated
    assert math.isfinite(result.best_validation_loss)


def test_fit_counts_the_time_spent_before_it_against_the_budget(tmp_path: Path) -> None:
    """A run that spent its whole budget reading the data trains one epoch, no more."""
    meta, _ = fit(panel(), tmp_path, ModelConfig(context=7 * 24, horizon=24),
                  TrainConfig(max_minutes=1.0, max_epochs=50, steps_per_epoch=5, patience=100),
                  source="toy", progress=False, started=time.monotonic() - 60.0)
    assert (meta.training["epochs"], meta.training["stopped_by"]) == (1, "time-budget")


@pytest.mark.parametrize(("start", "holidays", "horizon", "wanted"), [
    # Easter Monday (1 April) is the first day the training windows forecast.
    ("2024-03-18", "FR", 7 * 24, True),
    ("2024-03-18", "", 7 * 24, False),
    ("2024-03-18", "", 24, False),
    # Easter Monday falls in the first window's context only, 1 May in the validation span:
    # a week ahead has nothing to learn from; a day ahead, one patch, reads a holiday as a
    # Sunday.
    ("2024-03-20", "FR", 7 * 24, False),
    ("2024-03-20", "FR", 24, True),
    # 14 July 2024 is a Sunday: a holiday on a weekend changes nothing to learn from.
    ("2024-06-20", "FR", 7 * 24, False),
])
def test_horizon_tokens_where_a_holiday_ahead_can_be_learnt_or_read_as_a_sunday(
    start: str, holidays: str, horizon: int, wanted: bool
) -> None:
    data = panel(start, days=49, holidays=holidays)
    assert horizon_tokens_wanted(data, ModelConfig(context=14 * 24, horizon=horizon),
                                 TrainConfig()) is wanted


def test_a_week_ahead_model_with_no_holiday_to_learn_from_takes_a_sundays_forecast(
    tmp_path: Path
) -> None:
    """With no holiday on a working day before its validation span, a week-ahead model has no
    horizon tokens and records that a holiday ahead takes the forecast of a Sunday (a day-ahead
    model's token reads it as a Sunday instead: tests/test_holidays.py)."""
    meta, _ = fit(panel("2024-03-20", days=49, holidays="FR"), tmp_path,
                  ModelConfig(context=14 * 24, horizon=7 * 24),
                  TrainConfig(max_epochs=1, steps_per_epoch=2), source="toy", progress=False,
                  gpu_graph=False)
    assert not meta.config.horizon_tokens
    assert meta.holiday_reading == "from_sunday"
    # Its 49 days from 20 March hold the spring switch: the windows read the wall clock.
    assert ("public holidays FR, those on working days in the horizon forecast as the horizon's "
            "nearest Sunday; its UTC offset changes within the data (DST): the windows are read "
            "on its wall clock)." in (tmp_path / "report.md").read_text())

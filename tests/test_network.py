"""The forecaster's contract: fused = math attention, order-free batches, ordered quantiles."""

import numpy as np
import pandas as pd
import pytest
import torch

from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import HOLIDAY, N_CALENDAR
from kpi_forecast.model.network import ByteDropout, Forecaster, PatchTransformer, pinball_terms
from tests.tolerance import network_tolerance, rounding_tolerance


def largest(values: torch.Tensor) -> float:
    return float(values.nan_to_num().abs().max())


def make(context: int = 96, horizon: int = 12, **kwargs: object) -> Forecaster:
    torch.manual_seed(0)
    return Forecaster(ModelConfig(context=context, horizon=horizon, **kwargs)).eval()


def inputs(batch: int, context: int = 96, seed: int = 1,
           horizon: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    values = torch.rand(batch, context, generator=gen) * 100.0
    values[0, 10:30] = float("nan")
    values[1, ::3] = float("nan")
    calendar = torch.randn(batch, context + horizon, N_CALENDAR, generator=gen)
    return values, calendar


def test_fused_and_math_attention_agree() -> None:
    network = make()
    values, calendar = inputs(32)
    with torch.no_grad():
        fused = network(values, calendar)
        network.set_attention("math")
        plain = network(values, calendar)
    assert torch.isfinite(fused).all()
    assert (fused - plain).abs().max().item() <= network_tolerance(network.cfg, largest(values))


def test_forecasts_do_not_depend_on_batch_order() -> None:
    network = make()
    values, calendar = inputs(16)
    order = torch.randperm(16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        together = network(values, calendar)
        shuffled = network(values[order], calendar[order])
        alone = network(values[5:6], calendar[5:6])
    within = network_tolerance(network.cfg, largest(values))  # other batch sizes, other blocks
    torch.testing.assert_close(shuffled, together[order], rtol=0, atol=within)
    torch.testing.assert_close(alone, together[5:6], rtol=0, atol=within)


def test_quantiles_never_cross_and_are_non_negative() -> None:
    network = make(quantiles=[0.05, 0.1, 0.5, 0.9, 0.95])
    with torch.no_grad():
        for member in network.members:  # wild heads still may not cross
            for param in member.head.parameters():
                param.normal_(0.0, 5.0)
        out = network(*inputs(64))
    assert out.shape == (64, 12, 5)
    assert (out.diff(dim=-1) >= 0).all()
    assert (out >= 0).all()


def test_missing_values_are_masked_not_zeroed() -> None:
    """A NaN step and a zero step are different inputs: the mask reaches the network."""
    network = make()
    values, calendar = inputs(2)
    zeros = values.clone()
    zeros[0, 10:30] = 0.0
    with torch.no_grad():
        assert not torch.allclose(network(values, calendar)[0], network(zeros, calendar)[0])


def test_forecast_scales_with_the_series() -> None:
    """Instance normalisation: a series ten times larger gets a forecast ten times larger."""
    network = make()
    values, calendar = inputs(4)
    with torch.no_grad():
        small = network(values, calendar)
        large = network(values * 10.0, calendar)
    torch.testing.assert_close(large, small * 10.0, rtol=0,
                               atol=network_tolerance(network.cfg, largest(values * 10.0)))


def test_pinball_loss_ignores_missing_targets() -> None:
    quantiles = torch.tensor([0.1, 0.5, 0.9])
    forecast = torch.tensor([[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]])
    target = torch.tensor([[2.0, float("nan")]])
    total, count = pinball_terms(forecast, target, quantiles, torch.ones(1, 1))
    # errors 1, 0, -1 -> 0.1*1, 0, (0.9-1)*-1 = 0.1, summed over the three quantiles of the
    # one observed step
    assert (total.item(), count.item()) == pytest.approx((0.1 + 0.0 + 0.1, 3))


def test_ensemble_forecast_is_the_mean_of_its_members() -> None:
    network = make(ensemble=3)
    values, calendar = inputs(8)
    with torch.no_grad():
        members = network(values, calendar, members=True)
        combined = network(values, calendar)
    assert members.shape == (3, 8, 12, 3)
    assert not torch.allclose(members[0], members[1])  # independently initialised
    # Members are averaged before the final clipping at zero: equal where nothing is clipped.
    unclipped = (members > 0).all(dim=0)
    torch.testing.assert_close(  # the same sum of three, maybe in another order
        combined[unclipped], members.mean(dim=0)[unclipped], rtol=0,
        atol=rounding_tolerance(network.cfg.ensemble + 1, members.abs().max().item()))


def test_patch_length_follows_the_context() -> None:
    hourly = ModelConfig(context=336, horizon=24)
    quarter_hourly = ModelConfig(context=4 * 336, horizon=96)
    assert hourly.n_patches == quarter_hourly.n_patches
    with pytest.raises(ValueError, match="quantiles"):
        ModelConfig(context=10, horizon=2, quantiles=[0.9, 0.1])


def test_window_calendar_matches_the_grid_whatever_the_index_unit() -> None:
    """Runtime calendars must equal training's, for second-, micro- and nanosecond indexes."""
    from kpi_forecast.model.features import calendar_features, window_calendar

    grid = pd.date_range("2024-03-30", periods=72, freq="1h", tz="UTC")
    for unit in ("s", "us", "ns"):
        index = grid.as_unit(unit)
        windows = window_calendar(index[[47, 71]], 24, pd.Timedelta("1h"), "Europe/Paris")
        np.testing.assert_array_equal(windows[0], calendar_features(index[24:48], "Europe/Paris"))
        np.testing.assert_array_equal(windows[1], calendar_features(index[48:72], "Europe/Paris"))


def test_byte_dropout_drops_at_its_rate_everywhere_and_keeps_the_mean() -> None:
    torch.manual_seed(0)
    layer = ByteDropout(0.1)
    x = torch.ones(1_000_003)  # not a multiple of eight: the last draw is only partly used
    out = layer(x)
    rate = 26 / 256  # 0.1 rounded to 1/256
    dropped = (out == 0).float()
    # Sampling, not rounding: each bound is six standard deviations of the binomial count
    # (a seeded draw, so the same on every machine).
    def six_sigma(n: int) -> float:
        return 6 * (rate * (1 - rate) / n) ** 0.5

    assert abs(dropped.mean().item() - rate) < six_sigma(len(x))
    # Every byte of a 64-bit draw is uniform (the top one too).
    per_byte = dropped[: 1_000_000].view(-1, 8).mean(dim=0)
    assert torch.all((per_byte - rate).abs() < six_sigma(125_000)), per_byte
    assert out.mean().item() == pytest.approx(1.0, abs=six_sigma(len(x)) / (1 - rate))
    assert out.unique().tolist() == pytest.approx([0.0, 1 / (1 - rate)])
    layer.eval()
    assert layer(x) is x
    assert ByteDropout(0.0).train()(x) is x


def test_holidays_in_the_window_and_in_the_horizon_reach_the_forecast() -> None:
    network = make(horizon_tokens=True)
    values, calendar = inputs(4)
    calendar[..., HOLIDAY] = 0.0
    days = (slice(0, 24), slice(96, 108))  # a day of the window, the horizon
    with torch.no_grad():
        plain = network(values, calendar)
        for steps in days:
            told = calendar.clone()
            told[:, steps, HOLIDAY] = 1.0
            # Untrained, the holiday share has no weight: unseen holidays change nothing ...
            torch.testing.assert_close(network(values, told), plain)
        for member in network.members:  # ... and once it has some, both parts count.
            member.embed.weight[:, -1] = torch.randn(member.embed.out_features)
        plain = network(values, calendar)
        for steps in days:
            told = calendar.clone()
            told[:, steps, HOLIDAY] = 1.0
            assert not torch.allclose(network(values, told), plain)


def test_without_horizon_tokens_the_horizons_calendar_is_not_read() -> None:
    network = make()
    assert network.cfg.n_tokens == network.cfg.n_patches
    values, calendar = inputs(4)
    with torch.no_grad():
        for member in network.members:
            member.embed.weight[:, -1] = torch.randn(member.embed.out_features)
        ahead = calendar.clone()
        ahead[:, 96:] = torch.randn(4, 12, calendar.shape[-1])
        torch.testing.assert_close(network(values, ahead), network(values, calendar))


def test_the_skip_goes_through_a_bottleneck_only_where_both_sides_are_four_times_wider() -> None:
    """Full rank for hourly, half-hourly and 15-minute day-ahead and for Milan's week-ahead;
    through the bottleneck for a week of 2-minute data forecasting a day, with a tenth of the
    weights; full rank with skip_rank 0 (artifacts from before it). The head never changes."""
    for context, horizon in ((336, 24), (672, 48), (1344, 96), (336, 168)):
        layers = PatchTransformer(ModelConfig(context=context, horizon=horizon))
        assert isinstance(layers.skip, torch.nn.Linear)
    cfg = ModelConfig(context=7 * 720, horizon=720)
    two_minute = PatchTransformer(cfg)
    assert [layer.out_features for layer in two_minute.skip] == [cfg.d_model, 720]
    full = PatchTransformer(ModelConfig(context=7 * 720, horizon=720, skip_rank=0))
    assert two_minute.head.weight.shape == full.head.weight.shape
    skip_weights = {name: sum(p.numel() for p in model.skip.parameters())
                    for name, model in (("factorised", two_minute), ("full", full))}
    assert skip_weights["factorised"] < skip_weights["full"] / 9


def test_the_skip_is_described_as_built() -> None:
    assert ModelConfig(context=7 * 720, horizon=720).describe_skip() == (
        "skip 5040 -> 64 -> 720: the context and the horizon are both at least 4x its "
        "bottleneck")
    assert ModelConfig(context=336, horizon=168).describe_skip() == (
        "skip 336 -> 168, full rank: the context or the horizon is under 4x the bottleneck "
        "of 64")
    assert ModelConfig(context=336, horizon=24, skip_rank=0).describe_skip() == (
        "skip 336 -> 24, full rank (skip_rank 0)")

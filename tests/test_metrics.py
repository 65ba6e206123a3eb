"""Forecast-accuracy metrics against hand-computed values on tiny arrays."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from kpi_forecast.model.metrics import (
    METRIC_KEYS,
    coverage,
    error_by_step,
    evaluate,
    mae,
    mase,
    mase_scale,
    mse,
    pinball,
    rmse,
    smape,
)

NAN = np.nan

# Observed absolute errors 1, 0, 2, 0, 3; the NaN actual (forecast 9) must be ignored.
ACTUAL = np.array([[1.0, 2.0, 3.0], [4.0, NAN, 6.0]])
POINT = np.array([[2.0, 2.0, 1.0], [4.0, 9.0, 3.0]])


def test_point_errors_ignore_missing_actuals() -> None:
    assert mae(ACTUAL, POINT) == pytest.approx(6 / 5)
    assert mse(ACTUAL, POINT) == pytest.approx(14 / 5)
    assert rmse(ACTUAL, POINT) == pytest.approx(math.sqrt(14 / 5))


def test_nothing_observed_gives_nan_without_warnings() -> None:
    actual = np.full((2, 3), NAN)
    point = np.zeros((2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(mae(actual, point))
        assert math.isnan(rmse(actual, point))
        assert math.isnan(smape(actual, point))
        assert math.isnan(mase(actual, point, np.ones(2)))
        assert math.isnan(coverage(actual, point, point))
        assert math.isnan(pinball(actual, np.zeros((2, 3, 1)), [0.5]))
        assert np.isnan(error_by_step(actual, point)).all()


def test_nan_forecast_at_observed_step_poisons_pooled_metrics() -> None:
    point = POINT.copy()
    point[0, 0] = NAN
    assert math.isnan(mae(ACTUAL, point))
    assert math.isnan(smape(ACTUAL, point))


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        mae(ACTUAL, POINT[:, :2])


def test_smape_percent_with_zero_zero_convention() -> None:
    actual = np.array([[0.0, 1.0, 2.0, 0.0]])
    point = np.array([[0.0, 3.0, 2.0, 5.0]])
    # Terms: 0 (0/0 convention), 200*2/4 = 100, 0, 200*5/5 = 200 (the maximum).
    assert smape(actual, point) == pytest.approx((0 + 100 + 0 + 200) / 4)
    assert smape(np.zeros((1, 3)), np.zeros((1, 3))) == 0.0


def test_mase_scale_hand_computed() -> None:
    history = np.array(
        [
            [1.0, 2.0, 3.0, 1.0, 2.0, 4.0],  # season-3 diffs 0, 0, 1
            [1.0, NAN, 3.0, 1.0, 2.0, 4.0],  # pair (NaN, 2) skipped: diffs 0, 1
        ]
    )
    np.testing.assert_allclose(mase_scale(history, 3), [1 / 3, 1 / 2])


def test_mase_scale_nan_without_pairs_or_with_zero_scale() -> None:
    history = np.array(
        [
            [1.0, 2.0, 3.0, NAN, NAN, NAN],  # no pair with both sides observed
            [5.0, 5.0, 5.0, 5.0, 5.0, 5.0],  # constant: scale 0
            [1.0, 2.0, 3.0, 1.0, 2.0, 3.0],  # perfectly periodic: scale 0
        ]
    )
    assert np.isnan(mase_scale(history, 3)).all()
    assert np.isnan(mase_scale(history[:, :3], 3)).all()  # history no longer than a season
    with pytest.raises(ValueError, match="season"):
        mase_scale(history, 0)


def test_mase_on_seasonal_series_plus_noise() -> None:
    pattern = np.array([10.0, 20.0, 30.0, 40.0])
    noise = np.array([0, 0, 0, 0, 1, 0, 0, 0, 0, 0, -2, 0], dtype=float)
    seasonal = np.tile(pattern, 3) + noise
    constant = np.full(12, 5.0)
    history = np.stack([seasonal, constant])
    # Seasonal diffs y_t - y_{t-4} = noise_t - noise_{t-4}: 1, 0, 0, 0, -1, 0, -2, 0.
    scale = mase_scale(history, 4)
    assert scale[0] == pytest.approx(4 / 8)
    assert np.isnan(scale[1])  # constant history: dropped instead of dividing by 0

    actual = np.stack([pattern + np.array([0.0, 1.0, 0.0, 0.0]), np.full(4, 6.0)])
    point = history[:, -4:]  # seasonal naive: 10, 20, 28, 40 and 5, 5, 5, 5
    # Seasonal series: errors 0, 1, 2, 0 -> MAE 0.75 -> MASE 0.75 / 0.5; constant dropped.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mase(actual, point, scale) == pytest.approx(1.5)
        # A zero scale handed in directly still never yields inf.
        assert mase(actual, point, np.array([0.5, 0.0])) == pytest.approx(1.5)
        assert math.isnan(mase(actual, point, np.array([0.0, NAN])))


def test_mase_ignores_missing_actuals_per_series() -> None:
    actual = np.array([[1.0, NAN], [NAN, NAN]])
    point = np.array([[3.0, 100.0], [0.0, 0.0]])
    # Series 0: MAE 2 / scale 4; series 1 has nothing observed and drops out.
    assert mase(actual, point, np.array([4.0, 1.0])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="scale"):
        mase(actual, point, np.ones(3))


def test_coverage_closed_interval_over_observed() -> None:
    actual = np.array([[1.0, 5.0, NAN, 10.0]])
    lower = np.array([[0.0, 5.0, 0.0, 11.0]])
    upper = np.array([[2.0, 6.0, 1.0, 12.0]])
    # Inside, on the lower bound (counts), skipped, outside.
    assert coverage(actual, lower, upper) == pytest.approx(2 / 3)


def test_pinball_single_quantile_above_and_below() -> None:
    levels = [0.9]
    # Actual above the forecast: 0.9 * (10 - 8).
    assert pinball(np.array([[10.0]]), np.array([[[8.0]]]), levels) == pytest.approx(1.8)
    # Actual below the forecast: (1 - 0.9) * (12 - 10).
    assert pinball(np.array([[10.0]]), np.array([[[12.0]]]), levels) == pytest.approx(0.2)


def test_pinball_averages_levels_and_masks_missing() -> None:
    actual = np.array([[10.0, NAN]])
    q = np.array([[[8.0, 10.0, 12.0], [0.0, 0.0, 0.0]]])
    # q=0.1 below actual by 2: 0.1*2; q=0.5 exact: 0; q=0.9 above by 2: 0.1*2.
    assert pinball(actual, q, [0.1, 0.5, 0.9]) == pytest.approx((0.2 + 0.0 + 0.2) / 3)


def test_pinball_at_median_is_half_mae() -> None:
    q = POINT[..., None]
    assert pinball(ACTUAL, q, [0.5]) == pytest.approx(0.5 * mae(ACTUAL, POINT))


def test_pinball_validates_levels_and_shape() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        pinball(ACTUAL, np.zeros((2, 3, 1)), [1.0])
    with pytest.raises(ValueError, match="shape"):
        pinball(ACTUAL, np.zeros((2, 3, 2)), [0.5])


def test_evaluate_point_only_has_all_keys_with_nan_interval_metrics() -> None:
    result = evaluate(ACTUAL, POINT, scale=np.array([1.0, 2.0]))
    assert tuple(result) == METRIC_KEYS
    assert result["mae"] == pytest.approx(6 / 5)
    assert result["rmse"] == pytest.approx(math.sqrt(14 / 5))
    # Series MAEs 3/3 = 1 and 3/2 = 1.5 over scales 1 and 2: (1 + 0.75) / 2.
    assert result["mase"] == pytest.approx(0.875)
    assert result["smape"] == pytest.approx(smape(ACTUAL, POINT))
    assert math.isnan(result["coverage"])
    assert math.isnan(result["pinball"])


def test_evaluate_with_quantiles() -> None:
    levels = np.array([0.1, 0.5, 0.9])
    q = np.stack([POINT - 1.0, POINT, POINT + 1.0], axis=-1)
    result = evaluate(ACTUAL, POINT, np.ones(2), quantile_forecasts=q, levels=levels)
    assert set(result) == set(METRIC_KEYS)
    # Errors 1, 0, 2, 0, 3: only the actuals off by <= 1 lie in [point - 1, point + 1].
    assert result["coverage"] == pytest.approx(3 / 5)
    assert result["pinball"] == pytest.approx(pinball(ACTUAL, q, levels))


def test_evaluate_interval_matches_levels_despite_round_off() -> None:
    levels = np.array([0.1, 0.1 + 0.2, 0.9])  # 0.30000000000000004
    q = np.stack([POINT - 1.0, POINT, POINT + 1.0], axis=-1)
    result = evaluate(ACTUAL, POINT, np.ones(2), q, levels, interval=(0.1, 0.3))
    # Interval [point - 1, point]: covers the errors 0, 0 and the actual 1 below 2.
    assert result["coverage"] == pytest.approx(3 / 5)


def test_evaluate_rejects_interval_level_not_among_levels() -> None:
    q = np.zeros((2, 3, 3))
    with pytest.raises(ValueError, match=r"interval level 0\.05 is not among"):
        evaluate(ACTUAL, POINT, np.ones(2), q, [0.1, 0.5, 0.9], interval=(0.05, 0.9))
    with pytest.raises(ValueError, match="lower < upper"):
        evaluate(ACTUAL, POINT, np.ones(2), q, [0.1, 0.5, 0.9], interval=(0.9, 0.1))
    with pytest.raises(ValueError, match="together"):
        evaluate(ACTUAL, POINT, np.ones(2), quantile_forecasts=q)


def test_error_by_step() -> None:
    actual = np.array([[1.0, 2.0, NAN], [3.0, NAN, NAN]])
    point = np.array([[2.0, 2.0, 0.0], [1.0, 5.0, 0.0]])
    # Step 0: (1 + 2) / 2; step 1: only series 0, error 0; step 2: nothing observed.
    np.testing.assert_allclose(error_by_step(actual, point), [1.5, 0.0, NAN])

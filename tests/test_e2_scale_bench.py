"""The scale benchmark's reading of the ingest-lag histogram (benchmarks/e2_scale.py)."""

from __future__ import annotations

import math

from benchmarks.e2_scale import lag_bucket, lag_quantile

PREFIX = "kpi_forecast_e2_ingest_lag_seconds_bucket|le="


def buckets(counts: dict[str, float]) -> dict[str, float]:
    return {PREFIX + le: count for le, count in counts.items()}


def test_the_lag_quantile_is_interpolated_in_its_bucket_between_two_scrapes() -> None:
    before = buckets({"0.1": 50, "0.25": 50, "1.0": 50, "+Inf": 50})
    # Since then: 100 reports, 90 within 100 ms, 10 between 100 and 250 ms.
    after = buckets({"0.1": 140, "0.25": 150, "1.0": 150, "+Inf": 150})
    # Rank 99 of 100 is the 9th of the 10 in (0.1, 0.25]: as Prometheus's histogram_quantile.
    assert math.isclose(lag_quantile(before, after, 0.99), 0.1 + 0.15 * 9 / 10)
    assert math.isclose(lag_quantile(before, after, 0.5), 0.1 * 50 / 90)
    assert lag_bucket(before, after, 0.99) == (0.1, 0.25)
    assert lag_bucket(before, after, 0.5) == (0.0, 0.1)


def test_a_lag_beyond_the_last_bound_reads_as_that_bound_and_none_as_nan() -> None:
    same = buckets({"0.1": 5, "1.0": 5, "+Inf": 5})
    assert math.isnan(lag_quantile(same, same, 0.99))
    late = buckets({"0.1": 5, "1.0": 5, "+Inf": 105})
    assert lag_quantile(same, late, 0.99) == 1.0
    assert lag_bucket(same, late, 0.99) == (1.0, float("inf"))

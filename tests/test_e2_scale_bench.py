"""The scale benchmark's reading of the ingest-lag histogram and its model of a replica's CPU
(benchmarks/e2_scale.py)."""

from __future__ import annotations

import math

import pandas as pd

from benchmarks.e2_scale import lag_bucket, lag_quantile, replica_cost

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


def test_a_replicas_cpu_splits_into_a_fixed_share_and_a_cost_per_indication() -> None:
    # Replicas costing 0.04 cores whatever the rate, and 20 us an indication.
    def cores(rate: float) -> float:
        return 0.04 + 20e-6 * rate

    table = pd.DataFrame([
        {"a_per_s": 3000.0, "a_cpu_share": cores(3000)},
        {"a_per_s": 1400.0, "a_cpu_share": cores(1400), "b_per_s": 1600.0,
         "b_cpu_share": cores(1600)},
    ])
    fixed, ms_per_1000 = replica_cost(table)
    # The fit's own float rounding, on values of the order of 0.1.
    assert math.isclose(fixed, 0.04, abs_tol=1e-12)
    assert math.isclose(ms_per_1000, 20.0, rel_tol=1e-9)
    # Rates too alike to tell the parts apart: all of it counts per indication.
    flat = pd.DataFrame([{"a_per_s": 1000.0, "a_cpu_share": 0.05},
                         {"a_per_s": 1000.0, "a_cpu_share": 0.03}])
    assert replica_cost(flat) == (0.0, 40.0)

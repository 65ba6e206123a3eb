"""The serving benchmark's core pinning: the xApp and `hey` on disjoint cores where asked."""

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.serving import cpu_list, cpu_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("text", "cpus"), [("0", {0}), ("0,1", {0, 1}), ("2-5", {2, 3, 4, 5}),
                                            ("0,2-3,8", {0, 2, 3, 8})])
def test_cpu_lists_read_as_taskset_writes_them(text: str, cpus: set[int]) -> None:
    assert cpu_list(text) == cpus
    assert cpu_list(cpu_text(cpus)) == cpus


@pytest.mark.parametrize(("args", "why"), [
    (["--server-cpus", "0,1", "--client-cpus", "1-3"], "share cores"),
    (["--server-cpus", "0,1"], "go together"),
])
def test_overlapping_or_lone_core_lists_are_refused_before_anything_runs(
        args: list[str], why: str) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.serving", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    if "hey` is not installed" in done.stdout:
        pytest.skip("hey is not installed (apt-get install hey)")
    assert done.returncode == 2
    assert why in done.stderr


def load_run(**measured: float) -> dict:
    """One `measured` run's figures, as the benchmark records them."""
    return {"connections": 4, "offered_rps": 100, "ok_rps": 100.0, "goodput_rps": 99.0,
            "p50_ms": 5.0, "p99_ms": 8.0, "shed_503": 0, "fallbacks": 0, "other_errors": 0,
            "server_within_budget": 1.0, "server_p99_le_ms": 9.0, "requests": 500,
            "shed_fraction": 0.0, "limit": 5.0, "delay_ms": 2.0, "service_ms": 4.0,
            "allowance_ms": 5.0, "loop_lag_ms": 0.2, **measured}


def results(capacity: dict | None) -> dict:
    overload = [] if capacity is None else [
        load_run(x_capacity=m, goodput_ratio=g, limit=lim)
        for m, g, lim in ((1.0, 1.0, 5.0), (1.5, 1.4, 6.0), (2.0, 0.86, 7.0), (4.0, 0.73, 3.0))]
    return {"context": 336, "ramp": [load_run(p99_ms=10.4)], "capacity": capacity,
            "below": [] if capacity is None else [load_run()],
            "overload": overload, "rss": None if capacity is None else (222.0, 223.0),
            "steady": [load_run(p99_ms=6.0), load_run(), load_run(p99_ms=12.0)],
            "floor": [load_run(p99_ms=5.0), load_run(p99_ms=4.0), load_run(p99_ms=4.0)],
            "noop": [load_run(p99_ms=4.0), load_run(p99_ms=2.0), load_run(p99_ms=3.0)],
            "int8": [load_run()] * 3, "floor_int8": [load_run(p99_ms=6.0)] * 3,
            "noop_int8": [load_run(p99_ms=4.0)] * 3,
            "burst": {"float32": {"p50_ms": 0.78, "p99_ms": 0.91, "paced_p50_ms": 1.56,
                                  "paced_p99_ms": 1.95},
                      "int8": {"p50_ms": 0.7, "p99_ms": 0.8, "paced_p50_ms": 1.2,
                               "paced_p99_ms": 1.5}},
            "batches": [{"body": "Arrow IPC", "cells": 1000, "request_mb": 1.31, "p50_ms": 262,
                         "p99_ms": 274, "server_p50_ms": 259, "bare_graph_p50_ms": 257,
                         "calls": 20}]}


@pytest.mark.parametrize("capacity", [load_run(offered_rps=600, goodput_rps=598.0), None])
def test_the_results_section_reports_the_limits_state_or_why_there_was_no_capacity(
        capacity: dict | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from benchmarks import serving

    written: dict[str, str] = {}
    figures: dict[str, float] = {}
    monkeypatch.setattr(serving, "RESULTS", tmp_path)
    monkeypatch.setattr(serving, "write_section", lambda run, section: (
        written.update({run.section: section}), figures.update(run.figures)))
    args = argparse.Namespace(seconds=10, threads=2, model=Path("bundle/model"),
                              server_cpus={0, 1}, client_cpus={2, 3})
    serving.write_results(results(capacity), args)
    text = written["serving"]
    assert "--threads 2 --model bundle/model --server-cpus 0,1 --client-cpus 2,3" in text
    assert "runs on cores of its own (2; the xApp has 2)" in text
    # The median of the pairs' ratios (6 / 4, 8 / 2, 12 / 3), not the medians' ratio (8 / 3).
    assert "The xApp's p99 is **4.00x** the no-op's (the median of the runs' ratios" in text
    assert re.search(r"\| no-op, beside it +\| +5 \| +3 \| 4\.0 / 2\.0 / 3\.0 +\|", text)
    # The floor server's over the no-op's (5 / 4, 4 / 2, 4 / 3; 6 / 4), the xApp's over the
    # floor server's (6 / 5, 8 / 4, 12 / 4; 8 / 6).
    assert "Its p99 is **1.33x** the no-op's (int8 **1.50x**)" in text
    assert "**2.00x** the floor server's p99 (int8 **1.33x**)" in text
    assert re.search(r"\| floor server, beside it +\| +5 \| +4 \| 5\.0 / 4\.0 / 4\.0 +\|", text)
    # The bound below the floor server's: (3 + 1.56) / 3 and (4 + 1.2) / 4, each no-op's median
    # p99 and the paced call.
    assert figures["no-op and paced model call over no-op"] == pytest.approx((3 + 1.56) / 3)
    assert figures["int8: no-op and paced model call over no-op"] == pytest.approx(1.3)
    assert "0.78 / 0.91 ms back to back and 1.56 / 1.95 ms at the load's rhythm" in text
    phases = set(pd.read_csv(tmp_path / "serving_load.csv")["phase"])
    if capacity is None:
        assert "**No capacity**" in text and "accepted p99 10.4 ms" in text
        assert "overload, admission on" not in phases
        return
    assert "**Capacity: 600 requests/s**" in text
    assert "At 2x and 4x capacity: goodput 0.73-0.86 of capacity" in text
    steering = text.split("the event loop's lag):")[1].split("At 2x")[0]
    assert "limit" in steering and "loop_lag_ms" in steering
    assert re.search(r"\|\s+2\s+\|\s+7\s+\|", steering)  # at 2x the limit was 7
    assert "overload, admission on" in phases


def test_the_in_process_measure_prints_the_cpu_of_each_round(tmp_path: Path) -> None:
    """``benchmarks.request_cpu`` (side_by_side's CPU per request) runs the app on a model
    directory, checks every answer is the model's, and prints each round's CPU per request,
    the process's and the event loop's thread's (a part of it), their medians, and the no-op
    handler's through the same harness."""
    from tests.exported_model import exported_copy

    model_dir = exported_copy(tmp_path / "model", context=48, horizon=24)
    done = subprocess.run([sys.executable, "-m", "benchmarks.request_cpu", "--model",
                           str(model_dir), "--requests", "30", "--rounds", "2"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout.splitlines()[-1])
    rounds = printed["rounds"]
    assert len(rounds) == 2
    assert all(0 < cpu["loop"] <= cpu["process"] for cpu in rounds)
    assert printed["cpu_us_per_request"] == statistics.median(r["process"] for r in rounds)
    assert printed["loop_us_per_request"] == statistics.median(r["loop"] for r in rounds)
    assert printed["noop_loop_us_per_request"] > 0


def test_the_floor_server_answers_a_burst_from_one_model_call_in_the_xapps_shape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``benchmarks.floor_server``, the yardstick between the no-op and the xApp, does the
    model's whole job: requests that arrive together are answered from one call of the
    model's contract, each its own row, rounded as the xApp rounds, stamped in its zone."""
    import asyncio
    import datetime as dt

    import numpy as np
    import pandas as pd

    from benchmarks import floor_server
    from benchmarks.request_cpu import ROUTE, call
    from kpi_forecast.model.runtime import OnnxForecaster
    from kpi_forecast.xapp.http.schemas import ForecastResponse
    from tests.exported_model import exported_copy

    model_dir = exported_copy(tmp_path / "model", context=48, horizon=24)
    calls: list[int] = []
    forecast = OnnxForecaster.forecast

    def counted(self: OnnxForecaster, history: list[np.ndarray], last: pd.DatetimeIndex
                ) -> np.ndarray:
        calls.append(len(history))
        return forecast(self, history, last)

    monkeypatch.setattr(OnnxForecaster, "forecast", counted)
    app = floor_server.create_app(str(model_dir), "float32")
    rng = np.random.default_rng(1)
    values = [[None if step == 5 else round(float(v), 2) for step, v in
               enumerate(rng.gamma(2.0, 10.0, 48 + extra))] for extra in (0, 3, 7)]
    bodies = [{"cell_id": f"c{i}", "start": "2026-03-28T00:00:00+01:00", "freq": "1h",
               "values": v, "horizon": 24 - i} for i, v in enumerate(values)]

    async def burst() -> list[tuple[int, bytes]]:
        return await asyncio.gather(*(call(app, "POST", ROUTE, json.dumps(body).encode())
                                      for body in bodies))

    answers = asyncio.run(burst())
    assert calls == [3]
    start = pd.Timestamp("2026-03-28T00:00:00+01:00")
    last = [start + pd.Timedelta(hours=len(v) - 1) for v in values]
    histories = [np.array([np.nan if x is None else x for x in v], np.float32)[None]
                 for v in values]
    expected = np.round(forecast(OnnxForecaster(model_dir), histories, pd.DatetimeIndex(
        [t.tz_convert("UTC") for t in last])).astype(np.float64), floor_server.DECIMALS)
    for row, ((status, payload), body) in enumerate(zip(answers, bodies, strict=True)):
        assert status == 200
        answer = ForecastResponse.model_validate_json(payload)
        assert answer.cell_id == body["cell_id"] and answer.source == "model"
        assert len(answer.forecasts) == body["horizon"]
        assert [[point["p10"], point["p50"], point["p90"]] for point in answer.forecasts] == (
            expected[row, : body["horizon"]].tolist())
        # One step apart after the series' last, in the offset the series came in.
        stamps = [dt.datetime.fromisoformat(point["timestamp"]) for point in answer.forecasts]
        assert [s - last[row] for s in stamps] == [
            pd.Timedelta(hours=k + 1) for k in range(body["horizon"])]
        assert {s.utcoffset() for s in stamps} == {dt.timedelta(hours=1)}

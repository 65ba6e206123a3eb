"""The peer comparison's own machinery (benchmarks/peers.py, peer_models.py): gap filling that
never looks ahead, the Nixtla frame round trip, scoring, the kept results a rerun resumes from,
and our own runner. The peers themselves need the optional `bench` extra and run in
`make bench-peers`."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from benchmarks import peers
from benchmarks.peer_models import (
    QUANTILES,
    Outcome,
    Task,
    fold_stamps,
    frame_to_array,
    imputed,
    long_frame,
    run_ours,
)
from kpi_forecast.data.panel import Panel
from kpi_forecast.model.metrics import mae


def panel(n_cells: int = 3, days: int = 21, seed: int = 0) -> Panel:
    rng = np.random.default_rng(seed)
    steps = days * 24
    hours = np.arange(steps) % 24
    values = (10 + 5 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 0.5, (n_cells, steps)))
    values = values.astype(np.float32)
    values[0, 30:40] = np.nan
    values[1, :5] = np.nan
    index = pd.date_range("2024-01-01", periods=steps, freq="1h", tz="UTC")
    return Panel([f"c{i}" for i in range(n_cells)], index, values, "1h", "load")


def task(days: int = 21, folds: int = 3) -> Task:
    p = panel(days=days)
    origins = [p.n_steps - 24 * (folds - k) for k in range(folds)]
    return Task("toy", "day_ahead", p, origins, context=7 * 24, horizon=24, budget_s=3.0,
                seed=0)


def test_gaps_are_filled_from_the_past_only() -> None:
    p = panel()
    filled = imputed(p, train_steps=300)
    observed = ~np.isnan(p.values)
    assert not np.isnan(filled).any()
    assert np.array_equal(filled[observed], p.values[observed])
    # Cell 0's gap at steps 30-39 takes the values one day earlier (no week of history yet).
    assert np.allclose(filled[0, 30:40], p.values[0, 6:16])
    # Changing the future (after the training steps) changes nothing before it.
    later = dataclasses.replace(p, values=p.values.copy())
    later.values[:, 400:] += 100.0
    assert np.array_equal(imputed(later, 300)[:, :400], filled[:, :400])
    # Before a cell's first sample: its median over the training steps.
    assert np.allclose(filled[1, :5], np.nanmedian(p.values[1, :300]))


def test_nixtla_frames_round_trip_in_panel_order() -> None:
    t = task()
    values = imputed(t.panel, t.train_steps)
    frame = long_frame(t.panel, values, 0, t.panel.n_steps)
    assert list(frame.columns) == ["unique_id", "ds", "y", "available_mask"]
    assert frame["available_mask"].sum() == (~np.isnan(t.panel.values)).sum()
    origin = t.origins[-1]
    stamps = fold_stamps(t, origin)
    forecast = frame[frame["ds"].isin(stamps.tz_convert(None))].sample(frac=1.0, random_state=0)
    forecast = forecast.assign(lo=forecast["y"] - 1, hi=forecast["y"] + 1)
    array = frame_to_array(forecast, ("lo", "y", ""), t.panel.cell_ids, stamps)
    assert array.shape == (3, 24, len(QUANTILES))
    assert np.allclose(array[..., 1], values[:, origin : origin + 24])
    assert np.allclose(array[..., 0], values[:, origin : origin + 24] - 1)
    assert np.isnan(array[..., 2]).all()
    with pytest.raises(ValueError, match="lacks 1"):
        frame_to_array(forecast.iloc[1:], ("lo", "y", ""), t.panel.cell_ids, stamps)


def outcome_from(point: np.ndarray, spread: float | None) -> Outcome:
    quantiles = np.repeat(point[..., None], 3, axis=-1).astype(np.float32)
    if spread is None:
        quantiles[..., [0, 2]] = np.nan
    else:
        quantiles[..., 0] -= spread
        quantiles[..., 2] += spread
    return Outcome(quantiles, 1.0, 2.0, 3.0, {"peak_mb": 100.0})


def test_scoring_uses_observed_values_and_the_same_folds_for_everyone() -> None:
    t = task()
    actual, _ = peers.fold_truth(t)
    perfect = outcome_from(np.nan_to_num(actual), spread=1.0)
    offset = outcome_from(np.nan_to_num(actual) + 2.0, spread=None)
    table, per_fold = peers.score(t, {"perfect": perfect, "offset": offset})
    assert table.loc["perfect", "mae"] == 0.0 and table.loc["perfect", "coverage"] == 1.0
    assert table.loc["offset", "mae"] == pytest.approx(2.0)
    assert np.isnan(table.loc["offset", "coverage"])  # no quantiles, no coverage
    assert len(per_fold) == 2 * len(t.origins)
    assert set(per_fold["origin"]) == {t.panel.index[o].isoformat() for o in t.origins}
    assert table.loc["perfect", "peak_mb"] == 100.0


def test_verdict_names_the_best_peer_and_the_ratios() -> None:
    table = pd.DataFrame({
        "mae": [1.0, 1.2, 0.9], "mase": [0.5, 0.6, 0.7], "train_s": [10.0, 20.0, 1.0],
        "predict_ms_one": [0.5, 10.0, 100.0],
    }, index=["kpi-forecast", "nhits", "mstl"])
    missing, *lines = peers.verdict(table)
    # Models without a kept result are named, not silently left out of the comparison.
    assert "patchtst" in missing and "nhits" not in missing and "mstl" not in missing
    assert not peers.verdict(table.reindex(peers.MODELS).fillna(1.0))[0].startswith("- missing")
    assert lines[0].startswith("- lowest MAE: no") and "mstl" in lines[0]
    assert lines[1].startswith("- lowest MASE: yes")
    assert "yes (ours 10 s, nhits 20 s)" in lines[2]
    assert lines[3].endswith("yes (20x)")
    # Our result alone (no peer kept yet): said so, not a crash.
    [alone] = peers.verdict(table.loc[["kpi-forecast"]])
    assert "no peer result" in alone


def test_ours_without_the_holiday_calendar_is_not_a_peer() -> None:
    table = pd.DataFrame({
        "mae": [1.0, 0.8, 1.1], "mase": [0.5, 0.4, 0.6], "train_s": [10.0, 10.0, 20.0],
        "predict_ms_one": [0.5, 0.5, 10.0],
    }, index=["kpi-forecast", peers.BLIND, "nhits"])
    lines = peers.verdict(table)[1:]  # after the line naming the models not run
    assert lines[0] == "- lowest MAE: yes (ours 1.000, best peer nhits 1.100, ratio 0.909)"
    assert lines[1] == "  - without the holiday calendar: yes (0.800, ratio 0.727)"


def test_ours_runs_again_at_the_fastest_deep_peers_time_only_when_it_took_longer() -> None:
    t = task()

    def took(seconds: float) -> Outcome:
        return dataclasses.replace(outcome_from(np.zeros((1, 1, 24)), 1.0), train_s=seconds)

    outcomes = {"kpi-forecast": took(57.0), "patchtst": took(53.71), "nhits": took(54.1),
                "mstl": took(5.0)}  # a statistical model's time is not the one to match
    timed = peers.at_peer_time(t, outcomes)
    assert timed is not None and timed.budget_s == 53.7
    assert dataclasses.replace(timed, budget_s=t.budget_s) == t  # only the budget differs
    assert peers.at_peer_time(t, outcomes | {"kpi-forecast": took(53.0)}) is None
    assert peers.at_peer_time(t, {"kpi-forecast": took(57.0), "mstl": took(5.0)}) is None
    # The rerun is its own result: it sits beside ours in the table but is not a peer.
    table = pd.DataFrame({
        "mae": [1.0, 1.1, 1.05], "mase": [0.5, 0.55, 0.52], "train_s": [57.0, 54.0, 50.0],
        "predict_ms_one": [0.5, 10.0, 0.5],
    }, index=["kpi-forecast", "nhits", peers.AT_PEER_TIME])
    lines = peers.verdict(table)[1:]
    assert lines[0].startswith("- lowest MAE: yes") and "best peer nhits" in lines[0]
    assert "no (ours 57 s, nhits 54 s)" in lines[2]
    assert lines[3] == ("  - given nhits's 54 s as its budget, ours took 50 s and still has "
                        "the lowest MAE and MASE: yes (MAE 1.050, MASE 0.520)")
    table.loc[peers.AT_PEER_TIME, "mase"] = 0.56
    assert "MASE: no (MAE 1.050" in peers.verdict(table)[4]


def test_kept_results_are_reused_only_for_the_same_task(tmp_path, monkeypatch) -> None:
    t = task()
    calls = []

    given_budgets = []

    def fake_run(given: Task, model: str) -> Outcome:
        calls.append(model)
        given_budgets.append(given.budget_s)
        return outcome_from(np.zeros((len(given.origins), given.panel.n_cells, 24)), 1.0)

    monkeypatch.setattr(peers, "run", fake_run)
    monkeypatch.setattr(peers, "make_task", lambda dataset, protocol, seed: dataclasses.replace(
        t, seed=seed))
    peers.run_one("toy", "day_ahead", "mstl", seed=0, cache=tmp_path)
    kept = peers.load_result(tmp_path, t, "mstl")
    assert kept is not None and kept.forecasts.shape == (3, 3, 24, 3)
    assert kept.details["peak_mb"] > 0
    info = json.loads((tmp_path / "toy/day_ahead/seed-0/mstl.json").read_text())
    assert info["key"] == peers.task_key(t, "mstl")
    # Another seed, other data or another model is another task: nothing kept for it.
    assert peers.load_result(tmp_path, dataclasses.replace(t, seed=1), "mstl") is None
    # ... and a run with another seed keeps its result beside this one, not over it.
    peers.run_one("toy", "day_ahead", "mstl", seed=1, cache=tmp_path)
    assert peers.load_result(tmp_path, dataclasses.replace(t, seed=1), "mstl") is not None
    assert peers.load_result(tmp_path, t, "mstl") is not None
    assert peers.load_result(tmp_path, t, "nhits") is None
    # A run with another budget is another task too, and its model is given that budget.
    peers.run_one("toy", "day_ahead", "mstl", seed=0, cache=tmp_path, budget_s=12.5)
    assert given_budgets[-1] == 12.5
    assert peers.load_result(tmp_path, dataclasses.replace(t, budget_s=12.5), "mstl") is not None
    assert peers.load_result(tmp_path, t, "mstl") is None
    peers.run_one("toy", "day_ahead", "mstl", seed=0, cache=tmp_path)
    # A rerun takes the kept result without starting a process.
    monkeypatch.setattr(peers.subprocess, "run", lambda *a, **k: pytest.fail("recomputed"))
    assert peers.ensure_result(t, "mstl", tmp_path, fresh=False).train_s == kept.train_s
    assert calls == ["mstl"] * 4


def test_our_kept_result_is_stale_once_our_code_changes(monkeypatch) -> None:
    t = task()
    ours, peer = peers.task_key(t, "kpi-forecast"), peers.task_key(t, "mstl")
    assert peers.task_key(t, "kpi-forecast") == ours  # the same sources, the same key
    monkeypatch.setattr(peers, "our_code", lambda: "edited")
    assert peers.task_key(t, "kpi-forecast") != ours
    assert peers.task_key(t, "mstl") == peer  # a peer's key does not follow our code
    # Nor does it follow the holiday calendar, which only we are told.
    told = dataclasses.replace(t, panel=dataclasses.replace(t.panel, holidays="FR"))
    assert peers.task_key(told, "kpi-forecast") != peers.task_key(t, "kpi-forecast")
    assert peers.task_key(told, "mstl") == peer


@pytest.mark.slow
def test_our_runner_trains_once_and_forecasts_every_fold() -> None:
    t = task(days=28)
    result = run_ours(t)
    assert result.forecasts.shape == (len(t.origins), t.panel.n_cells, 24, 3)
    assert (np.diff(result.forecasts, axis=-1) >= 0).all()  # quantiles in order
    actual, _ = peers.fold_truth(t)
    assert mae(actual, result.forecasts[..., 1]) < np.nanmean(np.abs(actual - 10.0))
    # Timed, not compared: which call is faster is a benchmark's business, not a test's.
    assert result.train_s > 0 and result.predict_ms_one > 0 and result.predict_ms_all > 0

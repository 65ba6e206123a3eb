"""Live scoring: forecasts recorded at each origin from the history held, scored as the actuals
arrive, beside the seasonal naives (model.scores, xapp.serving.scoring)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import redis

from kpi_forecast.model.metrics import coverage, mae, pinball
from kpi_forecast.model.naive import naive_forecasts
from kpi_forecast.model.recalibration import calendar_sources
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.model.scores import FIELDS, SCORED_NAIVES, Accuracy, block_sums
from kpi_forecast.xapp.descriptor.config_file import Descriptor
from kpi_forecast.xapp.descriptor.controls import ModelControls
from kpi_forecast.xapp.serving.scoring import Grid, Scorer
from kpi_forecast.xapp.store.score_records import ScoreRecord, size
from tests.processes import ROOT
from tests.redis_server import redis_server
from tests.test_shared_history import redis_store
from tests.tolerance import network_tolerance
from tests.xapp_helpers import HORIZON, descriptor, make_model, running

MODEL = "model"
START = pd.Timestamp("2024-03-04T00:00:00+00:00")  # a Monday, midnight UTC: an origin
CELLS = [f"c{i}" for i in range(6)]
DAYS = 15  # the history before the first origin: a week for the weekly naive, and a context
STEPS = (DAYS + 1) * 24 + 2  # another horizon, and the step past the second origin


def load(cell: int) -> np.ndarray:
    rng = np.random.default_rng(cell)
    t = np.arange(STEPS)
    shape = 1.5 + np.sin(2 * np.pi * t / 24) + 0.3 * (t // 24 % 7 >= 5)
    return np.round((20 + 10 * cell) * shape * rng.lognormal(0, 0.2, STEPS), 3)


VALUES = np.stack([load(i) for i in range(len(CELLS))])


@pytest.fixture
def ticked_by_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background rounds: the test ticks the scorer itself, so nothing races it."""
    async def idle(self: Scorer) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Scorer, "run", idle)


async def write(client: httpx.AsyncClient, first: int, stop: int) -> None:
    """The cells' values of steps [first, stop) over REST."""
    items = [{"cell_id": cell, "start": (START + first * pd.Timedelta("1h")).isoformat(),
              "freq": "1h", "values": VALUES[i, first:stop].tolist()}
             for i, cell in enumerate(CELLS)]
    response = await client.post("/v1/cells/history", json={"items": items})
    assert response.status_code == 200, response.text


def expected(model_dir: Path, origin: int) -> dict:
    """What the round after ``origin`` (a step index) must find: the forecast recorded from
    the history before it, and the naives, scored on its horizon's actuals, every cell."""
    model = OnnxForecaster(model_dir)
    last = pd.DatetimeIndex([START + (origin - 1) * pd.Timedelta("1h")] * len(CELLS))
    history = VALUES[:, :origin].astype(np.float32)
    forecast = model.forecast(history, last)
    actual = VALUES[:, origin:origin + HORIZON]
    naives = naive_forecasts(history, HORIZON, 24,
                             calendar_sources(model.metadata, model.step, last), SCORED_NAIVES)
    return {"model": model, "forecast": forecast, "actual": actual, "naives": naives}


def test_block_sums_pool_to_the_metrics_of_the_points_scored() -> None:
    rng = np.random.default_rng(0)
    actual = rng.uniform(0, 100, (5, 24))
    actual[0, :3] = np.nan  # not observed
    naives = np.stack([actual + rng.normal(0, 5, actual.shape) for _ in SCORED_NAIVES])
    naives[1, 2, 5:9] = np.nan  # a naive that cannot tell: not a point for any of them
    levels = [0.1, 0.5, 0.9]
    quantiles = np.sort(actual[..., None] + rng.normal(0, 8, (*actual.shape, 3)), axis=-1)
    sums = block_sums(actual, quantiles, levels, naives)
    points = ~np.isnan(actual) & ~np.isnan(naives).any(axis=0)
    masked = np.where(points, actual, np.nan)
    scores = Accuracy.of(sums.sum(axis=0))
    assert scores.points == points.sum() == 5 * 24 - 3 - 4
    assert scores.mae == pytest.approx(mae(masked, quantiles[..., 1]))
    assert scores.pinball == pytest.approx(pinball(masked, quantiles, levels))
    assert scores.coverage == pytest.approx(coverage(masked, quantiles[..., 0],
                                                     quantiles[..., 2]))
    naive_mae = {name: mae(masked, naive) for name, naive in zip(SCORED_NAIVES, naives,
                                                                 strict=True)}
    assert scores.naive_mae == pytest.approx(naive_mae)
    assert scores.skill == pytest.approx(1 - scores.mae / min(naive_mae.values()))
    # Per row, the sums are those of its own points: pooling rows is adding them.
    assert block_sums(actual[2:3], quantiles[2:3], levels, naives[:, 2:3]) == pytest.approx(
        sums[2:3])
    # Nothing scored: nothing said.
    assert Accuracy.of(np.zeros(len(FIELDS))) == Accuracy(0, None, dict.fromkeys(
        SCORED_NAIVES), None, None, None)


def test_a_score_record_keeps_its_shape_and_refuses_another() -> None:
    record = ScoreRecord.empty(24, 3, 7)
    record.origin, record.forecast = 1234, np.arange(72, dtype=np.float32).reshape(24, 3)
    record.add(1200, np.arange(len(FIELDS), dtype=np.float64))
    blob = record.to_bytes()
    assert len(blob) == size(24, 3, 7)
    back = ScoreRecord.from_bytes(blob, 24, 3, 7)
    assert back.origin == 1234 and back.scored(1200) and not back.scored(1176)
    np.testing.assert_array_equal(back.forecast, record.forecast)
    np.testing.assert_array_equal(back.sums, record.sums)
    with pytest.raises(ValueError, match="bytes"):
        ScoreRecord.from_bytes(blob, 48, 3, 7)
    with pytest.raises(ValueError, match="shape"):
        ScoreRecord.from_bytes(blob, 12, 6, 7)  # as many bytes, another model's


@pytest.mark.usefixtures("ticked_by_the_test")
def test_recorded_forecasts_are_scored_as_their_actuals_arrive(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / MODEL)
    first = DAYS * 24  # the first origin the history reaches
    want = expected(model_dir, first)
    tolerance = network_tolerance(want["model"].metadata.config, VALUES.max())

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, recalibration={"everySeconds": 0},
                          scoring={"worstCells": 3})
        async with running(desc) as client:
            scorer = client.app.state.components.default.scorer
            await write(client, 0, first + 2)  # a step past the first origin: its round is due
            await scorer.tick()
            # The first round: nothing was recorded for the horizon before it.
            answer = (await client.get(f"/v1/models/{MODEL}/accuracy")).json()
            assert answer["scored_until"] == (START + first * pd.Timedelta("1h")).isoformat()
            assert answer["windows"]["day"]["points"] == 0
            assert answer["windows"]["day"]["skill"] is None
            await write(client, first + 2, first + HORIZON + 2)
            await scorer.tick()
            answer = (await client.get(f"/v1/models/{MODEL}/accuracy")).json()
            metrics = (await client.get("/ric/v1/metrics")).text
            one = (await client.get(f"/v1/models/{MODEL}/accuracy", params={"cell": "c2"})
                   ).json()
            unknown = await client.get(f"/v1/models/{MODEL}/accuracy", params={"cell": "c9"})
        day = answer["windows"]["day"]
        actual, quantiles = want["actual"], want["forecast"]
        assert day["points"] == actual.size == len(CELLS) * HORIZON
        assert day["mae"] == pytest.approx(mae(actual, quantiles[..., 1]), abs=tolerance)
        for name, naive in zip(SCORED_NAIVES, want["naives"], strict=True):
            assert day["naive_mae"][name] == pytest.approx(mae(actual, naive))
        assert day["coverage"] == pytest.approx(
            coverage(actual, quantiles[..., 0], quantiles[..., 2]), abs=1 / actual.size)
        assert answer["windows"]["week"] == day  # one horizon scored so far
        assert answer["cells"] == len(CELLS)
        skills = [cell["week"]["skill"] for cell in answer["worst_cells"]]
        assert len(skills) == 3 and skills == sorted(skills)
        assert one["cell_id"] == "c2" and one["worst_cells"] == []
        assert one["windows"]["day"]["mae"] == pytest.approx(
            mae(actual[2], quantiles[2, :, 1]), abs=tolerance)
        assert unknown.status_code == 404 and "c9" in unknown.json()["error"]
        shown = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                 if line.startswith("kpi_forecast_")}
        served = f'model="{MODEL}",role="served"'
        assert shown[f'kpi_forecast_live_skill{{{served},window="day"}}'] == \
            pytest.approx(day["skill"])
        assert shown[f'kpi_forecast_live_scored_points{{{served},window="day"}}'] == \
            day["points"]
        # The first round's horizon had no recorded forecast: its actuals were counted.
        assert shown[f'kpi_forecast_scoring_unforecast_actuals_total{{{served}}}'] == \
            len(CELLS) * HORIZON
        assert shown[f'kpi_forecast_scoring_rounds_total{{{served}}}'] == 2
        assert sum(name.startswith("kpi_forecast_live_worst_cell_skill") for name in shown) == 3

    asyncio.run(go())


@pytest.mark.usefixtures("ticked_by_the_test")
def test_replicas_share_the_rounds_and_a_restart_keeps_the_scores(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / MODEL)
    first = DAYS * 24

    async def go() -> None:
        with redis_server(tmp_path) as port:
            desc = descriptor(tmp_path, model_dir, historyStore=redis_store(port, "scores"),
                              recalibration={"everySeconds": 0})
            async with running(desc) as a, running(desc) as b:
                scorer_a = a.app.state.components.default.scorer
                scorer_b = b.app.state.components.default.scorer
                await write(a, 0, first + 2)
                await write(b, first + 2, first + HORIZON + 2)  # B's history is ahead
                await scorer_a.tick()  # A takes on the first origin's round
                await scorer_b.tick()  # B the second's, scoring what A recorded
                await scorer_a.tick()  # A's round is behind B's: A takes B's summary
                from_a = (await a.get(f"/v1/models/{MODEL}/accuracy")).json()
                from_b = (await b.get(f"/v1/models/{MODEL}/accuracy")).json()
            assert from_a == from_b
            assert from_a["windows"]["day"]["points"] == len(CELLS) * HORIZON
            rounds = tuple(each.app.state.components.metrics.scoring_rounds.labels(
                model=MODEL, role="served")._value.get() for each in (a, b))
            assert rounds == (1, 1)
            async with running(desc) as restarted:
                await restarted.app.state.components.default.scorer.tick()
                assert (await restarted.get(f"/v1/models/{MODEL}/accuracy")).json() == from_a
            # What each cell costs in Redis: one record of the size the model fixes.
            grid = Grid.of(OnnxForecaster(model_dir))
            held = redis.Redis(port=port).strlen(f"{{scores}},scores:{MODEL}:test:c0")
            assert held == size(grid.horizon, grid.quantiles, grid.blocks)

    asyncio.run(go())


@pytest.mark.usefixtures("ticked_by_the_test")
def test_a_guarded_model_answers_with_the_fallback_while_its_skill_is_below_the_threshold(
        tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / MODEL)
    first = DAYS * 24

    def guarded(min_skill: float, where: Path = tmp_path) -> Descriptor:
        return descriptor(where, model_dir, recalibration={"everySeconds": 0}, perModel={
            MODEL: {"guard": {"enabled": True, "minSkill": min_skill, "minPoints": HORIZON}}})

    async def go() -> None:
        # No forecast has a skill of 1 (every error 0): the guard's threshold is not met.
        async with running(guarded(1.0)) as client:
            components = client.app.state.components
            scorer = components.default.scorer
            await write(client, 0, first + 2)
            await scorer.tick()
            unscored = (await client.get("/v1/cells/c0/forecast")).json()
            await write(client, first + 2, first + HORIZON + 2)
            await scorer.tick()
            below = (await client.get("/v1/cells/c0/forecast")).json()
            metrics = (await client.get("/ric/v1/metrics")).text
            skill = (await client.get(f"/v1/models/{MODEL}/accuracy")).json()["windows"]["day"][
                "skill"]
            # A threshold the skill meets (a config change, live): the model answers again.
            components.apply_descriptor(guarded(skill, tmp_path / "lower"))
            await scorer.tick()
            recovered = (await client.get("/v1/cells/c0/forecast")).json()
        assert unscored["source"] == "model"  # fewer points than minPoints: no judgement yet
        assert below["source"] == "fallback" and below["reason"] == "live_skill"
        assert below["model_version"] is None
        shown = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                 if line.startswith("kpi_forecast_")}
        assert shown[f'kpi_forecast_guard_active{{model="{MODEL}"}}'] == 1
        assert shown[f'kpi_forecast_fallbacks_total{{model="{MODEL}",reason="live_skill"}}'] == 1
        assert recovered["source"] == "model"

    asyncio.run(go())


def test_the_accuracy_pages_guard_example_is_a_valid_model_setting() -> None:
    page = (ROOT / "docs" / "accuracy.md").read_text()
    [example] = re.findall(r"```json\n(.*?)\n```", page, re.S)
    for name, own in json.loads(example)["controls"]["perModel"].items():
        assert ModelControls.model_validate(own).guard.enabled, name


def test_the_accuracy_page_states_the_size_of_a_record() -> None:
    page = (ROOT / "docs" / "accuracy.md").read_text()
    header, per_block, per_cell, cells = (re.search(pattern, page.replace("\n", " "))[1]
                                          for pattern in (r"a (\d+)-byte header",
                                                          r"`(\d+)` bytes per scored horizon",
                                                          r"(\d+) bytes per cell",
                                                          r"cells hold ([\d,]+) bytes"))
    assert int(header) == size(0, 0, 0)
    assert int(per_block) == size(0, 0, 1) - size(0, 0, 0)
    assert int(per_cell) == size(24, 3, 7)  # day-ahead hourly, three quantiles, a week
    assert int(cells.replace(",", "")) == size(24, 3, 7) * 10**5


@pytest.mark.usefixtures("ticked_by_the_test")
def test_no_scores_when_scoring_is_off(tmp_path: Path) -> None:
    async def go() -> None:
        desc = descriptor(tmp_path, make_model(tmp_path / MODEL), scoring={"enabled": False})
        async with running(desc) as client:
            await write(client, 0, DAYS * 24 + 2)
            await client.app.state.components.default.scorer.tick()
            answer = await client.get(f"/v1/models/{MODEL}/accuracy")
        assert answer.status_code == 404
        assert answer.json()["error"] == "live scoring is off (controls.scoring.enabled)"

    asyncio.run(go())

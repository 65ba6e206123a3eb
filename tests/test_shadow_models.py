"""Shadow models: a candidate version forecasting and scored beside the version served,
promoted by a call or the descriptor's rule, rolled back; every decision kept in the shared
state and followed by every replica (xapp.serving.lifecycle)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import numpy as np
import pytest

from kpi_forecast.model.metrics import coverage, mae
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.model.scores import FIELDS, POINTS
from kpi_forecast.xapp.descriptor.accuracy import Promotion
from kpi_forecast.xapp.descriptor.config_file import ConfigError
from kpi_forecast.xapp.descriptor.controls import ModelControls
from kpi_forecast.xapp.serving import repository
from kpi_forecast.xapp.serving.lifecycle import Lifecycle, promotion_due
from kpi_forecast.xapp.serving.model_holder import check_controls
from kpi_forecast.xapp.serving.scoring import MAX_BLOCKS, Grid, Scorer, Summary
from kpi_forecast.xapp.store.score_records import size
from kpi_forecast.xapp.store.shared_state import SharedState
from tests.processes import ROOT
from tests.redis_server import redis_server
from tests.test_live_scoring import CELLS, DAYS, MODEL, expected, write
from tests.test_shared_history import redis_store
from tests.tolerance import network_tolerance
from tests.xapp_helpers import HORIZON, descriptor, make_model, running

FIRST = DAYS * 24  # the first origin the replayed history reaches
# Two versions of one model: on the test's load the candidate's weights forecast better
# (checked below from the forecasts themselves, not assumed).
SERVED, CANDIDATE = ("v-served", 0), ("v-candidate", 1)


@pytest.fixture
def ticked_by_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background rounds or decision rounds: the test ticks them, so nothing races it."""
    async def idle(self: object) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Scorer, "run", idle)
    monkeypatch.setattr(Lifecycle, "run", idle)


def two_versions(tmp_path: Path) -> tuple[Path, Path]:
    served = make_model(tmp_path / MODEL, version=SERVED[0], seed=SERVED[1])
    candidate = make_model(tmp_path / "candidates" / "next", version=CANDIDATE[0],
                           seed=CANDIDATE[1])
    return served, candidate


def metric(text: str, name: str) -> float:
    return next(float(line.split()[1]) for line in text.splitlines()
                if line.startswith(name + " ") or line.startswith(name + "{") and
                line.split()[0] == name)


async def rounds(client: object) -> None:
    slot = client.app.state.components.default  # type: ignore[attr-defined]
    await slot.scorer.tick()
    await slot.candidate_scorer.tick()


@pytest.mark.usefixtures("ticked_by_the_test")
def test_a_candidate_is_scored_beside_the_served_version_and_promoted_by_the_rule(
        tmp_path: Path) -> None:
    served_dir, candidate_dir = two_versions(tmp_path)
    want = {name: expected(path, FIRST) for name, path in
            (("served", served_dir), ("candidate", candidate_dir))}
    actual = want["served"]["actual"]
    scores = {name: (mae(actual, w["forecast"][..., 1]),
                     coverage(actual, w["forecast"][..., 0], w["forecast"][..., 2]))
              for name, w in want.items()}
    # The premise: the candidate forecasts this load better, and its band is no further off.
    assert scores["candidate"][0] < scores["served"][0]
    assert abs(scores["candidate"][1] - 0.8) <= abs(scores["served"][1] - 0.8)
    tolerance = network_tolerance(want["served"]["model"].metadata.config, actual.max())

    async def go() -> None:
        desc = descriptor(tmp_path, served_dir, recalibration={"everySeconds": 0},
                          promotion={"enabled": True, "minPoints": len(CELLS) * HORIZON,
                                     "minDays": 1})
        async with running(desc) as client:
            components = client.app.state.components
            await write(client, 0, FIRST + 2)
            shadowed = await client.post(f"/v1/models/{MODEL}/candidate",
                                         json={"model_dir": str(candidate_dir)})
            await rounds(client)  # both record their forecasts at the first origin
            forecast = (await client.get("/v1/cells/c0/forecast")).json()
            await components.lifecycle.tick()  # nothing scored yet: no promotion
            index = (await client.get("/v1/models")).json()
            await write(client, FIRST + 2, FIRST + HORIZON + 2)
            await rounds(client)  # both scored on the first origin's horizon
            accuracy = (await client.get(f"/v1/models/{MODEL}/accuracy")).json()
            await components.lifecycle.tick()  # the rule holds: promoted
            promoted = (await client.get("/v1/models")).json()
            after = (await client.get("/v1/cells/c0/forecast")).json()
            back = await client.post(f"/v1/models/{MODEL}/rollback")
            again = await client.post(f"/v1/models/{MODEL}/rollback")
            rolled = (await client.get("/v1/models")).json()
            metrics = (await client.get("/ric/v1/metrics")).text
        assert shadowed.status_code == 200, shadowed.text
        assert shadowed.json()["action"] == "candidate"
        assert shadowed.json()["candidate_version"] == CANDIDATE[0]
        # Shadowed, never answering.
        assert forecast["model_version"] == SERVED[0]
        assert index["models"][0]["version"] == SERVED[0]
        assert index["models"][0]["candidate_version"] == CANDIDATE[0]
        # Both scored on the same points, each as its own forecasts say.
        day = accuracy["windows"]["day"]
        shadow = accuracy["candidate"]["windows"]["day"]
        assert accuracy["model_version"] == SERVED[0]
        assert accuracy["candidate"]["model_version"] == CANDIDATE[0]
        assert day["points"] == shadow["points"] == actual.size
        assert day["mae"] == pytest.approx(scores["served"][0], abs=tolerance)
        assert shadow["mae"] == pytest.approx(scores["candidate"][0], abs=tolerance)
        assert shadow["naive_mae"] == day["naive_mae"]
        # Promoted by the rule: served, no candidate left, the decision says why.
        [model] = promoted["models"]
        assert (model["version"], model["candidate_version"]) == (CANDIDATE[0], None)
        assert after["model_version"] == CANDIDATE[0]
        [replica] = promoted["replicas"]
        assert replica["models"][MODEL]["version"] == CANDIDATE[0]
        assert replica["models"][MODEL]["decision"] == model["decision"] == 2
        # Rolled back by a call, once: there is nothing before the version it serves again.
        assert back.status_code == 200 and back.json()["action"] == "rollback"
        assert back.json()["served_version"] == SERVED[0]
        assert again.status_code == 409 and "roll back" in again.json()["error"]
        assert rolled["models"][0]["version"] == SERVED[0]
        for action in ("candidate", "promote", "rollback"):
            assert metric(metrics, f'kpi_forecast_model_decisions_total{{action="{action}",'
                                   f'model="{MODEL}"}}') == 1
        assert metric(metrics, f'kpi_forecast_live_scored_points{{model="{MODEL}",'
                               'role="candidate",window="day"}') == actual.size

    asyncio.run(go())


def summary(version: str, blocks: dict[int, tuple[float, float, float]]) -> Summary:
    """A round's summary whose horizons (by origin) had (points, absolute error, inside)."""
    sums = {}
    for origin, (points, error, inside) in blocks.items():
        row = np.zeros(len(FIELDS))
        row[POINTS] = points
        row[FIELDS.index("abs_error")] = error
        row[FIELDS.index("interval_points")] = points
        row[FIELDS.index("inside")] = inside
        for naive in ("last_day", "last_week"):
            row[FIELDS.index(f"{naive}_abs_error")] = 2 * points
        sums[origin] = row
    return Summary(version, max(blocks) + 24, 0.0, 1, {}, [], sums)


def test_the_promotion_rule_judges_the_horizons_both_versions_were_scored_on() -> None:
    grid = Grid(3600 * 10**9, 24, 24, 3, 7)
    rule = Promotion(enabled=True, min_points=48, min_days=2)
    # The served version was good before the candidate came (origin 0), bad since.
    served = summary("a", {0: (24, 0.0, 19), 24: (24, 48.0, 19), 48: (24, 48.0, 19)})
    better = summary("b", {24: (24, 24.0, 19), 48: (24, 24.0, 19)})
    assert promotion_due(served, better, rule, grid) is not None  # 24+24 < 48+48
    # Over its whole week the served version's error (96 over 72 points) would look lower.
    assert promotion_due(served, summary("b", {24: (24, 24.0, 19)}), rule, grid) is None
    worse = summary("b", {24: (24, 60.0, 19), 48: (24, 60.0, 19)})
    assert promotion_due(served, worse, rule, grid) is None
    wide = summary("b", {24: (24, 24.0, 24), 48: (24, 24.0, 24)})  # every actual inside
    assert promotion_due(served, wide, rule, grid) is None  # coverage 1.0, further from 0.8


def test_a_promotion_rule_that_can_never_be_met_is_refused_when_the_descriptor_loads(
        tmp_path: Path) -> None:
    served_dir, _ = two_versions(tmp_path)
    with pytest.raises(ConfigError, match="controls.promotion.minDays: 8 is greater than the "
                       "maximum of 7"):  # scores are kept for a week
        descriptor(tmp_path, served_dir, promotion={"enabled": True, "minDays": 8})
    # A week of an hourly model's scores over two cells holds 2 x 24 x 7 points.
    never = descriptor(tmp_path, served_dir, scoring={"maxCells": 2},
                       promotion={"enabled": True, "minPoints": 2 * 24 * 7 + 1})
    with pytest.raises(repository.RepositoryError) as refused:
        repository.at_start(never.controls)
    assert str(refused.value) == (
        f"model {MODEL}: controls.promotion.minPoints 337 can never be met: the live scores "
        "hold at most 336 points (2 cells, scoring.maxCells, x 168 steps kept a cell)")
    just = descriptor(tmp_path, served_dir, scoring={"maxCells": 2},
                      promotion={"enabled": True, "minPoints": 2 * 24 * 7})
    assert repository.at_start(just.controls) == ((MODEL,), MODEL)

    async def go() -> None:  # and as a live config change
        async with running(just) as client:
            with pytest.raises(ValueError, match="can never be met"):
                client.app.state.components.apply_descriptor(never)

    asyncio.run(go())


@pytest.mark.usefixtures("ticked_by_the_test")
def test_a_candidate_of_another_kpi_or_grid_is_refused_in_one_line(tmp_path: Path) -> None:
    served_dir, _ = two_versions(tmp_path)
    other_kpi = make_model(tmp_path / "other-kpi", version="k", target="some.other.kpi")
    other_grid = make_model(tmp_path / "other-grid", version="g")
    meta = json.loads((other_grid / "metadata.json").read_text())
    meta["freq"] = "15min"
    (other_grid / "metadata.json").write_text(json.dumps(meta))
    same = make_model(tmp_path / "same", version=SERVED[0])

    async def go() -> dict[str, object]:
        async with running(descriptor(tmp_path, served_dir)) as client:
            answers = {name: await client.post(f"/v1/models/{MODEL}/candidate",
                                               json={"model_dir": str(path)})
                       for name, path in (("kpi", other_kpi), ("grid", other_grid),
                                          ("same", same), ("outside", Path("/tmp")))}
            answers["promote"] = await client.post(f"/v1/models/{MODEL}/promote")
            answers["drop"] = await client.delete(f"/v1/models/{MODEL}/candidate")
            answers["index"] = (await client.get("/v1/models")).json()
        return answers

    answers = asyncio.run(go())
    for name, says in (("kpi", "candidate KPI some.other.kpi differs"),
                       ("grid", "candidate frequency 15min differs"),
                       ("same", f"candidate version {SERVED[0]} is the one")):
        assert answers[name].status_code == 422, name
        error = answers[name].json()["error"]
        assert says in error and "\n" not in error, error
    assert answers["outside"].status_code == 403
    assert answers["promote"].status_code == 409
    assert answers["drop"].status_code == 409
    assert answers["index"]["models"][0]["candidate_version"] is None
    assert answers["index"]["models"][0]["decision"] is None  # nothing was decided


@pytest.mark.usefixtures("ticked_by_the_test")
def test_every_replica_follows_the_decisions_and_says_what_it_serves(tmp_path: Path) -> None:
    served_dir, candidate_dir = two_versions(tmp_path)

    async def go() -> None:
        with redis_server(tmp_path) as port:
            desc = descriptor(tmp_path, served_dir, historyStore=redis_store(port, "shadow"),
                              recalibration={"everySeconds": 0})
            async with running(desc) as a, running(desc) as b:
                lifecycle_a = a.app.state.components.lifecycle
                lifecycle_b = b.app.state.components.lifecycle
                shadowed = await a.post(f"/v1/models/{MODEL}/candidate",
                                        json={"model_dir": str(candidate_dir)})
                assert shadowed.status_code == 200, shadowed.text
                await lifecycle_b.tick()  # B follows: it shadows the candidate too
                assert b.app.state.components.state.view(MODEL).candidate is not None
                promoted = await b.post(f"/v1/models/{MODEL}/promote")
                assert promoted.status_code == 200, promoted.text
                await lifecycle_a.tick()  # A follows B's promotion
                await lifecycle_b.tick()
                index = (await a.get("/v1/models")).json()
                forecasts = [(await each.post("/v1/forecast", json={
                    "cell_id": "c0", "start": "2024-03-01T00:00:00Z", "freq": "1h",
                    "values": [float(v % 24 + 1) for v in range(24 * DAYS)]})).json()
                    for each in (a, b)]
                # A decision made against a stale sequence is refused: nothing is kept.
                shared: SharedState = a.app.state.components.state.now.shared
                stale = await shared.put_decision(MODEL, 2, b"{}")
            async with running(desc) as restarted:  # a new replica follows at its first tick
                await restarted.app.state.components.lifecycle.tick()
                version = (await restarted.get("/v1/models")).json()["models"][0]["version"]
        assert promoted.json()["sequence"] == 2
        assert promoted.json()["by"] == lifecycle_b.replica
        assert {replica["replica"]: replica["models"][MODEL]["version"]
                for replica in index["replicas"]} == {lifecycle_a.replica: CANDIDATE[0],
                                                      lifecycle_b.replica: CANDIDATE[0]}
        assert [each["model_version"] for each in forecasts] == [CANDIDATE[0]] * 2
        assert stale is False
        assert version == CANDIDATE[0]

    asyncio.run(go())


def test_the_lifecycle_pages_rule_example_is_a_rule_that_can_be_met() -> None:
    page = (ROOT / "docs" / "lifecycle.md").read_text()
    [example] = re.findall(r"```json\n(.*?)\n```", page, re.S)
    controls = json.loads(example)["controls"]
    for name, own in controls["perModel"].items():
        rule = ModelControls.model_validate(own).promotion
        assert rule is not None and rule.enabled, name
        assert rule.never_met(7 * 24, 24, controls["scoring"]["maxCells"]) is None  # hourly


def test_a_fine_grid_keeps_its_last_horizons_and_a_rule_longer_than_them_is_refused(
        tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "seconds")
    meta = json.loads((model_dir / "metadata.json").read_text())
    meta["freq"] = "1s"  # a week of one-second steps: 25,200 horizons of 24
    (model_dir / "metadata.json").write_text(json.dumps(meta))
    model = OnnxForecaster(model_dir)
    grid = Grid.of(model)
    assert grid.blocks == MAX_BLOCKS and grid.steps_kept == MAX_BLOCKS * HORIZON
    assert size(grid.horizon, grid.quantiles, grid.blocks) == size(24, 3, MAX_BLOCKS)
    rule = descriptor(tmp_path, model_dir, promotion={"enabled": True, "minDays": 1}).controls
    with pytest.raises(ValueError, match=r"minDays 1 can never be met: the live scores keep "
                                         r"0\.0467 days"):
        check_controls(rule, model)

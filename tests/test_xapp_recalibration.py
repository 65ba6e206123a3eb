"""The xApp recalibrates its quantiles on the recent history it holds (xapp.recalibrator)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from kpi_forecast.model.recalibration import Recalibration, recalibration
from kpi_forecast.xapp.serving.recalibrator import Offsets, Recalibrator
from tests.redis_server import redis_server
from tests.tolerance import ANSWER_ROUNDING, rounding_tolerance
from tests.xapp_helpers import CONTEXT, HORIZON, descriptor, make_model, running

MODEL = "model"  # the one model's name, its directory's: the label of its metrics

START = "2024-03-04T00:00:00+01:00"
HOUR = pd.Timedelta("1h")
CELLS, STEPS = 12, CONTEXT + 8 * HORIZON  # a week of windows and one more horizon


def load(cell: int) -> list[float]:
    rng = np.random.default_rng(cell)
    t = np.arange(STEPS)
    shape = 1.5 + np.sin(2 * np.pi * t / 24)
    return [round(float(v), 3) for v in (20 + 10 * cell) * shape * rng.lognormal(0, 0.3, STEPS)]


async def seed(client: httpx.AsyncClient) -> None:
    items = [{"cell_id": f"c{i}", "start": START, "freq": "1h", "values": load(i)}
             for i in range(CELLS)]
    assert (await client.post("/v1/cells/history", json={"items": items})).status_code == 200


@pytest.fixture
def refreshed_by_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background refreshes: the test calls ``refresh`` itself, so nothing races it."""
    async def idle(self: Recalibrator) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Recalibrator, "run", idle)


@contextlib.asynccontextmanager
async def seeded(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """An xApp serving an untrained model, holding the history of CELLS cells."""
    async with running(descriptor(tmp_path, make_model(tmp_path / "model"))) as client:
        await seed(client)
        yield client


async def quantiles(client: httpx.AsyncClient, cell: str) -> np.ndarray:
    response = await client.get(f"/v1/cells/{cell}/forecast")
    assert response.status_code == 200 and response.json()["source"] == "model"
    return np.array([[step[q] for q in ("p10", "p50", "p90")]
                     for step in response.json()["forecasts"]])


async def shown(client: httpx.AsyncClient) -> tuple[float, float, dict[str, float]]:
    """The recalibration gauges a scrape reads: windows, model weight, offset per quantile (of
    the one model served, whose label they carry)."""
    metrics = (await client.get("/ric/v1/metrics")).text
    value = {line.split()[0]: float(line.split()[-1]) for line in metrics.splitlines()
             if line.startswith("kpi_forecast_recalibration_")}
    offsets = {name.split('quantile="')[1].split('"')[0]: v for name, v in value.items()
               if "offset{" in name}
    return (value[f'kpi_forecast_recalibration_windows{{model="{MODEL}"}}'],
            value[f'kpi_forecast_recalibration_model_weight{{model="{MODEL}"}}'], offsets)


@pytest.mark.usefixtures("refreshed_by_the_test")
def test_forecasts_get_the_offsets_of_the_cells_recent_history(tmp_path: Path) -> None:
    async def go() -> None:
        async with seeded(tmp_path) as client:
            service = client.app.state.components
            plain = await quantiles(client, "c3")
            info = (await client.get("/v1/model")).json()["recalibration"]
            assert info["windows"] == 0 and set(info["offsets"].values()) == {0.0}
            assert info["read_at"] == {"p10": 0.1, "p50": 0.5, "p90": 0.9}
            assert info["zero_width_offsets"] == {}

            fitted = await service.default.recalibrator.refresh()
            assert fitted.windows == 7 and fitted.residuals == CELLS * 7 * HORIZON
            moved = await quantiles(client, "c3")
            # The same adjustment as `kpi-forecast predict` would find on these windows.
            # As the store holds it: its whole length, NaN before the first value.
            length = service.state.now.controls.history_length
            history = np.full((CELLS, length), np.nan, np.float32)
            history[:, -STEPS:] = [load(i) for i in range(CELLS)]
            last = pd.DatetimeIndex([pd.Timestamp(START) + (STEPS - 1) * HOUR] * CELLS)
            expected = recalibration(service.state.now.model, history, last, 7)
            # The same function on the same arrays in the same order (the store lists cells
            # by their last report, ties in the order they came): the same result, exactly.
            np.testing.assert_array_equal(fitted.offsets, expected.offsets)
            # An untrained network's median: the naives take some of it.
            assert fitted.shares == expected.shares and fitted.weight < 1
            # Answers carry DECIMALS places: `plain` comes rounded, and the adjustment (the
            # median's blend, each outer quantile moved by its offset in band widths) carries
            # that rounding on, scaled by at most 1 + 2 |offset|; `moved` is rounded again.
            spread = 1 + 2 * np.abs(expected.offsets).max()
            np.testing.assert_allclose(
                moved, expected.apply(plain[None], history[3:4])[0], rtol=0,
                atol=ANSWER_ROUNDING * (spread + 1) + rounding_tolerance(8, np.abs(moved).max()))
            assert not np.allclose(moved, plain)

            info = (await client.get("/v1/model")).json()["recalibration"]
            assert info["windows"] == 7 and info["cells"] == CELLS and info["refreshed_at"]
            assert info["offsets"]["p10"] == round(float(fitted.offsets[0]), 6)
            # The exported network's band is nowhere zero wide.
            assert info["zero_width_offsets"] == {} and expected.flat_offsets.size == 0
            assert info["read_at"] == dict(zip(["p10", "p50", "p90"], expected.read_at,
                                               strict=True))
            assert info["model_weight"] == fitted.weight
            assert info["naive_weights"] == fitted.naive_shares()
            # Shares of twentieths, each rounded once to float64, summed in it.
            assert info["model_weight"] + sum(info["naive_weights"].values()) == \
                pytest.approx(1.0, rel=0, abs=4 * np.finfo(float).eps)
            metrics = (await client.get("/ric/v1/metrics")).text
            assert f'kpi_forecast_recalibration_windows{{model="{MODEL}"}} 7.0' in metrics
            line = next(x for x in metrics.splitlines() if x.startswith(
                f'kpi_forecast_recalibration_offset{{model="{MODEL}",quantile="p90"}}'))
            assert float(line.split()[-1]) == float(fitted.offsets[2]) != 0.0

    asyncio.run(go())


@pytest.mark.usefixtures("refreshed_by_the_test")
def test_the_offsets_for_zero_wide_bands_are_shown(tmp_path: Path) -> None:
    """Offsets in force for zero-wide bands (a replica's refresh, shared) are in GET
    /v1/model beside the others."""
    async def go() -> None:
        async with seeded(tmp_path) as client:
            service = client.app.state.components
            fitted = Recalibration(np.array([-0.1, 0.0, 0.2], np.float32), 1, 7, 500,
                                   steps_per_day=24,
                                   flat_offsets=np.array([-1.25, 0.0, 2.5], np.float32))
            version = service.state.now.model.metadata.model_version
            service.default.recalibrator.offsets = Offsets(version, fitted, 10, 1.0e9)
            info = (await client.get("/v1/model")).json()["recalibration"]
            assert info["zero_width_offsets"] == {"p10": -1.25, "p50": 0.0, "p90": 2.5}
            assert info["offsets"] == {"p10": -0.1, "p50": 0.0, "p90": 0.2}

    asyncio.run(go())


@pytest.mark.usefixtures("refreshed_by_the_test")
def test_the_offsets_are_kept_to_their_model_and_can_be_turned_off(tmp_path: Path) -> None:
    async def go() -> None:
        async with seeded(tmp_path) as client:
            service = client.app.state.components
            plain = await quantiles(client, "c1")
            await service.default.recalibrator.refresh()
            assert not np.allclose(await quantiles(client, "c1"), plain)
            # Another model's forecasts do not take this one's offsets.
            other = make_model(tmp_path / "other", version="other")
            assert (await client.post("/v1/model/reload", json={"model_dir": str(other)})
                    ).status_code == 200
            assert (await client.get("/v1/model")).json()["recalibration"]["windows"] == 0
            assert await shown(client) == (0.0, 1.0, {"p10": 0.0, "p50": 0.0, "p90": 0.0})
            await service.default.recalibrator.refresh()
            assert (await client.get("/v1/model")).json()["recalibration"]["windows"] == 7
            assert (await shown(client))[0] == 7.0
            # everySeconds 0: the model's own calibration, whatever was computed before.
            service.apply_descriptor(descriptor(tmp_path / "off", other, recalibration={
                "everySeconds": 0, "maxCells": 256}))
            assert (await client.get("/v1/model")).json()["recalibration"]["windows"] == 0
            assert await shown(client) == (0.0, 1.0, {"p10": 0.0, "p50": 0.0, "p90": 0.0})

    asyncio.run(go())


def test_the_background_loop_refreshes_for_a_new_model_and_then_on_schedule(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        model_dir = make_model(tmp_path / "model")
        desc = descriptor(tmp_path, model_dir,
                          recalibration={"everySeconds": 0.5, "maxCells": 5})
        async with running(desc) as client:
            await seed(client)
            for _ in range(100):  # refreshed at load, then every half second (a tick is 1 s)
                info = (await client.get("/v1/model")).json()["recalibration"]
                if info["windows"]:
                    break
                await asyncio.sleep(0.05)
            assert info["windows"] == 7 and info["cells"] == 5  # the most recent maxCells cells


    asyncio.run(go())


def test_a_refresh_that_found_no_history_is_retried_before_its_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new deployment refreshes at once on an empty history; the history that then arrives
    is fitted after the retry delay, not an hour later."""
    monkeypatch.setattr("kpi_forecast.xapp.serving.recalibrator.RETRY_S", 0.5)

    async def go() -> None:
        desc = descriptor(tmp_path, make_model(tmp_path / "model"),
                          recalibration={"everySeconds": 3600, "maxCells": 256})
        async with running(desc) as client:
            service = client.app.state.components
            for _ in range(100):
                if service.default.recalibrator.offsets is not None:
                    break
                await asyncio.sleep(0.05)
            offsets = service.default.recalibrator.offsets
            assert offsets.recalibration.windows == 0  # nothing held yet
            await seed(client)
            for _ in range(100):
                info = (await client.get("/v1/model")).json()["recalibration"]
                if info["windows"]:
                    break
                await asyncio.sleep(0.05)
            assert info["windows"] == 7 and info["cells"] == CELLS

    asyncio.run(go())


def test_replicas_on_one_redis_apply_the_same_offsets(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    with redis_server(tmp_path) as port:
        store = {"backend": "redis", "host": "127.0.0.1", "port": port, "timeoutMs": 300}
        desc_a = descriptor(tmp_path / "a", model_dir, historyStore=store)
        desc_b = descriptor(tmp_path / "b", model_dir, historyStore=store)

        async def go() -> None:
            async with running(desc_a) as a, running(desc_b) as b:
                await seed(a)
                fitted = await a.app.state.components.default.recalibrator.refresh()
                assert fitted.windows == 7
                # Each replica takes up the store's refresh within a second. B may have
                # refreshed on its own while A's seeding landed: whichever was written last
                # is the one both apply.
                for _ in range(100):
                    info = (await b.get("/v1/model")).json()["recalibration"]
                    if info["windows"] and info == (await a.get("/v1/model")).json()[
                            "recalibration"]:
                        break
                    await asyncio.sleep(0.05)
                assert info == (await a.get("/v1/model")).json()["recalibration"]
                assert info["windows"] == 7
                np.testing.assert_array_equal(await quantiles(b, "c5"),
                                              await quantiles(a, "c5"))
            # A restarted replica takes the shared offsets rather than computing its own.
            async with running(desc_b) as b:
                # Replicas look for shared offsets every second: a few looks at most.
                for _ in range(100):
                    if (await b.get("/v1/model")).json()["recalibration"] == info:
                        break
                    await asyncio.sleep(0.05)
                assert (await b.get("/v1/model")).json()["recalibration"] == info

        asyncio.run(go())


def test_shared_offsets_keep_the_shares_and_refuse_another_builds() -> None:
    fitted = Recalibration(np.array([-0.1, 0.0, 0.2], np.float32), 1, 7, 500,
                           shares=(0.25, 0.0, 0.7, 0.05), steps_per_day=24,
                           read_at=(0.0875, 0.5, 0.95),
                           flat_offsets=np.array([-1.25, 0.0, 2.5], np.float32))
    blob = Offsets("v1", fitted, 10, 1.0e9).to_json()
    read = Offsets.from_json(blob).recalibration
    np.testing.assert_array_equal(read.offsets, fitted.offsets)
    np.testing.assert_array_equal(read.flat_offsets, fitted.flat_offsets)
    assert (read.shares, read.windows) == ((0.25, 0.0, 0.7, 0.05), 7)
    assert read.read_at == (0.0875, 0.5, 0.95)
    # Offsets another build wrote are refused in one line, not half read.
    raw = json.loads(blob)
    del raw["shares"]
    with pytest.raises(ValueError, match="not offsets as this xApp writes them .*shares"):
        Offsets.from_json(json.dumps(raw).encode())

"""What the OpenAPI document promises and what the API enforces are the same: every reference
resolves, the served model's constraints are stated, and what lies outside them (a year pandas
cannot hold, a value float32 cannot, a boolean for a number) is a 4xx naming the field."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from openapi_spec_validator import validate

from kpi_forecast.model.kpi import MAX_KPI_VALUE
from kpi_forecast.xapp.http import arrow_ipc
from tests.xapp_helpers import CONTEXT, HORIZON, descriptor, make_model, running

START = "2024-03-01T00:00:00+01:00"
ARROW = {"content-type": arrow_ipc.ARROW_STREAM}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("contract") / "model")


def weekly_model(path: Path) -> Path:
    """The test model with a step of a week: a few thousand steps reach past 2262."""
    make_model(path, version="weekly")
    meta = json.loads((path / "metadata.json").read_text())
    (path / "metadata.json").write_text(json.dumps({**meta, "freq": "7D"}))
    return path


def item(**changes: object) -> dict:
    return {"cell_id": "c1", "start": START, "freq": "1h",
            "values": [float(10 + h % 24) for h in range(CONTEXT)], **changes}


def refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def resolve(document: dict, ref: str) -> object:
    assert ref.startswith("#/"), ref
    node: object = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]  # type: ignore[index]
    return node


def check_document(document: dict) -> None:
    validate(document)  # the OpenAPI 3.1 meta-schema
    for ref in refs(document):
        resolve(document, ref)  # a KeyError names the reference that does not resolve


def test_the_document_is_valid_and_every_reference_resolves(model_dir: Path,
                                                           tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, tmp_path / "nowhere"), wait_ready=False
                           ) as client:
            check_document((await client.get("/openapi.json")).json())  # no model yet
        async with running(descriptor(tmp_path, model_dir)) as client:
            document = (await client.get("/openapi.json")).json()
            check_document(document)
            batch = document["paths"]["/v1/forecast/batch"]["post"]["requestBody"]["content"]
            ref = batch["application/json"]["schema"]["$ref"]
            assert resolve(document, ref)["properties"]["items"]["items"]["$ref"] == (
                "#/components/schemas/ForecastRequest")
            assert batch[arrow_ipc.ARROW_STREAM]["schema"] == {"type": "string", "format": "binary"}

    asyncio.run(go())


def test_the_document_states_the_served_models_step_and_horizon(model_dir: Path,
                                                                tmp_path: Path) -> None:
    async def go() -> None:
        # The model swapped in below is in another test folder: the root above both.
        async with running(descriptor(tmp_path, model_dir, modelRoot=str(tmp_path.parent))
                           ) as client:
            document = (await client.get("/openapi.json")).json()
            schemas = document["components"]["schemas"]
            for name in ("ForecastRequest", "SeriesIn", "CellHistoryIn"):
                assert schemas[name]["properties"]["freq"]["enum"] == ["1h"], name
            for name in ("ForecastRequest", "CellsForecastRequest"):
                horizon = schemas[name]["properties"]["horizon"]["anyOf"][0]
                assert horizon == {"type": "integer", "minimum": 1, "maximum": HORIZON}, name
            assert "enum" not in schemas["CellsResponse"]["properties"]["freq"]  # a response
            query = {p["name"]: p["schema"] for p in
                     document["paths"]["/v1/forecast/batch"]["post"]["parameters"]}
            assert query["freq"]["anyOf"][0]["enum"] == ["1h"]
            assert query["horizon"]["anyOf"][0]["maximum"] == HORIZON
            # Another model swapped in: the document follows it.
            weekly = weekly_model(tmp_path / "weekly")
            assert (await client.post("/v1/model/reload",
                                      json={"model_dir": str(weekly)})).status_code == 200
            schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
            assert schemas["SeriesIn"]["properties"]["freq"]["enum"] == ["7D"]

    asyncio.run(go())


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"start": "9243-03-26T05:20:30+21:24"}, "start", "year 9243 is outside 1970 to 2199"),
    ({"start": "1969-12-31T23:00:00+00:00"}, "start", "year 1969"),
    ({"start": 0}, "start", "date-time string"),
    ({"values": [1e39]}, "values[0]", "less than or equal to 1000000000000000"),
    ({"values": [True, 2.0]}, "values[0]", "valid number"),
    ({"values": [None, None]}, "values", "no observed value"),
    ({"horizon": True}, "horizon", "whole number"),
    ({"horizon": "5"}, "horizon", "whole number"),
    ({"cell_id": "a/b"}, "cell_id", "pattern"),
])
def test_what_the_schema_refuses_is_a_422_naming_the_field(
        model_dir: Path, tmp_path: Path, change: dict, field: str, words: str) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post("/v1/forecast", json=item(**change))
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error.startswith(f"{field}: ") and words in error, error
            history = {k: v for k, v in item(**change).items() if k != "cell_id"}
            if field != "cell_id" and words != "no observed value":  # the same rule for history
                response = await client.post("/v1/cells/c1/history", json=history)
                assert response.status_code == 422 and field in response.json()["error"]

    asyncio.run(go())


def test_the_largest_value_taken_gives_finite_quantiles(model_dir: Path,
                                                       tmp_path: Path) -> None:
    values = [MAX_KPI_VALUE * (h % 2) for h in range(CONTEXT)]  # 0 and the maximum, alternating

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post("/v1/forecast", json=item(values=values))
            assert response.status_code == 200 and response.json()["source"] == "model"
            quantiles = [v for point in response.json()["forecasts"]
                         for k, v in point.items() if k != "timestamp"]
            assert np.isfinite(quantiles).all()

    asyncio.run(go())


def test_a_series_whose_forecast_ends_past_2262_is_refused(tmp_path: Path) -> None:
    weekly = weekly_model(tmp_path / "weekly")
    start = pd.Timestamp("2199-01-01", tz="UTC")

    async def go() -> None:
        async with running(descriptor(tmp_path, weekly)) as client:
            long = item(freq="7D", start=start.isoformat(), values=[1.0] * 3400)  # 65 years
            history = {k: v for k, v in long.items() if k != "cell_id"}
            for route, sent in (("/v1/forecast", long), ("/v1/cells/c1/history", history)):
                response = await client.post(route, json=sent)
                assert response.status_code == 422, response.text
                assert response.json()["error"].startswith("values: 3400 steps of 7D")
            body = arrow_ipc.write_request(["c1"], [start], [[1.0] * 3400])
            response = await client.post("/v1/forecast/batch", content=body, headers=ARROW)
            assert response.status_code == 422 and "end past 2262" in response.json()["error"]
            short = item(freq="7D", start=start.isoformat(), values=[1.0] * 100)
            assert (await client.post("/v1/forecast", json=short)).status_code == 200

    asyncio.run(go())


def test_arrow_values_and_starts_outside_the_range_are_422(model_dir: Path,
                                                         tmp_path: Path) -> None:
    cases = [
        (pd.Timestamp("2024-03-01", tz="UTC"), [1.0, 1e39], "not a KPI"),
        (pd.Timestamp("2024-03-01", tz="UTC"), [1.0, 2e15], "not a KPI"),
        (pd.Timestamp("1960-01-01", tz="UTC"), [1.0, 2.0], "outside the years 1970 to 2199"),
    ]

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            for start, values, words in cases:
                body = arrow_ipc.write_request(["c1"], [start], [values])
                response = await client.post("/v1/forecast/batch", content=body, headers=ARROW)
                assert response.status_code == 422 and words in response.json()["error"]
            # Without ?freq the model's own step is meant.
            body = arrow_ipc.write_request(["c1"], [pd.Timestamp("2024-03-01", tz="UTC")],
                                        [[1.0] * CONTEXT])
            response = await client.post("/v1/forecast/batch", content=body, headers=ARROW)
            assert response.status_code == 200 and response.headers["x-source"] == "model"

    asyncio.run(go())


def test_a_json_batch_takes_items_of_any_offset_and_horizon(model_dir: Path,
                                                           tmp_path: Path) -> None:
    items = [item(cell_id="a", start="2024-03-01T00:00:00-06:22", horizon=3),
             item(cell_id="b", start="2024-03-01T00:00:00+02:00"),
             item(cell_id="c", start="2024-03-01T00:00:00Z", horizon=HORIZON)]

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            response = await client.post("/v1/forecast/batch?horizon=5", json={"items": items})
            assert response.status_code == 200, response.text
            answers = {a["cell_id"]: a["forecasts"] for a in response.json()["items"]}
            assert [len(answers[c]) for c in "abc"] == [3, 5, HORIZON]  # the query's for b
            assert answers["a"][0]["timestamp"] == "2024-03-08T00:00:00-06:22"  # its own offset
            alone = await client.post("/v1/forecast", json=items[0])
            assert alone.json()["forecasts"] == answers["a"]
            for query in ("?horizon=25", "?freq=", "?freq=15min"):
                response = await client.post(f"/v1/forecast/batch{query}", json={"items": items})
                assert response.status_code == 422, query

    asyncio.run(go())


def test_answers_step_through_a_dst_switch_in_their_own_offset(model_dir: Path,
                                                              tmp_path: Path) -> None:
    # The history ends at 00:00 UTC on 31 March 2024: Paris moves from +01:00 to +02:00 an
    # hour later, inside the forecast.
    end = pd.Timestamp("2024-03-31T00:00:00Z")
    start = end - (CONTEXT - 1) * pd.Timedelta("1h")

    async def go() -> None:
        async with running(descriptor(tmp_path, model_dir)) as client:
            answers = {}
            for zone in ("UTC", "Europe/Paris"):  # one instant, two offsets, asked in turn
                body = item(start=start.tz_convert(zone).isoformat())
                answers[zone] = (await client.post("/v1/forecast", json=body)).json()
            stamps = {zone: [pd.Timestamp(p["timestamp"]) for p in answer["forecasts"]]
                      for zone, answer in answers.items()}
            expected = list(pd.date_range(end + pd.Timedelta("1h"), periods=HORIZON, freq="1h"))
            assert stamps["UTC"] == stamps["Europe/Paris"] == expected  # the same instants
            # Each in the offset its request came in (a date-time carries an offset, no zone).
            assert answers["UTC"]["forecasts"][0]["timestamp"] == "2024-03-31T01:00:00+00:00"
            assert answers["Europe/Paris"]["forecasts"][1]["timestamp"] == (
                "2024-03-31T03:00:00+01:00")
            # A held cell is answered in the model's zone, Europe/Paris: across the switch.
            history = {k: v for k, v in item(start=start.isoformat()).items() if k != "cell_id"}
            assert (await client.post("/v1/cells/c1/history", json=history)).status_code == 200
            held = (await client.get("/v1/cells/c1/forecast")).json()["forecasts"]
            assert [p["timestamp"] for p in held[:2]] == ["2024-03-31T03:00:00+02:00",
                                                          "2024-03-31T04:00:00+02:00"]
            assert [pd.Timestamp(p["timestamp"]) for p in held] == expected

    asyncio.run(go())

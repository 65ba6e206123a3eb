"""The route groups that change what the xApp forecasts (controls.api): model control and
history writes, each open, behind the API key or off; refused with 403 before the body is
read, counted by group, said in the OpenAPI document; the key never shown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kpi_forecast.xapp.descriptor.config_file import CONFIG_FILE_NAME, DEFAULT_DIR, load_descriptor
from kpi_forecast.xapp.descriptor.controls import API_KEY_ENV, API_KEY_HEADER
from tests.xapp_helpers import CONTEXT, descriptor, make_model, running

KEY = "s3cret-key-for-the-test"
START = "2013-12-01T00:00:00+01:00"
HISTORY = {"start": START, "freq": "1h", "values": [5.0] * CONTEXT}


def restricted_calls(model_dir: Path) -> dict[str, tuple[str, dict]]:
    """One call of each restricted route, by group."""
    return {
        "reload": ("/v1/model/reload", {"model_dir": str(model_dir)}),
        "add_history": ("/v1/cells/c1/history", HISTORY),
        "add_histories": ("/v1/cells/history", {"items": [{"cell_id": "c2", **HISTORY}]}),
    }


def test_the_packaged_descriptor_puts_both_groups_behind_the_key() -> None:
    api = load_descriptor(DEFAULT_DIR / CONFIG_FILE_NAME, {"model_dir": "/m"}).controls.api
    assert (api.model_control, api.history_writes) == ("key", "key")


@pytest.mark.parametrize("mode", ["key", "off"])
def test_a_caller_without_the_key_changes_nothing(tmp_path: Path, mode: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, KEY)
    model_dir = make_model(tmp_path / "model")
    newer = make_model(tmp_path / "newer", version="newer")
    calls = restricted_calls(newer)

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, api={"modelControl": mode, "historyWrites": mode})
        async with running(desc) as client:
            wrong = {API_KEY_HEADER: "not-" + KEY}
            for headers in ({}, wrong, {API_KEY_HEADER: KEY[:-1]}):
                for path, body in calls.values():
                    response = await client.post(path, json=body, headers=headers)
                    assert response.status_code == 403, (path, response.text)
                    assert response.json()["group"] in {"model_control", "history_writes"}
            assert (await client.get("/v1/model")).json()["model_version"] == "test"
            assert (await client.get("/v1/cells")).json()["count"] == 0
            registry = client.app.state.components.metrics.registry
            counts = {group: registry.get_sample_value(
                "kpi_forecast_refused_requests_total", {"group": group})
                for group in ("model_control", "history_writes")}
            assert counts == {"model_control": 3.0, "history_writes": 6.0}
            # With the key: off stays off; key lets the caller in.
            keyed = {API_KEY_HEADER: KEY}
            statuses = [(await client.post(path, json=body, headers=keyed)).status_code
                        for path, body in calls.values()]
            assert statuses == ([200, 200, 200] if mode == "key" else [403, 403, 403])
            # Reading is open to every caller.
            assert (await client.get("/v1/cells")).status_code == 200
            assert (await client.get("/ric/v1/health/ready")).status_code == 200
            assert KEY not in (await client.get("/ric/v1/config")).text

    asyncio.run(go())


def test_without_a_key_set_the_key_groups_refuse_everyone(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    model_dir = make_model(tmp_path / "model")

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, api={"modelControl": "key",
                                                    "historyWrites": "open"})
        async with running(desc) as client:
            refused = await client.post("/v1/model/reload", json={},
                                        headers={API_KEY_HEADER: ""})
            assert refused.status_code == 403
            assert f"none is set (${API_KEY_ENV}" in refused.json()["error"]
            taken = await client.post("/v1/cells/c1/history", json=HISTORY)
            assert taken.status_code == 200  # open: any caller

    asyncio.run(go())


def test_the_document_says_which_routes_need_which_group(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "model")

    async def go() -> None:
        desc = descriptor(tmp_path, model_dir, api={"modelControl": "key",
                                                    "historyWrites": "off"})
        async with running(desc) as client:
            document = (await client.get("/openapi.json")).json()
        paths = document["paths"]
        reload = paths["/v1/model/reload"]["post"]
        assert reload["x-api-group"] == "model_control"
        assert reload["security"] == [{"ApiKey": []}] and "403" in reload["responses"]
        scheme = document["components"]["securitySchemes"]["ApiKey"]
        assert scheme == {"type": "apiKey", "in": "header", "name": API_KEY_HEADER,
                          "description": f"The key in the xApp's ${API_KEY_ENV}"}
        for path in ("/v1/cells/{cell_id}/history", "/v1/cells/history"):
            operation = paths[path]["post"]
            assert operation["x-api-group"] == "history_writes"
            assert "security" not in operation  # off: no key opens it
            assert "history_writes: off" in operation["description"]
        for path in ("/v1/forecast", "/v1/cells", "/ric/v1/health/ready"):
            for operation in paths[path].values():
                assert "x-api-group" not in operation and "security" not in operation
        # The security page lists every restricted route in its group's row, and no other.
        page = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
        rows = {line.split("`")[1]: line for line in page.splitlines()
                if line.startswith("| ") and "`" in line}
        listed = {group: rows[group.replace("_c", "C").replace("_w", "W")]
                  for group in ("model_control", "history_writes")}
        restricted = {(operation["x-api-group"], f"{method.upper()} {path}")
                      for path, item in paths.items() for method, operation in item.items()
                      if operation.get("x-api-group") in listed}
        assert restricted and all(f"`{route}`" in listed[group] for group, route in restricted)
        for group, row in listed.items():
            assert row.count("`POST ") + row.count("`DELETE ") == sum(
                1 for g, _ in restricted if g == group), row

    asyncio.run(go())

"""KServe's time-series API on the xApp: answers parsed with the kserve package's own types
(its release's ``kserve/protocol/rest/timeseries/types.py``, installed beside the dev venv by
make test without kserve's dependencies, and read without the package's ``__init__``), and the
errors in KServe's shape."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.test_xapp_api import START, series
from tests.xapp_helpers import descriptor, make_repository, running

TYPES = Path(sys.prefix) / "kserve" / "kserve" / "protocol" / "rest" / "timeseries" / "types.py"


@pytest.fixture(scope="module")
def kserve_types() -> ModuleType:
    assert TYPES.is_file(), f"{TYPES}: kserve's types are installed by make test"
    spec = importlib.util.spec_from_file_location("kserve_timeseries_types", TYPES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repository(tmp_path_factory.mktemp("kserve") / "models",
                           {"traffic": "traffic_mb", "prb": "prb_util"})


def request(kserve_types: ModuleType, **options: object) -> dict:
    """A request built with kserve's own types, as a KServe client sends it."""
    return kserve_types.ForecastRequest(
        model="prb", options=kserve_types.ForecastOptions(**{"horizon": 24, **options}),
        inputs=[kserve_types.TimeSeriesInput(
            type="univariate_time_series", name=f"c{k}", series=series(seed=k)[6:],
            frequency="H", start_timestamp=START) for k in range(3)],
    ).model_dump(mode="json", exclude_none=True)


def test_answers_parse_as_kserves_forecast_response_and_match_the_native_route(
        kserve_types: ModuleType, repository: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with running(descriptor(tmp_path, None,
                                      modelRepository=str(repository))) as client:
            assert (await client.get("/v1/timeseries/models")).json() == ["prb", "traffic"]
            answer = await client.post("/v1/timeseries/forecast",
                                       json=request(kserve_types, quantiles=[0.1, 0.9]))
            assert answer.status_code == 200, answer.text
            parsed = kserve_types.ForecastResponse.model_validate(answer.json())
            assert parsed.model == "prb" and parsed.status.value == "completed"
            [output] = parsed.outputs
            assert [c.name for c in output.content] == ["c0", "c1", "c2"]
            first = output.content[0]
            assert (len(first.mean_forecast), sorted(first.quantiles)) == (24, ["0.1", "0.9"])
            assert first.frequency.value == "H"
            # The same series through the native route: the same model, the same forecast.
            native = (await client.post("/v1/models/prb/forecast", json={
                "cell_id": "c0", "start": START, "freq": "1h", "values": series(seed=0)[6:],
                "horizon": 24})).json()
            assert first.start_timestamp == native["forecasts"][0]["timestamp"]
            for key, column in (("p50", first.mean_forecast), ("p10", first.quantiles["0.1"]),
                                ("p90", first.quantiles["0.9"])):
                np.testing.assert_array_equal(column, [p[key] for p in native["forecasts"]])

    asyncio.run(go())


@pytest.mark.parametrize(("change", "status", "problem"), [
    ({"model": "nope"}, 404, "no model 'nope'; the models: prb, traffic"),
    ({"options": {"horizon": 500}}, 422, "options.horizon 500: from 1 to the model's 24"),
    ({"options": {"horizon": 2, "quantiles": [0.3]}}, 422,
     "options.quantiles [0.3] are not among the model's"),
    ({"frequency": "D"}, 422, "inputs.0.frequency 'D': the model's step is 1h"),
    ({"frequency": "M"}, 422, "inputs.0.frequency 'M'"),
    ({"start_timestamp": None}, 422, "inputs.0.start_timestamp: needed"),
    ({"series": [1.0, -5.0]}, 422, "inputs.0.series.1: Input should be greater than or equal"),
    ({"type": "multivariate_time_series"}, 422, "inputs.0: only univariate_time_series"),
    ({"options": None}, 422, "options: Input should be an object"),
])
def test_bad_requests_get_kserves_error_shape(
        kserve_types: ModuleType, repository: Path, tmp_path: Path, change: dict, status: int,
        problem: str) -> None:
    body = request(kserve_types)
    for key, value in change.items():
        if key in body:
            body[key] = value
        elif value is None:
            body["inputs"][0].pop(key)
        else:
            body["inputs"][0][key] = value

    async def go() -> None:
        async with running(descriptor(tmp_path, None,
                                      modelRepository=str(repository))) as client:
            answer = await client.post("/v1/timeseries/forecast", json=body)
            assert answer.status_code == status, answer.text
            error = kserve_types.ErrorResponse.model_validate(answer.json()).error
            assert problem in error.message
            assert error.code == str(status)

    asyncio.run(go())

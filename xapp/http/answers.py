"""A forecast answer as JSON: one cell's points (timestamps in the zone its series came in,
quantiles rounded to DECIMALS places), built from checked parts without validating them
again.

The answers have the shape of ``schemas.ForecastResponse`` and ``BatchResponse`` (the OpenAPI
document's, and what the contract tests validate them against) but are plain dicts encoded by
orjson: building the pydantic models and dumping them is slower, and every single-cell
forecast pays it (docs/decisions/hot-path.md).
"""

from __future__ import annotations

import datetime as dt
import functools

import numpy as np
import orjson
from fastapi import Response

from kpi_forecast.xapp.serving.decision import Answer

DECIMALS = 4  # of the quantiles answered in JSON: a tenth of a thousandth of any KPI unit


def _points(answer: Answer, row: int, last: dt.datetime, step: dt.timedelta,
            horizon: int | None, names: tuple[str, ...] | None) -> list[dict]:
    quantiles = answer.quantiles[row, :horizon]
    if names is not None and list(names) != answer.names:
        quantiles = quantiles[:, [answer.names.index(name) for name in names]]
    rows = np.round(quantiles.astype(np.float64), DECIMALS).tolist()
    stamps = _timestamps(last.astimezone(dt.UTC), last.tzinfo, step, len(rows))
    keys = ("timestamp", *(names or answer.names))
    return [dict(zip(keys, (stamp, *values), strict=True))
            for stamp, values in zip(stamps, rows, strict=True)]


@functools.lru_cache(maxsize=256)
def _timestamps(last: dt.datetime, zone: dt.tzinfo, step: dt.timedelta, horizon: int
                ) -> tuple[str, ...]:
    """The forecast steps' ISO timestamps in ``zone``, from ``last`` in UTC: the same few
    windows are asked for all hour long.

    Steps are added in UTC: an aware datetime adds on the wall clock, which across a DST
    switch would label two steps with one instant. The zone is part of the key because
    datetimes of one instant in two zones are equal, and hash alike.
    """
    return tuple((last + (k + 1) * step).astimezone(zone).isoformat() for k in range(horizon))


def cell_response(cell_id: str, answer: Answer, row: int, last: dt.datetime,
                  step: dt.timedelta, latency_ms: float, horizon: int | None = None,
                  names: tuple[str, ...] | None = None) -> dict:
    """One cell's answer (a ``ForecastResponse``): its first ``horizon`` steps and its
    quantiles ``names`` (default: all the answer holds)."""
    return {
        "cell_id": cell_id, "forecasts": _points(answer, row, last, step, horizon, names),
        "model_version": answer.model_version, "source": answer.source,
        "reason": answer.reason, "latency_ms": round(latency_ms, 3),
    }


def batch_response(items: list[dict], latency_ms: float) -> dict:
    """Many cells' answers (a ``BatchResponse``)."""
    return {"items": items, "latency_ms": round(latency_ms, 3)}


def json_response(payload: dict) -> Response:
    return Response(orjson.dumps(payload), media_type="application/json")

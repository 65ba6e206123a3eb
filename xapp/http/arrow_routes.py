"""The Arrow IPC path of /v1/forecast/batch: a table of series in, a long table of forecasts
out, for callers that send thousands of cells at once (``arrow_ipc.py`` reads and writes it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from fastapi import Response

from kpi_forecast.model.kpi import kpi_problem, not_kpis
from kpi_forecast.xapp.http import arrow_ipc
from kpi_forecast.xapp.http.errors import ClientError
from kpi_forecast.xapp.http.routes import BY_NAME
from kpi_forecast.xapp.http.schemas import FIRST_YEAR, LAST_YEAR
from kpi_forecast.xapp.http.series import fits
from kpi_forecast.xapp.ric.a1.policies import request_budget
from kpi_forecast.xapp.service import Service

ROUTE = BY_NAME["forecast_batch"]


async def forecast_arrow(service: Service, body: bytes, freq: str | None, horizon: int | None,
                         arrival: float) -> Response:
    decider = service.decider
    freq = decider.served().metadata.freq if freq is None else freq
    model, horizon = decider.check_request(freq, horizon)
    try:
        cells, start, history, lengths = arrow_ipc.read_request(body)
    except arrow_ipc.BodyError as exc:
        raise ClientError(422, str(exc)) from None
    bad = not_kpis(history)
    if bad.any():
        row, step = (int(i) for i in np.argwhere(bad)[0])
        value = float(history[row, step])
        raise ClientError(422, f"series {row} ({cells[row]}): value {value} is not a KPI: "
                          f"{kpi_problem(value)}")
    outside = (start.year < FIRST_YEAR) | (start.year > LAST_YEAR)
    if outside.any():
        row = int(np.argmax(outside))
        raise ClientError(422, f"series {row} ({cells[row]}): start {start[row].isoformat()} "
                          f"is outside the years {FIRST_YEAR} to {LAST_YEAR}")
    start = start.as_unit("ns")
    late = ~fits(start.asi8, lengths - 1 + model.metadata.horizon, model.step.value)
    if late.any():
        row = int(np.argmax(late))
        raise ClientError(422, f"series {row} ({cells[row]}): {lengths[row]} steps from "
                          f"{start[row].isoformat()}, and the model's horizon after them, end "
                          f"past {pd.Timestamp.max.date()}")
    # One table answers every row at one horizon and one set of quantiles: A1 policies have
    # their say here in the cells they exclude and the budget they set.
    budget_s = request_budget(service.policies.for_cells(cells), service.budget.seconds)
    last_ns = start.asi8 + (lengths - 1) * model.step.value  # fits() checked it stays in range
    answer = await decider.forecast(history, last_ns, horizon, arrival, freq, budget_s=budget_s)
    steps = np.arange(1, horizon + 1, dtype=np.int64) * model.step.value
    stamps = last_ns[:, None] + steps[None, :]
    payload = arrow_ipc.write_response(cells, stamps, answer.quantiles, answer.names)
    latency = service.gate.observe(ROUTE, arrival, answer, len(cells), budget_s)
    headers = {"X-Model-Version": answer.model_version or "", "X-Source": answer.source,
               "X-Latency-Ms": f"{latency:.3f}"}
    if answer.reason:
        headers["X-Fallback-Reason"] = answer.reason
    return Response(payload, media_type=arrow_ipc.ARROW_STREAM, headers=headers)

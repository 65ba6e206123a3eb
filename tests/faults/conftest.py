"""What each fault test measured, for docs/reliability.md: with $KPI_FORECAST_FAULTS_REPORT set
(``python -m benchmarks.reliability`` sets it), each test's row is appended to that file as
one JSON line; without it the row is only printed."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import pytest

REPORT_ENV = "KPI_FORECAST_FAULTS_REPORT"


@dataclass
class Row:
    fault: str
    injected: str
    load: str  # what ran during the fault
    lost: str  # expected: nothing but what is counted
    recovery_s: float  # from the fault's end to the promise kept again
    recovered: str  # what "recovered" means for this fault


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def row(self, **fields: object) -> None:
        row = Row(**fields)  # type: ignore[arg-type]
        print(f"{row.fault}: recovered ({row.recovered}) in {row.recovery_s:.2f} s; "
              f"lost: {row.lost}")
        self.rows.append(row)
        path = os.environ.get(REPORT_ENV)
        if path:
            with open(path, "a") as out:
                out.write(json.dumps(asdict(row)) + "\n")


@pytest.fixture
def report() -> Report:
    return Report()

"""The Redis write benchmark's phases (benchmarks/history_writes.py) on a real redis-server:
each makes the commands it says for a cell's next step, and the store's phase keeps every
report."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from benchmarks.history_writes import FLOORS, STORE, measure
from tests.redis_server import redis_server


def test_each_phase_makes_the_commands_it_names_for_a_cells_next_step(tmp_path: Path) -> None:
    cells, steps, batch = 10, 3, 5
    cores = os.sched_getaffinity(0)
    with redis_server(tmp_path) as port:
        runs = asyncio.run(measure(port, cells, steps, batch, rounds=2))
    assert os.sched_getaffinity(0) == cores  # unpinned: the rest of the suite keeps its cores
    calls = steps * cells / batch  # one script call per batch
    per_report = dict(zip([STORE, *FLOORS], [3, 2, 1, 0], strict=True))
    assert set(runs) == set(per_report)
    for name, commands in per_report.items():
        assert len(runs[name]) == 2
        for _, counted in runs[name]:
            # The INFO that reads the count is counted too: one per phase.
            assert counted == pytest.approx((commands * steps * cells + calls + 1)
                                            / (steps * cells)), name

"""The model lifecycle's loop through a regime change, end to end with real parts: the
benchmark's loop (benchmarks/regime_change.py), small. What it measures about the models is the
benchmark's to report; here, what must hold whatever they learned in their few seconds."""

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.regime_change import Scenario, loop


@pytest.mark.slow
def test_a_regime_change_is_alerted_on_retrained_for_and_shadowed_with_nothing_lost(
        tmp_path: Path, rmr_library: Path) -> None:
    timeline_csv = tmp_path / "timeline.csv"
    figures = loop(tmp_path, Scenario(minutes=0.2, days_before=9, retrain_days=3,
                                      days_after=6), timeline_csv)
    # Every report of both replays (the node restarted between them) is taken.
    assert figures["reports taken"] == figures["reports sent"] > 0
    # The cell's forecast answered throughout, the candidate's load and any promotion included.
    assert figures["forecasts asked"] > 100 and figures["forecasts not 200"] == 0
    # Prometheus, scraping the xApp, has the chart's alert pending on a day after the change.
    assert figures["hours to alert"] is not None
    timeline = pd.read_csv(timeline_csv)
    # Scored before the change, every day; the candidate from the export scored beside it.
    assert timeline["day_skill"].notna().sum() >= 7
    assert figures["candidate scored"]
    candidate = timeline["candidate_version"].dropna().unique()
    assert len(candidate) == 1
    # Served until the rule promoted it, if it did: never another version.
    assert set(timeline["version"]) <= {timeline["version"].iloc[0], candidate[0]}
    assert figures["promotions"] == (timeline["version"].iloc[-1] == candidate[0])

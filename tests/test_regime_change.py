"""The model lifecycle's loop through a regime change, end to end with real parts: the
benchmark's loop (benchmarks/regime_change.py), small, serving a network never trained, so that
the candidate trained on the exported history is the better one whatever it learned in its
seconds. What the loop does with trained models is the benchmark's to measure."""

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.regime_change import Scenario, loop
from tests.exported_model import exported_copy


@pytest.mark.slow
def test_a_served_model_worse_than_naive_is_alerted_on_replaced_by_the_rule_nothing_lost(
        tmp_path: Path, rmr_library: Path) -> None:
    untrained = exported_copy(tmp_path / "untrained", 168, 24)
    timeline_csv = tmp_path / "timeline.csv"
    figures = loop(tmp_path / "ric", Scenario(minutes=0.2, days_before=8, retrain_days=2,
                                              days_after=5), timeline_csv, untrained)
    # Every report of both replays (the node restarted between them) is taken.
    assert figures["reports taken"] == figures["reports sent"] > 0
    # The cell's forecast answered throughout: the candidate's load and promotion included.
    assert figures["forecasts asked"] > 100
    assert figures["forecasts not 200"] == 0, figures["refusals"]
    # Prometheus, scraping the xApp, has the chart's alert pending.
    assert figures["hours to alert"] is not None
    timeline = pd.read_csv(timeline_csv)
    served, candidate = timeline["version"].iloc[0], timeline["candidate_version"].dropna()
    assert figures["candidate scored"] and candidate.nunique() == 1
    # Promoted by the rule once, and no other version served.
    assert figures["promotions"] == 1, str(figures)  # the skills shadowed, each step's hour
    assert list(timeline["version"].unique()) == [served, candidate.iloc[0]]
    promoted = timeline["version"] == candidate.iloc[0]
    after = timeline["hours"] >= 24  # the days scored wholly after the change
    # The live skill recovers: the promoted version's days better than the untrained's.
    assert (timeline.loc[promoted, "day_skill"].mean()
            > timeline.loc[after & ~promoted, "day_skill"].mean())

"""The whole pipeline on the real Milan export (skipped when ../shared is absent)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kpi_forecast.cli.main import main
from tests.beside import EPOCHS_NOT_CLOCK

MILAN = Path(__file__).resolve().parents[2] / "shared/data/milan/milan_hourly.csv.gz"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not MILAN.is_file(), reason="../shared/data/milan not present"),
]


def test_train_predict_backtest_on_real_gappy_data(tmp_path: Path) -> None:
    model = tmp_path / "model"
    assert main(["train", "--data", str(MILAN), "--target", "traffic", "--out", str(model),
                 "--context", "7D", "--horizon", "24", "--max-epochs", "1", "--quiet",
                 "--no-gpu-graph", *EPOCHS_NOT_CLOCK]) == 0
    forecast = tmp_path / "forecast.csv"
    assert main(["predict", "--model", str(model), "--data", str(MILAN),
                 "--out", str(forecast)]) == 0
    frame = pd.read_csv(forecast)
    assert frame["cell_id"].nunique() == 281 and len(frame) == 281 * 24
    assert np.isfinite(frame[["p10", "p50", "p90"]].to_numpy()).all()
    # Squares whose export stops early are forecast after their own last hour, in +01:00.
    source = pd.read_csv(MILAN)
    last = source.groupby("cell_id")["timestamp"].max()
    first = frame.groupby("cell_id")["timestamp"].min()
    early = last[last < last.max()].index
    assert len(early) == 70
    expected = (pd.to_datetime(last[early]) + pd.Timedelta("1h")).map(pd.Timestamp.isoformat)
    assert (first[early] == expected).all()
    assert main(["backtest", "--model", str(model), "--data", str(MILAN), "--folds", "2"]) == 0
    overall = pd.read_csv(model / "backtest" / "overall.csv", index_col="model")
    assert overall.notna().loc[:, ["mae", "rmse", "mase"]].all().all()

"""train -> predict -> backtest through the real CLI on small synthetic data."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kpi_forecast.cli.main import main
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.data.synthetic import generate
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.model.naive import PROFILE_WEEKS, naive_forecasts
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.training.fit import load_network
from kpi_forecast.training.predict import last_windows
from kpi_forecast.training.train import auto_batch_size, describe_batch
from tests.beside import EPOCHS_NOT_CLOCK
from tests.tolerance import network_tolerance, rounding_tolerance

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "cells.csv"
    generate(n_cells=6, days=28, seed=3, start="2024-05-06").to_csv(path, index=False)
    return path


def train_args(data: Path, out: Path, seed: int = 0) -> list[str]:
    return [
        "train", "--data", str(data), "--target", "traffic_mb", "--out", str(out),
        "--context", "7D", "--horizon", "24h", "--max-epochs", "2", "--seed", str(seed),
        "--quiet", "--no-gpu-graph",  # the float16 graph: README's train and make demo
        *EPOCHS_NOT_CLOCK,
    ]


@pytest.fixture(scope="module")
def model_dir(data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model")
    assert main(train_args(data_file, out)) == 0
    return out


def test_train_writes_a_complete_model_directory(model_dir: Path) -> None:
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["target"] == "traffic_mb" and meta["freq"] == "1h"
    assert meta["config"]["context"] == 168 and meta["config"]["horizon"] == 24
    assert meta["config"]["quantiles"] == [0.1, 0.5, 0.9]
    assert meta["calendar_tz"] == "+02:00"  # the sample's May offsets in Europe/Paris
    assert len(meta["data_fingerprint"]) == 64
    assert {"mae", "rmse", "mase", "coverage", "pinball"} <= set(meta["validation"])
    assert meta["libraries"]["torch"].startswith("2.13.0")
    assert meta["onnx"]["attention"] == "onnx-attention"
    assert "float16" not in meta["onnx"] and not (model_dir / "model.fp16.onnx").exists()
    # 6 cells hold too few windows for 100 steps of 256: the batch shrank to suit them.
    training = meta["training"]
    assert training["batch_size"] == auto_batch_size(training["train_windows"], 100) < 256
    assert training["batch_choice"] == describe_batch(training["batch_size"],
                                                      training["train_windows"], 100, 0)
    assert training["context_choice"] == "context 168 steps, as asked"
    report = (model_dir / "report.md").read_text()
    assert f"{training['context_choice']}; {training['batch_choice']}." in report
    for plot in ("forecast_samples", "error_by_step", "error_vs_baselines", "learning_curve"):
        assert f"plots/{plot}.png" in report
        assert (model_dir / "plots" / f"{plot}.png").stat().st_size > 1000
    state = torch.load(model_dir / "weights.pt", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_the_batch_halves_until_a_pass_over_the_windows_takes_100_steps() -> None:
    assert auto_batch_size(174_000, 100) == 256  # Milan's 281 cells
    assert auto_batch_size(25_600, 100) == 256
    assert auto_batch_size(25_599, 100) == 128
    assert auto_batch_size(11_867, 100) == 64  # the sample's 24 cells
    assert auto_batch_size(600, 100) == 32  # a single series: the floor
    assert describe_batch(256, 174_000, 100, 0) == (
        "batch 256 windows: the 174000 training windows fill 100 steps of it")
    assert describe_batch(64, 11_867, 100, 0).startswith("batch 64 windows, halved from 256")
    assert "the smallest" in describe_batch(32, 600, 100, 0)
    assert describe_batch(64, 600, 100, 64) == "batch 64 windows, as asked"


def test_a_given_batch_size_is_kept(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    args = train_args(data_file, out)
    args[args.index("--max-epochs") + 1] = "1"
    assert main([*args, "--batch-size", "256"]) == 0
    training = load_metadata(out).training
    assert training["batch_size"] == 256
    assert training["batch_choice"] == "batch 256 windows, as asked"


def test_onnx_matches_torch_on_the_trained_model(model_dir: Path) -> None:
    network, meta = load_network(model_dir)
    forecaster = OnnxForecaster(model_dir)
    rng = np.random.default_rng(0)
    values = (rng.random((8, meta.context)) * 500).astype(np.float32)
    values[2, 50:90] = np.nan
    last = pd.DatetimeIndex(pd.date_range("2024-06-01", periods=8, freq="7h", tz="UTC"))
    from kpi_forecast.model.features import forecast_calendar

    calendar = forecast_calendar(last, meta.context, meta.horizon, forecaster.step,
                                 meta.calendar_tz, meta.holidays, meta.holiday_as_sunday)
    with torch.no_grad():
        expected = network(torch.from_numpy(values), torch.from_numpy(calendar)).numpy()
    got = forecaster.forecast(values, last)
    assert np.abs(got - expected).max() <= network_tolerance(meta.config, np.nanmax(values))


def test_same_seed_same_weights(data_file: Path, model_dir: Path, tmp_path: Path) -> None:
    assert main(train_args(data_file, tmp_path / "again")) == 0
    first = torch.load(model_dir / "weights.pt", weights_only=True)
    second = torch.load(tmp_path / "again" / "weights.pt", weights_only=True)
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_predict_writes_the_horizon_after_each_cells_last_sample(
    model_dir: Path, data_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "forecast.csv"
    assert main(["predict", "--model", str(model_dir), "--data", str(data_file),
                 "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["cell_id", "timestamp", "p10", "p50", "p90"]
    assert frame.groupby("cell_id").size().eq(24).all() and frame["cell_id"].nunique() == 6
    assert (frame["p10"] <= frame["p50"]).all() and (frame["p50"] <= frame["p90"]).all()
    source = pd.read_csv(data_file)
    last = pd.to_datetime(source.groupby("cell_id")["timestamp"].max(), utc=True)
    first_forecast = pd.to_datetime(frame.groupby("cell_id")["timestamp"].min(), utc=True)
    assert (first_forecast - last).eq(pd.Timedelta("1h")).all()


def test_predict_runs_without_torch(model_dir: Path, data_file: Path, tmp_path: Path) -> None:
    """The serving image has no torch: predict must not import it."""
    out = tmp_path / "forecast.csv"
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from kpi_forecast.cli.main import main\n"
        f"code = main(['predict', '--model', {str(model_dir)!r}, '--data', {str(data_file)!r},"
        f" '--out', {str(out)!r}])\n"
        "assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(out)) == 6 * 24


def test_backtest_reports_model_and_baselines(
    model_dir: Path, data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt"
    assert main(["backtest", "--model", str(model_dir), "--data", str(data_file),
                 "--folds", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("kpi-forecast", "seasonal_naive_day", "seasonal_naive_week", "mean_4_weeks"):
        assert name in printed
    overall = pd.read_csv(out / "overall.csv", index_col="model")
    assert list(overall.columns) == ["mae", "rmse", "mase", "smape", "coverage", "pinball"]
    assert overall.loc["kpi-forecast", ["mae", "coverage", "pinball"]].notna().all()
    assert overall.loc["seasonal_naive_week", "coverage"] != overall.loc["seasonal_naive_week",
                                                                          "coverage"]
    per_cell = pd.read_csv(out / "per_cell.csv")
    assert len(per_cell) == 6 * 4


def test_tampered_onnx_is_refused(model_dir: Path, data_file: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("metadata.json", "weights.pt"):
        (broken / name).write_bytes((model_dir / name).read_bytes())
    (broken / "model.onnx").write_bytes((model_dir / "model.onnx").read_bytes()[:-100])
    code = main(["predict", "--model", str(broken), "--data", str(data_file),
                 "--out", str(tmp_path / "f.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "sha256" in err and len(err.strip().splitlines()) == 1
    assert load_metadata(broken).target == "traffic_mb"


def as_version_2(metadata: dict, wall_clock: bool = True) -> dict:
    """Metadata as the previous schema version wrote it: two holiday flags, a wall-clock flag."""
    old = {k: v for k, v in metadata.items() if k != "holiday_reading"}
    return {**old, "schema_version": 2, "holiday_as_sunday": True, "holiday_from_sunday": False,
            "wall_clock": wall_clock}


def test_an_artifact_of_the_previous_version_is_refused_until_exported_anew(
        model_dir: Path, data_file: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old"
    old.mkdir()
    for name in ("metadata.json", "weights.pt", "model.onnx"):
        (old / name).write_bytes((model_dir / name).read_bytes())
    metadata = json.loads((model_dir / "metadata.json").read_text())
    (old / "metadata.json").write_text(json.dumps({**as_version_2(metadata), "holidays": "FR"}))
    predict = ["predict", "--model", str(old), "--data", str(data_file),
               "--out", str(tmp_path / "f.csv")]
    assert main(predict) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kpi-forecast: error: {old / 'metadata.json'}: schema version 2, this "
                   "kpi-forecast reads 3; export it anew from its weights.pt: kpi-forecast "
                   f"export --model {old}"]
    assert main(["export", "--model", str(old)]) == 0
    exported = load_metadata(old)
    assert exported.schema_version == 3 and exported.holiday_reading == "as_sunday"
    assert main(predict) == 0
    # Version 2 from before the network read the wall clock: nothing to export it as.
    (old / "metadata.json").write_text(json.dumps(as_version_2(metadata, wall_clock=False)))
    assert main(["export", "--model", str(old)]) == 2
    assert "schema version 2 from before the wall clock" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--target", "nope"], "nope"),
        (["--target", "traffic_mb", "--context", "90D"], "too little usable history"),
        (["--target", "traffic_mb", "--horizon", "90min"], "not a whole number"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(
    data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    args: list[str], expected: str,
) -> None:
    code = main(["train", "--data", str(data_file), "--out", str(tmp_path / "m"), "--quiet",
                 *args])
    err = [line for line in capsys.readouterr().err.splitlines() if "kpi-forecast" in line]
    assert code == 2
    assert len(err) == 1 and expected in err[0] and "Traceback" not in err[0]


@pytest.fixture(scope="module")
def shuffled_file(data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same days of each cell in a new order: a week the model cannot foresee, at the same
    level and spread, so its own calibration, fitted on the real order, covers too little."""
    frame = pd.read_csv(data_file)
    rng = np.random.default_rng(0)
    for _, rows in frame.groupby("cell_id").groups.items():
        days = np.asarray(rows)[: len(rows) // 24 * 24].reshape(-1, 24)
        frame.loc[days.ravel(), "traffic_mb"] = (
            frame.loc[days[rng.permutation(len(days))].ravel(), "traffic_mb"].to_numpy())
    path = tmp_path_factory.mktemp("shuffled") / "cells.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("data", ["data_file", "shuffled_file"])
def test_backtest_recalibrates_the_quantiles_on_the_week_before_each_origin(
    model_dir: Path, data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    scores = {}
    for option in ("0", "auto"):
        out = tmp_path / option
        assert main(["backtest", "--model", str(model_dir),
                     "--data", str(request.getfixturevalue(data)),
                     "--recalibrate", option, "--out", str(out)]) == 0
        scores[option] = pd.read_csv(out / "overall.csv", index_col="model").loc["kpi-forecast"]
    printed = capsys.readouterr().out
    assert "not recalibrated" in printed and "recalibrated on the last 7 window(s)" in printed
    # Two epochs on six cells leave the validation-fitted band too wide for the data in order
    # and too narrow for the shuffled days; the recent week brings both within 0.05 of the
    # nominal 0.80.
    off_before, off_after = (abs(scores[o]["coverage"] - 0.8) for o in ("0", "auto"))
    assert off_after < 0.05 and off_after < off_before
    if data == "data_file":
        # So short a training leaves the simple forecasts a better median than the model's on
        # the data in order: the blend gives them most of it, and both errors fall by over a
        # tenth.
        shares = re.findall(r"median (\d\.\d\d) model \+ ", printed)
        assert shares and float(shares[-1]) < 0.5
        for metric in ("mae", "pinball"):
            assert scores["auto"][metric] < 0.9 * scores["0"][metric]


def test_predict_recalibrates_on_the_windows_before_each_cells_last_sample(
    model_dir: Path, shuffled_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frames = {}
    for option in ("0", "3"):
        out = tmp_path / f"{option}.csv"
        assert main(["predict", "--model", str(model_dir), "--data", str(shuffled_file),
                     "--recalibrate", option, "--out", str(out)]) == 0
        frames[option] = pd.read_csv(out)
    printed = capsys.readouterr().out
    assert "quantiles not recalibrated" in printed
    found = re.search(r"recalibrated on the last 3 window\(s\), \d+ points: median "
                      r"(\d\.\d\d) model((?: \+ \d\.\d\d [a-z]+ [a-z]+)*) \(from \d+ windows\); "
                      r"p10 [-+]", printed)
    assert found
    shares = {name.replace(" ", "_"): float(share)
              for share, name in re.findall(r"\+ (\d\.\d\d) ([a-z]+ [a-z]+)", found.group(2))}
    plain, moved = frames["0"], frames["3"]
    # The median moves only as far as the blend with the simple forecasts takes it, each
    # computed on the history before each cell's last sample, as predict reads it.
    panel = load_panel(shuffled_file, "traffic_mb")
    history, _ = last_windows(panel, PROFILE_WEEKS * panel.steps_per("7D"))
    order = [panel.cell_ids.index(cell) for cell in plain["cell_id"].unique()]
    median = plain["p50"].to_numpy().reshape(len(order), -1)
    expected = median.copy()
    for name, share in shares.items():
        naive = naive_forecasts(history[order], median.shape[1], 24, names=(name,))[0]
        expected += share * np.nan_to_num(naive - median)
    # A blend of float32 numbers (a product and a sum per naive), each number written to the
    # CSV at float32's precision: a few roundings of the largest of them.
    larger = np.nanmax(np.abs(np.concatenate([median.ravel(), history.ravel()])))
    np.testing.assert_allclose(moved["p50"], expected.ravel(), rtol=0,
                               atol=rounding_tolerance(2 + 2 * len(shares), larger))
    assert (plain["p90"] != moved["p90"]).all()
    assert (plain["p10"] != moved["p10"]).mean() > 0.9  # the rest are KPIs held at zero
    assert (moved["p10"] <= moved["p50"]).all() and (moved["p50"] <= moved["p90"]).all()


def test_a_bad_recalibrate_value_is_one_line(
    model_dir: Path, data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["predict", "--model", str(model_dir), "--data", str(data_file),
              "--out", str(tmp_path / "f.csv"), "--recalibrate", "week"])
    assert exited.value.code == 2
    assert "--recalibrate: not a whole number >= 0: week" in capsys.readouterr().err


def test_an_unknown_holiday_calendar_is_one_line(
    data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["train", "--data", str(data_file), "--target", "traffic_mb",
              "--out", str(tmp_path / "m"), "--holidays", "FR-75"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2
    assert "--holidays: unknown holiday calendar 'FR-75'" in err[-1] and "Traceback" not in err


def test_patch_len_sets_the_tokens_per_window(data_file: Path, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """The long-context mode: --patch-len 4 reads a 7-day hourly window as 42 tokens."""
    args = train_args(data_file, tmp_path / "m")
    args[args.index("--max-epochs") + 1] = "1"
    with caplog.at_level("INFO"):
        assert main([*args, "--patch-len", "4"]) == 0
    meta = json.loads((tmp_path / "m" / "metadata.json").read_text())
    assert meta["config"]["patch_len"] == 4
    assert "42 tokens per context window, 4 step(s) each" in caplog.text

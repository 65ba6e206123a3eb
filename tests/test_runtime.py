"""The ONNX Runtime inference module: session options, providers, warm-up, IOBinding, input
validation, and that it runs with torch unimportable (the serving image has none)."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest

from kpi_forecast.model.artifact import METADATA_FILE, ArtifactError, load_metadata
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import forecast_calendar
from kpi_forecast.model.runtime import (
    CPU,
    CUDA,
    InputError,
    OnnxForecaster,
    RuntimeOptions,
    available_cpus,
    execution_providers,
    fit_to_width,
)
from tests.exported_model import exported_copy
from tests.tolerance import network_tolerance

ROOT = Path(__file__).resolve().parents[1]
CONTEXT, HORIZON = 72, 12
HAS_CUDA = CUDA in ort.get_available_providers()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_copy(tmp_path_factory.mktemp("runtime") / "model", CONTEXT, HORIZON)


def within(values: np.ndarray) -> float:
    """Two float32 evaluations of the test model (other batch sizes, other kernels)."""
    return network_tolerance(ModelConfig(CONTEXT, HORIZON), float(np.nanmax(np.abs(values))))


def inputs(batch: int, seed: int = 0) -> tuple[np.ndarray, pd.DatetimeIndex]:
    rng = np.random.default_rng(seed)
    values = (rng.gamma(2.0, 10.0, (batch, CONTEXT)) + 1.0).astype(np.float32)
    values[0, 5:15] = np.nan
    last = pd.date_range("2024-03-30 12:00", periods=batch, freq="7h", tz="UTC")
    return values, last


def test_cpu_session_reports_what_is_active(model_dir: Path) -> None:
    forecaster = OnnxForecaster(model_dir, RuntimeOptions(provider="cpu", intra_op_threads=1))
    described = forecaster.describe()
    assert forecaster.provider == CPU == described["provider"]
    assert described["options"]["intra_op_threads"] == 1
    assert described["options"]["graph_optimization"] == "all"
    assert described["attention"] == "onnx-attention"
    assert described["io_binding"] is False  # auto: only with CUDA
    assert forecaster.warmup_ms > 0


def test_a_large_batch_is_split_across_the_cores_with_the_same_result(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values, last = inputs(700)
    single = OnnxForecaster(model_dir, RuntimeOptions(provider="cpu", intra_op_threads=1))
    assert single.describe()["parallel_calls"] == 1
    monkeypatch.setattr("kpi_forecast.model.runtime.available_cpus", lambda: 3)
    split = OnnxForecaster(model_dir, RuntimeOptions(provider="cpu"))  # automatic threads
    assert split.describe()["parallel_calls"] == 3
    np.testing.assert_allclose(split.forecast(values, last), single.forecast(values, last),
                               rtol=0, atol=within(values))
    np.testing.assert_allclose(split.forecast(values[:5], last[:5]),  # too few to split
                               single.forecast(values[:5], last[:5]), rtol=0,
                               atol=within(values))


def test_available_cpus_follow_a_cgroup_limit(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    limit = tmp_path / "cpu.max"
    assert available_cpus(limit) == 16  # no cgroup file
    limit.write_text("max 100000\n")
    assert available_cpus(limit) == 16
    limit.write_text("250000 100000\n")  # limits.cpu: 2500m
    assert available_cpus(limit) == 3
    limit.write_text("50000 100000\n")
    assert available_cpus(limit) == 1


def test_auto_prefers_cuda_only_when_present() -> None:
    assert execution_providers("cpu") == [CPU]
    assert execution_providers("auto") == ([CUDA, CPU] if HAS_CUDA else [CPU])


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime build has the CUDA provider")
def test_asking_for_cuda_without_it_is_a_clear_error(model_dir: Path) -> None:
    with pytest.raises(ArtifactError, match="onnxruntime-gpu"):
        OnnxForecaster(model_dir, RuntimeOptions(provider="cuda"))


def test_no_warmup_when_disabled(model_dir: Path) -> None:
    assert OnnxForecaster(model_dir, RuntimeOptions(warmup=False)).warmup_ms == 0.0


@pytest.mark.parametrize(
    "options",
    [
        RuntimeOptions(io_binding="on"),
        RuntimeOptions(graph_optimization="disable", intra_op_threads=1),
        RuntimeOptions(inter_op_threads=2, graph_optimization="basic"),
    ],
    ids=["io-binding", "no-optimisation", "basic-optimisation"],
)
def test_session_options_do_not_change_the_forecast(model_dir: Path,
                                                    options: RuntimeOptions) -> None:
    values, last = inputs(33)
    reference = OnnxForecaster(model_dir, RuntimeOptions(io_binding="off")).forecast(values, last)
    forecaster = OnnxForecaster(model_dir, options)
    got = forecaster.forecast(values, last)
    assert forecaster.io_binding == (options.io_binding == "on")
    assert np.isfinite(reference).all()
    np.testing.assert_allclose(got, reference, rtol=0, atol=within(values))


def test_io_binding_across_several_chunks(model_dir: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    values, last = inputs(10)
    whole = OnnxForecaster(model_dir, RuntimeOptions(io_binding="on")).forecast(values, last)
    monkeypatch.setattr("kpi_forecast.model.runtime.MAX_BATCH", 3)
    chunked = OnnxForecaster(model_dir, RuntimeOptions(io_binding="on")).forecast(values, last)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=within(values))
    # Each row is its own forecast: different rows must not come out alike.
    assert not np.allclose(chunked[1], chunked[2])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("provider", "tpu", "provider"),
        ("graph_optimization", "max", "graph_optimization"),
        ("io_binding", "yes", "io_binding"),
        ("intra_op_threads", -1, "thread"),
    ],
)
def test_bad_runtime_options_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RuntimeOptions(**{field: value})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda v, t: (v[0], t), "dimension"),
        (lambda v, t: (v, t[:-1]), "row"),
        (lambda v, t: (v, t.tz_localize(None)), "timezone-aware"),
        (lambda v, t: (v[:, :0], t), "no steps"),
        (lambda v, t: (np.where(np.arange(CONTEXT) == 7, np.inf, v), t), "row 0 step 7"),
        (lambda v, t: (np.where(np.arange(CONTEXT) == 3, -2.0, v), t), "negative"),
    ],
    ids=["1-d", "count", "naive-time", "empty", "infinite", "negative"],
)
def test_bad_inputs_are_named(model_dir: Path, mutate, message: str) -> None:
    forecaster = OnnxForecaster(model_dir)
    values, last = mutate(*inputs(4))
    with pytest.raises(InputError, match=message):
        forecaster.forecast(values, last)


def with_metadata(model_dir: Path, copy: Path, edit) -> Path:
    """A copy of ``model_dir`` whose metadata.json ``edit`` (a dict -> None) has changed."""
    copy.mkdir(exist_ok=True)
    for path in model_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    meta = json.loads((model_dir / METADATA_FILE).read_text())
    edit(meta)
    (copy / METADATA_FILE).write_text(json.dumps(meta))
    return copy


@pytest.mark.parametrize(("field", "value", "part"), [
    ("quantiles", [0.1, 0.25, 0.5, 0.9], "outputs"),
    ("horizon", HORIZON + 1, "inputs"),  # caught on the calendar, which covers the horizon
])
def test_a_model_with_a_foreign_graph_is_refused(
    model_dir: Path, tmp_path: Path, field: str, value: object, part: str
) -> None:
    """Metadata that promises other quantiles or another horizon than the graph has."""
    copy = with_metadata(model_dir, tmp_path / "copy",
                         lambda meta: meta["config"].__setitem__(field, value))
    with pytest.raises(ArtifactError, match=f"{part} .* do not match metadata"):
        OnnxForecaster(copy)


def test_a_model_with_an_unknown_holiday_calendar_is_refused(
    model_dir: Path, tmp_path: Path
) -> None:
    copy = with_metadata(model_dir, tmp_path / "copy",
                         lambda meta: meta.__setitem__("holidays", "XX"))
    with pytest.raises(ArtifactError, match="unknown holiday calendar 'XX'"):
        OnnxForecaster(copy)


def test_a_holiday_is_read_as_the_model_was_trained_to_read_it(
    model_dir: Path, tmp_path: Path
) -> None:
    """A model that reads a holiday as a Sunday gets that calendar; one without a holiday
    reading (``none``) the weekday's."""
    last = pd.DatetimeIndex([pd.Timestamp("2024-05-20 20:00", tz="Europe/Paris")])  # Whit Monday
    history = np.random.default_rng(0).gamma(2.0, 10.0, (1, CONTEXT)).astype(np.float32)
    forecasts = {}
    edits = {True: lambda meta: meta.update(holidays="FR", holiday_reading="as_sunday"),
             False: lambda meta: meta.update(holidays="FR", holiday_reading="none")}
    for as_sunday, edit in edits.items():
        forecaster = OnnxForecaster(with_metadata(model_dir, tmp_path / f"{as_sunday}", edit))
        assert forecaster.metadata.holiday_as_sunday is as_sunday
        calendar = forecast_calendar(last, CONTEXT, HORIZON, pd.Timedelta("1h"),
                                     "Europe/Paris", "FR", as_sunday)
        forecasts[as_sunday] = forecaster.forecast(history, last)
        np.testing.assert_array_equal(forecasts[as_sunday], forecaster.run(history, calendar))
    assert np.abs(forecasts[True] - forecasts[False]).max() > within(forecasts[True])


def test_a_holiday_ahead_takes_the_forecast_of_a_sunday_where_the_model_says_so(
    model_dir: Path, tmp_path: Path
) -> None:
    """A model without the horizon's calendar forecasts a working-day holiday as its nearest
    Sunday in the horizon (``from_sunday``); one without a holiday reading as the network
    does. Six-hour steps make the test model's 12 a horizon of three days."""
    last = pd.DatetimeIndex([pd.Timestamp("2024-05-17 18:00", tz="Europe/Paris")])
    history = np.random.default_rng(0).gamma(2.0, 10.0, (1, CONTEXT)).astype(np.float32)
    forecasts = {}
    edits = {True: lambda meta: meta.update(freq="6h", holidays="FR",
                                            holiday_reading="from_sunday"),
             False: lambda meta: meta.update(freq="6h", holidays="FR", holiday_reading="none")}
    for from_sunday, edit in edits.items():
        forecaster = OnnxForecaster(with_metadata(model_dir, tmp_path / f"{from_sunday}", edit))
        assert (forecaster.metadata.holiday_reading == "from_sunday") is from_sunday
        forecasts[from_sunday] = forecaster.forecast(history, last)
    moved, kept = forecasts[True], forecasts[False]
    # Saturday 18, Sunday 19 and Whit Monday 20 May, four steps each: Monday takes Sunday's.
    np.testing.assert_array_equal(moved[:, 8:12], kept[:, 4:8])
    np.testing.assert_array_equal(moved[:, :8], kept[:, :8])
    assert np.abs(kept[:, 8:12] - kept[:, 4:8]).max() > within(kept)


def test_metadata_must_say_how_it_reads_holidays(model_dir: Path, tmp_path: Path) -> None:
    missing = with_metadata(model_dir, tmp_path / "missing",
                            lambda meta: meta.pop("holiday_reading"))
    with pytest.raises(ArtifactError, match="invalid metadata .*holiday_reading"):
        load_metadata(missing)
    other = with_metadata(model_dir, tmp_path / "other",
                          lambda meta: meta.update(holiday_reading="as_monday"))
    with pytest.raises(ArtifactError, match="holiday_reading 'as_monday' is not one of none, "
                       "as_sunday, from_sunday"):
        load_metadata(other)


def test_fit_to_width_cuts_and_pads_on_the_left() -> None:
    rows = np.arange(6, dtype=np.float32).reshape(1, 6)
    np.testing.assert_array_equal(fit_to_width(rows, 4), [[2, 3, 4, 5]])
    np.testing.assert_array_equal(fit_to_width(rows, 8), [[np.nan, np.nan, 0, 1, 2, 3, 4, 5]])


def test_blocks_of_different_lengths_are_forecast_as_one_batch_of_their_rows(
    model_dir: Path,
) -> None:
    # The requests of one batch: each block keeps its own history, cut to the context.
    forecaster = OnnxForecaster(model_dir)
    values, last = inputs(3)
    short, long_ = values[:1, -CONTEXT // 2 :], np.concatenate([values[1:], values[1:]], axis=1)
    together = forecaster.forecast([short, long_], last)
    # Other batch sizes may take other kernels: equal to the float rounding of the network.
    np.testing.assert_allclose(together[:1], forecaster.forecast(short, last[:1]), rtol=0,
                               atol=within(values))
    np.testing.assert_allclose(together[1:], forecaster.forecast(long_[:, -CONTEXT:], last[1:]),
                               rtol=0, atol=within(values))

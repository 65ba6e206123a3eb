"""The xApp's configuration layer: the packaged O-RAN SC descriptor, where it is looked for,
schema and model validation with readable errors, overrides, and the reloading watcher."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import re
from pathlib import Path

import pytest

from kpi_forecast.xapp.descriptor.config_file import (
    CONFIG_FILE_NAME,
    DEFAULT_DIR,
    SCHEMA_FILE_NAME,
    ConfigError,
    ConfigWatcher,
    Descriptor,
    descriptor_path,
    load_descriptor,
)
from kpi_forecast.xapp.descriptor.controls import (
    DEFAULT_CLIENT_HOST,
    E2,
    Batching,
    Controls,
    HistoryStore,
    KpiSource,
    Registration,
)
from kpi_forecast.xapp.descriptor.fields import APPLIES, changed

PACKAGED = DEFAULT_DIR / CONFIG_FILE_NAME
SCHEMA = json.loads((DEFAULT_DIR / SCHEMA_FILE_NAME).read_text())
RX = ["RIC_SUB_RESP", "RIC_SUB_FAILURE", "RIC_SUB_DEL_RESP", "RIC_INDICATION", "A1_POLICY_REQ",
      "KPI_FORECAST_ACK"]
TX = ["RIC_SUB_REQ", "RIC_SUB_DEL_REQ", "A1_POLICY_RESP", "A1_POLICY_QUERY", "KPI_FORECAST"]


def packaged_raw() -> dict:
    return json.loads(PACKAGED.read_text())


def write(path: Path, raw: dict) -> Path:
    path.write_text(json.dumps(raw, indent=2))
    return path


def with_controls(tmp_path: Path, name: str = CONFIG_FILE_NAME, **controls: object) -> Path:
    raw = packaged_raw()
    raw["controls"].update(controls)
    return write(tmp_path / name, raw)


# --- the packaged descriptor -------------------------------------------------------------------


def test_packaged_descriptor_loads_with_the_oran_fields() -> None:
    descriptor = load_descriptor(PACKAGED)
    assert isinstance(descriptor, Descriptor)
    assert (descriptor.name, descriptor.version) == ("kpi-forecast", "0.1.0")
    assert descriptor.raw == packaged_raw()
    raw = descriptor.raw
    assert raw["containers"][0]["image"] == {
        "registry": "docker.io",
        "name": "kpi-forecast",
        "tag": "0.1.0",
    }
    ports = {p["name"]: p for p in raw["messaging"]["ports"]}
    assert {name: p["port"] for name, p in ports.items()} == {
        "http": 8080,
        "rmr-data": 4560,
        "rmr-route": 4561,
    }
    assert all(p["container"] == "kpi-forecast" for p in ports.values())
    assert (ports["rmr-data"]["rxMessages"], ports["rmr-data"]["txMessages"]) == (RX, TX)
    assert (raw["rmr"]["rxMessages"], raw["rmr"]["txMessages"]) == (RX, TX)
    assert raw["rmr"]["protocols"] == ["tcp"]
    assert raw["livenessProbe"]["httpGet"] == {"path": "ric/v1/health/alive", "port": 8080}
    assert raw["readinessProbe"]["httpGet"] == {"path": "ric/v1/health/ready", "port": 8080}


def test_packaged_controls_are_the_model_defaults() -> None:
    assert load_descriptor(PACKAGED).controls == Controls(model_dir="/opt/ric/model")


def test_camel_case_aliases_and_snake_case_names_both_populate() -> None:
    by_alias = Batching.model_validate({"maxBatchSize": 8, "maxQueueDelayMs": 1})
    assert by_alias == Batching(max_batch_size=8, max_queue_delay_ms=1)
    assert Registration().model_dump(by_alias=True)["appmgrUrl"].startswith("http://")
    with pytest.raises(ValueError):  # frozen: a descriptor is never edited in place
        by_alias.max_batch_size = 2  # type: ignore[misc]


# --- where the descriptor is -------------------------------------------------------------------


def test_descriptor_path_precedence(tmp_path: Path) -> None:
    config_file = tmp_path / "a.json"
    descriptor_dir = tmp_path / "dir"
    descriptor_dir.mkdir()
    both = {"CONFIG_FILE": str(config_file), "XAPP_DESCRIPTOR_PATH": str(descriptor_dir)}

    assert descriptor_path(tmp_path / "explicit.json", both) == tmp_path / "explicit.json"
    assert descriptor_path(None, both) == config_file
    assert descriptor_path(None, {"XAPP_DESCRIPTOR_PATH": str(descriptor_dir)}) == (
        descriptor_dir / CONFIG_FILE_NAME
    )
    assert descriptor_path(None, {"XAPP_DESCRIPTOR_PATH": str(config_file)}) == config_file
    assert descriptor_path(None, {}) == PACKAGED


def test_descriptor_path_ignores_empty_variables_and_expands_directories(tmp_path: Path) -> None:
    assert descriptor_path(None, {"CONFIG_FILE": "", "XAPP_DESCRIPTOR_PATH": ""}) == PACKAGED
    assert descriptor_path(str(tmp_path), {}) == tmp_path / CONFIG_FILE_NAME


def test_descriptor_path_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIG_FILE", "/etc/xapp/config.json")
    assert descriptor_path() == Path("/etc/xapp/config.json")


# --- validation errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (
            lambda r: r["controls"]["batching"].update(maxBatchSize=0),
            "controls.batching.maxBatchSize",
        ),
        (lambda r: r["controls"].update(latencyBudgetMs=0), "controls.latencyBudgetMs"),
        (lambda r: r["controls"].update(quantiles=[0.1, 1.0]), "controls.quantiles[1]"),
        (lambda r: r["controls"].update(quantiles=[0.5, 0.5]), "controls.quantiles"),
        (lambda r: r["controls"].update(quantiles=[]), "controls.quantiles"),
        (lambda r: r["controls"].update(defaultHorizon=0), "controls.defaultHorizon"),
        (lambda r: r["controls"].update(executionProvider="tpu"), "controls.executionProvider"),
        (lambda r: r["controls"].update(intraOpThreads=1.5), "controls.intraOpThreads"),
        (lambda r: r["controls"]["registration"].update(retrySeconds=0), "retrySeconds"),
        (lambda r: r["controls"].pop("modelDir"), "controls: Value error, name one of modelDir"),
        (lambda r: r["messaging"]["ports"][2].update(port=70000), "messaging.ports[2].port"),
        (lambda r: r.pop("containers"), "(root): 'containers' is a required property"),
    ],
)
def test_invalid_values_name_the_file_and_the_json_path(tmp_path, edit, where) -> None:
    raw = packaged_raw()
    edit(raw)
    path = write(tmp_path / CONFIG_FILE_NAME, raw)
    with pytest.raises(ConfigError) as caught:
        load_descriptor(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert where in message
    assert "\n" not in message
    assert caught.value.path == path


def test_unknown_control_key_is_rejected(tmp_path: Path) -> None:
    path = with_controls(tmp_path, maxBatchSzie=8)
    with pytest.raises(ConfigError, match=r"controls: .*'maxBatchSzie' was unexpected"):
        load_descriptor(path)


def test_the_first_error_by_path_is_reported(tmp_path: Path) -> None:
    raw = packaged_raw()
    raw["controls"]["historyLength"] = 0
    raw["controls"]["batching"]["maxQueueSize"] = 0
    path = write(tmp_path / CONFIG_FILE_NAME, raw)
    with pytest.raises(ConfigError, match=r"controls\.batching\.maxQueueSize"):
        load_descriptor(path)


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / CONFIG_FILE_NAME
    path.write_text('{\n  "name": "kpi-forecast",\n  "version" "0.1.0"\n}\n')
    with pytest.raises(ConfigError, match=r"invalid JSON at line 3, column 13: Expecting ':'"):
        load_descriptor(path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"controls": {"latencyBudgetMs": NaN}}', "NaN is not valid JSON"),
        ('{"name": "a", "name": "b"}', "duplicate key 'name'"),
        ("[1, 2]", "(root): [1, 2] is not of type 'object'"),
    ],
)
def test_json_that_python_accepts_but_a_descriptor_must_not(tmp_path, text, problem) -> None:
    path = tmp_path / CONFIG_FILE_NAME
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_descriptor(path)
    assert problem in str(caught.value)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_descriptor(tmp_path / "absent.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_descriptor(tmp_path)  # a directory
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_descriptor(tmp_path / "latin1.json")


# --- overrides ---------------------------------------------------------------------------------


def test_overrides_replace_the_file_controls(tmp_path: Path) -> None:
    path = with_controls(tmp_path, latencyBudgetMs=50)
    descriptor = load_descriptor(
        path, {"model_dir": str(tmp_path / "model"), "batching": {"max_batch_size": 8}}
    )
    controls = descriptor.controls
    assert controls.model_dir == str(tmp_path / "model")
    assert controls.latency_budget_ms == 50  # from the file, untouched by the overrides
    assert controls.batching == Batching(max_batch_size=8)
    assert descriptor.raw["controls"]["modelDir"] == "/opt/ric/model"  # raw is the file


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"model_dir": ""}, "override model_dir: String should have at least 1 character"),
        ({"batching": {"max_batch_size": 0}}, "override batching.max_batch_size"),
        ({"quantiles": [0.5, 0.5]}, "must be unique"),
        ({"latency_budget_ms": float("inf")}, "override latency_budget_ms"),
        ({"execution_provider": "gpu"}, "override execution_provider"),
        ({"modelDir": "/m"}, "unknown controls override(s): modelDir"),
    ],
)
def test_overrides_are_validated(overrides: dict, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_descriptor(PACKAGED, overrides)
    assert problem in str(caught.value)
    assert str(caught.value).startswith(str(PACKAGED))


# --- the schema beside the file ----------------------------------------------------------------


def test_a_schema_beside_the_file_is_the_one_used(tmp_path: Path) -> None:
    path = with_controls(tmp_path, historyLength=5000)
    assert load_descriptor(path).controls.history_length == 5000  # the packaged schema allows it

    stricter = copy.deepcopy(SCHEMA)
    stricter["properties"]["historyLength"]["maximum"] = 1000
    write(tmp_path / SCHEMA_FILE_NAME, stricter)
    with pytest.raises(ConfigError, match=r"controls\.historyLength: 5000 is greater than"):
        load_descriptor(path)


def test_the_schema_of_the_controls_is_checked_with_the_envelope_around_it(tmp_path) -> None:
    raw = packaged_raw()
    del raw["messaging"]
    write(tmp_path / CONFIG_FILE_NAME, raw)
    write(tmp_path / SCHEMA_FILE_NAME, SCHEMA)
    with pytest.raises(ConfigError, match="'messaging' is a required property"):
        load_descriptor(tmp_path / CONFIG_FILE_NAME)


def test_a_schema_of_the_whole_descriptor_beside_the_file_is_used_as_it_is(tmp_path) -> None:
    # As a chart built by dms_cli mounts it: the onboarder's schema of the descriptor with the
    # controls' schema inside. Its envelope may be stricter than the xApp's.
    whole = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
             "required": ["name", "metrics"],
             "properties": {"name": {"type": "string"}, "controls": SCHEMA}}
    write(tmp_path / SCHEMA_FILE_NAME, whole)
    path = with_controls(tmp_path, historyLength=2000)
    with pytest.raises(ConfigError, match="'metrics' is a required property"):
        load_descriptor(path)
    whole["required"] = ["name"]
    whole["properties"]["controls"]["properties"]["historyLength"]["maximum"] = 1000
    write(tmp_path / SCHEMA_FILE_NAME, whole)
    with pytest.raises(ConfigError, match=r"controls\.historyLength: 2000 is greater than"):
        load_descriptor(path)


def test_an_invalid_schema_beside_the_file_names_the_schema(tmp_path: Path) -> None:
    path = with_controls(tmp_path)
    schema = tmp_path / SCHEMA_FILE_NAME
    write(schema, {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": 12})
    with pytest.raises(ConfigError, match="not a valid JSON Schema") as caught:
        load_descriptor(path)
    assert caught.value.path == schema


# --- when a change applies --------------------------------------------------------------------


def test_each_setting_says_when_a_change_applies_and_changes_are_sorted_by_it() -> None:
    old = Controls(model_dir="/a")
    live = old.model_copy(update={
        "latency_budget_ms": 5, "batching": Batching(max_batch_size=8),
        "e2": old.e2.model_copy(update={"kpis": {"kpi": KpiSource(measurement="m")}})})
    assert [changed(old, live, when) for when in ("live", "reload", "restart")] == [
        ["latencyBudgetMs", "batching.maxBatchSize", "e2.kpis"], [], []]
    new = old.model_copy(update={"model_dir": "/b", "intra_op_threads": 4,
                                 "execution_provider": "cuda"})
    assert changed(old, new, "reload") == ["modelDir", "executionProvider", "intraOpThreads"]
    # A setting without its own declaration takes its parent's: every historyStore field
    # is the store opened at start.
    later = old.model_copy(update={
        "history_length": 10, "history_store": HistoryStore(namespace="n"),
        "e2": old.e2.model_copy(update={"port": 4561}),
        "registration": Registration(retry_seconds=1)})
    assert changed(old, later, "restart") == [
        "historyLength", "historyStore.namespace", "registration.retrySeconds", "e2.port"]
    assert changed(old, later, "live") == []


def test_the_schema_and_the_reference_show_when_a_change_applies() -> None:
    properties = SCHEMA["properties"]
    assert properties["modelDir"][APPLIES] == "reload"
    assert properties["historyStore"][APPLIES] == "restart"
    assert properties["e2"]["properties"]["port"][APPLIES] == "restart"
    assert APPLIES not in properties["latencyBudgetMs"]  # live, as the controls are
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference"
            / "configuration.md").read_text()
    cells = [re.split(r"(?<!\\)\|", line) for line in page.splitlines()
             if line.startswith("| `")]  # a type's own | is escaped
    rows = {row[1].strip(" `"): row for row in cells}
    assert rows["historyStore.namespace"][3].strip() == "restart"
    assert rows["intraOpThreads"][3].strip() == "reload"
    assert rows["latencyBudgetMs"][3].strip() == "live"
    # Fields with a default show it, not "required".
    assert rows["perModel"][4].strip() == "`{}`"
    assert rows["e2.kpis"][4].strip().startswith('`{"prb_util": ')


# --- the watcher -------------------------------------------------------------------------------


class Recorder:
    def __init__(self, reject: bool = False) -> None:
        self.seen: list[Descriptor] = []
        self.reject = reject

    def __call__(self, descriptor: Descriptor) -> None:
        if self.reject:
            raise ValueError("model directory has no model.onnx")
        self.seen.append(descriptor)


def errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_watcher_takes_on_a_valid_change(tmp_path: Path) -> None:
    path = with_controls(tmp_path, latencyBudgetMs=100)
    recorder = Recorder()
    watcher = ConfigWatcher(path, recorder, interval=0.05)
    assert watcher.current.controls.latency_budget_ms == 100
    assert watcher.check() is False  # nothing changed
    with_controls(tmp_path, latencyBudgetMs=40)
    assert watcher.check() is True
    assert [d.controls.latency_budget_ms for d in recorder.seen] == [40]
    assert watcher.current is recorder.seen[0]
    assert watcher.check() is False


def test_watcher_keeps_overrides_across_reloads(tmp_path: Path) -> None:
    path = with_controls(tmp_path)
    watcher = ConfigWatcher(path, Recorder(), overrides={"model_dir": "/cli/model"})
    with_controls(tmp_path, historyLength=10)
    assert watcher.check() is True
    assert (watcher.current.controls.model_dir, watcher.current.controls.history_length) == (
        "/cli/model",
        10,
    )


def test_watcher_detects_a_change_even_when_mtime_is_unchanged(tmp_path: Path) -> None:
    path = with_controls(tmp_path, historyLength=100)
    stat = path.stat()
    watcher = ConfigWatcher(path, Recorder())
    with_controls(tmp_path, historyLength=200)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert watcher.check() is True
    assert watcher.current.controls.history_length == 200


def test_watcher_follows_a_configmap_symlink_swap(tmp_path: Path) -> None:
    # Kubernetes mounts a ConfigMap as file -> ..data/file, ..data -> ..<timestamp>/, and
    # updates it by writing a new timestamped directory and renaming a new ..data over the old.
    for version, history in (("..v1", 100), ("..v2", 300)):
        (tmp_path / version).mkdir()
        with_controls(tmp_path / version, historyLength=history)
    (tmp_path / "..data").symlink_to("..v1")
    (tmp_path / CONFIG_FILE_NAME).symlink_to(f"..data/{CONFIG_FILE_NAME}")
    watcher = ConfigWatcher(tmp_path / CONFIG_FILE_NAME, Recorder())
    assert watcher.current.controls.history_length == 100

    (tmp_path / "..data_tmp").symlink_to("..v2")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert watcher.check() is True
    assert watcher.current.controls.history_length == 300


def test_watcher_logs_an_invalid_change_once_and_keeps_the_old(tmp_path, caplog) -> None:
    path = with_controls(tmp_path, latencyBudgetMs=100)
    recorder = Recorder()
    watcher = ConfigWatcher(path, recorder)
    old = watcher.current
    raw = packaged_raw()
    raw["controls"]["batching"]["maxBatchSize"] = 0
    write(path, raw)
    with caplog.at_level(logging.INFO, logger="kpi_forecast.xapp.descriptor.config_file"):
        assert watcher.check() is False
        assert watcher.check() is False
    assert watcher.current is old
    assert recorder.seen == []
    [record] = errors(caplog)
    assert "controls.batching.maxBatchSize" in record.getMessage()
    assert str(path) in record.getMessage()
    assert "\n" not in record.getMessage()

    with_controls(tmp_path, latencyBudgetMs=25)  # fixed: taken on
    assert watcher.check() is True
    assert watcher.current.controls.latency_budget_ms == 25


def test_watcher_logs_the_same_bad_content_again_after_a_revert(tmp_path, caplog) -> None:
    path = with_controls(tmp_path)
    good = path.read_bytes()
    watcher = ConfigWatcher(path, Recorder())
    with caplog.at_level(logging.ERROR, logger="kpi_forecast.xapp.descriptor.config_file"):
        path.write_text("{")
        watcher.check()
        path.write_bytes(good)  # an operator reverts ...
        assert watcher.check() is False
        path.write_text("{")  # ... then makes the same mistake: that is news again
        watcher.check()
    assert len(errors(caplog)) == 2


def test_watcher_survives_the_file_disappearing(tmp_path, caplog) -> None:
    path = with_controls(tmp_path)
    watcher = ConfigWatcher(path, Recorder())
    path.unlink()
    with caplog.at_level(logging.ERROR, logger="kpi_forecast.xapp.descriptor.config_file"):
        assert watcher.check() is False
        assert watcher.check() is False
    [record] = errors(caplog)
    assert "file not found" in record.getMessage()
    assert watcher.current.controls.model_dir == "/opt/ric/model"


def test_watcher_treats_an_on_change_refusal_as_a_rejected_change(tmp_path, caplog) -> None:
    path = with_controls(tmp_path, modelDir="/models/a")
    recorder = Recorder(reject=True)
    watcher = ConfigWatcher(path, recorder)
    with_controls(tmp_path, modelDir="/models/b")
    with caplog.at_level(logging.ERROR, logger="kpi_forecast.xapp.descriptor.config_file"):
        assert watcher.check() is False
        assert watcher.check() is False
    assert watcher.current.controls.model_dir == "/models/a"
    [record] = errors(caplog)
    assert f"{path}: model directory has no model.onnx" in record.getMessage()


def test_watcher_refuses_a_bad_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        ConfigWatcher(with_controls(tmp_path, historyLength=0), Recorder())
    with pytest.raises(ValueError, match="interval"):
        ConfigWatcher(with_controls(tmp_path), Recorder(), interval=0)


def test_watcher_run_loop_picks_up_a_change_and_stops_when_cancelled(tmp_path: Path) -> None:
    path = with_controls(tmp_path, historyLength=100)

    async def scenario() -> list[int]:
        changed = asyncio.Event()
        seen: list[int] = []

        def on_change(descriptor: Descriptor) -> None:
            seen.append(descriptor.controls.history_length)
            changed.set()

        watcher = ConfigWatcher(path, on_change, interval=0.02)
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.05)
        with_controls(tmp_path, historyLength=200)
        await asyncio.wait_for(changed.wait(), timeout=2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(scenario()) == [200]


def test_watcher_run_loop_outlives_a_failing_callback(tmp_path, caplog) -> None:
    path = with_controls(tmp_path, historyLength=100)
    calls: list[int] = []

    def on_change(descriptor: Descriptor) -> None:
        calls.append(descriptor.controls.history_length)
        if len(calls) == 1:
            raise RuntimeError("bug in the caller")

    async def scenario() -> None:
        watcher = ConfigWatcher(path, on_change, interval=0.02)
        task = asyncio.create_task(watcher.run())
        with_controls(tmp_path, historyLength=200)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if len(calls) >= 2:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.ERROR, logger="kpi_forecast.xapp.descriptor.config_file"):
        asyncio.run(scenario())
    assert calls[:2] == [200, 200]  # a callback bug is not remembered as bad content: retried
    assert "bug in the caller" in caplog.text


@pytest.mark.parametrize(("client_host", "submgr", "expected"), [
    (None, "http://127.0.0.1:8090", "127.0.0.1"),
    (None, "http://localhost:8090", "127.0.0.1"),
    (None, "http://[::1]:8090", "127.0.0.1"),
    (None, "http://service-ricplt-submgr-http.ricplt:8088", DEFAULT_CLIENT_HOST),
    (None, "http://10.0.0.7:8088", DEFAULT_CLIENT_HOST),
    (None, None, DEFAULT_CLIENT_HOST),
    ("e2-side.example", "http://127.0.0.1:8090", "e2-side.example"),  # set: taken as it is
])
def test_the_e2_endpoint_is_loopback_where_the_subscription_manager_is(
        client_host: str | None, submgr: str | None, expected: str) -> None:
    e2 = E2(client_host=client_host, submgr_url=submgr)
    assert e2.endpoint_host() == expected

"""The xApp's configuration: an O-RAN SC xApp descriptor (config-file.json), checked against a
JSON Schema, with the xApp's own settings under "controls", and a watcher that reloads it when
the ConfigMap behind it changes."""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from kpi_forecast.model.errors import UserError

DEFAULT_DIR = Path(__file__).parent / "descriptor"
CONFIG_FILE_NAME = "config-file.json"
SCHEMA_FILE_NAME = "schema.json"

# Changing any of these means building a new ONNX Runtime session, i.e. reloading the model.
MODEL_FIELDS = ("model_dir", "execution_provider", "intra_op_threads")

DEFAULT_APPMGR_URL = "http://service-ricplt-appmgr-http.ricplt:8080/ric/v1/register"

log = logging.getLogger(__name__)


class ConfigError(UserError, ValueError):
    """A descriptor that cannot be used; the message is one line naming the file and the problem."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = _one_line(problem)
        super().__init__(f"{self.path}: {self.problem}")


# --- the controls ------------------------------------------------------------------------------
# Bounds mirror descriptor/schema.json: the schema guards the file, these guard the overrides
# (CLI flags), which never pass through the schema.

_MODEL_CONFIG = ConfigDict(
    populate_by_name=True,
    alias_generator=to_camel,
    extra="forbid",
    frozen=True,
    allow_inf_nan=False,  # JSON Schema bounds let NaN through (every comparison is false)
)

Quantile = Annotated[float, Field(gt=0, lt=1)]


class Batching(BaseModel):
    """How requests are gathered into one model call."""

    model_config = _MODEL_CONFIG

    max_batch_size: int = Field(64, ge=1, le=4096)
    max_queue_delay_ms: float = Field(2.0, ge=0, le=1000)
    max_queue_size: int = Field(1024, ge=1, le=100_000)
    # adaptive: an in-flight limit that follows the queueing delay (xapp/overload.py); off:
    # every request is admitted up to max_queue_size (a RIC that sheds load upstream).
    admission: Literal["adaptive", "off"] = "adaptive"


class Registration(BaseModel):
    """Registration with the RIC platform's application manager."""

    model_config = _MODEL_CONFIG

    enabled: bool = False
    appmgr_url: str = Field(DEFAULT_APPMGR_URL, min_length=1)
    retry_seconds: float = Field(10.0, gt=0)


class KpiSource(BaseModel):
    """Which E2SM-KPM measurement feeds a KPI, and how reports within one step combine."""

    model_config = _MODEL_CONFIG

    measurement: str = Field(min_length=1, max_length=150)  # a TS 28.552 name
    aggregate: Literal["mean", "sum"] = "mean"  # sum for volumes, mean for levels and rates
    scale: float = Field(1.0, gt=0)  # measurement unit -> KPI unit, e.g. Mbit -> MB = 0.125


DEFAULT_RMR_HOST = "service-ricxapp-kpi-forecast-rmr.ricxapp"
DEFAULT_KPIS = {
    "prb_util": KpiSource(measurement="RRU.PrbUsedDl"),
    "dl_throughput_mbps": KpiSource(measurement="DRB.UEThpDl", scale=0.001),  # kbit/s
    "active_ues": KpiSource(measurement="DRB.MeanActiveUeDl"),
    "traffic_mb": KpiSource(measurement="DRB.PdcpSduVolumeDL", aggregate="sum", scale=0.125),
}


class E2(BaseModel):
    """E2 ingestion: the rmr-data port and the measurement behind each KPI."""

    model_config = _MODEL_CONFIG

    enabled: bool = False
    port: int = Field(4560, ge=0, le=65535)  # 0 picks a free port (tests)
    # Where the subscription manager is; None: do not subscribe (frames may still arrive).
    submgr_url: str | None = Field(None, min_length=1)
    # How the E2 side reaches this xApp's rmr-data port (the chart's RMR Service); None: see
    # ``endpoint_host``.
    client_host: str | None = Field(None, min_length=1)
    reporting_period_ms: int | None = Field(None, ge=1)  # None: the model's step
    kpis: dict[str, KpiSource] = Field(default_factory=lambda: dict(DEFAULT_KPIS))

    def endpoint_host(self) -> str:
        """Where the E2 side is to send this xApp's frames: ``client_host`` when set; else
        loopback when the subscription manager is on loopback (the E2 side then runs on this
        machine, as ``kpi-forecast e2sim`` does), else the RMR Service's in-cluster name."""
        if self.client_host:
            return self.client_host
        host = urllib.parse.urlsplit(self.submgr_url or "").hostname or ""
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:  # a name, not an address
            loopback = False
        return "127.0.0.1" if loopback else DEFAULT_RMR_HOST


class HistoryStore(BaseModel):
    """Where per-cell history lives: this replica's memory, or the RIC's shared Redis."""

    model_config = _MODEL_CONFIG

    backend: Literal["memory", "redis"] = "memory"
    # The braces and comma delimit SDL keys ({namespace},key): not allowed inside a namespace.
    namespace: str = Field("kpi-forecast", min_length=1, max_length=100, pattern=r"^[^{},]+$")
    host: str | None = Field(None, min_length=1)  # None: $DBAAS_SERVICE_HOST
    port: int | None = Field(None, ge=1, le=65535)  # None: $DBAAS_SERVICE_PORT, else 6379
    db: int = Field(0, ge=0, le=15)
    timeout_ms: float = Field(500.0, gt=0, le=60_000)
    max_cells: int = Field(100_000, ge=1, le=10_000_000)


class RecalibrationControls(BaseModel):
    """Background recalibration of the quantiles on the recent history of the cells held."""

    model_config = _MODEL_CONFIG

    every_seconds: float = Field(3600.0, ge=0, le=7 * 86400)  # 0: the model's calibration only
    max_cells: int = Field(256, ge=1, le=100_000)  # the most recently reported cells


class Controls(BaseModel):
    """The xApp's own settings: the descriptor's "controls" object."""

    model_config = _MODEL_CONFIG

    model_dir: str = Field(min_length=1)
    latency_budget_ms: float = Field(100.0, gt=0, le=60_000)
    default_horizon: Annotated[int, Field(ge=1)] | None = None
    quantiles: list[Quantile] | None = Field(None, min_length=1)
    batching: Batching = Batching()
    history_length: int = Field(672, ge=1, le=1_000_000)
    history_store: HistoryStore = HistoryStore()
    recalibration: RecalibrationControls = RecalibrationControls()
    execution_provider: Literal["auto", "cuda", "cpu"] = "auto"
    intra_op_threads: int = Field(0, ge=0, le=256)
    max_request_bytes: int = Field(4 * 2**20, ge=1024, le=2**30)
    registration: Registration = Registration()
    e2: E2 = E2()

    @field_validator("quantiles")
    @classmethod
    def _unique(cls, value: list[float] | None) -> list[float] | None:
        # The schema's uniqueItems; pydantic has no list-uniqueness constraint of its own.
        if value is not None and len(set(value)) != len(value):
            raise ValueError("quantiles must be unique")
        return value


@dataclass(frozen=True)
class Descriptor:
    """A loaded, validated descriptor. raw is the parsed file, served by GET /ric/v1/config."""

    path: Path
    name: str
    version: str
    controls: Controls
    raw: dict


def model_fields_changed(old: Controls, new: Controls) -> list[str]:
    """The fields among MODEL_FIELDS that differ: if any, the model must be reloaded."""
    return [name for name in MODEL_FIELDS if getattr(old, name) != getattr(new, name)]


# --- finding and loading -----------------------------------------------------------------------


def descriptor_path(
    explicit: str | Path | None = None, environ: Mapping[str, str] = os.environ
) -> Path:
    """Where the descriptor is: the explicit argument, else $CONFIG_FILE, else
    $XAPP_DESCRIPTOR_PATH (a directory holding config-file.json, or a file), else the packaged
    default. A directory given explicitly is treated like $XAPP_DESCRIPTOR_PATH."""
    if explicit is not None and str(explicit):
        return _file_in(Path(explicit))
    # Helm charts often render unset values as empty strings: treat those as unset.
    if environ.get("CONFIG_FILE"):
        return Path(environ["CONFIG_FILE"])
    if environ.get("XAPP_DESCRIPTOR_PATH"):
        return _file_in(Path(environ["XAPP_DESCRIPTOR_PATH"]))
    return DEFAULT_DIR / CONFIG_FILE_NAME


def _file_in(path: Path) -> Path:
    return path / CONFIG_FILE_NAME if path.is_dir() else path


def load_descriptor(path: Path, overrides: Mapping[str, object] | None = None) -> Descriptor:
    """Read, schema-check and parse a descriptor; overrides (snake_case Controls fields, e.g.
    from CLI flags) replace the file's controls and are validated too. Raises ConfigError."""
    path = Path(path)
    return _build(path, _read_bytes(path), overrides)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror or exc}") from None


def _build(path: Path, data: bytes, overrides: Mapping[str, object] | None) -> Descriptor:
    raw = _parse_json(path, data)
    _check_schema(path, raw)
    controls = _controls(path, raw["controls"])
    if overrides:
        controls = _apply_overrides(path, controls, overrides)
    return Descriptor(path, raw["name"], raw["version"], controls, raw)


def _parse_json(path: Path, data: bytes) -> Any:
    try:
        text = data.decode("utf-8-sig")  # tolerate a BOM some editors add
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise ConfigError(path, f"invalid JSON: {exc}") from None


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity, which are not JSON and slip past schema bounds.
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of duplicate keys silently; in a hand-edited ConfigMap that hides typos.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _schema_for(path: Path) -> Path:
    beside = path.parent / SCHEMA_FILE_NAME
    return beside if beside.is_file() else DEFAULT_DIR / SCHEMA_FILE_NAME


def _check_schema(path: Path, raw: Any) -> None:
    schema_path = _schema_for(path)
    schema = _parse_json(schema_path, _read_bytes(schema_path))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(schema_path, f"not a valid JSON Schema: {exc.message}") from None
    errors = sorted(cls(schema).iter_errors(raw), key=lambda e: _json_path(e.absolute_path))
    if errors:
        # The first by path, so the same file always gives the same message.
        first = errors[0]
        raise ConfigError(path, f"{_json_path(first.absolute_path) or '(root)'}: {first.message}")


def _json_path(parts: Sequence[str | int]) -> str:
    """controls.batching.maxBatchSize, messaging.ports[1].port."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def _controls(path: Path, raw_controls: Any) -> Controls:
    try:
        return Controls.model_validate(raw_controls)
    except pydantic.ValidationError as exc:
        raise ConfigError(path, _pydantic_problem("controls.", exc)) from None


def _apply_overrides(path: Path, controls: Controls, overrides: Mapping[str, object]) -> Controls:
    unknown = sorted(set(overrides) - set(Controls.model_fields))
    if unknown:
        # Checked here because a camelCase key would otherwise sit beside its snake_case twin.
        raise ConfigError(path, f"unknown controls override(s): {', '.join(unknown)}")
    try:
        return Controls.model_validate({**controls.model_dump(), **overrides})
    except pydantic.ValidationError as exc:
        raise ConfigError(path, _pydantic_problem("override ", exc)) from None


def _pydantic_problem(prefix: str, exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{prefix}{_json_path(e['loc'])}: {e['msg']}" for e in exc.errors())


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 500 else text[:497] + "..."


# --- watching ----------------------------------------------------------------------------------


class ConfigWatcher:
    """Polls a descriptor and hands each valid change to on_change; invalid ones are logged once
    and ignored, so a bad ConfigMap edit never takes down a running xApp."""

    def __init__(
        self,
        path: Path,
        on_change: Callable[[Descriptor], None],
        interval: float = 1.0,
        overrides: Mapping[str, object] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, not {interval}")
        self.path = Path(path)
        self.interval = interval
        self._on_change = on_change
        self._overrides = dict(overrides or {})
        data = _read_bytes(self.path)
        # A bad file at start-up is fatal (ConfigError), unlike a bad change later.
        self._current = _build(self.path, data, self._overrides)
        self._digest = _digest(data)
        self._rejected: str | None = None  # what was last logged, so it is logged once

    @property
    def current(self) -> Descriptor:
        """The descriptor in force: the last valid one."""
        return self._current

    def check(self) -> bool:
        """Reload if the file's bytes changed; True when a new descriptor was taken on."""
        # ConfigMap updates swap a symlink, and mtimes can repeat: compare content, not mtime.
        try:
            data = _read_bytes(self.path)
        except ConfigError as exc:
            return self._reject(f"unreadable:{exc}", exc)
        digest = _digest(data)
        if digest == self._digest:
            self._rejected = None  # back to the content in force: a new bad edit is news again
            return False
        if digest == self._rejected:
            return False
        try:
            new = _build(self.path, data, self._overrides)
            self._on_change(new)
        except ValueError as exc:  # ConfigError, pydantic's ValidationError, on_change refusals
            return self._reject(digest, exc)
        self._current, self._digest, self._rejected = new, digest, None
        log.info("configuration reloaded from %s", self.path)
        return True

    def _reject(self, key: str, exc: Exception) -> bool:
        if key != self._rejected:
            problem = str(exc) if isinstance(exc, ConfigError) else f"{self.path}: {exc}"
            problem = _one_line(problem)
            log.error("configuration change rejected, keeping the previous one: %s", problem)
            self._rejected = key
        return False

    async def run(self) -> None:
        """check() every interval seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:
                # A bug in on_change must not silently end the watcher's task.
                log.exception("configuration watcher: unexpected error checking %s", self.path)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

"""The xApp's configuration: where the O-RAN SC xApp descriptor (config-file.json) is, reading
it (checked against the JSON Schema beside it, the controls parsed by the models of
`controls.py`), and a watcher that reloads it when the ConfigMap behind it changes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pydantic

from kpi_forecast.model.errors import UserError
from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.descriptor.schema import descriptor_schema

DEFAULT_DIR = Path(__file__).parent
CONFIG_FILE_NAME = "config-file.json"
SCHEMA_FILE_NAME = "schema.json"

log = logging.getLogger(__name__)


class ConfigError(UserError, ValueError):
    """A descriptor that cannot be used; the message is one line naming the file and the problem."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = _one_line(problem)
        super().__init__(f"{self.path}: {self.problem}")


@dataclass(frozen=True)
class Descriptor:
    """A loaded, validated descriptor. raw is the parsed file, served by GET /ric/v1/config."""

    path: Path
    name: str
    version: str
    controls: Controls
    raw: dict


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
    """Check the whole descriptor against the schema.json beside it: either the schema of the
    controls (as this xApp and its chart ship it), which is put in the envelope's schema as
    the onboarder does, or a schema of the whole descriptor (as a chart that dms_cli built
    mounts it: the onboarder's own, with the controls' schema inside)."""
    schema_path = _schema_for(path)
    schema = _parse_json(schema_path, _read_bytes(schema_path))
    if isinstance(schema, dict) and "controls" not in schema.get("properties", {}):
        schema = descriptor_schema(schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
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
    merged = controls.model_dump()
    for key, value in overrides.items():
        # A group's override (e2, a1) sets the fields it names; the file's others stay.
        merged[key] = {**merged[key], **value} if isinstance(value, Mapping) else value
    try:
        return Controls.model_validate(merged)
    except pydantic.ValidationError as exc:
        raise ConfigError(path, _pydantic_problem("override ", exc)) from None


def _pydantic_problem(prefix: str, exc: pydantic.ValidationError) -> str:
    # A check of the whole (no path) is named by the prefix alone: "controls", not "controls.".
    return "; ".join(f"{prefix}{_json_path(e['loc'])}: {e['msg']}" if e["loc"]
                     else f"{prefix.rstrip('. ')}: {e['msg']}" for e in exc.errors())


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 500 else text[:497] + "..."


# --- watching ----------------------------------------------------------------------------------


WATCH_INTERVAL_S = 1.0  # how often the descriptor file is read for a change


class ConfigWatcher:
    """Polls a descriptor and hands each valid change to on_change; invalid ones are logged once
    and ignored, so a bad ConfigMap edit never takes down a running xApp."""

    def __init__(
        self,
        path: Path,
        on_change: Callable[[Descriptor], None],
        interval: float = WATCH_INTERVAL_S,
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

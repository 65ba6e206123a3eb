"""The model directory: what `train` writes and every runtime reads. Torch-free.

    DIR/metadata.json   schema version, data contract (freq, context, horizon, quantiles,
                        target, calendar zone, holiday calendar), config, training-data fingerprint,
                        validation metrics, library versions, sha256 of the weights and graphs
    DIR/weights.pt      torch state_dict (loaded with weights_only=True)
    DIR/model.onnx      the exported graph served by ONNX Runtime
    DIR/model.fp16.onnx the same graph with its Transformer in float16, for CUDA
    DIR/report.md       the training report, with plots in DIR/plots/

Each file is written whole or not at all (``replaced_atomically``), metadata.json last: a
write killed or out of disk leaves the files as they were, or new files whose checksums the
old metadata.json refuses, never a torn file that passes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.errors import UserError

SCHEMA_VERSION = 3  # 3: one holiday_reading; the window read on the wall clock always
METADATA_FILE = "metadata.json"
WEIGHTS_FILE = "weights.pt"
ONNX_FILE = "model.onnx"
FLOAT16_ONNX_FILE = "model.fp16.onnx"
INT8_ONNX_FILE = "model.int8.onnx"
GRAPH_FILES = {"float32": ONNX_FILE, "float16": FLOAT16_ONNX_FILE, "int8": INT8_ONNX_FILE}
REPORT_FILE = "report.md"


Precision = Literal["float32", "float16", "int8"]
# How the model reads a public holiday on a working day (model.features): "as_sunday", its
# day-of-week features are Sunday's (the horizon has tokens, so the network sees it coming);
# "from_sunday", it takes the forecast of the horizon's nearest Sunday (sunday_sources: the
# horizon has no tokens); "none", no holiday calendar.
HolidayReading = Literal["none", "as_sunday", "from_sunday"]
HOLIDAY_READINGS = ("none", "as_sunday", "from_sunday")


class ArtifactError(UserError, ValueError):
    """A model directory that cannot be used; its message is one readable line."""


@dataclass
class ModelMetadata:
    model_version: str
    target: str
    freq: str
    calendar_tz: str
    config: ModelConfig
    data_fingerprint: str
    created: str
    holidays: str  # public-holiday calendar of the calendar features; "" = none
    holiday_reading: HolidayReading
    # weights.pt's sha256: a re-export (`kpi-forecast export`) takes the weights it describes.
    weights_sha256: str
    validation: dict[str, float] = field(default_factory=dict)
    training: dict[str, float | int | str] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)
    # The float32 graph's file, sha256, opset and attention form; "float16" (the GPU graph)
    # and "int8" (the quantised CPU graph): each one's file and sha256, absent in artifacts
    # exported without it or before it existed.
    onnx: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def context(self) -> int:
        return self.config.context

    @property
    def horizon(self) -> int:
        return self.config.horizon

    @property
    def quantiles(self) -> list[float]:
        return self.config.quantiles

    @property
    def holiday_as_sunday(self) -> bool:
        return self.holiday_reading == "as_sunday"

    @property
    def precisions(self) -> list[Precision]:
        """Its graphs: float32 always, float16 and int8 where it was exported with them."""
        return ["float32", *(p for p in ("float16", "int8") if p in self.onnx)]

    def quantile_names(self) -> list[str]:
        """Column names of the quantiles: 0.1 -> p10, 0.5 -> p50, 0.975 -> p97.5."""
        return [f"p{round(q * 100, 6):g}" for q in self.quantiles]

    def to_json(self) -> str:
        payload = asdict(self)
        payload["config"] = self.config.to_dict()
        return json.dumps(payload, indent=2, sort_keys=True)

    def save(self, model_dir: Path) -> None:
        with replaced_atomically(Path(model_dir) / METADATA_FILE) as partial:
            partial.write_text(self.to_json() + "\n")


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """A file beside ``path`` to write in; once written and on disk it is renamed over
    ``path`` in one step, so that a reader, or a run killed meanwhile, sees the old file or the
    new one, never part of one. A failed write (a full disk) is an ArtifactError naming
    ``path``, the old file untouched."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        yield partial
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)  # the rename itself on disk
        finally:
            os.close(folder)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot write it ({exc.strerror or exc}); what was there "
                            "is left as it was") from exc
    finally:
        partial.unlink(missing_ok=True)


def repository_models(root: str | Path) -> dict[str, Path]:
    """The models of a repository (a folder of model directories, as ``train --target a,b``
    writes and ``serve --models`` serves): its subdirectories holding a model's metadata, by
    name, in name order. OSError when the folder cannot be read."""
    folder = Path(root)
    return {p.name: p for p in sorted(folder.iterdir()) if (p / METADATA_FILE).is_file()}


def models_at(path: str | Path) -> dict[str, Path]:
    """A model directory ({its name: it}) or a repository's models; ArtifactError when
    ``path`` is neither."""
    folder = Path(path)
    if (folder / METADATA_FILE).is_file():
        return {folder.name: folder}
    try:
        found = repository_models(folder) if folder.is_dir() else {}
    except OSError as exc:
        raise ArtifactError(f"{folder}: {exc.strerror or exc}") from None
    if not found:
        raise ArtifactError(f"{folder}: neither a model directory ({METADATA_FILE}) nor a "
                            "repository of them; is it a directory written by 'train'?")
    return found


def load_metadata(model_dir: str | Path, *, reexport: bool = False) -> ModelMetadata:
    """A model directory's metadata.json. An artifact of an older schema version is refused,
    naming the command that exports it anew from its weights; ``reexport`` (that command)
    reads the one version before this one."""
    path = Path(model_dir) / METADATA_FILE
    if not Path(model_dir).is_dir():
        raise ArtifactError(f"{model_dir}: not a model directory")
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; is {model_dir} a directory written by 'train'?")
    try:
        payload = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable metadata ({exc})") from exc
    version = payload.get("schema_version") if isinstance(payload, dict) else None
    if reexport and version == SCHEMA_VERSION - 1:
        payload = _from_version_2(path, payload)
    elif version != SCHEMA_VERSION:
        raise ArtifactError(
            f"{path}: schema version {version!r}, this kpi-forecast reads {SCHEMA_VERSION}; "
            f"export it anew from its weights.pt: kpi-forecast export --model {model_dir}")
    try:
        payload["config"] = ModelConfig(**payload["config"])
        meta = ModelMetadata(**payload)
    except (TypeError, ValueError, KeyError) as exc:
        raise ArtifactError(f"{path}: invalid metadata ({exc})") from exc
    if meta.holiday_reading not in HOLIDAY_READINGS:
        raise ArtifactError(f"{path}: holiday_reading {meta.holiday_reading!r} is not one of "
                            f"{', '.join(HOLIDAY_READINGS)}")
    return meta


def _from_version_2(path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """Version 2's metadata as version 3 says it: its two holiday flags as one reading. Only
    what version 3 can say the same: a network trained on the wall clock, with the skip's rank
    and the weights' checksum recorded."""
    if not (payload.get("wall_clock") and payload.get("weights_sha256")
            and "skip_rank" in payload.get("config", {})):
        raise ArtifactError(f"{path}: schema version 2 from before the wall clock, the skip's "
                            "rank or the weights' checksum were recorded; train it anew")
    payload = dict(payload)
    as_sunday = payload.pop("holiday_as_sunday", False)
    from_sunday = payload.pop("holiday_from_sunday", False)
    del payload["wall_clock"]
    payload["holiday_reading"] = ("none" if not payload.get("holidays") else
                                  "as_sunday" if as_sunday else
                                  "from_sunday" if from_sunday else "none")
    payload["schema_version"] = SCHEMA_VERSION
    return payload


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified_graph(model_dir: str | Path, metadata: ModelMetadata,
                   precision: Precision = "float32") -> Path:
    """The model's graph in ``precision``, once its checksum matches metadata.json."""
    entry = metadata.onnx if precision == "float32" else metadata.onnx.get(precision)
    path = Path(model_dir) / GRAPH_FILES[precision]
    if not entry:
        raise ArtifactError(f"{Path(model_dir) / METADATA_FILE}: no {precision} graph recorded; "
                            f"run 'kpi-forecast export --model {model_dir}'")
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; run 'kpi-forecast export --model {model_dir}'")
    if sha256_file(path) != entry.get("sha256"):
        raise ArtifactError(
            f"{path}: sha256 does not match metadata.json (truncated or replaced file?)"
        )
    return path

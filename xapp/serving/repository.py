"""The models served, by name, as Triton serves a model repository: the directory of each
(a subdirectory of ``controls.modelRepository`` named as the model, or the one ``modelDir``),
which are loaded at start, and each model's own serving parts (``ModelSlot``: its holder,
batcher, recalibrator and scorer), so that each loads, reloads, unloads and fails on its own.

What can be told before anything loads is checked at start, each in one line: a repository
that holds no model, a model named that it does not hold, two models that forecast one KPI
(E2 delivers one history per KPI: two models of it would read one history each claimed).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pandas as pd

from kpi_forecast.model.artifact import METADATA_FILE, repository_models
from kpi_forecast.model.errors import UserError
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.descriptor.controls import Controls
from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.admission import latency_budget_s
from kpi_forecast.xapp.serving.batcher import DynamicBatcher
from kpi_forecast.xapp.serving.errors import UnknownModel
from kpi_forecast.xapp.serving.model_holder import ModelHolder
from kpi_forecast.xapp.serving.recalibrator import Recalibrator
from kpi_forecast.xapp.serving.scoring import WINDOWS, Scorer
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from kpi_forecast.xapp.store.shared_state import SharedState

if TYPE_CHECKING:
    from kpi_forecast.xapp.ric.a1.handler import PolicyHandler

log = logging.getLogger(__name__)

ModelStatus = Literal["READY", "LOADING", "UNAVAILABLE"]  # Triton's names


class RepositoryError(UserError):
    """The repository cannot be served as the controls name it."""


def listed(controls: Controls) -> list[str]:
    """The models the repository holds now, by name: its subdirectories holding a model's
    metadata (with modelDir, that directory's name); none while it cannot be read (at start
    that is refused first, ``at_start``)."""
    if controls.model_dir is not None:
        return [Path(controls.model_dir).name]
    root = Path(controls.model_repository or "")
    try:
        return list(repository_models(root))
    except OSError as exc:
        log.warning("modelRepository %s cannot be read: %s", root, describe(exc))
        return []


def declared(model_dir: Path, field: str) -> str | None:
    """A field of a model directory's metadata (None: unreadable; loading will say why)."""
    try:
        value = json.loads((model_dir / METADATA_FILE).read_text()).get(field)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def kpi_of(model_dir: Path) -> str | None:
    """The KPI a model directory's metadata names (None: unreadable)."""
    return declared(model_dir, "target")


def check_promotion(controls: Controls, names: tuple[str, ...]) -> None:
    """RepositoryError for a model whose promotion rule can never be met on its grid."""
    for name in names:
        own = controls.for_model(name)
        freq = declared(controls.directory_of(name), "freq")
        try:
            step = pd.Timedelta(pd.tseries.frequencies.to_offset(freq)) if freq else None
        except (ValueError, TypeError):
            step = None
        if step is None or step <= pd.Timedelta(0):
            continue
        per_day = max(1, pd.Timedelta("1D") // step)  # the horizon is read at load
        reason = own.promotion.never_met(WINDOWS["week"] * per_day, per_day,
                                         own.scoring.max_cells)
        if reason:
            raise RepositoryError(f"model {name}: controls.{reason}")


def at_start(controls: Controls) -> tuple[tuple[str, ...], str]:
    """The models to load at start, in order, and the default one; RepositoryError (one line)
    for a repository that cannot be served so."""
    if controls.model_dir is not None:
        name = Path(controls.model_dir).name
        others = [each for each in controls.per_model if each != name]
        if others:
            raise RepositoryError(f"controls.perModel names {', '.join(others)}: the model "
                                  f"of modelDir {controls.model_dir} is named {name}")
        check_promotion(controls, (name,))
        return (name,), name
    root = controls.model_repository
    try:
        held = list(repository_models(root or ""))
    except OSError as exc:
        raise RepositoryError(f"modelRepository {root}: {describe(exc)}") from None
    if not held:
        raise RepositoryError(f"modelRepository {root} holds no model (no subdirectory with "
                              f"{METADATA_FILE}; kpi-forecast train --target a,b --out DIR "
                              "writes one)")
    names = tuple(controls.models or held)
    missing = [name for name in [*names, *controls.per_model] if name not in held]
    if missing:
        raise RepositoryError(f"modelRepository {root} holds no model {', '.join(missing)}; "
                              f"it holds {', '.join(held)}")
    claim_kpis({name: kpi_of(controls.directory_of(name)) for name in names})
    check_promotion(controls, names)
    return names, controls.default_model or names[0]


def claim_kpis(kpis: dict[str, str | None]) -> None:
    """RepositoryError when two of the models (by name: their KPI) forecast one KPI."""
    by_kpi: dict[str, list[str]] = {}
    for name, kpi in kpis.items():
        if kpi is not None:
            by_kpi.setdefault(kpi, []).append(name)
    for kpi, names in by_kpi.items():
        if len(names) > 1:
            raise RepositoryError(f"models {' and '.join(names)} both forecast KPI {kpi}: "
                                  "serve one model per KPI")


class ModelSlot:
    """One model's serving parts: its holder (load, verify, swap in), its batcher, its
    recalibrator and its live scorers (of the version served and of its candidate). The A1
    policies, when on (``a1``), are checked again whenever a model is swapped in."""

    def __init__(self, name: str, state: ServingState, metrics: Metrics,
                 a1: PolicyHandler | None = None) -> None:
        batching = state.view(name).controls.batching
        self.name = name
        self._a1 = a1
        self.recalibrator = Recalibrator(state, metrics, name)
        self.scorer = Scorer(state, metrics, name)
        self.candidate_scorer = Scorer(state, metrics, name, candidate=True)
        self.holder = ModelHolder(state, metrics, name, self._prepare, self._swapped)
        self.batcher = DynamicBatcher(state, metrics, name, batching.max_batch_size,
                                      batching.max_queue_delay_ms / 1000.0,
                                      batching.max_queue_size)
        metrics.model_ready.labels(model=name).set(0)  # a series from the start, for alerts
        metrics.guarded.labels(model=name).set(0)
        metrics.budget.labels(model=name).set(latency_budget_s(state.view(name).controls))

    def status(self, state: ServingState) -> tuple[ModelStatus, str | None]:
        """Triton's model state, and why it is not ready."""
        if state.view(self.name).model is not None:
            return "READY", None
        if self.holder.loading:
            return "LOADING", self.holder.problem
        return "UNAVAILABLE", self.holder.problem or "not loaded"

    async def _prepare(self, model: OnnxForecaster, shared: SharedState) -> None:
        """Take the recalibration and the A1 instances other replicas keep before serving
        ``model``, so a restarted replica answers as they do from its first request."""
        try:
            await self.recalibrator.take_shared(model, shared)
        except (HistoryUnavailable, ValueError, KeyError) as exc:
            log.warning("recalibration of %s: the shared offsets cannot be read yet: %s",
                        self.name, describe(exc))
        if self._a1 is not None:
            try:  # the A1 instances other replicas took, in force from the first request
                await self._a1.take_stored(shared)
            except HistoryUnavailable as exc:
                log.warning("a1: the stored instances cannot be read yet: %s", describe(exc))

    def _swapped(self, model: OnnxForecaster) -> None:
        self.recalibrator.put_in_force(model)
        if self._a1 is not None:
            self._a1.models_changed()


def unknown(name: str, state: ServingState, controls: Controls) -> UnknownModel:
    """The error for a model not served, naming those that are (and, for one the repository
    holds, how to load it)."""
    held = listed(controls)
    if name in held:
        return UnknownModel(f"model {name!r} is not loaded (POST /v1/models/{name}/load); "
                            f"served: {', '.join(state.models)}")
    names = list(dict.fromkeys([*state.models, *held]))
    return UnknownModel(f"no model {name!r}; the models: {', '.join(names)}")

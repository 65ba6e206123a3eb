"""The model routes, as Triton's model control: the models of the repository and their state
(/v1/models), one model's data contract (/v1/models/{name}; /v1/model: the default one's), its
live accuracy (/v1/models/{name}/accuracy), and a model loaded, reloaded or unloaded by name
(the model-control access group; a bad model is refused and the one before keeps serving, the
other models untouched)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
from fastapi import APIRouter, Query

from kpi_forecast.model.artifact import ArtifactError
from kpi_forecast.model.scores import FIELDS, Accuracy
from kpi_forecast.xapp.components import Components
from kpi_forecast.xapp.descriptor.fields import CELL_ID_PATTERN, MAX_CELL_ID
from kpi_forecast.xapp.http.edge import facts
from kpi_forecast.xapp.http.errors import ERRORS, ClientError
from kpi_forecast.xapp.http.model_schemas import (
    AccuracyOut,
    CandidateAccuracy,
    CandidateRequest,
    DecisionOut,
    ModelOut,
    ModelsOut,
    ModelState,
    RecalibrationOut,
    ReloadRequest,
    ReplicaModel,
    ReplicaOut,
    WindowAccuracy,
    WorstCell,
)
from kpi_forecast.xapp.http.schemas import ModelNamePath
from kpi_forecast.xapp.serving import repository
from kpi_forecast.xapp.serving.errors import Shed
from kpi_forecast.xapp.serving.lifecycle import Action, Decision
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.serving.scoring import WINDOWS, Scorer

CellQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_CELL_ID,
                                        pattern=CELL_ID_PATTERN,
                                        description="one cell's scores instead of the model's")]


def add_model_routes(router: APIRouter, components: Components) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``components``."""
    options = {"response_model": ModelOut, "responses": ERRORS, "tags": ["model"]}
    control = {**options, "openapi_extra": facts(group="model_control")}

    @router.get("/v1/model", **options)
    async def model_info() -> ModelOut:
        """The default model: its version, data contract, runtime and recalibration in force."""
        return _model_out(components, components.default)

    @router.post("/v1/model/reload", **control,
                 description="Loads the model directory named (default: the default model's) "
                 "as the default model; it must lie in controls.modelRoot (symlinks resolved; "
                 "403 otherwise).")
    async def reload(body: ReloadRequest | None = None) -> ModelOut:
        """Load a model directory (by default the configured one), verify and warm it up, then
        swap it in; on any failure the current model keeps serving."""
        model_dir = confined(body.model_dir, components) if body and body.model_dir else None
        if model_dir and not os.path.isdir(model_dir):
            raise ClientError(404, f"model_dir {body.model_dir!r}: no such directory")
        return await _load(components, components.state.default, model_dir)

    @router.get("/v1/models", response_model=ModelsOut, responses=ERRORS, tags=["model"])
    async def models() -> ModelsOut:
        """Every model of the repository (Triton's repository index): its KPI, the version
        served, its state (READY, LOADING, UNAVAILABLE, with the reason) and the E2
        measurement its KPI's history is filled from."""
        return await _models_out(components)

    @router.get("/v1/models/{name}", **options)
    async def model(name: ModelNamePath) -> ModelOut:
        """One model's version, data contract, runtime and recalibration in force."""
        return _model_out(components, components.slot(name))

    @router.get("/v1/models/{name}/accuracy", response_model=AccuracyOut, responses=ERRORS,
                tags=["model"])
    async def accuracy(name: ModelNamePath, cell: CellQuery = None) -> AccuracyOut:
        """The served version's live accuracy from its recorded forecasts, scored as their
        actuals arrived (controls.scoring): MAE beside the seasonal naives', skill, pinball
        loss and P10-P90 coverage over the last day and week, and the cells of lowest skill;
        with ``cell``, that cell's; the candidate's beside it."""
        return await _accuracy(components, components.slot(name), cell)

    @router.post("/v1/models/{name}/load", **control,
                 description="Loads (or reloads) the model from its directory in the "
                 "repository, verifies and warms it up, then serves it; a model that fails "
                 "is refused (422) and the one before keeps serving.")
    async def load(name: ModelNamePath) -> ModelOut:
        """Load or reload one model of the repository; the others keep serving."""
        if name not in components.models:
            confined(str(components.state.now.controls.directory_of(name)), components)
        return await _load(components, name)

    @router.post("/v1/models/{name}/unload", response_model=ModelsOut, responses=ERRORS,
                 tags=["model"], openapi_extra=facts(group="model_control"))
    async def unload(name: ModelNamePath) -> ModelsOut:
        """Stop serving one model (its routes answer 503 until it is loaded again); the
        repository index after it."""
        await components.unload(name)
        return await _models_out(components)

    decision = {"response_model": DecisionOut, "responses": ERRORS, "tags": ["model"],
                "openapi_extra": facts(group="model_control")}

    @router.post("/v1/models/{name}/candidate", **decision,
                 description="Loads the model directory named (in controls.modelRoot; 403 "
                 "otherwise) as the model's candidate: it forecasts and is scored beside the "
                 "version served, never answering. Refused (422) when it forecasts another KPI "
                 "or on another grid, or is the version served; every replica shadows it.")
    async def candidate(name: ModelNamePath, body: CandidateRequest) -> DecisionOut:
        """Shadow a candidate version beside the version served."""
        model_dir = confined(body.model_dir, components)
        if not os.path.isdir(model_dir):
            raise ClientError(404, f"model_dir {body.model_dir!r}: no such directory")
        return await _decide(components, name, "candidate", model_dir)

    @router.delete("/v1/models/{name}/candidate", **decision)
    async def drop_candidate(name: ModelNamePath) -> DecisionOut:
        """Stop shadowing the model's candidate, on every replica."""
        return await _decide(components, name, "drop_candidate")

    @router.post("/v1/models/{name}/promote", **decision)
    async def promote(name: ModelNamePath) -> DecisionOut:
        """Serve the candidate in place of the version served (which a rollback serves
        again), on every replica; 409 without a candidate."""
        return await _decide(components, name, "promote")

    @router.post("/v1/models/{name}/rollback", **decision)
    async def rollback(name: ModelNamePath) -> DecisionOut:
        """Serve again the version served before the last load or promotion, on every
        replica; 409 where there is none."""
        return await _decide(components, name, "rollback")


async def _decide(components: Components, name: str, action: Action,
                  model_dir: str | None = None) -> DecisionOut:
    components.slot(name)  # UnknownModel
    try:
        made = await components.lifecycle.decide(name, action, model_dir)
    except (ArtifactError, ValueError) as exc:
        raise ClientError(422, f"model rejected, the previous one keeps serving: {exc}"
                          ) from None
    return decision_out(name, made)


def decision_out(name: str, made: Decision) -> DecisionOut:
    return DecisionOut(
        model=name, sequence=made.sequence, action=made.action,
        served_version=made.served and made.served.version,
        candidate_version=made.candidate and made.candidate.version,
        previous_version=made.previous and made.previous.version, reason=made.reason,
        by=made.by, at=pd.Timestamp(made.at, unit="s", tz="UTC").isoformat())


async def _models_out(components: Components) -> ModelsOut:
    reports = await components.lifecycle.replicas()
    return ModelsOut(models=_index(components), replicas=[
        ReplicaOut(replica=replica, models={
            name: ReplicaModel(**served) for name, served in models.items()})
        for replica, models in sorted(reports.items())])


async def _load(components: Components, name: str, model_dir: str | None = None) -> ModelOut:
    try:
        slot = await components.load(name, model_dir)
    except (ArtifactError, ValueError) as exc:
        raise ClientError(422, f"model rejected, the previous one keeps serving: {exc}"
                          ) from None
    return _model_out(components, slot)


def _window(scores: Accuracy) -> WindowAccuracy:
    return WindowAccuracy(points=scores.points, mae=scores.mae, naive_mae=scores.naive_mae,
                          skill=scores.skill, pinball=scores.pinball, coverage=scores.coverage)


async def _scores(scorer: Scorer, cell: str | None
                  ) -> tuple[dict[str, Accuracy], list[WorstCell], int] | None:
    """A scorer's windows, worst cells and cells scored (None: nothing kept for ``cell``)."""
    summary, nothing = scorer.summary, Accuracy.of(np.zeros(len(FIELDS)))
    if cell is None:
        windows = {name: Accuracy.of(summary.windows[name]) if summary else nothing
                   for name in WINDOWS}
        worst = [WorstCell(cell_id=each, week=_window(Accuracy.of(sums)))
                 for each, sums in (summary.worst if summary else [])]
        return windows, worst, summary.cells if summary else 0
    found = await scorer.cell_accuracy(cell)
    return None if found is None else (found, [], int(found["week"].points > 0))


def _until(scorer: Scorer, step: int) -> str | None:
    summary = scorer.summary
    return None if summary is None else pd.Timestamp(summary.origin * step, tz="UTC").isoformat()


async def _accuracy(components: Components, slot: ModelSlot, cell: str | None) -> AccuracyOut:
    served = components.state.view(slot.name)
    model = served.model
    if model is None:
        status, reason = slot.status(components.state)
        raise Shed("not_ready", f"model {slot.name} is {status}: {reason or 'loading it'}")
    if not served.controls.scoring.enabled:
        raise ClientError(404, "live scoring is off (controls.scoring.enabled)")
    scores = await _scores(slot.scorer, cell)
    if scores is None:
        raise ClientError(404, f"cell {cell!r}: no live scores of model {slot.name} "
                          f"{model.metadata.model_version} (scored at each origin, from "
                          "the cells reported within its last horizon)")
    windows, worst, cells = scores
    candidate = None
    if served.candidate is not None and (
            shadowed := await _scores(slot.candidate_scorer, cell)) is not None:
        candidate = CandidateAccuracy(
            model_version=served.candidate.metadata.model_version,
            scored_until=_until(slot.candidate_scorer, served.candidate.step.value),
            cells=shadowed[2], windows={name: _window(each)
                                        for name, each in shadowed[0].items()})
    summary = slot.scorer.summary
    return AccuracyOut(
        model=slot.name, model_version=model.metadata.model_version, cell_id=cell,
        scored_until=_until(slot.scorer, model.step.value),
        scored_at=(pd.Timestamp(summary.scored_at, unit="s", tz="UTC").isoformat()
                   if summary else None),
        cells=cells, windows={name: _window(each) for name, each in windows.items()},
        worst_cells=worst, candidate=candidate)


def confined(model_dir: str, components: Components) -> str:
    """``model_dir`` resolved (symlinks followed), or a 403 when it lies outside the model
    root: checked before anything in it is read, so that no caller can make the xApp load
    (or probe) a directory elsewhere on its filesystem."""
    controls = components.state.now.controls
    root = Path(controls.model_root or controls.model_repository
                or Path(controls.model_dir or "").resolve().parent).resolve()
    target = Path(model_dir).resolve()
    if not target.is_relative_to(root):
        raise ClientError(403, f"model_dir {model_dir!r} is outside the model root {root} "
                          "(controls.modelRoot)")
    return str(target)


def _index(components: Components) -> list[ModelState]:
    state, controls = components.state, components.state.now.controls
    names = list(dict.fromkeys([*state.models, *repository.listed(controls)]))
    index = []
    for name in names:
        slot = components.models.get(name)
        served = state.models.get(name)
        model = served.model if served is not None else None
        status, reason = slot.status(state) if slot else ("UNAVAILABLE", "not loaded")
        kpi = (model.metadata.target if model is not None
               else repository.kpi_of(controls.directory_of(name)))
        source = controls.e2.kpis.get(kpi) if kpi is not None else None
        candidate = served.candidate if served is not None else None
        index.append(ModelState(
            name=name, state=status, reason=reason, default=name == state.default, kpi=kpi,
            version=model.metadata.model_version if model is not None else None,
            candidate_version=candidate.metadata.model_version if candidate else None,
            decision=components.lifecycle.applied.get(name),
            measurement=source.measurement if source is not None else None))
    return index


def _model_out(components: Components, slot: ModelSlot) -> ModelOut:
    model = components.state.view(slot.name).model
    if model is None:
        status, reason = slot.status(components.state)
        raise Shed("not_ready", f"model {slot.name} is {status}: {reason or 'loading it'}")
    meta = model.metadata
    return ModelOut(
        name=slot.name, model_version=meta.model_version, model_dir=str(model.model_dir),
        target=meta.target, freq=meta.freq, context=meta.context, horizon=meta.horizon,
        quantiles=meta.quantiles, calendar_tz=meta.calendar_tz, holidays=meta.holidays,
        holiday_reading=meta.holiday_reading,
        load_seconds=round(slot.holder.load_seconds, 3), runtime=model.describe(),
        recalibration=RecalibrationOut(**slot.recalibrator.describe(model)),
    )

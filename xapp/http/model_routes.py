"""The model routes: what is served (/v1/model), and a new model directory swapped in
(/v1/model/reload; a bad one is refused and the old one keeps serving)."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter

from kpi_forecast.model.artifact import ArtifactError
from kpi_forecast.xapp.http.edge import facts
from kpi_forecast.xapp.http.errors import ERRORS, ClientError, Shed
from kpi_forecast.xapp.http.schemas import ModelOut, ReloadRequest
from kpi_forecast.xapp.service import Service


def add_model_routes(router: APIRouter, service: Service) -> None:
    """These routes, on ``router`` (the app's), their handlers reading ``service``."""
    options = {"response_model": ModelOut, "responses": ERRORS, "tags": ["model"]}

    @router.get("/v1/model", **options)
    async def model_info() -> ModelOut:
        """The model served: its version, data contract, runtime and recalibration in force."""
        if service.state.now.model is None:
            raise Shed("not_ready", "no model loaded yet")
        return _model_out(service)

    @router.post("/v1/model/reload", **options, openapi_extra=facts(group="model_control"),
                 description="Loads the model directory named (default: controls.modelDir), "
                 "which must lie in controls.modelRoot (symlinks resolved; 403 otherwise).")
    async def reload(body: ReloadRequest | None = None) -> ModelOut:
        """Load a model directory (by default the configured one), verify and warm it up, then
        swap it in; on any failure the current model keeps serving."""
        model_dir = confined(body.model_dir, service) if body and body.model_dir else None
        if model_dir and not os.path.isdir(model_dir):
            raise ClientError(404, f"model_dir {body.model_dir!r}: no such directory")
        try:
            await service.holder.reload(model_dir)
        except (ArtifactError, ValueError) as exc:
            raise ClientError(422, f"model rejected, the previous one keeps serving: {exc}"
                              ) from None
        return _model_out(service)



def confined(model_dir: str, service: Service) -> str:
    """``model_dir`` resolved (symlinks followed), or a 403 when it lies outside the model
    root: checked before anything in it is read, so that no caller can make the xApp load
    (or probe) a directory elsewhere on its filesystem."""
    controls = service.state.now.controls
    root = Path(controls.model_root or Path(controls.model_dir).resolve().parent).resolve()
    target = Path(model_dir).resolve()
    if not target.is_relative_to(root):
        raise ClientError(403, f"model_dir {model_dir!r} is outside the model root {root} "
                          "(controls.modelRoot)")
    return str(target)


def _model_out(service: Service) -> ModelOut:
    model = service.state.now.model
    meta = model.metadata
    return ModelOut(
        model_version=meta.model_version, model_dir=str(model.model_dir), target=meta.target,
        freq=meta.freq, context=meta.context, horizon=meta.horizon, quantiles=meta.quantiles,
        calendar_tz=meta.calendar_tz, holidays=meta.holidays,
        holiday_reading=meta.holiday_reading,
        load_seconds=round(service.holder.load_seconds, 3), runtime=model.describe(),
        recalibration=service.recalibrator.describe(model),
    )

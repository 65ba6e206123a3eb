"""What the xApp serves now, as one snapshot swapped whole: the controls in force, the state
replicas share and, for each model by name, its ``ModelView``: the model, the cell history
of its KPI on its grid, and the recalibration in force for it. Whoever needs them reads
``ServingState.view(name)`` (or ``now``, the default model's) once for a piece of work (a
request, a batch, an ingestion round) and hands that view on, so that the piece sees one model,
one set of controls and one recalibration throughout, whatever is swapped meanwhile."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kpi_forecast.model.recalibration import Recalibration
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.descriptor.controls import Controls, KpiSource
from kpi_forecast.xapp.serving.errors import UnknownModel
from kpi_forecast.xapp.store.cell_history import CellHistory
from kpi_forecast.xapp.store.shared_state import SharedState


@dataclass(frozen=True)
class ModelView:
    """One model's view: what its requests see."""

    controls: Controls  # with the model's own settings (controls.perModel) in place
    name: str = "default"
    model: OnnxForecaster | None = None  # None until the model is loaded, and once unloaded
    history: CellHistory | None = None  # on the model's grid, of its KPI
    shared: SharedState | None = None  # one for every model, opened with the first history
    recalibration: Recalibration | None = None  # the model's offsets in force; None: none
    # A version shadowed beside the model: it forecasts and is scored, never answers.
    candidate: OnnxForecaster | None = None
    # Why the model's forecasts are the fallback's now (its guard: controls.guard); None: not.
    guarded: str | None = None
    # The E2 measurement behind the model's KPI (controls.e2.kpis); None: not mapped, or no
    # model. Kept in step with the controls and the model by ``ServingState.swap``.
    kpi_source: KpiSource | None = None


# What every model's view holds alike: a swap of these changes every view at once.
COMMON = frozenset({"controls", "shared"})


class ServingState:
    """Holds the views in force, by model name; ``swap`` replaces them whole (one assignment),
    ``add`` adds a model. ``default`` is the model the routes without a model name answer
    for. ``models`` and ``now`` (the default model's view) are plain attributes, set anew at
    each change: the hot path reads them without a call. ``controls`` are the controls in
    force as the descriptor has them; each view's are a model's (``Controls.for_model``)."""

    def __init__(self, controls: Controls, names: tuple[str, ...] = ("default",),
                 default: str | None = None) -> None:
        self.default = default or names[0]
        self.controls = controls
        self._set({name: ModelView(controls.for_model(name), name) for name in names})

    def _set(self, models: dict[str, ModelView]) -> None:
        self.models: Mapping[str, ModelView] = MappingProxyType(models)
        self.now = models[self.default]

    def view(self, name: str) -> ModelView:
        try:
            return self.models[name]
        except KeyError:
            raise UnknownModel(f"no model {name!r}; served: {', '.join(self.models)}") from None

    def swap(self, name: str | None = None, **changes: object) -> ModelView:
        """Change one model's view (``name``), or what all share (no name: controls, shared);
        the default model's view, or ``name``'s, after it."""
        if name is None and not changes.keys() <= COMMON:
            raise ValueError(f"only {sorted(COMMON)} change for every model at once")
        models = dict(self.models)
        controls = changes.get("controls")
        if isinstance(controls, Controls):
            self.controls = controls
        for each in ([name] if name is not None else list(models)):
            own = changes
            if isinstance(controls, Controls):
                own = {**changes, "controls": controls.for_model(each)}
            served = dataclasses.replace(self.view(each), **own)
            if ("controls" in changes or "model" in changes) and "kpi_source" not in changes:
                model = served.model
                source = (None if model is None
                          else served.controls.e2.kpis.get(model.metadata.target))
                served = dataclasses.replace(served, kpi_source=source)
            models[each] = served
        self._set(models)
        return models[name or self.default]

    def add(self, name: str) -> ModelView:
        """A view for a model not served before (nothing loaded yet)."""
        if name not in self.models:
            now = self.now
            self._set({**self.models, name: ModelView(self.controls.for_model(name), name,
                                                      shared=now.shared)})
        return self.models[name]

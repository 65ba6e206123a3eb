"""What the xApp serves now, as one snapshot swapped whole: the controls in force, the model,
the cell history on its grid, the state replicas share, and the recalibration in force for the
model. Whoever needs them reads ``ServingState.now`` once for a piece of work (a request, a
batch, an ingestion round) and hands that snapshot on, so that the piece sees one model, one
set of controls and one recalibration throughout, whatever is swapped meanwhile."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kpi_forecast.model.recalibration import Recalibration
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.descriptor.controls import Controls, KpiSource
from kpi_forecast.xapp.store.cell_history import CellHistory
from kpi_forecast.xapp.store.shared_state import SharedState


@dataclass(frozen=True)
class Served:
    controls: Controls
    model: OnnxForecaster | None = None  # None until the first model is loaded
    history: CellHistory | None = None  # on the model's grid, of its KPI
    shared: SharedState | None = None  # opened with the first model's history
    recalibration: Recalibration | None = None  # the model's offsets in force; None: none
    # The E2 measurement behind the model's KPI (controls.e2.kpis); None: not mapped, or no
    # model. Kept in step with the controls and the model by ``ServingState.swap``.
    kpi_source: KpiSource | None = None


class ServingState:
    """Holds the snapshot in force; ``swap`` replaces it whole (one assignment)."""

    def __init__(self, controls: Controls) -> None:
        self.now = Served(controls)

    def swap(self, **changes: object) -> Served:
        served = dataclasses.replace(self.now, **changes)
        if "controls" in changes or "model" in changes:
            model = served.model
            source = (None if model is None
                      else served.controls.e2.kpis.get(model.metadata.target))
            served = dataclasses.replace(served, kpi_source=source)
        self.now = served
        return served

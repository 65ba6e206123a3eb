"""The A1 policy instances in force, and what each cell's forecasts get from them.

An instance is in force when the served model can give what it asks (its quantiles are among
the model's, its horizon within the model's) and none of its cells is already steered by
another instance; otherwise it is held, with the reason, and its cells get the controls'
values. Which instances are in force is worked out again whenever the instances or the model
change, so that a forecast only looks its cells up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.http.errors import ClientError
from kpi_forecast.xapp.ric.a1.policy_type import ForecastPolicy


@dataclass(frozen=True)
class Steering:
    """What a cell's forecast gets from the instance steering it (None: the controls')."""

    instance_id: str | None = None
    horizon: int | None = None
    quantiles: tuple[float, ...] | None = None
    budget_s: float | None = None


UNSTEERED = Steering()


def request_budget(steering: list[Steering], controls_s: float) -> float | None:
    """A request for several cells is held to the smallest of their budgets (a cell no
    instance budgets has the controls' ``controls_s``); None when no instance sets one."""
    budgets = {s.budget_s for s in steering}
    if budgets == {None}:
        return None
    return min(controls_s if b is None else b for b in budgets)


def misfit(policy: ForecastPolicy, model: OnnxForecaster | None) -> str | None:
    """Why ``model`` cannot give what ``policy`` asks; None when it can (or none is served)."""
    if model is None:
        return None
    meta = model.metadata
    missing = [q for q in policy.quantiles or [] if q not in meta.quantiles]
    if missing:
        return f"quantiles {missing} are not among the served model's {meta.quantiles}"
    if policy.horizon is not None and policy.horizon > meta.horizon:
        return f"horizon {policy.horizon} exceeds the served model's {meta.horizon}"
    return None


class Policies:
    def __init__(self) -> None:
        self.instances: dict[str, ForecastPolicy] = {}
        self.held: dict[str, str] = {}  # instance id -> why it is not in force
        self._steering: dict[str, Steering] = {}
        self._excluded: dict[str, str] = {}  # cell -> the instance excluding it

    def conflict(self, instance_id: str, policy: ForecastPolicy) -> str | None:
        """Why ``policy`` may not become instance ``instance_id``: a cell another instance
        steers already."""
        for other_id, other in sorted(self.instances.items()):
            if other_id != instance_id and (shared := set(policy.cells) & set(other.cells)):
                return (f"cell {sorted(shared)[0]!r} is steered by instance {other_id!r} "
                        "already: a cell belongs to one instance at most")
        return None

    def replace(self, instances: Mapping[str, ForecastPolicy],
                model: OnnxForecaster | None) -> None:
        """Put ``instances`` in force, as far as ``model`` can serve them."""
        steering: dict[str, Steering] = {}
        excluded: dict[str, str] = {}
        held: dict[str, str] = {}
        for instance_id, policy in sorted(instances.items()):
            reason = misfit(policy, model)
            taken = next((cell for cell in policy.cells
                          if cell in steering or cell in excluded), None)
            if reason is None and taken is not None:  # two replicas took overlapping ones
                reason = f"cell {taken!r} is steered by an instance before it"
            if reason is not None:
                held[instance_id] = reason
                continue
            if policy.excluded:
                excluded.update(dict.fromkeys(policy.cells, instance_id))
                continue
            steer = Steering(
                instance_id, policy.horizon,
                tuple(policy.quantiles) if policy.quantiles else None,
                policy.latency_budget_ms / 1000.0 if policy.latency_budget_ms else None)
            steering.update(dict.fromkeys(policy.cells, steer))
        # Each is replaced whole: a forecast running meanwhile sees the old or the new.
        self.instances, self.held = dict(instances), held
        self._steering, self._excluded = steering, excluded

    def in_force(self) -> list[str]:
        return sorted(set(self.instances) - set(self.held))

    def for_cells(self, cell_ids: Iterable[str]) -> list[Steering]:
        """Each cell's steering; a ClientError (409) for a cell excluded from forecasting."""
        steering, excluded = self._steering, self._excluded
        if not steering and not excluded:  # the common case costs one test per request
            return [UNSTEERED for _ in cell_ids]
        answer = []
        for cell_id in cell_ids:
            if cell_id in excluded:
                raise ClientError(409, f"cell {cell_id!r} is excluded from forecasting by A1 "
                                  f"policy instance {excluded[cell_id]!r}")
            answer.append(steering.get(cell_id, UNSTEERED))
        return answer

"""The A1 policy instances in force, and what each cell's forecasts get from them.

An instance steers the forecasts of the model it names, or of every model served. It is in
force when each of those models can give what it asks (its quantiles are among the model's, its
horizon within the model's) and none of its cells is already steered by another instance for
one of them; otherwise it is held, with the reason, and its cells get the controls' values.
Which instances are in force is worked out again whenever the instances or the models change,
so that a forecast only looks its cells up.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.ric.a1.policy_type import ForecastPolicy
from kpi_forecast.xapp.serving.errors import Excluded


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


def misfit(policy: ForecastPolicy, models: Mapping[str, OnnxForecaster]) -> str | None:
    """Why the served ``models`` (by name) cannot give what ``policy`` asks of those it
    steers (the one it names, or every one); None when they can."""
    if policy.model is not None:
        if policy.model not in models:
            return f"model {policy.model!r} is not served (served: {', '.join(models)})"
        steered = {policy.model: models[policy.model]}
    else:
        steered = dict(models)
    for name, model in steered.items():
        meta = model.metadata
        missing = [q for q in policy.quantiles or [] if q not in meta.quantiles]
        if missing:
            return f"quantiles {missing} are not among model {name}'s {meta.quantiles}"
        if policy.horizon is not None and policy.horizon > meta.horizon:
            return f"horizon {policy.horizon} exceeds model {name}'s {meta.horizon}"
    return None


def _overlap(one: ForecastPolicy, other: ForecastPolicy) -> bool:
    """Whether the two steer forecasts of one model."""
    return one.model is None or other.model is None or one.model == other.model


class Policies:
    def __init__(self) -> None:
        self.instances: dict[str, ForecastPolicy] = {}
        self.held: dict[str, str] = {}  # instance id -> why it is not in force
        # By model name, cell -> its steering, and cell -> the instance excluding it.
        self._steering: dict[str, dict[str, Steering]] = {}
        self._excluded: dict[str, dict[str, str]] = {}

    def conflict(self, instance_id: str, policy: ForecastPolicy) -> str | None:
        """Why ``policy`` may not become instance ``instance_id``: a cell another instance
        steers already for a model this one steers."""
        for other_id, other in sorted(self.instances.items()):
            if (other_id != instance_id and _overlap(policy, other)
                    and (shared := set(policy.cells) & set(other.cells))):
                return (f"cell {sorted(shared)[0]!r} is steered by instance {other_id!r} "
                        "already: a cell belongs to one instance at most for each model")
        return None

    def replace(self, instances: Mapping[str, ForecastPolicy],
                models: Mapping[str, OnnxForecaster]) -> None:
        """Put ``instances`` in force, as far as the served ``models`` (by name) can serve
        them."""
        steering: dict[str, dict[str, Steering]] = {name: {} for name in models}
        excluded: dict[str, dict[str, str]] = {name: {} for name in models}
        held: dict[str, str] = {}
        for instance_id, policy in sorted(instances.items()):
            reason = misfit(policy, models)
            names = list(models) if policy.model is None else [policy.model]
            taken = None if reason else next(
                (cell for name in names for cell in policy.cells
                 if cell in steering[name] or cell in excluded[name]), None)
            if reason is None and taken is not None:  # two replicas took overlapping ones
                reason = f"cell {taken!r} is steered by an instance before it"
            if reason is not None:
                held[instance_id] = reason
                continue
            if policy.excluded:
                for name in names:
                    excluded[name].update(dict.fromkeys(policy.cells, instance_id))
                continue
            steer = Steering(
                instance_id, policy.horizon,
                tuple(policy.quantiles) if policy.quantiles else None,
                policy.latency_budget_ms / 1000.0 if policy.latency_budget_ms else None)
            for name in names:
                steering[name].update(dict.fromkeys(policy.cells, steer))
        # Each is replaced whole: a forecast running meanwhile sees the old or the new.
        self.instances, self.held = dict(instances), held
        self._steering, self._excluded = steering, excluded

    def in_force(self) -> list[str]:
        return sorted(set(self.instances) - set(self.held))

    def excluded_cells(self, model: str) -> Collection[str]:
        """The cells excluded from ``model``'s forecasting."""
        return self._excluded.get(model) or ()

    def for_cells(self, cell_ids: Iterable[str], model: str) -> list[Steering]:
        """Each cell's steering of ``model``'s forecasts; Excluded for a cell excluded from
        forecasting."""
        steering, excluded = self._steering.get(model), self._excluded.get(model)
        if not steering and not excluded:  # the common case costs one test per request
            return [UNSTEERED for _ in cell_ids]
        answer = []
        for cell_id in cell_ids:
            if excluded and cell_id in excluded:
                raise Excluded(f"cell {cell_id!r} is excluded from forecasting by A1 policy "
                               f"instance {excluded[cell_id]!r}")
            answer.append(steering.get(cell_id, UNSTEERED) if steering else UNSTEERED)
        return answer

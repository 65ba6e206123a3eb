"""The deployment's decisions about its models, made by one replica and followed by all: which
version of a model is served, which candidate is shadowed beside it (forecasting and scored,
never answering), and what a rollback serves again.

A decision (a model-control call, or the promotion rule, ``controls.promotion``) is made where
it is asked: the replica loads what it names first, so a bad model is refused before anyone
follows it, then keeps the decision in the shared state with the next sequence number (a
compare-and-set: of two decisions made at once, one is kept and the other refused with 409).
Every replica reads the decisions each tick and loads what a new one names, and reports what
it serves (``GET /v1/models`` lists the replicas' reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from kpi_forecast.model.artifact import ArtifactError
from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.model.scores import INTERVAL, Accuracy
from kpi_forecast.xapp.descriptor.accuracy import Promotion
from kpi_forecast.xapp.failures import describe, keep_ticking
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.errors import DecisionConflict, Shed
from kpi_forecast.xapp.serving.repository import ModelSlot
from kpi_forecast.xapp.serving.scoring import Grid, Summary
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from kpi_forecast.xapp.store.shared_state import SharedState

log = logging.getLogger(__name__)

Action = Literal["load", "unload", "candidate", "drop_candidate", "promote", "rollback"]
TICK_S = 1.0  # how often a replica reads the decisions and reports what it serves
REPORT_TTL_S = 5 * TICK_S  # a replica's report outlives it this long
NOMINAL_COVERAGE = INTERVAL[1] - INTERVAL[0]


@dataclass(frozen=True)
class Placed:
    """A model version where it was loaded from."""

    model_dir: str
    version: str


@dataclass(frozen=True)
class Decision:
    """The deployment's ``sequence``-th decision about a model, and what it serves after it."""

    sequence: int
    action: Action
    served: Placed | None  # None: unloaded
    candidate: Placed | None
    previous: Placed | None  # what a rollback serves again
    reason: str  # "call", or why the rule promoted
    by: str  # the replica that made it
    at: float  # Unix time

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, blob: bytes) -> Decision:
        raw = json.loads(blob)
        placed = {key: Placed(**raw[key]) if raw[key] else None
                  for key in ("served", "candidate", "previous")}
        return cls(**{**raw, **placed})


def placed(model: OnnxForecaster | None) -> Placed | None:
    return None if model is None else Placed(str(model.model_dir), model.metadata.model_version)


def promotion_due(served: Summary, candidate: Summary, rule: Promotion, grid: Grid
                  ) -> str | None:
    """Why the candidate is to be promoted by ``rule`` (None: it is not), judged over the
    horizons both versions were scored on."""
    common = sorted(set(served.blocks) & set(candidate.blocks))
    if not common:
        return None
    mine = Accuracy.of(np.sum([candidate.blocks[o] for o in common], axis=0))
    theirs = Accuracy.of(np.sum([served.blocks[o] for o in common], axis=0))
    days = len(common) * grid.horizon / grid.steps_per_day
    if (mine.points < rule.min_points or days < rule.min_days or mine.mae is None
            or theirs.mae is None or mine.mae >= theirs.mae):
        return None
    if mine.coverage is not None and theirs.coverage is not None and (
            abs(mine.coverage - NOMINAL_COVERAGE) > abs(theirs.coverage - NOMINAL_COVERAGE)):
        return None
    return (f"the rule: MAE {mine.mae:.4g} below {theirs.mae:.4g} over {mine.points} points "
            f"and {days:g} days scored beside it")


class Lifecycle:
    """Makes the decisions asked of this replica (``decide``) and follows every replica's
    (``tick``) for the models of ``slots`` (the components' own, by name)."""

    def __init__(self, state: ServingState, metrics: Metrics, slots: Mapping[str, ModelSlot],
                 replica: str) -> None:
        self._state = state
        self._metrics = metrics
        self._slots = slots
        self.replica = replica
        self.applied: dict[str, int] = {}  # model -> the sequence of the decision followed
        # One decision about a model at a time here, made or followed: calls racing on one
        # replica queue, not conflict.
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _shared(self) -> SharedState:
        shared = self._state.now.shared
        if shared is None:
            raise Shed("not_ready", "no model has loaded yet: the shared state is not open")
        return shared

    async def held(self, name: str) -> Decision | None:
        """The deployment's last decision about the model (None: none made)."""
        shared = self._state.now.shared
        blob = None if shared is None else await shared.decision(name)
        return None if blob is None else Decision.from_json(blob)

    def _serving(self, name: str) -> tuple[Placed | None, Placed | None]:
        """The version served here and the candidate shadowed, where each was loaded from."""
        view = self._state.view(name)
        return placed(view.model), placed(view.candidate)

    async def decide(self, name: str, action: Action, model_dir: str | None = None,
                     reason: str = "call") -> Decision:
        """Do ``action`` here, then keep it as the deployment's decision. Raises what loading
        raises (nothing is kept then), and DecisionConflict where the action cannot be done
        now or another replica made a decision meanwhile (the replicas follow that one)."""
        async with self._lock(name):
            return await self._decide(name, action, model_dir, reason)

    async def _decide(self, name: str, action: Action, model_dir: str | None,
                      reason: str) -> Decision:
        slot = self._slots[name]
        before = await self.held(name)
        old, shadowed = self._serving(name)
        kept = before.previous if before else None  # what a rollback serves now
        if action == "load":
            await slot.holder.reload(model_dir)
        elif action == "unload":
            await slot.holder.unload()
        elif action == "candidate":
            await slot.holder.load_candidate(model_dir or "")
        elif action == "drop_candidate":
            if shadowed is None:
                raise DecisionConflict(f"model {name} has no candidate")
            slot.holder.drop_candidate()
        elif action == "promote":
            loaded = self._state.view(name).candidate
            if loaded is None or shadowed is None:
                raise DecisionConflict(f"model {name} has no candidate to promote (POST "
                                       f"/v1/models/{name}/candidate shadows one)")
            await slot.holder.reload(shadowed.model_dir, loaded=loaded)
        else:  # rollback
            if kept is None:
                raise DecisionConflict(f"model {name}: no version served before this one to "
                                       "roll back to")
            await slot.holder.reload(kept.model_dir, expect_version=kept.version)
        served, candidate = self._serving(name)
        if action == "rollback":
            previous = None
        elif old is not None and (served is None or served.version != old.version):
            previous = old  # replaced: what a rollback serves again
        else:
            previous = kept
        shared = self._shared()
        if before is None:  # a first model's load opened the shared state
            before = await self.held(name)
        decision = Decision((before.sequence if before else 0) + 1, action, served, candidate,
                            previous, reason, self.replica, time.time())
        if not await shared.put_decision(name, decision.sequence, decision.to_json()):
            raise DecisionConflict(f"another decision about model {name} was made meanwhile; "
                                   "every replica follows that one within a second")
        self.applied[name] = decision.sequence
        self._metrics.decisions.labels(model=name, action=action).inc()
        log.info("%s: decision %d, %s (%s): serving %s, candidate %s", name, decision.sequence,
                 action, reason, served and served.version, candidate and candidate.version)
        return decision

    async def follow(self, name: str, decision: Decision) -> None:
        """Serve and shadow what ``decision`` names, loading only what differs."""
        slot, view = self._slots[name], self._state.view(name)
        served, candidate = self._serving(name)
        want = decision.served
        if want is None:
            if view.model is not None:
                await slot.holder.unload()
        elif served is None or served.version != want.version:
            reuse = (view.candidate if candidate is not None
                     and candidate.version == want.version else None)
            await slot.holder.reload(want.model_dir, expect_version=want.version, loaded=reuse)
        served, candidate = self._serving(name)
        if decision.candidate is None:
            slot.holder.drop_candidate()
        elif candidate is None or candidate.version != decision.candidate.version:
            await slot.holder.load_candidate(decision.candidate.model_dir,
                                             expect_version=decision.candidate.version)

    async def tick(self) -> None:
        """Follow the decisions not followed yet, promote where the rule says so, and report
        what this replica serves."""
        shared = self._state.now.shared
        if shared is None:
            return
        for name, slot in list(self._slots.items()):
            if slot.holder.first_loading:
                continue
            async with self._lock(name):
                await self._follow_held(name)
            await self._promote_by_rule(name, slot)
        await shared.report_serving(self.replica, json.dumps(self.report()).encode(),
                                    REPORT_TTL_S)

    async def _follow_held(self, name: str) -> None:
        decision = await self.held(name)
        if decision is not None and decision.sequence != self.applied.get(name):
            self.applied[name] = decision.sequence  # tried once; a failure is logged
            try:
                await self.follow(name, decision)
                log.info("%s: following decision %d (%s by %s)", name, decision.sequence,
                         decision.action, decision.by)
            except (ArtifactError, ValueError, OSError) as exc:
                log.error("%s: decision %d cannot be followed here: %s", name,
                          decision.sequence, describe(exc))

    async def _promote_by_rule(self, name: str, slot: ModelSlot) -> None:
        view = self._state.view(name)
        rule, model = view.controls.promotion, view.model
        served, shadowed = slot.scorer.summary, slot.candidate_scorer.summary
        if (not rule.enabled or model is None or view.candidate is None or served is None
                or shadowed is None
                or shadowed.model_version != view.candidate.metadata.model_version
                or served.model_version != model.metadata.model_version):
            return
        why = promotion_due(served, shadowed, rule, Grid.of(model))
        if why is not None:
            # Another replica may promote it first: this one follows at the next tick.
            with contextlib.suppress(DecisionConflict):
                await self.decide(name, "promote", reason=why)

    def report(self) -> dict[str, dict[str, object]]:
        """What this replica serves: per model, its version, candidate and decision."""
        served = {}
        for name in self._slots:
            version, candidate = self._serving(name)
            served[name] = {"version": version and version.version,
                            "candidate_version": candidate and candidate.version,
                            "decision": self.applied.get(name)}
        return served

    async def replicas(self) -> dict[str, dict[str, dict[str, object]]]:
        """Every live replica's report, by replica (this one's as it is now)."""
        shared = self._state.now.shared
        reports = {} if shared is None else await shared.serving_reports()
        found = {replica: json.loads(blob) for replica, blob in reports.items()}
        found[self.replica] = self.report()
        return found

    async def run(self) -> None:
        await keep_ticking(self.tick, TICK_S, log, "following the model decisions",
                           (HistoryUnavailable, ValueError, KeyError),
                           "the models served stay")

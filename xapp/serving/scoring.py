"""Live scoring: the served model's forecasts, recorded from the history held, scored as the
actuals arrive, beside the seasonal naives (``model.scores``).

Origins are the slots ``k * horizon`` of the model's grid (in UTC: midnight for a day-ahead
hourly model). When this replica's history first holds a report ``GRACE_STEPS`` past an origin
(``CellHistory.newest_ns``), one replica takes on that origin's round
(``SharedState.claim_round``): for each of the most recently reported cells
(``controls.scoring.maxCells``) it scores the forecast recorded at the previous origin against
the actuals of its horizon, beside the naives made from the history before that origin, and
records the model's forecast from the history before this origin with the recalibration in
force: what a request at the origin was answered. Records and the round's summary are kept in
the shared state, so replicas show the same scores and a restart keeps them; actuals of steps
no forecast was recorded for (a cell new since the last round, a version loaded since) are
counted, not scored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kpi_forecast.model.naive import naive_forecasts
from kpi_forecast.model.recalibration import Recalibration, calendar_sources
from kpi_forecast.model.runtime import InputError, OnnxForecaster
from kpi_forecast.model.scores import FIELDS, POINTS, SCORED_NAIVES, Accuracy, block_sums, in_window
from kpi_forecast.xapp.failures import describe, keep_ticking
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.serving.state import ModelView, ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from kpi_forecast.xapp.store.score_records import ScoreRecord

log = logging.getLogger(__name__)

TICK_S = 1.0  # how often the loop looks for a due round, or another replica's summary
GRACE_STEPS = 1  # a round waits for the first report this many steps past its origin
CELLS_PER_READ = 256  # cells a round reads, forecasts and writes at a time
WINDOWS = {"day": 1, "week": 7}  # the windows scored, in days
# Horizons a cell's record keeps at most: a week of an hourly model's hours. A finer model
# keeps its last MAX_BLOCKS horizons, which its windows then cover.
MAX_BLOCKS = 168
NS_PER_DAY = 86_400 * 10**9


@dataclass(frozen=True)
class Grid:
    """A model's geometry, as scoring reads it."""

    step_ns: int
    horizon: int
    steps_per_day: int
    quantiles: int
    blocks: int  # a week of horizons, at most MAX_BLOCKS

    @classmethod
    def of(cls, model: OnnxForecaster) -> Grid:
        meta, step = model.metadata, model.step.value
        per_day = max(1, NS_PER_DAY // step)
        return cls(step, meta.horizon, per_day, len(meta.quantiles),
                   min(-(-WINDOWS["week"] * per_day // meta.horizon), MAX_BLOCKS))

    @property
    def steps_kept(self) -> int:
        """Steps of a cell the records keep scores of: a week, or MAX_BLOCKS horizons."""
        return min(WINDOWS["week"] * self.steps_per_day, self.blocks * self.horizon)

    def window(self, record: ScoreRecord, end: int, days: int) -> np.ndarray:
        """The record's sums over the blocks in the ``days`` before slot ``end``."""
        mask = in_window(record.origins, self.horizon, end, days * self.steps_per_day)
        return record.sums[mask].sum(axis=0)

    def pool_blocks(self, record: ScoreRecord, end: int, blocks: dict[int, np.ndarray]) -> None:
        """Add the record's sums of each horizon of the week before slot ``end`` to
        ``blocks`` (by the horizon's origin)."""
        mask = in_window(record.origins, self.horizon, end, WINDOWS["week"] * self.steps_per_day)
        for origin, sums in zip(record.origins[mask], record.sums[mask], strict=True):
            if sums[POINTS] > 0:
                blocks[int(origin)] = blocks.get(int(origin), 0) + sums

    def ttl_s(self) -> float:
        """How long a version's records outlive their last write: a week and two horizons of
        the grid, as wall time."""
        return (self.blocks + 2) * self.horizon * self.step_ns / 1e9


@dataclass(frozen=True)
class Summary:
    """One round: the model's pooled sums per window and its worst cells over the week."""

    model_version: str
    origin: int  # slot: the scores cover the steps before it
    scored_at: float  # Unix time
    cells: int  # cells with a scored point over the week
    windows: dict[str, np.ndarray]  # window -> FIELDS sums
    worst: list[tuple[str, np.ndarray]]  # (cell, its week's sums), lowest skill first
    blocks: dict[int, np.ndarray]  # origin -> the cells' sums of that horizon, over the week

    def to_json(self) -> bytes:
        return json.dumps({
            "model_version": self.model_version, "origin": self.origin,
            "scored_at": self.scored_at, "cells": self.cells,
            "windows": {name: sums.tolist() for name, sums in self.windows.items()},
            "worst": [[cell, sums.tolist()] for cell, sums in self.worst],
            "blocks": [[origin, sums.tolist()] for origin, sums in self.blocks.items()]}
        ).encode()

    @classmethod
    def from_json(cls, blob: bytes) -> Summary:
        """A summary as ``to_json`` wrote it; ValueError for anything else."""
        try:
            raw = json.loads(blob)
            return cls(raw["model_version"], int(raw["origin"]), float(raw["scored_at"]),
                       int(raw["cells"]),
                       {name: np.asarray(sums, np.float64)
                        for name, sums in raw["windows"].items()},
                       [(str(cell), np.asarray(sums, np.float64))
                        for cell, sums in raw["worst"]],
                       {int(origin): np.asarray(sums, np.float64)
                        for origin, sums in raw["blocks"]})
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a scoring summary as this xApp writes it ({describe(exc)})"
                             ) from exc


def take_slots(values: np.ndarray, last_slots: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """[B, S]: each row's value at each of ``slots`` (its window [B, n] ends at its
    ``last_slots``), NaN where the window does not reach."""
    n = values.shape[1]
    index = n - 1 - (last_slots[:, None] - slots[None, :])
    inside = (index >= 0) & (index < n)
    found = np.take_along_axis(values, np.clip(index, 0, n - 1), axis=1)
    return np.where(inside, found, np.nan).astype(np.float32)


@dataclass
class _Chunk:
    """What one read of a round did."""

    records: list[ScoreRecord]
    recorded: int  # forecasts recorded
    unforecast: int  # actuals of steps no forecast was recorded for


def score_chunk(model: OnnxForecaster, recalibration: Recalibration | None, grid: Grid,
                origin: int, values: np.ndarray, last_slots: np.ndarray,
                records: list[ScoreRecord]) -> _Chunk:
    """The round of ``origin`` over cells' windows ``values`` [B, n] ending at
    ``last_slots``: score each record's forecast of the previous origin, record this one's."""
    h, n, step = grid.horizon, values.shape[1], pd.Timedelta(grid.step_ns, "ns")
    previous = origin - h
    actual = take_slots(values, last_slots, previous + np.arange(h))
    due = np.array([r.origin == previous and not r.scored(previous) for r in records])
    missed = np.array([r.origin != previous and not r.scored(previous) for r in records])
    unforecast = int((~np.isnan(actual[missed])).sum()) if missed.any() else 0
    if due.any():
        earlier = take_slots(values[due], last_slots[due], previous - n + np.arange(n))
        ends = pd.DatetimeIndex(np.full(len(earlier), (previous - 1) * grid.step_ns), tz="UTC")
        naives = naive_forecasts(earlier, h, grid.steps_per_day,
                                 calendar_sources(model.metadata, step, ends), SCORED_NAIVES)
        scored = [records[i] for i in np.flatnonzero(due)]
        sums = block_sums(actual[due], np.stack([r.forecast for r in scored]),
                          model.metadata.quantiles, naives)
        for record, row in zip(scored, sums, strict=True):
            record.add(previous, row)
    # Cells reported within the last horizon, with history before the origin, get this
    # origin's forecast.
    before = take_slots(values, last_slots, origin - n + np.arange(n))
    fresh = (np.array([r.origin != origin for r in records]) & (last_slots >= previous)
             & ~np.isnan(before).all(axis=1))
    if fresh.any():
        history = before[fresh]
        ends = pd.DatetimeIndex(np.full(len(history), (origin - 1) * grid.step_ns), tz="UTC")
        forecast = model.forecast(history, ends, recalibration)
        for i, made in zip(np.flatnonzero(fresh), forecast, strict=True):
            records[i].origin, records[i].forecast = origin, made
    return _Chunk(records, int(fresh.sum()), unforecast)


class Scorer:
    """Records and scores the forecasts of the model ``name`` in ``state``: of the version
    served, or (``candidate``) of the candidate shadowed beside it."""

    def __init__(self, state: ServingState, metrics: Metrics, name: str,
                 candidate: bool = False) -> None:
        self._state = state
        self.metrics = metrics
        self.name = name
        self.candidate = candidate
        self.role = "candidate" if candidate else "served"
        self.summary: Summary | None = None  # the last round's, of the version served
        self._worst_shown: list[tuple[str, str]] = []  # (rank, cell) on the worst-cell gauge

    def _record(self, blob: bytes | None, grid: Grid) -> ScoreRecord:
        if blob is not None:
            try:
                return ScoreRecord.from_bytes(blob, grid.horizon, grid.quantiles, grid.blocks)
            except ValueError as exc:  # another build's: start the cell afresh
                log.warning("%s: a live score record dropped: %s", self.name, exc)
        return ScoreRecord.empty(grid.horizon, grid.quantiles, grid.blocks)

    def _model(self, served: ModelView) -> OnnxForecaster | None:
        return served.candidate if self.candidate else served.model

    async def score_round(self, origin: int) -> Summary | None:
        """Take on the round of ``origin`` where no replica has: score, record, summarise."""
        served = self._state.view(self.name)
        model, history, shared = self._model(served), served.history, served.shared
        if model is None or history is None or shared is None:
            return None
        grid, version = Grid.of(model), model.metadata.model_version
        if not await shared.claim_round("scoring", self.name, version, origin, grid.ttl_s()):
            return None
        started = time.monotonic()
        chosen = await history.recent(served.controls.scoring.max_cells)
        totals = {name: np.zeros(len(FIELDS)) for name in WINDOWS}
        weeks: list[tuple[str, np.ndarray]] = []
        blocks: dict[int, np.ndarray] = {}
        recorded = unforecast = 0
        # The candidate's forecasts are its own: the offsets in force are the served one's.
        recalibration = None if self.candidate else served.recalibration
        for first in range(0, len(chosen), CELLS_PER_READ):
            cells = chosen[first:first + CELLS_PER_READ]
            windows = await history.windows(cells)
            blobs = await shared.score_records(self.name, version, cells)
            held = [(cell, window, blob) for cell, window, blob in zip(cells, windows, blobs,
                                                                       strict=True)
                    if window is not None]
            if not held:
                continue
            values = np.stack([window[0] for _, window, _ in held])
            last_slots = np.array([window[1].value // grid.step_ns for _, window, _ in held])
            chunk = await asyncio.to_thread(
                score_chunk, model, recalibration, grid, origin, values, last_slots,
                [self._record(blob, grid) for _, _, blob in held])
            await shared.put_score_records(
                self.name, version, [(cell, record.to_bytes()) for (cell, _, _), record
                                     in zip(held, chunk.records, strict=True)], grid.ttl_s())
            recorded, unforecast = recorded + chunk.recorded, unforecast + chunk.unforecast
            for (cell, _, _), record in zip(held, chunk.records, strict=True):
                per_window = {name: grid.window(record, origin, days)
                              for name, days in WINDOWS.items()}
                for name, sums in per_window.items():
                    totals[name] += sums
                weeks.append((cell, per_window["week"]))
                grid.pool_blocks(record, origin, blocks)
        summary = Summary(version, origin, time.time(),
                          sum(1 for _, sums in weeks if sums[POINTS] > 0), totals,
                          worst(weeks, served.controls.scoring.worst_cells, grid.horizon),
                          blocks)
        await shared.put_accuracy(self.name, version, summary.to_json(), grid.ttl_s())
        m, labels = self.metrics, {"model": self.name, "role": self.role}
        m.scoring_rounds.labels(**labels).inc()
        m.scoring_recorded.labels(**labels).inc(recorded)
        m.scoring_unforecast.labels(**labels).inc(unforecast)
        m.scoring_seconds.labels(**labels).set(time.monotonic() - started)
        self.adopt(summary, grid)
        log.info("%s (%s %s): scored the horizon before %s over %d cells, recorded %d forecasts "
                 "(%d actuals had none); skill over the day %s", self.name, self.role, version,
                 pd.Timestamp(origin * grid.step_ns, tz="UTC").isoformat(), summary.cells,
                 recorded, unforecast, Accuracy.of(totals["day"]).skill)
        return summary

    def adopt(self, summary: Summary | None, grid: Grid | None) -> None:
        """Put ``summary`` on the live gauges (None: no scores, NaN)."""
        self.summary = summary
        m, nan = self.metrics, float("nan")
        for name in WINDOWS:
            scores = Accuracy.of(summary.windows[name]) if summary else None
            labels = {"model": self.name, "role": self.role, "window": name}
            m.live_points.labels(**labels).set(scores.points if scores else 0)
            for gauge, value in ((m.live_mae, scores and scores.mae),
                                 (m.live_skill, scores and scores.skill),
                                 (m.live_pinball, scores and scores.pinball),
                                 (m.live_coverage, scores and scores.coverage)):
                gauge.labels(**labels).set(nan if value is None else value)
            for naive in SCORED_NAIVES:
                value = scores.naive_mae[naive] if scores else None
                m.live_naive_mae.labels(**labels, naive=naive).set(
                    nan if value is None else value)
        for rank, cell in self._worst_shown:
            m.live_worst_skill.remove(self.name, self.role, rank, cell)
        self._worst_shown = []
        for rank, (cell, sums) in enumerate(summary.worst if summary else [], start=1):
            skill = Accuracy.of(sums).skill
            m.live_worst_skill.labels(model=self.name, role=self.role, rank=str(rank),
                                      cell=cell).set(
                nan if skill is None else skill)
            self._worst_shown.append((str(rank), cell))
        m.live_origin.labels(model=self.name, role=self.role).set(
            nan if summary is None or grid is None else summary.origin * grid.step_ns / 1e9)

    async def cell_accuracy(self, cell_id: str) -> dict[str, Accuracy] | None:
        """One cell's scores per window as of the last round; None: none kept for it."""
        served = self._state.view(self.name)
        model, shared, summary = self._model(served), served.shared, self.summary
        if model is None or shared is None or summary is None:
            return None
        grid = Grid.of(model)
        [blob] = await shared.score_records(self.name, model.metadata.model_version, [cell_id])
        if blob is None:
            return None
        record = self._record(blob, grid)
        return {name: Accuracy.of(grid.window(record, summary.origin, days))
                for name, days in WINDOWS.items()}

    def guard(self) -> str | None:
        """Why the model's forecasts are to be the fallback's now (its guard, controls.guard,
        against the last round's scores); None: they are not."""
        controls = self._state.view(self.name).controls
        guard, summary = controls.guard, self.summary
        if self.candidate or not guard.enabled or not controls.scoring.enabled or summary is None:
            return None
        scores = Accuracy.of(summary.windows[guard.window])
        if scores.points < guard.min_points or scores.skill is None or (
                scores.skill >= guard.min_skill):
            return None
        return (f"live skill {scores.skill:.3f} over the {guard.window} is below the guard's "
                f"{guard.min_skill:g}")

    def put_guard_in_force(self) -> None:
        """Serve the fallback, or the model again, as ``guard`` says now."""
        reason, served = self.guard(), self._state.view(self.name)
        if self.candidate or served.model is None or reason == served.guarded:
            return
        self._state.swap(self.name, guarded=reason)
        self.metrics.guarded.labels(model=self.name).set(reason is not None)
        if reason is None:
            log.info("%s: the guard lifted, the model answers again", self.name)
        else:
            log.warning("%s: %s; the fallback answers until it recovers", self.name, reason)

    async def tick(self) -> None:
        """Take on the round that is due, or adopt the summary another replica wrote; then
        put the guard in force as the scores and the controls say."""
        try:
            await self._follow()
        finally:
            self.put_guard_in_force()

    async def _follow(self) -> None:
        served = self._state.view(self.name)
        model, history, shared = self._model(served), served.history, served.shared
        if model is None or history is None or shared is None:
            if self.summary is not None and self.candidate:  # no candidate now: no scores
                self.adopt(None, None)
            return
        grid = Grid.of(model)
        if not served.controls.scoring.enabled:
            if self.summary is not None:
                self.adopt(None, grid)
            return
        version = model.metadata.model_version
        if self.summary is not None and self.summary.model_version != version:
            self.adopt(None, grid)  # a new version: no scores yet
        newest = history.newest_ns
        due = None if newest is None else (
            (newest // grid.step_ns - GRACE_STEPS) // grid.horizon * grid.horizon)
        if (due is not None and (self.summary is None or due > self.summary.origin)
                and await self.score_round(due) is not None):
            return
        blob = await shared.accuracy(self.name, version)
        if blob is not None:
            summary = Summary.from_json(blob)
            if self.summary is None or summary.scored_at != self.summary.scored_at:
                self.adopt(summary, grid)

    async def run(self) -> None:
        """``tick`` every second until cancelled; the scores shown stay through a failure."""
        await keep_ticking(self.tick, TICK_S, log, f"live scoring of {self.name}",
                           (HistoryUnavailable, InputError, ValueError, KeyError),
                           "the scores shown stay")


def worst(weeks: Sequence[tuple[str, np.ndarray]], k: int, horizon: int
          ) -> list[tuple[str, np.ndarray]]:
    """The ``k`` cells of lowest skill over the week among those with a horizon of points."""
    ranked = [(skill, cell, sums) for cell, sums in weeks
              if sums[POINTS] >= horizon and (skill := Accuracy.of(sums).skill) is not None]
    ranked.sort(key=lambda entry: (entry[0], entry[1]))
    return [(cell, sums) for _, cell, sums in ranked[:k]]

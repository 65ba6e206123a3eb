"""The model lifecycle's loop, end to end with real parts, through a regime change.

The sample's traffic with a lasting level change (``--factor``, 0.4: a drop) in half its cells
from day 35. A served model trained on the 35 days before it; the mock E2 node replays the file
over librmr into `kpi-forecast serve` on redis-server (one simulated day every two seconds, so
that every scoring round is taken) with the promotion rule on; a real Prometheus scrapes the
xApp and evaluates the chart's alert rules. A week after the change the history is exported
(`kpi-forecast history export`), a candidate is trained on it (`kpi-forecast train`) and loaded
(`kpi-forecast models candidate`); a second replay (the node restarted) goes on to the end of
the file. Throughout, a client asks a changed cell's forecast ten times a second.

Reported, in simulated hours from the change: the alert's expression holding
(``KpiForecastWorseThanNaive`` pending), the served version's day skill back at 0 or above,
the candidate's arrival and the rule's decision; both versions' day skill while the candidate
was shadowed; the reports sent and taken; the forecast answers that were not 200 (from the
cell's first 200: before, it is unknown or holds too little history). The run fails if a
report was lost, a forecast failed, the alert never held after the change or the candidate
was never scored.

    python -m benchmarks.regime_change [--minutes 2] [--factor 0.4] [--retrain-days 7]
        [--work DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from benchmarks.common import write_section
from benchmarks.results import RESULTS, Results
from kpi_forecast.cli.mock_e2_node import cell_id
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.artifact import load_metadata
from kpi_forecast.xapp.ric import rmr
from tests.faults.ric import Ric
from tests.processes import ROOT
from tests.prometheus_server import prometheus_server
from tests.redis_server import RedisServer
from tests.rmr_library import RMR
from tests.waiting import wait_for

SAMPLE = ROOT / "data/sample/cells_hourly.csv.gz"
KPI = "traffic_mb"
CHANGE_DAY = 35  # the sample's first 35 days train the served model
SPEED = 43_200.0  # simulated seconds per second: a day in two, each scoring round taken
ALERT = "KpiForecastWorseThanNaive"
BIN = Path(sys.executable).parent


def regime_file(out: Path, factor: float) -> tuple[Path, pd.Timestamp]:
    """The sample with half its cells' load times ``factor`` from ``CHANGE_DAY`` on."""
    frame = pd.read_csv(SAMPLE)[["timestamp", "cell_id", KPI]]
    stamps = pd.to_datetime(frame["timestamp"], utc=True)
    change = stamps.min() + pd.Timedelta(days=CHANGE_DAY)
    cells = sorted(frame["cell_id"].unique())
    changed = frame["cell_id"].isin(cells[: len(cells) // 2]) & (stamps >= change)
    frame.loc[changed, KPI] *= factor
    frame.to_csv(out, index=False)
    frame[stamps < change].to_csv(out.with_name("before.csv"), index=False)
    return out, change


def cli(*args: str, timeout: float = 900) -> str:
    done = subprocess.run([str(BIN / "kpi-forecast"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"kpi-forecast {args[0]} exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")
    return done.stdout


@dataclass
class Watch:
    """What the loop looked like, sampled every quarter second from the xApp and Prometheus."""

    xapp: str
    prometheus: str
    model: str
    cell: str
    rows: list[dict] = field(default_factory=list)
    answers: list[tuple[int, str]] = field(default_factory=list)  # status, error if not 200
    stop: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None

    def sample(self, client: httpx.Client) -> None:
        accuracy = client.get(f"{self.xapp}/v1/models/{self.model}/accuracy").json()
        alerts = client.get(f"{self.prometheus}/api/v1/query",
                            params={"query": f'ALERTS{{alertname="{ALERT}"}}'}).json()
        candidate = accuracy.get("candidate") or {}
        self.rows.append({
            "scored_until": accuracy.get("scored_until"),
            "version": accuracy["model_version"],
            "day_skill": accuracy["windows"]["day"]["skill"],
            "candidate_until": candidate.get("scored_until"),
            "candidate_version": candidate.get("model_version"),
            "candidate_day_skill": (candidate.get("windows") or {}).get("day", {}).get("skill"),
            "alert": bool(alerts["data"]["result"])})

    def ask(self, client: httpx.Client) -> None:
        answer = client.get(f"{self.xapp}/v1/cells/{self.cell}/forecast")
        self.answers.append((answer.status_code, "" if answer.status_code == 200 else
                             answer.text[:300]))

    def answered(self) -> list[tuple[int, str]]:
        """The answers from the first 200 on: before it, the cell is unknown (404) or holds
        too little history (409), as documented."""
        codes = [code for code, _ in self.answers]
        return self.answers[codes.index(200) if 200 in codes else len(codes):]

    def run(self) -> None:
        try:
            with httpx.Client(timeout=10) as client:
                while not self.stop.is_set():
                    self.sample(client)
                    for _ in range(3):
                        self.ask(client)
                        time.sleep(0.08)
        except Exception as error:  # kept for the loop to raise: a thread's would be lost
            self.error = error

    def timeline(self) -> pd.DataFrame:
        """A row per round of the served version, the candidate's of the same origin beside."""
        table = pd.DataFrame(self.rows)
        served = table.dropna(subset=["scored_until"]).drop_duplicates("scored_until",
                                                                      keep="last")
        candidate = table.dropna(subset=["candidate_until"]).drop_duplicates(
            "candidate_until", keep="last")[["candidate_until", "candidate_day_skill"]]
        served = served.drop(columns=["candidate_until", "candidate_day_skill"]).merge(
            candidate, how="left", left_on="scored_until", right_on="candidate_until")
        served["scored_until"] = pd.to_datetime(served["scored_until"], utc=True)
        return served.drop(columns=["candidate_until"]).reset_index(drop=True)


def replay(ric: Ric, start: pd.Timestamp, end: pd.Timestamp, taken: float) -> float:
    """One run of the node over [start, end), waited out: every report it sent taken."""
    ric.start_node("--start", start.isoformat(), "--end", end.isoformat(),
                   "--speed", f"{SPEED:g}")
    replica = ric.replicas[0]
    bound = (end - start).total_seconds() / SPEED * 3 + 60

    def done() -> bool:
        stats = ric.node_stats()
        ends = sum(len(ends) for ends in stats["subscribers"].values())
        return (ends > 0 and stats.get("replays_done", 0) == ends
                and replica.metric("kpi_forecast_e2_indications_total") - taken
                == stats["indications"])

    wait_for(done, bound, ric.tail)
    sent = ric.node_stats()["indications"]
    ric.stop_node()
    return sent


def train(data: Path, target: str, out: Path, minutes: float, *extra: str) -> None:
    """`kpi-forecast train` on the sample's calendar (Europe/Paris, French holidays)."""
    cli("train", "--data", str(data), "--target", target, "--out", str(out), "--tz",
        "Europe/Paris", "--holidays", "FR", "--max-minutes", f"{minutes:g}", "--quiet", *extra)


@dataclass
class Scenario:
    minutes: float = 2.0  # each model's training budget
    factor: float = 0.4  # the changed cells' load after the change, times their own
    days_before: int = 14  # replayed before the change: a week of context, a week scored
    retrain_days: int = 7  # from the change to the export
    days_after: int | None = None  # replayed after the change (None: to the file's end)


def loop(directory: Path, scenario: Scenario, timeline_csv: Path,
         served_from: Path | None = None) -> dict:
    """The whole loop once, serving a copy of ``served_from`` (None: a model trained on the
    days before the change); its timeline goes to ``timeline_csv``."""
    minutes = scenario.minutes
    directory.mkdir(parents=True, exist_ok=True)
    data, change = regime_file(directory / "regime.csv", scenario.factor)
    target = KPI if served_from is None else load_metadata(served_from).target
    served = directory / "models" / target  # the model is named by its directory
    if served_from is not None:
        shutil.copytree(served_from, served)
    elif not (served / "model.onnx").is_file():  # one there from an earlier run with --work
        train(data.with_name("before.csv"), target, served, minutes, "--context", "7D")
    panel = load_panel(data, KPI)
    redis = RedisServer(directory).start()
    ric = Ric(directory, data, served, redis, column=KPI)
    stack = contextlib.ExitStack()
    try:
        replica = ric.add_replica("a", promotion={"enabled": True,
                                                  "minPoints": panel.n_cells * 24,
                                                  "minDays": 1})
        prom_url = stack.enter_context(prometheus_server(directory, replica.port))
        watch = Watch(replica.url, prom_url, target, cell_id(0))
        watcher = threading.Thread(target=watch.run, daemon=True)
        watcher.start()
        retrain_at = change + pd.Timedelta(days=scenario.retrain_days)
        end = (panel.index[-1] + panel.step if scenario.days_after is None
               else change + pd.Timedelta(days=scenario.days_after))
        sent = replay(ric, change - pd.Timedelta(days=scenario.days_before), retrain_at, 0.0)
        export = directory / "export.parquet"
        cli("history", "export", "--kpi", target, "--out", str(export), "--config",
            str(replica.config))
        candidate = directory / "models" / "candidate"
        train(export, target, candidate, minutes)
        cli("models", "candidate", "--xapp", replica.url, "--model", target,
            "--model-dir", str(candidate))
        sent += replay(ric, retrain_at, end, replica.metric("kpi_forecast_e2_indications_total"))
        time.sleep(3)  # the last round, scraped
        watch.stop.set()
        watcher.join(30)
        if watch.error is not None:
            raise watch.error
        taken = replica.metric("kpi_forecast_e2_indications_total")
        decisions = replica.metric(
            f'kpi_forecast_model_decisions_total{{action="promote",model="{target}"}}')
    finally:
        stack.close()
        ric.close()
    timeline = watch.timeline()
    timeline.insert(0, "hours", (timeline["scored_until"] - change) / pd.Timedelta(hours=1))
    timeline.to_csv(timeline_csv, index=False)
    answered = watch.answered()
    return {
        "factor": scenario.factor, "minutes": minutes, "retrain days": scenario.retrain_days,
        "reports sent": sent, "reports taken": taken, "forecasts asked": len(answered),
        "forecasts not 200": sum(code != 200 for code, _ in answered),
        "refusals": [f"{code} {error}" for code, error in answered if code != 200],
        "promotions": decisions,
        **summary(timeline, scenario.retrain_days * 24.0, load_metadata(candidate).model_version)}


def summary(timeline: pd.DataFrame, candidate_hours: float, candidate_version: str) -> dict:
    """The loop's figures read off its timeline (a row per round, ``hours`` since the change)."""
    hours = timeline["hours"]
    # A round scores the day before its origin: the first wholly after the change is 24 h on.
    before, after = timeline[hours <= 0], timeline[hours >= 24]
    alerted = after[after["alert"]]
    onset = alerted["hours"].min() if len(alerted) else None
    # Recovered by itself: the version served at the change, before any promotion.
    recovered = after[(after["hours"] > (onset or 0)) & (after["day_skill"] >= 0)
                      & (after["version"] == timeline["version"].iloc[0])]
    promoted = after[after["version"] == candidate_version]
    shadowed = timeline["candidate_day_skill"].notna() & ~timeline.index.isin(promoted.index)
    since = promoted["hours"].min() - candidate_hours if len(promoted) else None
    return {
        "alert before the change": bool(before["alert"].tail(3).any()),
        "skill before the change": float(before["day_skill"].tail(3).mean()),
        "lowest skill": float(after["day_skill"].min()),
        "hours to alert": onset,
        "hours to recovery": recovered["hours"].min() if len(recovered) else None,
        "hours to candidate": candidate_hours,
        "hours to promotion": promoted["hours"].min() if len(promoted) else None,
        "skill after": float(after["day_skill"].tail(7).mean()),
        "candidate scored": bool(timeline["candidate_day_skill"].notna().any()),
        "served skill shadowed": float(timeline.loc[shadowed, "day_skill"].mean()),
        "candidate skill shadowed": float(timeline.loc[shadowed, "candidate_day_skill"].mean()),
        "rule": ("kept the served version" if since is None
                 else f"promoted the candidate {since:.0f} h after it was loaded")}


def report(figures: dict, results: Results) -> str:
    """The section of docs/benchmarks.md."""
    def hours(name: str) -> str:
        value = figures[name]
        return "never" if value is None or np.isnan(value) else f"{value:.0f} h"

    results.figures.update(figures)
    return "\n".join([
        "## Through a regime change",
        "",
        f"{results.measured} (part of `make bench`): the sample's traffic, half its cells "
        f"times {figures['factor']:g} from day {CHANGE_DAY}; a served model trained on the "
        f"days before, the candidate on the history exported {figures['retrain days']} days "
        f"after the change ({figures['minutes']:g} min each); the mock E2 node over librmr, "
        "redis-server, a real Prometheus with the chart's rules; simulated hours from the change.",
        "",
        "| alert pending | day skill back at 0 | candidate loaded | promoted by the rule | "
        "day skill: before, lowest, last week | while shadowed: served, candidate | "
        "reports sent, taken | forecasts not 200 |",
        "|---|---|---|---|---|---|---|---|",
        f"| {hours('hours to alert')} | {hours('hours to recovery')} | "
        f"{hours('hours to candidate')} | {hours('hours to promotion')} | "
        f"{figures['skill before the change']:.2f}, {figures['lowest skill']:.2f}, "
        f"{figures['skill after']:.2f} | {figures['served skill shadowed']:.2f}, "
        f"{figures['candidate skill shadowed']:.2f} | {figures['reports sent']:,.0f}, "
        f"{figures['reports taken']:,.0f} | {figures['forecasts not 200']} of "
        f"{figures['forecasts asked']:,} |",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--factor", type=float, default=0.4)
    parser.add_argument("--retrain-days", type=int, default=7)
    parser.add_argument("--work", type=Path, help="keep the models, the export and the logs "
                        "here; a served model already there is reused")
    args = parser.parse_args()
    if not (RMR / "lib").is_dir():
        print("regime_change: ../shared/rmr is absent; nothing measured")
        return 0
    # Every process started finds librmr as an installed one, with no route table service.
    os.environ.update({"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [
        str(RMR / "lib"), os.environ.get("LD_LIBRARY_PATH")])),
        "RMR_SEED_RT": str(rmr.NO_ROUTES), "RMR_RTG_SVC": "-1"})
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for stale in ("models/candidate", "tsdb", "a", "export.parquet", "processes.log"):
            if (work / stale).is_dir():
                shutil.rmtree(work / stale)
            else:
                (work / stale).unlink(missing_ok=True)
        figures = loop(work, Scenario(args.minutes, args.factor, retrain_days=args.retrain_days),
                       RESULTS / "regime_change.csv")
    options = {"--minutes": (args.minutes, 2.0), "--factor": (args.factor, 0.4),
               "--retrain-days": (args.retrain_days, 7)}
    results = Results(
        "regime_change", " ".join(["python -m benchmarks.regime_change", *(
            f"{name} {value:g}" for name, (value, default) in options.items()
            if value != default)]), "benchmarks.md", "regime-change", tables=["regime_change"])
    section = report(figures, results)
    print(section)
    write_section(results, section)
    # The loop's mechanics, whatever the models: nothing lost, nothing failed, each step taken.
    problems = [what for what, bad in (
        ("reports lost", figures["reports taken"] != figures["reports sent"]),
        ("forecasts failed", figures["forecasts not 200"] > 0),
        ("the alert never pending after the change", figures["hours to alert"] is None),
        ("the candidate never scored", not figures["candidate scored"])) if bad]
    if problems:
        print(f"regime_change: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Our forecaster against the peers a user would pick instead, side by side.

Every model trains on the same steps and forecasts the same folds of the same data; all are
scored by the same code (``training.metrics``) on the observed values only. Each model runs
in its own process, so its peak memory is its own, and its result is kept in the cache
directory: an interrupted run resumes with the models it has not finished. ``make
bench-peers`` installs the peers (the ``bench`` extra) and runs this.

    python -m benchmarks.peers [--datasets milan sample] [--models ...] [--seed 0] [--fresh]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.metadata
import json
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import write_section
from benchmarks.peer_models import (
    AT_PEER_TIME,
    BLIND,
    DEEP,
    MODELS,
    OUR_RUNS,
    OURS,
    QUANTILES,
    STEP_SECONDS,
    Outcome,
    Task,
    run,
)
from benchmarks.results import RESULTS, Results
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.metrics import evaluate, mase_scale
from kpi_forecast.training.backtest import fold_origins

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "artifacts" / "bench-peers"
LIBRARIES = ("torch", "onnxruntime", "neuralforecast", "statsforecast", "numpy", "pandas")


@dataclass(frozen=True)
class Dataset:
    path: Path
    target: str
    tz: str | None
    holidays: str  # the public holidays of the cells' country, for our `--holidays`
    budget_s: float  # training budget of every trained model on this data


@dataclass(frozen=True)
class Protocol:
    title: str
    horizon_days: int
    folds: int
    context_days: int = 14


DATASETS = {
    "milan": Dataset(ROOT.parent / "shared/data/milan/milan_hourly.csv.gz", "traffic", None,
                     "IT-MI", 300.0),
    "sample": Dataset(ROOT / "data/sample/cells_hourly.csv.gz", "traffic_mb", "Europe/Paris",
                      "FR", 60.0),
}
PROTOCOLS = {
    "day_ahead": Protocol("day-ahead: horizon 24 h, origins every 24 h over the last 14 days",
                          1, 14),
    "last_week": Protocol("the survey's protocol: the first 55 days -> the next 7 days "
                          "(horizon 168 h)", 7, 1),
}
# The survey's protocol is defined on Milan's 62 days; the sample is compared day-ahead.
PROTOCOLS_OF = {"milan": ("day_ahead", "last_week"), "sample": ("day_ahead",)}
METRICS = ["mae", "rmse", "mase", "coverage", "pinball"]


def make_task(dataset: str, protocol: str, seed: int) -> Task:
    spec, proto = DATASETS[dataset], PROTOCOLS[protocol]
    panel = load_panel(spec.path, spec.target, tz=spec.tz)
    panel.holidays = spec.holidays
    day = panel.steps_per("1D")
    horizon = proto.horizon_days * day
    return Task(dataset, protocol, panel, fold_origins(panel.n_steps, horizon, proto.folds, day),
                proto.context_days * day, horizon, spec.budget_s, seed)


def our_code() -> str:
    """sha256 of our model's and training's sources: after a change there, ours is another
    model and its kept results are stale."""
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "model").glob("*.py"), *(ROOT / "training").glob("*.py")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def task_key(task: Task, model: str) -> str:
    """What a cached result depends on: data, folds, model (our own code, for ours), seed,
    budget and library versions."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    parts = {
        "data": hashlib.sha256(np.ascontiguousarray(task.panel.values).tobytes()).hexdigest(),
        "origins": task.origins, "context": task.context, "horizon": task.horizon,
        "budget_s": task.budget_s, "seed": task.seed, "model": model, "versions": versions,
    }
    if model in STEP_SECONDS:  # a deep peer's step budget
        parts["step_seconds"] = STEP_SECONDS[model]
    if model in OUR_RUNS:
        parts["code"] = our_code()
        parts["holidays"] = task.panel.holidays
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def result_paths(cache: Path, task: Task, model: str) -> tuple[Path, Path]:
    stem = cache / task.dataset / task.protocol / f"seed-{task.seed}" / model
    return stem.with_suffix(".npz"), stem.with_suffix(".json")


def peak_rss_mb() -> float:
    """Peak resident memory of this process plus that of its largest child (worker pools)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1024.0


def run_one(dataset: str, protocol: str, model: str, seed: int, cache: Path,
            budget_s: float | None = None) -> None:
    """Run one model on one task (with another training budget if given) and keep its result:
    the body of each child process."""
    task = make_task(dataset, protocol, seed)
    if budget_s is not None:
        task = replace(task, budget_s=budget_s)
    outcome = run(task, model)
    forecasts_path, info_path = result_paths(cache, task, model)
    forecasts_path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(forecasts_path, forecasts=outcome.forecasts)
    info = {k: v for k, v in asdict(outcome).items() if k != "forecasts"}
    info |= {"key": task_key(task, model), "peak_mb": peak_rss_mb(),
             "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    info_path.write_text(json.dumps(info, indent=1))


def load_result(cache: Path, task: Task, model: str) -> Outcome | None:
    """The kept result of ``model`` on ``task``, if there is one made for exactly this task."""
    forecasts_path, info_path = result_paths(cache, task, model)
    if not (forecasts_path.is_file() and info_path.is_file()):
        return None
    info = json.loads(info_path.read_text())
    if info.get("key") != task_key(task, model):
        return None
    with np.load(forecasts_path) as stored:
        forecasts = stored["forecasts"]
    details = dict(info["details"], peak_mb=info["peak_mb"])
    return Outcome(forecasts, info["train_s"], info["predict_ms_one"], info["predict_ms_all"],
                   details)


def ensure_result(task: Task, model: str, cache: Path, fresh: bool) -> Outcome:
    """The result of ``model`` on ``task``: kept, or computed now in a child process."""
    if not fresh and (kept := load_result(cache, task, model)) is not None:
        print(f"  {model}: kept result", flush=True)
        return kept
    log = result_paths(cache, task, model)[0].with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.peers", "--run-one", task.dataset, task.protocol,
             model, "--seed", str(task.seed), "--cache", str(cache),
             "--budget-s", repr(task.budget_s)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, check=False,
        )
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{model} on {task.dataset}/{task.protocol} failed "
                           f"(exit {done.returncode}, log {log}): {tail[0]}")
    print(f"  {model}: {time.monotonic() - started:.0f} s", flush=True)
    result = load_result(cache, task, model)
    if result is None:
        raise RuntimeError(f"{model} finished but left no result for this task in {cache}")
    return result


def at_peer_time(task: Task, outcomes: dict[str, Outcome]) -> Task | None:
    """The task with the fastest deep peer's training time as the budget, for ours to run
    again with; None when ours already took no longer (or a result to compare is missing)."""
    deep = [outcomes[m].train_s for m in DEEP if m in outcomes]
    if OURS not in outcomes or not deep or outcomes[OURS].train_s <= min(deep):
        return None
    return replace(task, budget_s=round(min(deep), 1))


def fold_truth(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Observed values [folds, cells, horizon] (NaN = missing) and MASE scales [folds, cells]."""
    panel, horizon = task.panel, task.horizon
    actual = np.stack([panel.values[:, o : o + horizon] for o in task.origins])
    scales = np.stack([mase_scale(panel.values[:, :o], 7 * task.steps_per_day)
                       for o in task.origins])
    return actual, scales


def score(task: Task, outcomes: dict[str, Outcome]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Overall metrics and costs per model, and the metrics per model and fold."""
    actual, scales = fold_truth(task)
    levels = np.asarray(QUANTILES)

    def metrics(forecasts: np.ndarray, folds: slice) -> dict[str, float]:
        a, f, s = actual[folds], forecasts[folds], scales[folds]
        flat = (a.reshape(-1, task.horizon), f.reshape(-1, task.horizon, len(levels)),
                s.reshape(-1))
        has_quantiles = not np.isnan(f[..., 0]).all()
        return evaluate(flat[0], flat[1][..., 1], flat[2],
                        quantile_forecasts=flat[1] if has_quantiles else None,
                        levels=levels if has_quantiles else None)

    overall, per_fold = {}, []
    for model, outcome in outcomes.items():
        overall[model] = {
            **{k: v for k, v in metrics(outcome.forecasts, slice(None)).items() if k in METRICS},
            "train_s": outcome.train_s, "predict_ms_one": outcome.predict_ms_one,
            "predict_ms_all": outcome.predict_ms_all, "peak_mb": outcome.details.get("peak_mb"),
        }
        for fold, origin in enumerate(task.origins):
            per_fold.append({
                "dataset": task.dataset, "protocol": task.protocol, "model": model,
                "origin": task.panel.index[origin].isoformat(), "seed": task.seed,
                **metrics(outcome.forecasts, slice(fold, fold + 1)),
            })
    return pd.DataFrame(overall).T, pd.DataFrame(per_fold)


def verdict(table: pd.DataFrame) -> list[str]:
    """The peer comparison's targets, checked on one protocol's table."""
    others = table.drop(index=list(OUR_RUNS), errors="ignore")
    if others.empty:
        return ["- no peer result is kept for this protocol: run without `--models`"]
    deep = [m for m in DEEP if m in table.index]
    lines = []
    if missing := [m for m in MODELS if m not in table.index]:
        lines.append(f"- missing, so compared only with the models shown: {', '.join(missing)} "
                     f"(no kept result for this task: `--models {' '.join(missing)}` runs them)")
    for metric in ("mae", "mase"):
        best = others[metric].idxmin()
        ratio = table.loc[OURS, metric] / others.loc[best, metric]
        lines.append(f"- lowest {metric.upper()}: {'yes' if ratio < 1 else 'no'} "
                     f"(ours {table.loc[OURS, metric]:.3f}, best peer {best} "
                     f"{others.loc[best, metric]:.3f}, ratio {ratio:.3f})")
        if BLIND in table.index:
            blind = table.loc[BLIND, metric] / others.loc[best, metric]
            lines.append(f"  - without the holiday calendar: "
                         f"{'yes' if blind < 1 else 'no'} ({table.loc[BLIND, metric]:.3f}, "
                         f"ratio {blind:.3f})")
    if deep:
        fastest = table.loc[deep, "train_s"].idxmin()
        ours, theirs = table.loc[OURS, "train_s"], table.loc[fastest, "train_s"]
        lines.append(f"- training time at most the fastest deep peer's: "
                     f"{'yes' if ours <= theirs else 'no'} (ours {ours:.0f} s, "
                     f"{fastest} {theirs:.0f} s)")
        if AT_PEER_TIME in table.index:
            timed = table.loc[AT_PEER_TIME]
            best = {metric: others[metric].min() for metric in ("mae", "mase")}
            lowest = all(timed[metric] < best[metric] for metric in best)
            lines.append(f"  - given {fastest}'s {theirs:.0f} s as its budget, ours took "
                         f"{timed['train_s']:.0f} s and still has the lowest MAE and MASE: "
                         f"{'yes' if lowest else 'no'} (MAE {timed['mae']:.3f}, "
                         f"MASE {timed['mase']:.3f})")
        speedup = table.loc[deep, "predict_ms_one"].min() / table.loc[OURS, "predict_ms_one"]
        lines.append(f"- one-cell prediction at least 10x faster than neuralforecast: "
                     f"{'yes' if speedup >= 10 else 'no'} ({speedup:.0f}x)")
    return lines


def report(sections: list[tuple[Task, pd.DataFrame]], results: Results) -> str:
    budgets = ", ".join(f"{name} {spec.budget_s / 60:g} min" for name, spec in DATASETS.items())
    holidays = ", ".join(f"{name} {spec.holidays}" for name, spec in DATASETS.items())
    lines = [
        "## Against the peers",
        "",
        f"{results.measured} (`make bench-peers`).",
        "",
        "- Every model trains on the steps before the first origin and forecasts the same folds,",
        "  scored by the same code on observed values only (gaps filled from the past for peers",
        "  that refuse them; neuralforecast is told which, `available_mask`).",
        f"- Training budget per trained model: {budgets}; a deep peer's steps are that time at",
        "  its measured seconds per step (`STEP_SECONDS`), capped by Lightning's `max_time`.",
        "- `train_s`: ours is `kpi-forecast train` as a whole, statsforecast's its whole",
        "  cross-validation. Prediction: ours on ONNX Runtime with the week-before recalibration",
        "  applied, `NeuralForecast.predict`, statsforecast's `forecast` (which fits).",
        f"- Ours is told the public holidays ({holidays}); the peers take no calendar. `{BLIND}`",
        f"  is ours without it; `{AT_PEER_TIME}` is ours given the fastest deep peer's training",
        "  time, where ours took longer. Coverage is P10-P90, pinball over P10/P50/P90, `peak_mb`",
        "  the peak RSS of the model's own process. Per-fold scores: `docs/benchmarks/peers.csv`.",
        "",
    ]
    for task, table in sections:
        origins = task.origins
        lines += [
            f"### {task.dataset}, {PROTOCOLS[task.protocol].title}",
            "",
            f"{task.panel.n_cells} cells; trained on {task.train_steps} steps; "
            f"{len(origins)} origin(s) {task.panel.index[origins[0]]} .. "
            f"{task.panel.index[origins[-1]]}.",
            "",
            table.sort_values("mae").to_markdown(floatfmt=".3f"),
            "",
            *verdict(table),
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--protocols", nargs="+", choices=list(PROTOCOLS),
                        default=list(PROTOCOLS))
    parser.add_argument("--models", nargs="+", choices=[*MODELS, AT_PEER_TIME],
                        default=[*MODELS, AT_PEER_TIME])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--fresh", action="store_true", help="recompute kept results too")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/ untouched")
    parser.add_argument("--run-one", nargs=3, metavar=("DATASET", "PROTOCOL", "MODEL"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        run_one(*args.run_one, seed=args.seed, cache=args.cache, budget_s=args.budget_s)
        return 0
    sections, per_fold = [], []
    for dataset in args.datasets:
        if not DATASETS[dataset].path.is_file():
            print(f"skipped {dataset}: {DATASETS[dataset].path} not present")
            continue
        for protocol in (p for p in args.protocols if p in PROTOCOLS_OF[dataset]):
            task = make_task(dataset, protocol, args.seed)
            print(f"{dataset} / {protocol}", flush=True)
            outcomes = {m: ensure_result(task, m, args.cache, args.fresh)
                        for m in args.models if m in MODELS}
            # The models not asked for this time join the table with their kept results.
            outcomes |= {m: kept for m in MODELS if m not in outcomes
                         and (kept := load_result(args.cache, task, m)) is not None}
            if (timed_task := at_peer_time(task, outcomes)) is not None:
                asked = AT_PEER_TIME in args.models
                timed = (ensure_result(timed_task, AT_PEER_TIME, args.cache, args.fresh)
                         if asked else load_result(args.cache, timed_task, AT_PEER_TIME))
                if timed is not None:
                    outcomes[AT_PEER_TIME] = timed
            table, folds = score(task, outcomes)
            sections.append((task, table))
            per_fold.append(folds)
            print(table.sort_values("mae").to_string(float_format=lambda v: f"{v:.3f}"),
                  flush=True)
    if not sections or args.no_docs:
        return 0
    results = Results(
        "peers", "python -m benchmarks.peers" + (f" --seed {args.seed}" if args.seed else ""),
        "benchmarks.md", "peers", tables=["peers", "peers_summary"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    pd.concat(per_fold).to_csv(RESULTS / "peers.csv", index=False, float_format="%.5g")
    summary = pd.concat([table.rename_axis("model").reset_index().assign(
        dataset=task.dataset, protocol=task.protocol) for task, table in sections])
    summary.set_index(["dataset", "protocol", "model"]).to_csv(RESULTS / "peers_summary.csv")
    write_section(results, report(sections, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

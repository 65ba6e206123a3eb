"""`kpi-forecast`: train, backtest, predict, export and serve from the command line.

Torch is imported only by the commands that need it (train, export): predict, backtest and serve
run with the `serve` extra alone.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from model.artifact import ArtifactError
from training.defaults import DEFAULT_HORIZON, default_context
from training.panel import DataError

if TYPE_CHECKING:
    from model.runtime import OnnxForecaster
    from training.distributed import Group
    from training.panel import Panel

log = logging.getLogger(__name__)



def parse_steps(text: str, step: pd.Timedelta, option: str) -> int:
    """A count of steps ("336") or a duration ("14D", "24h") converted to steps."""
    if text.isdigit():
        steps = int(text)
    else:
        try:
            duration = pd.Timedelta(text)
        except ValueError as exc:
            raise DataError(f"{option} {text!r}: neither a step count nor a duration") from exc
        steps = duration // step
        if steps * step != duration:
            raise DataError(f"{option} {text!r}: not a whole number of {step} steps")
    if steps < 1:
        raise DataError(f"{option} {text!r}: must be at least one step")
    return steps


def holiday_calendar(text: str) -> str:
    from model.features import check_holidays

    try:
        return check_holidays(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parse_quantiles(text: str) -> list[float]:
    try:
        return [float(q) for q in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from exc


def cmd_train(args: argparse.Namespace) -> None:
    from training.device import resolve_device
    from training.distributed import aligned, join
    from training.ingest import load_panel

    started = time.monotonic()  # --max-minutes counts from here: reading the data is in it
    # Under torchrun this process is one rank of several; alone it is the only one.
    group = join(resolve_device(args.device))
    if not group.main:
        logging.getLogger().setLevel(logging.WARNING)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(group.close)
        stop = cleanup.enter_context(stop_on_signals(
            "stopping after the step under way and writing the model so far"))
        if Path(args.data).is_dir():  # a Parquet dataset: each rank reads only its files
            shard = load_panel(args.data, args.target, freq=args.freq, tz=args.tz,
                               shard=(group.rank, group.world))
            shard.holidays = args.holidays
            panel = aligned(shard, group)
            _train(args, group, panel, started, stop, block=panel)
        else:  # one file: every rank reads it and trains on its block of cells
            panel = load_panel(args.data, args.target, freq=args.freq, tz=args.tz)
            panel.holidays = args.holidays
            _train(args, group, panel, started, stop)


@contextlib.contextmanager
def stop_on_signals(doing: str) -> Iterator[threading.Event]:
    """SIGTERM or Ctrl-C asks a long-running command to stop: the event is set, the command
    winds down (``doing`` says how) and exits 0. A second signal stops the process at once."""
    stop = threading.Event()

    def ask(signum: int, frame: object) -> None:
        if stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        stop.set()
        log.warning("%s: %s (again to stop at once)", signal.Signals(signum).name, doing)

    previous = {signum: signal.signal(signum, ask) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _train(args: argparse.Namespace, group: Group, panel: Panel, started: float,
           stop: threading.Event, block: Panel | None = None) -> None:
    from model.config import ModelConfig
    from training.fit import fit
    from training.train import TrainConfig

    step = panel.step
    horizon = parse_steps(args.horizon or DEFAULT_HORIZON, step, "--horizon")
    if args.context:
        context = parse_steps(args.context, step, "--context")
    else:
        context, why = default_context(panel, horizon, TrainConfig.validation_fraction)
        log.info("%s", why)
    try:
        model_cfg = ModelConfig(context=context, horizon=horizon, quantiles=args.quantiles,
                                attention=args.attention, dropout=args.dropout)
    except ValueError as exc:
        raise DataError(str(exc)) from exc
    log.info("%s", model_cfg.describe_skip())
    train_cfg = TrainConfig(max_minutes=args.max_minutes, max_epochs=args.max_epochs,
                            batch_size=args.batch_size, seed=args.seed, device=args.device)
    fitted = fit(panel, Path(args.out), model_cfg, train_cfg, str(args.data),
                 progress=not args.quiet, group=group, block=block, started=started,
                 stop=stop)
    if fitted is None:  # not rank 0: rank 0 writes and reports
        return
    meta, validation = fitted
    print(validation.overall.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"model: {Path(args.out) / 'model.onnx'} (version {meta.model_version})")
    print(f"report: {Path(args.out) / 'report.md'}")


def cmd_export(args: argparse.Namespace) -> None:
    from training.fit import export_model

    print(f"model: {export_model(Path(args.model))}")


def load_forecaster(args: argparse.Namespace) -> OnnxForecaster:
    from model.runtime import OnnxForecaster, RuntimeOptions

    options = RuntimeOptions(provider=args.provider, intra_op_threads=args.threads)
    forecaster = OnnxForecaster(args.model, options)
    log.info("onnxruntime %s on %s", forecaster.describe()["onnxruntime"], forecaster.provider)
    return forecaster


def cmd_backtest(args: argparse.Namespace) -> None:
    from training.backtest import backtest
    from training.ingest import load_panel

    forecaster = load_forecaster(args)
    meta = forecaster.metadata
    panel = load_panel(args.data, meta.target, freq=args.freq or meta.freq, tz=meta.calendar_tz)
    step = parse_steps(args.step, panel.step, "--step") if args.step else None
    result = backtest(forecaster, panel, folds=args.folds, step=step,
                      recalibrate_windows=recalibrate_windows(args, forecaster))
    out = Path(args.out or Path(args.model) / "backtest")
    out.mkdir(parents=True, exist_ok=True)
    result.overall.to_csv(out / "overall.csv", index_label="model")
    result.per_cell.to_csv(out / "per_cell.csv", index=False)
    print(f"{len(result.origins)} folds, origins {result.origins[0]} .. {result.origins[-1]}")
    print(f"last fold's quantiles {result.recalibrations[-1].describe(meta.quantile_names())}")
    print(result.overall.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"csv: {out / 'overall.csv'}, {out / 'per_cell.csv'}")


def cmd_predict(args: argparse.Namespace) -> None:
    from training.ingest import load_panel
    from training.predict import predict_frame

    forecaster = load_forecaster(args)
    meta = forecaster.metadata
    panel = load_panel(args.data, meta.target, freq=args.freq or meta.freq, tz=meta.calendar_tz)
    frame, recalibrated = predict_frame(forecaster, panel, recalibrate_windows(args, forecaster))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    print(f"{len(frame)} forecasts for {panel.n_cells} cells: {args.out}")
    print(f"quantiles {recalibrated.describe(meta.quantile_names())}")


def recalibrate_windows(args: argparse.Namespace, forecaster: OnnxForecaster) -> int:
    from model.recalibration import week_of_windows

    if args.recalibrate == "auto":
        return week_of_windows(forecaster.metadata.horizon, forecaster.step)
    return args.recalibrate


def windows_or_auto(text: str) -> int | str:
    return text if text == "auto" else non_negative_int(text)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a whole number >= 1: {text}")
    return int(text)


def non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a whole number >= 0: {text}")
    return int(text)


def cmd_serve(args: argparse.Namespace) -> None:
    from xapp.config import ConfigError
    from xapp.server import serve

    try:
        serve(args.model, args.config, args.host, args.port, args.submgr, args.e2_port)
    except ConfigError as exc:
        raise DataError(str(exc)) from None


def parse_faults(text: str) -> dict[str, float]:
    from xapp.e2.mock_node import FAULTS

    faults = {}
    for item in filter(None, text.split(",")):
        name, _, probability = item.partition("=")
        if name not in FAULTS:
            raise argparse.ArgumentTypeError(f"unknown fault {name!r}; known: {FAULTS}")
        try:
            faults[name] = float(probability)
        except ValueError:
            raise argparse.ArgumentTypeError(f"fault {name}: {probability!r} is not a "
                                             "probability") from None
    return faults


def synthetic_panel(column: str, cells: int, seed: int):  # -> Panel
    """Seeded synthetic load from two weeks ago to two weeks ahead: the node sends the past
    at once (history for the model), then the rest live, as it happens."""
    import tempfile

    from data.synthetic import generate
    from training.ingest import load_panel

    start = (pd.Timestamp.now(tz="UTC") - pd.Timedelta("14D")).floor("D")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.csv"
        generate(n_cells=cells, days=28, seed=seed, start=str(start.date()), tz="UTC").to_csv(
            path, index=False)
        return load_panel(path, column)


def cmd_e2sim(args: argparse.Namespace) -> None:
    from training.ingest import load_panel
    from xapp.e2.mock_node import MockE2Node, create_app

    pairs = [kpi.partition("=") for kpi in args.kpi]
    for (column, _, measurement), text in zip(pairs, args.kpi, strict=True):
        if not column or not measurement:
            raise DataError(f"--kpi {text!r}: write COLUMN=MEASUREMENT, e.g. "
                            "prb_util=RRU.PrbUsedDl")
    live_from = None
    panels = []
    for column, _, _ in pairs:
        if args.data == "synthetic":
            panel = synthetic_panel(column, args.cells or 24, args.seed)
            live_from = int(panel.index.searchsorted(pd.Timestamp.now(tz="UTC")))
        else:
            panel = load_panel(args.data, column, freq=args.freq)
        panels.append(panel.first_cells(args.cells) if args.cells else panel)
    panel = panels[0]
    for other, (column, _, _) in zip(panels[1:], pairs[1:], strict=True):
        if other.cell_ids != panel.cell_ids or not other.index.equals(panel.index):
            raise DataError(f"{args.data}: column {column} covers other cells or times than "
                            f"{pairs[0][0]}; give each KPI its own mock node")
    measurement = pairs[0][2]
    extra = {name: other.values for other, (_, _, name) in zip(panels[1:], pairs[1:],
                                                               strict=True)}
    step = {name: panel.index.searchsorted(pd.Timestamp(value), side="left")
            for name, value in (("start", args.start), ("end", args.end)) if value}
    from xapp.server import run

    host, _, port = args.listen.rpartition(":")
    node = MockE2Node(panel, measurement, extra=extra, cells_per_node=args.cells_per_node,
                      speed=args.speed,
                      pace_ms=args.period_ms, start=int(step.get("start", 0)),
                      end=int(step["end"]) if "end" in step else None, faults=args.faults,
                      seed=args.seed, live_from=live_from)
    reported = ", ".join(f"{column} as {name}" for column, _, name in pairs)
    print(f"mock E2 node: {panel.n_cells} cells in {len(node.nodes())} node(s), {reported}; "
          f"subscription API on http://{args.listen}")
    # Nothing lingers to wait for: a subscription is answered at once, the rest is background.
    run(create_app(node), host or "127.0.0.1", int(port), graceful_s=2.0)


def kubernetes_client(args: argparse.Namespace):  # -> kubernetes.client.ApiClient
    from kubernetes import config

    if args.kubeconfig or not Path("/var/run/secrets/kubernetes.io/serviceaccount").exists():
        return config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
    config.load_incluster_config()
    from kubernetes import client

    return client.ApiClient()


def cmd_k8s(args: argparse.Namespace) -> None:
    import urllib3
    from kubernetes.config import ConfigException
    from tabulate import tabulate

    from xapp import k8s

    # urllib3 logs each retry of a failing call: the one-line error below says it all.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        if args.k8s_command == "package":
            version = k8s.package(Path(args.model), Path(args.out))
            print(f"{args.out}: model {version}; publish it where the chart's fetcher reads "
                  "MODEL_URL, then run 'kpi-forecast k8s rollout'")
            return
        api = kubernetes_client(args)
        if args.k8s_command == "rollout":
            with stop_on_signals("no longer watching; the rollout goes on in the cluster") as stop:
                state = k8s.rollout(api, args.namespace, args.name, Path(args.model),
                                    args.model_url, timeout_s=args.timeout, stop=stop)
            if stop.is_set():
                print(f"{args.namespace}/{args.name}: stopped watching the rollout; "
                      "'kpi-forecast k8s status' follows it")
            else:
                print(f"{args.namespace}/{args.name}: every pod serves {state.model_version}")
        state = k8s.status(api, args.namespace, args.name)
    except (ConfigException, k8s.RolloutError) as exc:
        raise DataError(str(exc)) from None
    except urllib3.exceptions.HTTPError as exc:
        raise DataError(f"cannot reach the Kubernetes API server: {exc}") from None
    print(f"{state.namespace}/{state.name}: {state.ready}/{state.replicas} ready, "
          f"{state.updated} updated, image {state.image}, model {state.model_version or '-'}")
    rows = [(p.name, p.phase, "yes" if p.ready else "no", p.restarts, p.node or "-",
             p.model_version or "-") for p in state.pods]
    print(tabulate(rows, headers=["pod", "phase", "ready", "restarts", "node", "serves"]))


def cmd_train_job(args: argparse.Namespace) -> None:
    import urllib3
    import yaml
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException

    from training import k8s_job

    logging.getLogger("urllib3").setLevel(logging.ERROR)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    try:
        spec = k8s_job.TrainJobSpec(
            name=args.name, image=args.image, data=args.data, out=args.out,
            target=args.target, namespace=args.namespace, nodes=args.nodes, gpus=args.gpus,
            procs_per_node=args.procs_per_node, cpu=args.cpu, memory=args.memory,
            claim=args.claim, train_args=extra)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    kind, api = args.kind, None
    try:
        if kind == "auto" or not args.dry_run:
            try:
                api = kubernetes_client(args)
            except ConfigException as exc:
                if not args.dry_run:
                    raise DataError(str(exc)) from None
                log.warning("no cluster configured (%s): printing a plain Job", exc)
                kind = "job"
        if kind == "auto":
            kind = "pytorchjob" if k8s_job.has_pytorchjob(api) else "job"
        objects = k8s_job.manifests(spec, kind)
        if args.dry_run:
            print(yaml.safe_dump_all(objects, sort_keys=False), end="")
            return
        created = k8s_job.submit(api, objects)
    except ApiException as exc:
        raise DataError(f"the API server refused: {exc.status} {exc.reason}") from None
    except urllib3.exceptions.HTTPError as exc:
        raise DataError(f"cannot reach the Kubernetes API server: {exc}") from None
    print(f"{args.namespace}: created {', '.join(created)}; {k8s_job.describe(spec)}")


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto",
                        help="ONNX Runtime execution provider (auto: CUDA when available)")
    parser.add_argument("--threads", type=non_negative_int, default=0,
                        help="ONNX Runtime intra-op threads per call (default 0: one, and a large "
                        "batch split across the CPUs)")


def add_recalibration_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recalibrate", type=windows_or_auto, default="auto", metavar="N",
                        help="recalibrate the quantiles on the last N horizons of each history "
                        "before forecasting (default auto: the horizons that cover a week; 0: "
                        "keep the model's own calibration)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kpi-forecast", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train", help="train a forecaster and export it",
        description="Train a forecaster and export it. Runs unchanged under torchrun "
        "(torchrun --nproc-per-node N -m training.cli train ...): data-parallel, each rank "
        "training on its own block of cells, rank 0 writing; a rerun resumes from the last "
        "epoch's checkpoint in --out.")
    train.add_argument("--data", required=True,
                       help="long CSV, CSV.gz or Parquet file, or a Parquet dataset directory")
    train.add_argument("--target", required=True, help="KPI column to forecast")
    train.add_argument("--out", required=True, help="model directory to write")
    train.add_argument("--freq", help="grid step, e.g. 1h or 15min (inferred when absent)")
    train.add_argument("--tz", help="zone of the calendar features (default: from the data)")
    train.add_argument("--holidays", type=holiday_calendar, default="", metavar="CODE",
                       help="public holidays of the cells' country as a calendar feature: an "
                       "ISO 3166 code such as FR, or with a subdivision such as IT-MI "
                       "(default: none)")
    train.add_argument("--context", help="input steps or duration (default 14D, else 7D)")
    train.add_argument("--horizon", help=f"forecast steps or duration (default {DEFAULT_HORIZON})")
    train.add_argument("--max-minutes", type=float, default=5.0,
                       help="time budget of the whole command: reading, training, export "
                            "and report (default 5)")
    train.add_argument("--max-epochs", type=int, default=60)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--batch-size", type=positive_int, default=0,
                       help="windows per step, across all ranks under torchrun (default: 256, "
                            "halved down to 32 while a pass over the data is under 100 steps)")
    train.add_argument("--dropout", type=float, default=0.1, help="default 0.1")
    train.add_argument("--quantiles", type=parse_quantiles, default=[0.1, 0.5, 0.9])
    train.add_argument("--attention", choices=["fused", "math"], default="fused")
    train.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                       help="where to train (default: cuda when torch sees a GPU)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=cmd_train)

    export = commands.add_parser("export", help="(re-)export model.onnx from the weights")
    export.add_argument("--model", required=True)
    export.set_defaults(run=cmd_export)

    bt = commands.add_parser("backtest", help="rolling-origin evaluation against baselines")
    bt.add_argument("--model", required=True)
    bt.add_argument("--data", required=True)
    bt.add_argument("--folds", type=int, default=7)
    bt.add_argument("--step", help="steps or duration between origins (default: horizon)")
    bt.add_argument("--freq")
    bt.add_argument("--out", help="folder for the CSVs (default MODEL/backtest)")
    add_runtime_options(bt)
    add_recalibration_option(bt)
    bt.set_defaults(run=cmd_backtest)

    predict = commands.add_parser("predict", help="forecast after each cell's last sample")
    predict.add_argument("--model", required=True)
    predict.add_argument("--data", required=True)
    predict.add_argument("--out", required=True, help="CSV to write")
    predict.add_argument("--freq")
    add_runtime_options(predict)
    add_recalibration_option(predict)
    predict.set_defaults(run=cmd_predict)

    xapp = commands.add_parser("serve", help="run the xApp: forecasts over RIC-style REST")
    xapp.add_argument("--model", help="model directory (default: controls.modelDir)")
    xapp.add_argument("--config", help="xApp descriptor config-file.json (default: $CONFIG_FILE, "
                      "$XAPP_DESCRIPTOR_PATH/config-file.json, else the packaged one)")
    xapp.add_argument("--host", default="0.0.0.0")
    xapp.add_argument("--port", type=int, default=8080)
    xapp.add_argument("--submgr", help="subscription manager URL: subscribe to E2 nodes' KPIs")
    xapp.add_argument("--e2-port", type=int, help="rmr-data port for E2 frames (default 4560)")
    xapp.set_defaults(run=cmd_serve)

    ops = commands.add_parser("k8s", help="Kubernetes: the xApp's status, package, rollout; "
                              "distributed training jobs")
    ops_commands = ops.add_subparsers(dest="k8s_command", required=True)
    for name, text in (("status", "deployment, pods, readiness and the model each pod serves"),
                       ("package", "pack a model directory as the chart's fetcher expects"),
                       ("rollout", "roll the deployment to a published model, roll back on "
                                   "failure")):
        sub = ops_commands.add_parser(name, help=text)
        sub.set_defaults(run=cmd_k8s)
        if name == "package":
            sub.add_argument("--model", required=True, help="model directory")
            sub.add_argument("--out", required=True, help=".tar.gz to write")
            continue
        sub.add_argument("--namespace", default="ricxapp")
        sub.add_argument("--name", default="ricxapp-kpi-forecast", help="the Deployment")
        sub.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, or the "
                         "in-cluster service account")
        sub.add_argument("--context")
        if name == "rollout":
            sub.add_argument("--model", required=True, help="the model directory published")
            sub.add_argument("--model-url", required=True,
                             help="where its .tar.gz is (kpi-forecast k8s package)")
            sub.add_argument("--timeout", type=float, default=600.0, help="seconds")

    job = ops_commands.add_parser(
        "train-job", help="distributed training on the cluster: a Job, or a Kubeflow "
        "PyTorchJob where that resource exists (printed with --dry-run, else submitted)",
        description="Arguments after '--' go to 'kpi-forecast train' unchanged.")
    job.set_defaults(run=cmd_train_job)
    job.add_argument("--image", required=True, help="the training image (Dockerfile target "
                     "train, or its GPU build)")
    job.add_argument("--data", required=True, help="file or Parquet dataset directory on the "
                     "workspace volume, e.g. /workspace/kpis")
    job.add_argument("--out", required=True, help="model directory on the workspace volume")
    job.add_argument("--target", required=True, help="KPI column to forecast")
    job.add_argument("--gpus", type=non_negative_int, default=0, help="GPUs per node "
                     "(default 0: CPU with gloo)")
    job.add_argument("--nodes", type=positive_int, default=1)
    job.add_argument("--procs-per-node", type=non_negative_int, default=0,
                     help="ranks per node (default: one per GPU, or 1 on CPU)")
    job.add_argument("--cpu", type=positive_int, default=2, help="cores per node (default 2)")
    job.add_argument("--memory", default="8Gi", help="memory per node (default 8Gi)")
    job.add_argument("--claim", default="kpi-forecast-training",
                     help="PersistentVolumeClaim mounted at /workspace (ReadWriteMany for "
                     "several nodes)")
    job.add_argument("--name", default="kpi-forecast-train")
    job.add_argument("--namespace", default="ricplt")
    job.add_argument("--kind", choices=["auto", "job", "pytorchjob"], default="auto",
                     help="auto: a PyTorchJob when the cluster has the Kubeflow training "
                     "operator, else a Job")
    job.add_argument("--dry-run", action="store_true", help="print the manifests as YAML")
    job.add_argument("--kubeconfig")
    job.add_argument("--context")
    job.add_argument("train_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    sim = commands.add_parser("e2sim", help="mock E2 node: replay a KPI file over E2")
    sim.add_argument("--data", required=True, help="long CSV, CSV.gz or Parquet, or "
                     "'synthetic': two weeks of seeded history at once, then live load")
    sim.add_argument("--kpi", required=True, action="append", help="COLUMN=MEASUREMENT, "
                     "e.g. prb_util=RRU.PrbUsedDl (a TS 28.552 name); repeat for more KPIs")
    sim.add_argument("--listen", default="127.0.0.1:8090", help="subscription API HOST:PORT")
    sim.add_argument("--freq", help="grid step of the file (inferred when absent)")
    sim.add_argument("--start", help="first timestamp replayed")
    sim.add_argument("--end", help="timestamp where the replay stops")
    sim.add_argument("--speed", type=float, default=1.0,
                     help="replay speed against real time; 0: as fast as possible")
    sim.add_argument("--period-ms", type=float, help="wall-clock ms between reports "
                     "(overrides --speed)")
    sim.add_argument("--cells", type=int, help="replay only the first N cells")
    sim.add_argument("--cells-per-node", type=int, default=8)
    sim.add_argument("--faults", type=parse_faults, default={},
                     help="e.g. malformed=0.01,duplicate=0.01,late=0.01,gap=0.01")
    sim.add_argument("--seed", type=int, default=0)
    sim.set_defaults(run=cmd_e2sim)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.run(args)
    except (DataError, ArtifactError) as exc:
        print(f"kpi-forecast: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPU check: one script for a node with an NVIDIA GPU, air-gapped ones
included, in under 8 minutes. It needs the node's own python3 with a CUDA build of torch,
numpy, pandas and ONNX Runtime's CPU build; this source tree; and the bundle that
``--prepare`` writes on a machine with the project installed (three small pure-Python wheels,
unpacked: tabulate, tqdm, holidays; and a model directory with both ONNX graphs). No venv,
no network.

    # where the project is installed:
    python -m benchmarks.gpu_check --prepare artifacts/gpu-bundle
    # on the GPU node, from the source tree with artifacts/gpu-bundle copied beside it:
    PYTHONPATH=artifacts/gpu-bundle/site python3 -m benchmarks.gpu_check \\
        --model artifacts/gpu-bundle/model

What it measures, on CUDA, as one table (printed, and written to the folder ``--out`` as its
results file, ``gpu_check.json`` and ``gpu_check.csv``, for docs/benchmarks/):
1. the default network, fused (SDPA) against math attention, float32 and bf16 autocast, and
   CUDA against CPU;
2. self-attention from 1k to 32k tokens: math against SDPA (its own dispatch, flash, and the
   memory-efficient kernel): parity in float32 and bf16, latency and peak memory in bf16;
3. the network in long-context mode (one token per step), fused against math;
4. a short bf16 training run through the real training loop;
5. the float16 ONNX graph on ONNX Runtime's CPU provider against torch on CUDA (parity), and
   which provider, type and kernel ran each ONNX Attention node (ONNX Runtime's CUDA provider
   too where ``onnxruntime-gpu`` is installed).

Exits 0 without a GPU (saying so), 1 when a bound or a target is broken. ``--device cpu``
runs every step on the CPU instead: a dry run of the check itself, whose figures say nothing
about a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import math
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from benchmarks.results import Results, machine, revision
from kpi_forecast.model.artifact import WEIGHTS_FILE, load_metadata
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import forecast_calendar
from kpi_forecast.model.network import Forecaster, SelfAttention, instance_stats
from kpi_forecast.model.precision import BFLOAT16_BOUND, FLOAT16_BOUND, FLOAT32_BOUND

CONTEXT, HORIZON = 336, 24  # the default model: two weeks of hourly steps, one day ahead
TOKENS = (1024, 2048, 4096, 8192, 16384, 32768)
QUICK_TOKENS = (1024, 2048, 4096)
FAST_FROM_TOKENS = 4096  # from here on, fused attention must be at least SPEED_UP x faster
SPEED_UP = 2.0
LONG_CONTEXTS = (1344, 4032)  # one token per step: two weeks and six weeks at 15 minutes
# A dry run on the CPU checks the steps, not the figures: small sizes keep it short.
DRY_RUN_TOKENS, DRY_RUN_CONTEXTS = (256, 512), (336,)
BUNDLE_WHEELS = ("tabulate", "tqdm", "holidays")
REVISION_FILE = "revision.txt"  # the bundle's: the tree it was prepared from
COLUMNS = ["part", "case", "ms", "peak MB", "max diff / scale", "bound", "x math", "ok"]


def row(part: str, case: str, **measured: object) -> dict:
    return {"part": part, "case": case, **measured}


def inputs(batch: int, context: int, horizon: int, device: str,
           seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, pd.DatetimeIndex]:
    rng = np.random.default_rng(seed)
    values = rng.gamma(2.0, 10.0, (batch, context)).astype(np.float32)
    values[0, 30:80] = np.nan
    last = pd.DatetimeIndex(pd.Timestamp("2024-03-04", tz="UTC")
                            + pd.to_timedelta(rng.integers(0, 168, batch), "h"))
    calendar = forecast_calendar(last, context, horizon, pd.Timedelta("1h"), "Europe/Rome")
    return torch.from_numpy(values).to(device), torch.from_numpy(calendar).to(device), last


def scaled_difference(a: torch.Tensor, b: torch.Tensor, values: torch.Tensor) -> float:
    """The largest difference, in units of each window's scale."""
    _, _, scale, _ = instance_stats(values.float().cpu())
    diff = (a.float().cpu() - b.float().cpu()).abs() / scale.unsqueeze(-1)
    return float(diff.max())


def autocast(device: str, low: bool) -> contextlib.AbstractContextManager:
    return torch.autocast(device, dtype=torch.bfloat16) if low else contextlib.nullcontext()


def median_ms(call: Callable[[], object], device: str, repeats: int) -> float:
    """Median milliseconds of ``call``: CUDA events on the GPU, the wall clock on the CPU."""
    for _ in range(2):
        call()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000.0)
    return float(np.median(times))


def bounded(part: str, case: str, diff: float, bound: float, **more: object) -> dict:
    return row(part, case, **more, **{"max diff / scale": diff, "bound": bound,
                                      "ok": diff <= bound})


def network_parity(device: str) -> list[dict]:
    torch.backends.cuda.matmul.allow_tf32 = False  # exact float32 for the float32 bounds
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    network = Forecaster(ModelConfig(context=CONTEXT, horizon=HORIZON)).eval()
    values, calendar, _ = inputs(256, CONTEXT, HORIZON, "cpu")
    network.set_attention("math")
    with torch.inference_mode():
        cpu_math = network(values, calendar)
        network.to(device)
        values, calendar = values.to(device), calendar.to(device)
        out = {}
        for kind in ("math", "fused"):
            network.set_attention(kind)
            out[kind] = network(values, calendar)
            with autocast(device, True):
                out[f"{kind} bf16"] = network(values, calendar)
    part = "default network, batch 256"
    return [
        bounded(part, "fused vs math, float32", scaled_difference(
            out["fused"], out["math"], values), FLOAT32_BOUND),
        bounded(part, f"{device} vs CPU, float32 (math)", scaled_difference(
            out["math"], cpu_math, values), FLOAT32_BOUND),
        bounded(part, "fused bf16 vs math float32", scaled_difference(
            out["fused bf16"], out["math"], values), BFLOAT16_BOUND),
        bounded(part, "fused bf16 vs math bf16", scaled_difference(
            out["fused bf16"], out["math bf16"], values), BFLOAT16_BOUND),
    ]


def attention_scaling(tokens: tuple[int, ...], device: str) -> list[dict]:
    """Self-attention (batch 1, 4 heads, width 64): parity of each SDPA kernel with math in
    float32 and bf16; latency and peak memory in bf16. A kernel this device lacks says so."""
    from torch.nn.attention import SDPBackend

    kernels = {"SDPA": None, "SDPA flash": [SDPBackend.FLASH_ATTENTION],
               "SDPA memory-efficient": [SDPBackend.EFFICIENT_ATTENTION]}
    rows, speeds, memory = [], {}, {}
    part = "self-attention, bf16 timings"
    for n in tokens:
        layer = SelfAttention(ModelConfig(context=n, horizon=1, dropout=0.0)).to(device).eval()
        x = torch.randn(1, n, 64, device=device)
        reference: dict[bool, torch.Tensor] = {}
        math_ms = None
        try:
            with torch.inference_mode():
                layer.attention = "math"
                for low in (False, True):
                    with autocast(device, low):
                        reference[low] = layer(x)
                math_ms, math_mb = timed_attention(layer, x, device)
            rows.append(row(part, f"{n} tokens, math", **{"ms": math_ms, "peak MB": math_mb}))
            memory[("math", n)] = math_mb
        except RuntimeError as exc:  # out of memory: math holds the n x n scores
            rows.append(row(part, f"{n} tokens, math: {str(exc).splitlines()[0][:60]}"))
        layer.attention = "fused"
        for name, backends in kernels.items():
            for low in (False, True):
                label = f"{n} tokens, {name}, {'bf16' if low else 'float32'}"
                try:
                    with torch.inference_mode(), kernel(backends):
                        with autocast(device, low):
                            out = layer(x).float()
                        diff = (float((out - reference[low].float()).abs().max())
                                if low in reference else None)
                        del out
                        ms, mb = timed_attention(layer, x, device) if low else (None, None)
                except RuntimeError as exc:  # no such kernel for this device, type or shape
                    rows.append(row(part, f"{label}: {str(exc).splitlines()[0][:60]}"))
                    continue
                timing = {}
                if low:
                    timing = {"ms": ms, "peak MB": mb}
                    memory[(name, n)] = mb
                    if math_ms is not None:
                        timing["x math"] = speeds[(name, n)] = math_ms / ms
                if diff is None:  # no math reference to compare with
                    rows.append(row(part, label, **timing))
                    continue
                # x has unit variance: the differences are in units of its scale.
                rows.append(bounded(part, label, diff,
                                    BFLOAT16_BOUND if low else FLOAT32_BOUND, **timing))
        del layer, x, reference
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows + scaling_targets(tokens, speeds, memory, device)


def kernel(backends: list | None) -> contextlib.AbstractContextManager:
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(backends) if backends else contextlib.nullcontext()


def timed_attention(layer: SelfAttention, x: torch.Tensor, device: str) -> tuple[float, float]:
    """bf16 milliseconds and, on CUDA, peak MB above what was allocated before the call."""
    with autocast(device, True):
        if device != "cuda":
            return median_ms(lambda: layer(x), device, 3), math.nan
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
        layer(x)
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - baseline) / 2**20
        return median_ms(lambda: layer(x), device, 5), peak


def scaling_targets(tokens: tuple[int, ...], speeds: dict, memory: dict, device: str) -> list:
    """The GPU targets: fused at least SPEED_UP x faster from FAST_FROM_TOKENS on; memory
    linear in the tokens for fused kernels, quadratic for math (doubling the tokens: about
    2x against about 4x). They are a GPU's: a dry run on the CPU is held to none."""
    rows: list[dict] = []
    if device != "cuda":
        return rows
    for (name, n), speed in speeds.items():
        if n >= FAST_FROM_TOKENS:
            rows.append(row("targets", f"{name} at {n} tokens, at least {SPEED_UP:g}x math",
                            **{"x math": speed, "ok": speed >= SPEED_UP}))
    for name in ("math", "SDPA", "SDPA flash", "SDPA memory-efficient"):
        pairs = [(memory[(name, a)], memory[(name, b)]) for a, b in itertools.pairwise(tokens)
                 if (name, a) in memory and (name, b) in memory and memory[(name, a)] > 0]
        if not pairs:
            continue
        growth = max(b / a for a, b in pairs) if name != "math" else min(b / a for a, b in pairs)
        want = "quadratic (>= 3x per doubling)" if name == "math" else "linear (<= 2.5x)"
        ok = growth >= 3.0 if name == "math" else growth <= 2.5
        rows.append(row("targets", f"{name} memory {want}: {growth:.2f}x", ok=ok))
    return rows


def long_context(device: str, contexts: tuple[int, ...]) -> list[dict]:
    """The network with one token per step (``--patch-len 1``), fused against math."""
    rows = []
    for context in contexts:
        torch.manual_seed(0)
        cfg = ModelConfig(context=context, horizon=HORIZON, patch_len=1, dropout=0.0)
        network = Forecaster(cfg).to(device).eval()
        values, calendar, _ = inputs(8, context, HORIZON, device)
        part = f"long-context network, {cfg.n_tokens} tokens, batch 8"
        out, ms = {}, {}
        with torch.inference_mode():
            for kind in ("math", "fused"):
                network.set_attention(kind)
                for low in (False, True):
                    with autocast(device, low):
                        out[(kind, low)] = network(values, calendar)
                with autocast(device, True):
                    ms[kind] = median_ms(functools.partial(network, values, calendar),
                                         device, 5)
        rows.append(bounded(part, "fused vs math, float32", scaled_difference(
            out[("fused", False)], out[("math", False)], values), FLOAT32_BOUND))
        rows.append(bounded(part, "fused bf16 vs math float32", scaled_difference(
            out[("fused", True)], out[("math", False)], values), BFLOAT16_BOUND,
            **{"ms": ms["fused"], "x math": ms["math"] / ms["fused"]}))
        del network
    return rows


def training_run(device: str, steps_per_epoch: int = 50) -> list[dict]:
    """Three short epochs on synthetic cells through the real training loop (bf16 autocast
    on CUDA). The panel is built here, not read through ``data.ingest``, which needs pyarrow."""
    from kpi_forecast.data.panel import Panel
    from kpi_forecast.data.synthetic import generate
    from kpi_forecast.training.train import TrainConfig, train

    frame = generate(n_cells=16, days=28, seed=0)
    wide = frame.pivot(index="timestamp", columns="cell_id", values="traffic_mb")
    panel = Panel(list(wide.columns), pd.DatetimeIndex(wide.index).tz_convert("UTC"),
                  wide.to_numpy(np.float32).T.copy(), "1h", "traffic_mb", "Europe/Paris")
    config = TrainConfig(max_epochs=3, steps_per_epoch=steps_per_epoch, device=device,
                         max_minutes=3)
    result = train(panel, ModelConfig(context=7 * 24, horizon=24), config, progress=False)
    finite = bool(np.isfinite(result.best_validation_loss))
    where = f"{device} (bf16 autocast)" if device == "cuda" else device
    return [row("training (16 synthetic cells)", f"{result.epochs} epochs on {where}"
                f", {result.samples_per_second:.0f} windows/s, best validation loss "
                f"{result.best_validation_loss:.4f}", ms=result.seconds * 1000.0, ok=finite)]


def onnx_graphs(model_dir: Path, device: str) -> list[dict]:
    """The float16 graph on ONNX Runtime's CPU provider against torch on ``device``, float32
    (parity); then which provider, type and kernel ran each Attention node, with the CUDA
    provider where this onnxruntime has it."""
    import onnxruntime as ort

    from benchmarks.attention_kernels import attention_nodes
    from kpi_forecast.model.runtime import CUDA, OnnxForecaster, RuntimeOptions

    meta = load_metadata(model_dir)
    # Not training.fit.load_network: that module imports the exporter, hence onnx, which an
    # air-gapped node does not have.
    network = Forecaster(meta.config)
    network.load_state_dict(torch.load(model_dir / WEIGHTS_FILE, weights_only=True))
    network = network.to(device).eval()
    half = OnnxForecaster(model_dir, RuntimeOptions(provider="cpu", precision="float16"))
    values, calendar, last = inputs(256, meta.context, meta.horizon, "cpu")
    with torch.inference_mode():
        expected = network(values.to(device), calendar.to(device))
    got = torch.from_numpy(half.forecast(values.numpy(), last))
    rows = [bounded("ONNX float16 graph", "ONNX Runtime CPU (float16) vs torch "
                    f"{device} (float32), batch 256", scaled_difference(got, expected, values),
                    FLOAT16_BOUND)]
    # The CUDA provider serves the float16 graph; the CPU provider is shown running both.
    runs = [("cpu", "float32"), ("cpu", "float16")]
    if CUDA in ort.get_available_providers():
        runs.insert(0, ("cuda", "auto"))
    for provider, precision in runs:
        table, described = attention_nodes(model_dir, RuntimeOptions(provider=provider,
                                                                      precision=precision))
        summary = table.groupby(["provider", "dtype", "kernel"]).size()
        for (ran_on, dtype, kernel), nodes in summary.items():
            rows.append(row("ONNX Attention nodes", f"{provider} asked: {nodes} node(s) ran on "
                            f"{ran_on} in {dtype}, kernel {kernel} ({described['precision']} "
                            f"graph, onnxruntime {described['onnxruntime']})",
                            ok=ran_on == described["provider"]))
    return rows


def prepare(bundle: Path) -> None:
    """Write what the GPU node needs beside this source tree: site/ (the pure-Python wheels,
    unpacked, for Python 3.12) and model/ (the default network, untrained, both graphs)."""
    from benchmarks.runtime import default_model

    site = bundle / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site),
                    "--python-version", "3.12", "--only-binary=:all:", "--no-deps",
                    "--upgrade", *BUNDLE_WHEELS], check=True)
    model = bundle / "model"
    model.mkdir(parents=True, exist_ok=True)
    network, _ = default_model(model)
    torch.save(network.state_dict(), model / WEIGHTS_FILE)
    (bundle / REVISION_FILE).write_text(revision() + "\n")
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) / 2**20
    print(f"gpu-check bundle: {bundle} ({size:.1f} MiB); on the GPU node run:\n"
          f"PYTHONPATH={site} python3 -m benchmarks.gpu_check --model {model}")


def run_part(name: str, measure: Callable[[], list[dict]]) -> list[dict]:
    """One part's rows; a part that breaks becomes one failed row (its traceback on stderr),
    so that a first run on a new node still reports every other part."""
    started = time.monotonic()
    try:
        rows = measure()
    except Exception as exc:  # noqa: BLE001 - any failure is the node's finding, reported
        traceback.print_exc()
        rows = [row(name, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}",
                    ok=False)]
    print(f"gpu-check: {name}: {len(rows)} row(s) in {time.monotonic() - started:.1f} s",
          file=sys.stderr, flush=True)
    return rows


def report(args: argparse.Namespace, device: str) -> tuple[pd.DataFrame, Results]:
    started = time.monotonic()
    if device != "cuda":
        tokens, contexts = DRY_RUN_TOKENS, DRY_RUN_CONTEXTS
    else:
        tokens = QUICK_TOKENS if args.quick else TOKENS
        contexts = LONG_CONTEXTS[:1] if args.quick else LONG_CONTEXTS
    parts = {
        "default network": functools.partial(network_parity, device),
        "self-attention": functools.partial(attention_scaling, tokens, device),
        "long-context network": functools.partial(long_context, device, contexts),
        "training": functools.partial(training_run, device, 4 if args.quick else 50),
        "ONNX graphs": functools.partial(onnx_graphs, Path(args.model), device),
    }
    rows = [r for name, measure in parts.items() for r in run_part(name, measure)]
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    passed = bool(table["ok"].dropna().all())
    table["ok"] = table["ok"].map({True: "yes", False: "**NO**"})
    table = table.astype(object).where(table.notna(), None)  # blank, not "nan"
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        where = (f"{properties.name} ({properties.total_memory / 2**30:.0f} GiB, compute "
                 f"capability {properties.major}.{properties.minor}), torch {torch.__version__} "
                 f"(CUDA {torch.version.cuda})")
    else:
        where = f"the CPU (a dry run: no GPU figures), torch {torch.__version__}"
    options = " --quick" * args.quick + (" --device cpu" if device != "cuda" else "")
    results = Results(
        "gpu_check", f"PYTHONPATH=artifacts/gpu-bundle/site python3 -m benchmarks.gpu_check "
        f"--model artifacts/gpu-bundle/model{options}", "benchmarks.md", "gpu-check",
        figures={"passed": passed, "seconds": round(time.monotonic() - started)},
        tables=["gpu_check"], machine=f"{where}, host {machine()}",
        revision=bundle_revision(Path(args.model).parent))
    return table, results


def bundle_revision(bundle: Path) -> str:
    """The tree's revision, as ``--prepare`` recorded it: a node's copy may have no git."""
    recorded = bundle / REVISION_FILE
    return recorded.read_text().strip() if recorded.is_file() else revision()


def markdown(table: pd.DataFrame, results: Results) -> str:
    passed = results.figures["passed"]
    return "\n".join([
        f"{results.measured}, {results.figures['seconds']} s. Bounds in units of each series' "
        "scale (model/precision.py).",
        "",
        table.to_markdown(index=False, floatfmt=".3g", missingval=""),
        "",
        "Result: " + ("every bound and target held" if passed else "FAILED (rows with ok False)"),
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="artifacts/gpu-bundle/model",
                        help="a model directory with weights.pt and both graphs")
    parser.add_argument("--out", default="artifacts/gpu-check",
                        help="the folder for the results file, its table and the report")
    parser.add_argument("--quick", action="store_true", help="fewer token counts and steps")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a dry run of the check on the CPU")
    parser.add_argument("--prepare", metavar="BUNDLE",
                        help="write the bundle for a GPU node here, and stop")
    args = parser.parse_args()
    if args.prepare:
        prepare(Path(args.prepare))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no NVIDIA GPU visible to torch {torch.__version__} on {machine()}; "
              "nothing to check (run it on a GPU node)")
        return 0
    if not (Path(args.model) / WEIGHTS_FILE).is_file():
        print(f"gpu-check: {args.model}: no {WEIGHTS_FILE}; write the bundle first with "
              "python -m benchmarks.gpu_check --prepare artifacts/gpu-bundle", file=sys.stderr)
        return 2
    table, results = report(args, args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "gpu_check.csv", index=False)
    results.write(out)
    text = markdown(table, results)
    (out / "gpu_check.md").write_text(text + "\n")
    print(text)
    print(f"written: {out}/gpu_check.json, gpu_check.csv (docs/benchmarks/ takes both), "
          "gpu_check.md")
    return 0 if results.figures["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

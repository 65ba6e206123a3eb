"""Long-context mode: short patches, many tokens per window, against the default.

The default model reads a two-week hourly window as 14 tokens of a day each; with
``--patch-len 4`` it reads 84, with ``--patch-len 1`` one token per step (336). Attention's
cost grows with the square of the tokens, so that is where fused kernels count. Each
configuration trains on the embedded sample (all but its last 14 days) under the same time
budget, then is scored on the held-out days (daily day-ahead origins, recalibrated as
`kpi-forecast backtest` does) and timed: ONNX Runtime's `forecast()` on CPU, and the torch
forward pass with fused (SDPA) against plain-math attention.

    python -m benchmarks.long_context [--minutes 2] [--patch-lens 0 4 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from benchmarks.common import held_out, write_section
from benchmarks.results import RESULTS, Results
from benchmarks.runtime import percentiles
from kpi_forecast.data.ingest import load_panel
from kpi_forecast.model.config import ModelConfig
from kpi_forecast.model.features import N_CALENDAR
from kpi_forecast.model.network import Forecaster
from kpi_forecast.training.backtest import MODEL_NAME
from kpi_forecast.training.train import TrainConfig

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/cells_hourly.csv.gz"
TARGET = "traffic_mb"
CONTEXT, HORIZON, TEST_DAYS = 336, 24, 14
FORWARD_BATCH = 64


def forward_ms(cfg: ModelConfig) -> dict[str, float]:
    """The torch forward pass on CPU at batch FORWARD_BATCH, fused against math attention
    (untrained weights: the cost does not depend on their values)."""
    torch.manual_seed(0)
    network = Forecaster(cfg).eval()
    values = torch.rand(FORWARD_BATCH, cfg.context) * 100.0
    calendar = torch.zeros(FORWARD_BATCH, cfg.context + cfg.horizon, N_CALENDAR)
    timings = {}
    with torch.inference_mode():
        for kind in ("fused", "math"):
            network.set_attention(kind)
            timings[kind] = percentiles(lambda: network(values, calendar), 10)[0]
    return timings


def run(patch_len: int, minutes: float, seed: int) -> dict:
    panel = load_panel(SAMPLE, TARGET, tz="Europe/Rome")
    day = panel.steps_per("1D")
    cfg = ModelConfig(context=CONTEXT, horizon=HORIZON, patch_len=patch_len)
    evaluation = held_out(panel, panel.n_steps - TEST_DAYS * day, cfg,
                          TrainConfig(max_minutes=minutes, seed=seed), folds=TEST_DAYS,
                          step=day, source=str(SAMPLE))
    table = evaluation.table
    parameters = sum(p.numel() for p in Forecaster(cfg).parameters())
    forward = forward_ms(cfg)
    return {
        "patch_len": cfg.patch_len, "tokens": cfg.n_patches, "parameters": parameters,
        "epochs": evaluation.training["epochs"], "train_s": evaluation.training["seconds"],
        "windows_per_s": evaluation.training["samples_per_second"],
        "mae": table.loc[MODEL_NAME, "mae"],
        "mae_vs_snaive_week": table.loc[MODEL_NAME, "mae_vs_snaive_week"],
        "coverage_p10_p90": table.loc[MODEL_NAME, "coverage"],
        "forward_fused_ms": forward["fused"], "forward_math_ms": forward["math"],
        "math_over_fused": forward["math"] / forward["fused"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="training budget per model")
    parser.add_argument("--patch-lens", type=int, nargs="+", default=[0, 4, 1],
                        help="0 = the default (about 14 tokens per window)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    rows = pd.DataFrame([run(p, args.minutes, args.seed) for p in args.patch_lens])
    print(rows.to_string(index=False))
    if args.no_docs:
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows.to_csv(RESULTS / "long_context.csv", index=False)
    write_docs(rows, args.minutes, args.seed)
    return 0


def write_docs(rows: pd.DataFrame, minutes: float, seed: int) -> None:
    default = rows.iloc[0]
    results = Results(
        "long_context", f"python -m benchmarks.long_context --minutes {minutes:g}"
        + (f" --seed {seed}" if seed != 0 else ""), "benchmarks.md", "long-context",
        tables=["long_context"])
    whole = [".0f" if pd.api.types.is_integer_dtype(rows[c]) else ".3f" for c in rows.columns]
    section = "\n".join([
        "## Long-context mode: many tokens per window",
        "",
        f"{results.measured} (part of `make bench`): the embedded sample "
        f"({TARGET}, hourly), trained on all but its last {TEST_DAYS} days under the same "
        f"budget of {minutes:g} minutes each, seed {seed}, scored day-ahead on those "
        "days (daily origins, recalibrated as `kpi-forecast backtest` does). "
        f"`forward_*_ms`: the torch forward pass on CPU at batch {FORWARD_BATCH}, fused "
        "(SDPA) and plain-math attention. `patch_len` is `kpi-forecast train --patch-len`.",
        "",
        rows.to_markdown(index=False, floatfmt=whole),
        "",
        f"Against the default ({int(default['tokens'])} tokens): "
        + "; ".join(
            f"{int(r['tokens'])} tokens: MAE {r['mae'] / default['mae']:.2f}x, "
            f"{r['epochs']:.0f} epoch(s) against {default['epochs']:.0f}, forward pass "
            f"{r['forward_fused_ms'] / default['forward_fused_ms']:.1f}x"
            for _, r in rows.iloc[1:].iterrows())
        + ". The GPU check (`python -m benchmarks.gpu_check`) times the long-context network "
        "fused against math on CUDA.",
    ])
    write_section(results, section)


if __name__ == "__main__":
    sys.exit(main())

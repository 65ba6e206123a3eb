"""Which execution provider, and which kernel, ran each ONNX `Attention` node of a model's graph.

The provider comes from ONNX Runtime's own profile of the session (every node's events name
the provider that ran it); the kernel from the attention kernels' debug output
(``ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO=1``: ``SdpaKernel=FLASH_ATTENTION``, for example),
which the CUDA provider prints for its attention operators in the releases that have it. Runs
wherever ONNX Runtime does; the CUDA provider needs ``onnxruntime-gpu`` and a GPU.

    python -m benchmarks.attention_kernels --model DIR [--provider auto] [--precision auto]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from kpi_forecast.model.features import N_CALENDAR
from kpi_forecast.model.runtime import OnnxForecaster, RuntimeOptions

DEBUG_VARIABLE = "ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO"
BATCHES = (1, 64)
KERNEL = re.compile(r"SdpaKernel=(\w+)")
FLAG = re.compile(r"\b([A-Z_]*ATTENTION[A-Z_]*)=1\b")
NODE = re.compile(r"Node=(\S+)")


@contextlib.contextmanager
def native_stdout(into: Path) -> Iterator[None]:
    """Everything written to file descriptor 1 (C++ included) goes to ``into`` meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(into, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def kernels_named(debug_output: str) -> dict[str, str]:
    """Node name -> kernel, from the attention kernels' debug lines."""
    found = {}
    for line in debug_output.splitlines():
        node = NODE.search(line)
        if node is None:
            continue
        kernel = KERNEL.search(line)
        flags = FLAG.findall(line)
        if kernel or flags:
            found[node.group(1)] = kernel.group(1) if kernel else "+".join(flags)
    return found


def input_type(args: dict) -> str:
    """The element type of a profiled node's first input (what its kernel computed in, since
    ONNX Runtime casts around a node whose provider lacks that type)."""
    shapes = args.get("input_type_shape") or [{}]
    return next(iter(shapes[0]), "?")


def attention_nodes(model_dir: Path, options: RuntimeOptions) -> tuple[pd.DataFrame, dict]:
    """One row per Attention node: the provider that ran it, in which type, its calls and
    mean time, and the kernel where ONNX Runtime said which; and the session's describe()."""
    with tempfile.TemporaryDirectory() as tmp:
        before = os.environ.get(DEBUG_VARIABLE)
        os.environ[DEBUG_VARIABLE] = "1"  # read when a kernel is built: at session creation
        try:
            with native_stdout(Path(tmp) / "stdout.txt"):
                forecaster = OnnxForecaster(
                    model_dir, dataclasses.replace(options, profile_dir=tmp, warmup=False))
                meta = forecaster.metadata
                for batch in BATCHES:
                    forecaster.run(np.ones((batch, meta.context), np.float32),
                                   np.zeros((batch, meta.context + meta.horizon, N_CALENDAR),
                                            np.float32))
                profile = Path(forecaster.session.end_profiling())
        finally:  # as the caller had it
            if before is None:
                os.environ.pop(DEBUG_VARIABLE, None)
            else:
                os.environ[DEBUG_VARIABLE] = before
        events = json.loads(profile.read_text())
        kernels = kernels_named((Path(tmp) / "stdout.txt").read_text(errors="replace"))
    runs = [event for event in events if event.get("cat") == "Node"
            and event.get("args", {}).get("op_name") == "Attention"
            and event.get("name", "").endswith("_kernel_time")]
    rows = pd.DataFrame([{"node": event["name"].removesuffix("_kernel_time"),
                          "provider": event["args"].get("provider", "?"),
                          "dtype": input_type(event["args"]),
                          "us": float(event.get("dur", 0))} for event in runs])
    if rows.empty:
        columns = ["node", "provider", "dtype", "calls", "mean_us", "kernel"]
        return pd.DataFrame(columns=columns), forecaster.describe()
    table = (rows.groupby(["node", "provider", "dtype"], sort=False)["us"]
             .agg(calls="count", mean_us="mean").reset_index())
    table["kernel"] = [kernels.get(node, "not reported") for node in table["node"]]
    return table, forecaster.describe()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model directory")
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--precision", choices=["auto", "float32", "float16"], default="auto")
    args = parser.parse_args()
    table, described = attention_nodes(Path(args.model), RuntimeOptions(
        provider=args.provider, precision=args.precision))
    print(f"{args.model}: the {described['precision']} graph on {described['provider']} "
          f"(onnxruntime {described['onnxruntime']}), {len(table)} Attention node(s), "
          f"batches {', '.join(map(str, BATCHES))}")
    print(table.to_markdown(index=False, floatfmt=".1f"))
    if (table["kernel"] == "not reported").all():
        print(f"kernel: not reported by this onnxruntime with {DEBUG_VARIABLE}=1 (its CPU "
              "provider and older CUDA builds print none)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPU check as an air-gapped GPU node runs it: the node's python3 with only torch, numpy,
pandas and ONNX Runtime (and what they require), kpi-forecast not installed, the bundle from
``--prepare`` beside the source tree. Here without a GPU: the plain run must say so and exit
0; the dry run on the CPU goes through every step of the check."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from benchmarks import gpu_check
from benchmarks.gpu_check import BUNDLE_WHEELS, COLUMNS, REVISION_FILE
from benchmarks.results import load
from kpi_forecast.model.artifact import FLOAT16_ONNX_FILE, ONNX_FILE, WEIGHTS_FILE, load_metadata
from tests.air_gapped import node_site

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_LIMIT_MB = 64  # what such a node takes copied beside the source, in all


@pytest.fixture
def bundle(gpu_bundle: Path) -> Path:
    return gpu_bundle


def on_the_node(bundle: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``python3 -m benchmarks.gpu_check ARGS`` with no site-packages (-S) but the node's."""
    site = node_site(tmp_path / "node-site")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
           "PYTHONPATH": f"{bundle / 'site'}{os.pathsep}{site}"}
    return subprocess.run([sys.executable, "-S", "-m", "benchmarks.gpu_check", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)


def test_the_bundle_holds_pure_python_wheels_and_both_graphs_within_the_limit(
        bundle: Path) -> None:
    site = bundle / "site"
    for name in BUNDLE_WHEELS:
        assert any(site.glob(f"{name}-*.dist-info")), name
    compiled = [p for p in site.rglob("*") if p.suffix in (".so", ".pyd")]
    assert not compiled, compiled
    model = bundle / "model"
    assert {ONNX_FILE, FLOAT16_ONNX_FILE, WEIGHTS_FILE} <= {p.name for p in model.iterdir()}
    assert load_metadata(model).precisions == ["float32", "float16", "int8"]
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    assert size < BUNDLE_LIMIT_MB * 2**20


def test_the_node_has_no_kpi_forecast_and_no_other_packages(bundle: Path,
                                                            tmp_path: Path) -> None:
    site = node_site(tmp_path / "node-site")
    names = {p.name.split("-")[0].lower() for p in site.iterdir()}
    assert {"torch", "numpy", "pandas", "onnxruntime"} <= names
    assert not names & {"kpi_forecast", "onnx", "onnxscript", "pyarrow", "tqdm", "holidays",
                        "tabulate", "fastapi"}
    assert not any(zipfile.is_zipfile(p) for p in site.iterdir() if p.is_file())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_0(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu-check"
    done = on_the_node(bundle, tmp_path, "--model", str(bundle / "model"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "no NVIDIA GPU" in done.stdout
    assert not out.exists()


@pytest.mark.slow
def test_a_dry_run_on_the_cpu_goes_through_every_part_as_one_table(
        bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu-check"
    done = on_the_node(bundle, tmp_path, "--device", "cpu", "--quick", "--model",
                       str(bundle / "model"), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (out / "gpu_check.md").read_text()
    results = load("gpu_check", out)
    assert results.figures["passed"] is True and results.tables == ["gpu_check"]
    assert results.revision == (bundle / REVISION_FILE).read_text().strip()
    assert "the CPU (a dry run" in results.machine and "--device cpu" in results.command
    assert list(pd.read_csv(out / "gpu_check.csv").columns) == COLUMNS
    headers = [line for line in report.splitlines() if line.startswith("| part")]
    assert len(headers) == 1 and all(column in headers[0] for column in COLUMNS)
    for part in ("default network", "self-attention", "long-context network",
                 "training (16 synthetic cells)", "ONNX float16 graph", "ONNX Attention nodes"):
        assert f"| {part}" in report, part
    assert "9 node(s) ran on CPUExecutionProvider in float" in report
    assert "Result: every bound and target held" in report


def test_math_attention_out_of_memory_leaves_the_fused_kernels_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU smaller than the check's largest token counts, math's n x n scores do not fit."""
    real = gpu_check.SelfAttention.forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attention == "math" and x.shape[1] >= 512:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
        return real(self, x)

    monkeypatch.setattr(gpu_check.SelfAttention, "forward", forward)
    rows = {row["case"]: row for row in gpu_check.attention_scaling((256, 512), "cpu")}
    assert "512 tokens, math: CUDA out of memory. Tried to allocate 16.00 GiB" in rows
    fused = rows["512 tokens, SDPA, bf16"]
    assert fused["ms"] > 0 and "x math" not in fused and "ok" not in fused
    assert rows["256 tokens, SDPA, bf16"]["x math"] > 0 and rows["256 tokens, SDPA, bf16"]["ok"]


def test_a_part_that_breaks_is_one_failed_row_and_the_next_part_still_runs(
        capsys: pytest.CaptureFixture) -> None:
    """A first run on a new node (another torch, another pandas) must still report the rest."""
    def broken() -> list[dict]:
        raise RuntimeError("no kernel image is available for execution on the device\nmore")

    rows = gpu_check.run_part("self-attention", broken)
    rows += gpu_check.run_part("next", lambda: [gpu_check.row("next", "case", ok=True)])
    assert rows[0] == {"part": "self-attention", "case": "failed: RuntimeError: no kernel "
                       "image is available for execution on the device", "ok": False}
    assert rows[1]["ok"] is True
    err = capsys.readouterr().err
    assert "Traceback" in err and "gpu-check: next: 1 row(s)" in err

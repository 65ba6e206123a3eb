"""The GPU check's own parts that can run here; the GPU itself is exercised by `make gpu-check`."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "no NVIDIA GPU" in done.stdout
    assert not out.exists()


@pytest.mark.slow
def test_its_training_run_goes_through_the_real_loop() -> None:
    table = gpu_check.training_run("cpu", steps_per_epoch=4)
    assert table.loc[0, "finite"] and table.loc[0, "epochs"] >= 1
    assert table.loc[0, "windows/s"] > 0

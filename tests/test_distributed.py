"""Data-parallel training: torchrun with 2 gloo ranks on loopback against one process, a
partitioned Parquet dataset read rank by rank, and a run whose rank is killed resuming from
its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import torch

from model.runtime import OnnxForecaster
from training.checkpoint import CHECKPOINT_FILE
from training.distributed import Group, ShardedPairs
from training.ingest import load_panel
from training.panel import Panel

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data/sample/cells_hourly.csv.gz"
TARGET = "traffic_mb"
CELLS, DAYS = 6, 21
# Small enough for a few seconds per epoch; the global batch is the same for every world size.
TRAIN_ARGS = ["--target", TARGET, "--context", "7D", "--horizon", "1D", "--max-epochs", "4",
              "--batch-size", "64", "--quiet"]


def small_frame() -> pd.DataFrame:
    frame = pd.read_csv(SAMPLE)
    cells = sorted(frame["cell_id"].unique())[:CELLS]
    frame = frame[frame["cell_id"].isin(cells)]
    stamps = pd.to_datetime(frame["timestamp"], utc=True)
    return frame[stamps < stamps.min() + pd.Timedelta(days=DAYS)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same rows as one CSV file and as a Parquet dataset of 3 cell-bucket partitions."""
    root = tmp_path_factory.mktemp("distributed-data")
    frame = small_frame()
    csv = root / "cells.csv"
    frame.to_csv(csv, index=False)
    table = pa.Table.from_pandas(
        frame.assign(bucket=frame["cell_id"].map(lambda c: int(c[-3:]) % 3)),
        preserve_index=False)
    ds.write_dataset(table, root / "dataset", format="parquet", partitioning=["bucket"],
                     partitioning_flavor="hive")
    return {"csv": csv, "dataset": root / "dataset"}


def train_command(data: Path, out: Path, ranks: int, *extra: str,
                  max_restarts: int = 0) -> list[str]:
    cli = ["-m", "training.cli", "train", "--data", str(data), "--out", str(out),
           *TRAIN_ARGS, *extra]
    if ranks == 1:
        return [sys.executable, *cli]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", f"--max-restarts={max_restarts}", *cli]


def environment() -> dict[str, str]:
    # One thread per process in every run, so that one and two processes add up the same way.
    return {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def train(data: Path, out: Path, ranks: int, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(train_command(data, out, ranks, *extra), cwd=ROOT, env=environment(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def forecasts(model_dir: Path, panel: Panel) -> np.ndarray:
    forecaster = OnnxForecaster(model_dir)
    last = pd.DatetimeIndex([panel.index[-1]] * panel.n_cells)
    return forecaster.forecast(panel.values, last)


def test_blocks_cover_every_cell_once_in_order() -> None:
    for world in range(1, 6):
        for n_cells in (world, 7, 24):
            blocks = [Group(rank, world).block(n_cells) for rank in range(world)]
            cells = [i for block in blocks for i in range(n_cells)[block]]
            assert cells == list(range(n_cells))
            assert all(b.stop > b.start for b in blocks)


def test_sharded_pairs_draw_the_same_batch_as_one_list() -> None:
    rng = np.random.default_rng(0)
    whole = np.stack([np.repeat(np.arange(10), 30), np.tile(np.arange(30), 10)], axis=1)
    cut = [0, 70, 180, 300]  # three ranks holding 70, 110 and 120 pairs
    shards = [ShardedPairs(whole[a:b], a, len(whole)) for a, b in zip(cut, cut[1:], strict=False)]
    indices = rng.integers(0, len(whole), 256)
    taken = np.concatenate([shard.take(indices) for shard in shards])
    # The same multiset of pairs as one process drawing from the whole list.
    assert sorted(map(tuple, taken)) == sorted(map(tuple, whole[indices]))
    keep = np.sort(rng.choice(len(whole), 50, replace=False))
    subsets = [shard.subset(keep) for shard in shards]
    assert np.array_equal(np.concatenate([s.local for s in subsets]), whole[keep])
    assert [s.offset for s in subsets] == [0, len(subsets[0].local),
                                           len(subsets[0].local) + len(subsets[1].local)]
    assert all(s.total == 50 for s in subsets)


def test_a_dataset_read_by_blocks_of_files_holds_every_cell_once(data: dict[str, Path]) -> None:
    whole = load_panel(data["dataset"], TARGET)
    halves = [load_panel(data["dataset"], TARGET, shard=(k, 2)) for k in range(2)]
    assert [c for half in halves for c in half.cell_ids] == whole.cell_ids
    assert sorted(whole.cell_ids) == sorted(load_panel(data["csv"], TARGET).cell_ids)
    for half in halves:
        rows = [whole.cell_ids.index(c) for c in half.cell_ids]
        offset = whole.index.get_loc(half.index[0])
        expected = whole.values[rows, offset : offset + half.n_steps]
        assert np.array_equal(half.values, expected, equal_nan=True)


@pytest.mark.slow
def test_two_gloo_ranks_train_the_model_one_process_trains(data: dict[str, Path],
                                                           tmp_path: Path) -> None:
    # Dropout off: its masks depend on how the batch is split, everything else must not.
    train(data["csv"], tmp_path / "one", 1, "--dropout", "0")
    two = train(data["csv"], tmp_path / "two", 2, "--dropout", "0")
    assert "model:" in two.stdout  # rank 0 reports
    one_meta = json.loads((tmp_path / "one/metadata.json").read_text())
    two_meta = json.loads((tmp_path / "two/metadata.json").read_text())
    assert two_meta["training"]["ranks"] == 2 and one_meta["training"]["ranks"] == 1
    assert two_meta["training"]["epochs"] == one_meta["training"]["epochs"] == 4
    assert two_meta["training"]["best_validation_loss"] == pytest.approx(
        one_meta["training"]["best_validation_loss"], rel=1e-3)
    one_weights = torch.load(tmp_path / "one/weights.pt", weights_only=True)
    two_weights = torch.load(tmp_path / "two/weights.pt", weights_only=True)
    worst = max((one_weights[k] - two_weights[k]).abs().max().item() for k in one_weights)
    assert worst < 1e-3
    panel = load_panel(data["csv"], TARGET)
    one_forecast, two_forecast = forecasts(tmp_path / "one", panel), forecasts(
        tmp_path / "two", panel)
    scale = np.nanmean(np.abs(panel.values))
    assert np.max(np.abs(one_forecast - two_forecast)) / scale < 1e-3


def children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_killed_rank_resumes_from_the_last_checkpoint(data: dict[str, Path],
                                                        tmp_path: Path) -> None:
    train(data["dataset"], tmp_path / "whole", 2)
    out = tmp_path / "killed"
    run = subprocess.Popen(train_command(data["dataset"], out, 2, max_restarts=1), cwd=ROOT,
                           env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    checkpoint = out / CHECKPOINT_FILE
    deadline = time.monotonic() + 300
    while not checkpoint.exists():
        assert run.poll() is None, run.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.05)
    workers = children(run.pid)
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGKILL)  # rank 1 dies after an epoch
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr[-3000:]
    assert "resuming from" in stderr
    assert not checkpoint.exists()  # removed once training ended
    # The restarted ranks continue where the checkpoint left off: same weights as a run that
    # never died (dropout on, so the random streams are restored too).
    whole = torch.load(tmp_path / "whole/weights.pt", weights_only=True)
    resumed = torch.load(out / "weights.pt", weights_only=True)
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=1e-6, msg=name)

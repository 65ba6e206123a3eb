"""Data-parallel training: torchrun with 2 gloo ranks on loopback against one process, a
partitioned Parquet dataset read rank by rank, and a run whose rank is killed resuming from
its checkpoint."""

from __future__ import annotations

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

from kpi_forecast.data.ingest import load_panel
from kpi_forecast.training.checkpoint import CHECKPOINT_FILE
from kpi_forecast.training.distributed import Group, ShardedPairs
from tests.beside import EPOCHS_NOT_CLOCK

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data/sample/cells_hourly.csv.gz"
TARGET = "traffic_mb"
CELLS, DAYS = 6, 21
# Small enough for a few seconds per epoch; the global batch is the same for every world size.
# No float16 graph: its export took 14 of a run's 37 s here, and these tests are about training.
TRAIN_ARGS = ["--target", TARGET, "--context", "7D", "--horizon", "1D", "--max-epochs", "4",
              "--batch-size", "64", "--quiet", "--no-gpu-graph", *EPOCHS_NOT_CLOCK]


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
    cli = ["-m", "kpi_forecast.cli", "train", "--data", str(data), "--out", str(out),
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


# float64's unit roundoff. One rank and two add the same loss terms in other orders, so their
# sums differ by rounding alone; in float32 four epochs of training had amplified that to 0.6 %
# of a forecast on one CPU and not on another, so the equivalence is checked in float64, where
# rounding is 10^9 times smaller than float32's differences and any real one stands out.
UNIT_ROUNDOFF = float(np.finfo(np.float64).eps) / 2


@pytest.mark.slow
def test_two_gloo_ranks_take_the_steps_one_process_takes(data: dict[str, Path],
                                                         tmp_path: Path) -> None:
    runs = {}
    for ranks in (1, 2):
        out = tmp_path / f"ranks-{ranks}.pt"
        command = [sys.executable, "-m", "tests.ddp_float64", str(data["csv"]), str(out)]
        if ranks > 1:
            command[1:2] = ["-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={ranks}", "-m"]
        done = subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[ranks] = torch.load(out, weights_only=True)
    one, two = runs[1], runs[2]
    # The first step's gradient, summed over the ranks by DDP: a sum of the same loss terms
    # (batch x horizon x quantiles x members of them) in another order, so within that many
    # roundings of its largest entry. A window lost or counted twice would be 1/64 off.
    terms = 64 * 24 * 3 * 3
    gradient_one = torch.cat([g.flatten() for g in one["first_gradient"]])
    gradient_two = torch.cat([g.flatten() for g in two["first_gradient"]])
    scale = gradient_one.abs().max().item()
    assert (gradient_one - gradient_two).abs().max().item() <= terms * UNIT_ROUNDOFF * scale
    # The trained weights: two epochs of such steps. Each step's rounding feeds the next, so
    # the bound is looser (10^-9: 5e-15 was measured); a difference of float32's size or more
    # (1e-7, what a wrong weighting under Adam's normalisation would leave) still fails it.
    assert one["epochs"] == two["epochs"] == 2
    worst = max((one["weights"][k] - two["weights"][k]).abs().max().item()
                for k in one["weights"])
    assert worst <= 1e-9
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-12)


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
    # The restarted ranks continue where the checkpoint left off: the same arithmetic, in the
    # same order on the same machine, as a run that never died (dropout on, so the random
    # streams are restored too), hence the same weights bit for bit.
    whole = torch.load(tmp_path / "whole/weights.pt", weights_only=True)
    resumed = torch.load(out / "weights.pt", weights_only=True)
    for name, tensor in whole.items():
        assert torch.equal(resumed[name], tensor), name

"""Data-parallel training across processes: torchrun's environment, cell shards, collectives.

Under ``torchrun --nproc-per-node N`` (one or many nodes) every rank holds only its own block
of cells. All ranks draw the same global batch indices over the pairs of every rank, in rank
order; each trains on those that fall in its block, and DistributedDataParallel sums the
gradients. Each rank weighs its part by the global count of loss terms, so the update is the
one a single process would make on the whole global batch. One process is the one-rank case of
the same code, without a process group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from kpi_forecast.data.panel import DataError, Panel


@dataclass(frozen=True)
class Group:
    """This process's place among the ranks training together."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes metrics, checkpoints and the model."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def block(self, n_cells: int) -> slice:
        """This rank's contiguous block of cells: blocks in rank order keep the cell order."""
        return slice(self.rank * n_cells // self.world, (self.rank + 1) * n_cells // self.world)

    def sum(self, values: list[float]) -> np.ndarray:
        """The element-wise sum over ranks, on every rank (float64)."""
        array = np.asarray(values, dtype=np.float64)
        if not self.distributed:
            return array
        # nccl reduces device tensors only; gloo takes CPU ones.
        tensor = torch.from_numpy(array).to(self.device)
        dist.all_reduce(tensor)
        return tensor.cpu().numpy()

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one: decisions all ranks must share."""
        return bool(self.sum([float(flag)])[0] > 0)

    def gather(self, item: object) -> list:
        """Every rank's ``item``, in rank order, on every rank."""
        if not self.distributed:
            return [item]
        items: list = [None] * self.world
        dist.all_gather_object(items, item)
        return items

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def join(device: torch.device) -> Group:
    """The group torchrun describes in the environment, or a single process on ``device``.

    Backends: ``nccl`` between GPUs, ``gloo`` on CPU. On a GPU node each rank takes the GPU of
    its local rank.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Group(device=device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            # torchrun's agent keeps its store across restarts, and the process group's keys
            # carry no attempt: restarted ranks would read the dead ranks' addresses and fail
            # to connect. A prefix per restart keeps each attempt's keys apart.
            store = dist.PrefixStore(
                f"kpi-forecast/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}",
                dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              world, is_master=False))
            dist.init_process_group(backend, store=store, rank=int(os.environ["RANK"]),
                                    world_size=world)
        else:
            dist.init_process_group(backend)
    return Group(dist.get_rank(), dist.get_world_size(), device)


@dataclass
class ShardedPairs:
    """The (cell, origin) pairs of all ranks seen as one list in rank order.

    Each rank holds only its own ``local`` part (cell indices local to its block). Indices into
    the whole list are the same on every rank, so every rank can draw the same batch and keep
    its part of it.
    """

    local: np.ndarray  # [n, 2]
    offset: int  # index of local[0] in the whole list
    total: int

    @classmethod
    def across(cls, local: np.ndarray, group: Group) -> ShardedPairs:
        counts = group.gather(len(local))
        if group.distributed and min(counts) == 0:
            raise DataError(
                f"rank {counts.index(0)} of {group.world} has no usable training window in its "
                f"block of cells: use fewer ranks (windows per rank: {counts})"
            )
        return cls(local, int(sum(counts[: group.rank])), int(sum(counts)))

    def __len__(self) -> int:
        return self.total

    def take(self, indices: np.ndarray) -> np.ndarray:
        """This rank's pairs among the whole-list ``indices``, in their order."""
        mine = (indices >= self.offset) & (indices < self.offset + len(self.local))
        return self.local[indices[mine] - self.offset]

    def subset(self, indices: np.ndarray) -> ShardedPairs:
        """The pairs at sorted whole-list ``indices``, again as one list across ranks."""
        mine = (indices >= self.offset) & (indices < self.offset + len(self.local))
        before = int(np.count_nonzero(indices < self.offset))
        return ShardedPairs(self.local[indices[mine] - self.offset], before, len(indices))


def aligned(panel: Panel, group: Group) -> Panel:
    """This rank's block of cells on the grid that all ranks' cells span together.

    Every rank must agree on the step, phase and calendar zone, and no cell may be held by two
    ranks (its rows split across files of different ranks): either is a clear error.
    """
    if not group.distributed:
        return panel
    hashes = pd.util.hash_array(np.asarray(panel.cell_ids, dtype=object))
    views = group.gather((panel.index[0].value, panel.index[-1].value, panel.freq,
                          panel.calendar_tz, hashes))
    if len({v[2] for v in views}) > 1:
        raise DataError("the ranks' files imply different grid steps "
                        f"({', '.join(sorted({v[2] for v in views}))}): pass --freq")
    if len({v[3] for v in views}) > 1:
        raise DataError("the ranks' files imply different calendar zones "
                        f"({', '.join(sorted({v[3] for v in views}))}): pass --tz")
    step = panel.step.value
    start, end = min(v[0] for v in views), max(v[1] for v in views)
    if any((v[0] - start) % step for v in views):
        raise DataError(f"the ranks' timestamps fall on different phases of the {panel.freq} "
                        "grid: resample the data onto one grid")
    every = np.concatenate([v[4] for v in views])
    values, counts = np.unique(every, return_counts=True)
    if (counts > 1).any():
        shared = set(values[counts > 1].tolist())
        named = [c for c, h in zip(panel.cell_ids, hashes, strict=True) if int(h) in shared]
        raise DataError(
            f"{int((counts > 1).sum())} cells have rows in the files of more than one rank"
            + (f" (e.g. {named[0]!r})" if named else "")
            + ": keep each cell's rows in one file, e.g. partition the dataset by a cell bucket"
        )
    index = pd.date_range(pd.Timestamp(start, tz="UTC"), pd.Timestamp(end, tz="UTC"),
                          freq=panel.freq)
    return panel.on_grid(index)


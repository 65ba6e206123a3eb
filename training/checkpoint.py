"""The training state at the end of an epoch, written by rank 0, read back by every rank.

A run that dies (a killed rank, a preempted node) starts again from its last epoch: torchrun
restarts the ranks (``--max-restarts``) or the user reruns the same command, and training
resumes with the weights, optimiser, schedule, early-stopping state and random streams it had,
so the result is the one an uninterrupted run gives. The file is removed once training ends.
Loading uses ``weights_only=True``: tensors and plain values, never pickled code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
# Part of every key: a checkpoint written in another layout is ignored, not misread.
# 2: the weight average saved as {"updates", "module"}.
FORMAT = 2


@dataclass
class Checkpoint:
    path: Path
    key: str  # what the run depends on: a checkpoint of another run is ignored

    @staticmethod
    def key_of(**parts: object) -> str:
        keyed = {"format": FORMAT, **parts}
        return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()

    def save(self, state: dict) -> None:
        """Write atomically: a run killed while writing leaves the previous epoch's file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        torch.save({"key": self.key, **state}, partial)
        os.replace(partial, self.path)

    def load(self) -> dict | None:
        """The saved state of this same run, or None (none saved, or one of another run)."""
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError) as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", self.path, exc)
            return None
        if state.get("key") != self.key:
            log.warning("ignoring checkpoint %s: it belongs to a run with other data or "
                        "settings", self.path)
            return None
        return state

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

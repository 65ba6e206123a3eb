"""The training state at the end of an epoch, written by rank 0, read back by every rank.

A run that dies (a killed rank, a preempted node) starts again from its last epoch: torchrun
restarts the ranks (``--max-restarts``) or the user reruns the same command, and training
resumes with the weights, optimiser, schedule, early-stopping state and random streams it had,
so the result is the one an uninterrupted run gives. The file is removed once training ends.
It is written whole or not at all, and opens with the sha256 of what follows: a checkpoint
that does not match (a torn or damaged file) is ignored, never resumed from. Loading uses
``weights_only=True``: tensors and plain values, never pickled code.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from kpi_forecast.model.artifact import replaced_atomically

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
# Part of every key: a checkpoint written in another layout is ignored, not misread.
# 3: the file opens with its payload's sha256.
FORMAT = 3


@dataclass
class Checkpoint:
    path: Path
    key: str  # what the run depends on: a checkpoint of another run is ignored

    @staticmethod
    def key_of(**parts: object) -> str:
        keyed = {"format": FORMAT, **parts}
        return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()

    def save(self, state: dict) -> None:
        """Write whole or not at all: a run killed while writing, or out of disk, leaves the
        previous epoch's file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        torch.save({"key": self.key, **state}, buffer)
        payload = buffer.getvalue()
        with replaced_atomically(self.path) as partial:
            partial.write_bytes(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)

    def load(self) -> dict | None:
        """The saved state of this same run, or None (none saved, one of another run, or one
        whose checksum does not match)."""
        if not self.path.is_file():
            return None
        try:
            digest, _, payload = self.path.read_bytes().partition(b"\n")
            if hashlib.sha256(payload).hexdigest().encode() != digest:
                log.warning("ignoring checkpoint %s: its sha256 does not match (a torn or "
                            "damaged file)", self.path)
                return None
            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
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

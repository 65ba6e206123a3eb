"""What live scoring keeps per cell and model version (``serving.scoring``): the forecast
recorded at the last origin, waiting for its actuals, and the scores of the blocks of the last
week (``model.scores``), as one blob in the shared state. Its size is fixed by the model:
``size(horizon, quantiles, blocks)`` bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from kpi_forecast.model.scores import FIELDS

_HEADER = struct.Struct("<qiii")  # the forecast's origin, horizon, quantiles, blocks kept


def size(horizon: int, quantiles: int, blocks: int) -> int:
    """Bytes of one record."""
    return _HEADER.size + 4 * horizon * quantiles + 8 * blocks * (1 + len(FIELDS))


@dataclass
class ScoreRecord:
    """One cell's forecast waiting for its actuals and its scored blocks, newest last."""

    origin: int  # slot of the recorded forecast's first step; -1: none
    forecast: np.ndarray  # [horizon, quantiles] float32
    origins: np.ndarray  # [blocks] int64: each scored block's origin; -1: none yet
    sums: np.ndarray  # [blocks, FIELDS] float64

    @classmethod
    def empty(cls, horizon: int, quantiles: int, blocks: int) -> ScoreRecord:
        return cls(-1, np.zeros((horizon, quantiles), np.float32),
                   np.full(blocks, -1, np.int64), np.zeros((blocks, len(FIELDS))))

    def scored(self, origin: int) -> bool:
        return bool((self.origins == origin).any())

    def add(self, origin: int, sums: np.ndarray) -> None:
        """Keep a block's scores, the oldest block making room."""
        self.origins = np.append(self.origins[1:], origin)
        self.sums = np.concatenate([self.sums[1:], sums[None]])

    def to_bytes(self) -> bytes:
        horizon, quantiles = self.forecast.shape
        return b"".join([_HEADER.pack(self.origin, horizon, quantiles, len(self.origins)),
                         self.forecast.astype("<f4").tobytes(),
                         self.origins.astype("<i8").tobytes(),
                         self.sums.astype("<f8").tobytes()])

    @classmethod
    def from_bytes(cls, blob: bytes, horizon: int, quantiles: int, blocks: int
                   ) -> ScoreRecord:
        """A record as ``to_bytes`` wrote it for this shape; ValueError for anything else (a
        record of another build, or cut short)."""
        if len(blob) != size(horizon, quantiles, blocks):
            raise ValueError(f"a score record of {len(blob)} bytes, not "
                             f"{size(horizon, quantiles, blocks)}")
        origin, *shape = _HEADER.unpack_from(blob)
        if shape != [horizon, quantiles, blocks]:
            raise ValueError(f"a score record of shape {shape}, not "
                             f"{[horizon, quantiles, blocks]}")
        at = _HEADER.size
        forecast = np.frombuffer(blob, "<f4", horizon * quantiles, at)
        at += forecast.nbytes
        origins = np.frombuffer(blob, "<i8", blocks, at)
        sums = np.frombuffer(blob, "<f8", blocks * len(FIELDS), at + origins.nbytes)
        return cls(origin, forecast.reshape(horizon, quantiles).copy(), origins.copy(),
                   sums.reshape(blocks, len(FIELDS)).copy())

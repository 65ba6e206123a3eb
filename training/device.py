"""Where training runs: CPU, or CUDA with bf16 autocast so attention takes the fused kernels."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch

from kpi_forecast.data.panel import DataError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DataError("--device cuda: torch sees no CUDA GPU on this machine")
    if name not in ("cpu", "cuda"):
        raise DataError(f"--device {name!r}: use auto, cpu or cuda")
    return torch.device(name)


def seed_everything(seed: int, device: torch.device) -> None:
    if device.type == "cuda":
        # cuBLAS is deterministic only with a fixed workspace; it must be set before it starts.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    # The fused attention backward kernels on CUDA have no deterministic variant: warn there.
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")


def mixed_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 on CUDA, so that SDPA can dispatch to FlashAttention (half precision only) or the
    memory-efficient kernel; float32 on CPU, where half precision brings no speed."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_tensors(batch: tuple[np.ndarray, ...], device: torch.device) -> list[torch.Tensor]:
    """The arrays on ``device``; floating ones in torch's default dtype (float32, or float64
    where a test sets it to check arithmetic beyond float32's rounding)."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in batch]
    return [t.to(device, dtype=torch.get_default_dtype() if t.is_floating_point() else t.dtype,
                 non_blocking=True) for t in tensors]

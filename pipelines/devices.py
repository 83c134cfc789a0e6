"""The devices and dtypes a run names: whether the machine has them, and mixed precision.

Its own module because both the data-parallel launch (:mod:`pipelines.distributed`, which checks
a rank's GPU before NCCL would fail on it) and the run setup use these checks.
"""

from __future__ import annotations

import contextlib

import torch

from .errors import TrainingError


def check_device_available(device: str) -> None:
    """Raise TrainingError (one line) for a device this machine does not have."""
    kind = torch.device(device).type
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise TrainingError(f"device {device}: CUDA is not available on this machine")
        index = torch.device(device).index
        if index is not None and index >= torch.cuda.device_count():
            raise TrainingError(f"device {device}: only {torch.cuda.device_count()} CUDA devices")
    elif kind == "mps" and not torch.backends.mps.is_available():
        raise TrainingError(f"device {device}: MPS is not available on this machine")


def dtype_of(name: str) -> torch.dtype:
    return getattr(torch, name)


def compute_precision(device: str, dtype: str) -> contextlib.AbstractContextManager:
    """Mixed precision for the drafter's forward: its parameters (and AdamW state) stay float32,
    matmuls run in the target's dtype under autocast. float32 needs nothing."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype_of(dtype))

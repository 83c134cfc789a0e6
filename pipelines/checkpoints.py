"""Training checkpoints: one ``step-NNNNNN/`` directory per save under ``--ckpt-dir``.

The on-disk format (model.safetensors, config.json, optimizer.safetensors, state.json written
last; temporary directory renamed into place, so a kill never leaves half a checkpoint) belongs to
:mod:`dflash.checkpoint`. This module names the directories and fixes what the training programs
keep in ``state.json``: ``step``, the data ``cursor`` after the last consumed batch, the
``schedule``, the ``script`` that wrote it, its ``seed``, ``world_size`` and ``micro_batches``
(each validated on resume by :mod:`pipelines.checkpoint_state`). Either program resumes from
either's checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dflash import DFlashConfig
from dflash.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)

from .checkpoint_state import validate_training_state
from .errors import TrainingError

STEP_DIR_FORMAT = "step-{:06d}"


def step_dir(ckpt_dir: str | Path, step: int) -> Path:
    """``ckpt_dir / "step-000120"``."""
    return Path(ckpt_dir) / STEP_DIR_FORMAT.format(step)


def save_training_checkpoint(
    ckpt_dir: str | Path,
    step: int,
    drafter: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
) -> Path:
    """Write ``ckpt_dir/step-NNNNNN`` atomically and return its path."""
    return save_checkpoint(step_dir(ckpt_dir, step), drafter, optimizer=optimizer, state=state)


def checkpoint_config(path: str | Path) -> DFlashConfig:
    """The drafter config saved in a checkpoint.

    Raises:
        TrainingError: missing, torn or malformed checkpoint (one line).
    """
    try:
        cfg, _ = read_checkpoint_config(path)
    except CheckpointError as e:
        raise TrainingError(f"cannot resume: {e}") from None
    except OSError as e:
        raise TrainingError(f"cannot resume from {path}: {e}") from None
    return cfg


def restore_training_checkpoint(
    path: str | Path,
    drafter: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Load weights (and optimizer state) in place; return the JSON state (step, cursor, ...).

    Raises:
        TrainingError: damaged or malformed files, mismatching config, missing optimizer state,
            any field of state.json out of its range (one line naming the file).
    """
    try:
        loaded = load_checkpoint(path, drafter, optimizer, map_location=device)
        return validate_training_state(loaded.state, path)
    except CheckpointError as e:
        raise TrainingError(f"cannot resume: {e}") from None
    except OSError as e:
        raise TrainingError(f"cannot resume from {path}: {e}") from None

"""dflash: the DFlash block drafter, its training objective and lossless speculative decoding.

Public API::

    from dflash import DFlashConfig, DFlashDraftModel, TargetModel, spec_generate, evaluate_tau

Names are imported lazily (PEP 562), so ``import dflash.data`` or ``import dflash.config`` does not
pay for importing transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "checkpoint": [
        "LoadedCheckpoint",
        "capture_rng",
        "is_complete_checkpoint",
        "latest_checkpoint",
        "load_checkpoint",
        "load_drafter",
        "restore_rng",
        "save_checkpoint",
    ],
    "config": ["DFlashConfig", "decay_weights", "default_target_layer_ids"],
    "metrics": ["StepMetrics"],
    "model": ["DFlashDraftModel"],
    "objective": ["ObjectiveOutput", "compute_loss_and_metrics", "sample_anchors"],
    "spec_decode": [
        "GreedyOracleDrafter",
        "SpecOutput",
        "TauResult",
        "evaluate_tau",
        "spec_generate",
        "speculative_accept",
    ],
    "target": ["TargetModel", "TargetOutput"],
    "walk": ["WalkResult", "walk_accepted", "walk_batch"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [
    "DFlashConfig",
    "DFlashDraftModel",
    "GreedyOracleDrafter",
    "LoadedCheckpoint",
    "ObjectiveOutput",
    "SpecOutput",
    "StepMetrics",
    "TargetModel",
    "TargetOutput",
    "TauResult",
    "WalkResult",
    "capture_rng",
    "compute_loss_and_metrics",
    "decay_weights",
    "default_target_layer_ids",
    "evaluate_tau",
    "is_complete_checkpoint",
    "latest_checkpoint",
    "load_checkpoint",
    "load_drafter",
    "restore_rng",
    "sample_anchors",
    "save_checkpoint",
    "spec_generate",
    "speculative_accept",
    "walk_accepted",
    "walk_batch",
]

if TYPE_CHECKING:
    from .checkpoint import (
        LoadedCheckpoint,
        capture_rng,
        is_complete_checkpoint,
        latest_checkpoint,
        load_checkpoint,
        load_drafter,
        restore_rng,
        save_checkpoint,
    )
    from .config import DFlashConfig, decay_weights, default_target_layer_ids
    from .metrics import StepMetrics
    from .model import DFlashDraftModel
    from .objective import ObjectiveOutput, compute_loss_and_metrics, sample_anchors
    from .spec_decode import (
        GreedyOracleDrafter,
        SpecOutput,
        TauResult,
        evaluate_tau,
        spec_generate,
        speculative_accept,
    )
    from .target import TargetModel, TargetOutput
    from .walk import WalkResult, walk_accepted, walk_batch


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dflash' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""dflash: the DFlash block drafter, its training objective and lossless speculative decoding.

Public API::

    from dflash import DFlashConfig, DFlashDraftModel, TargetModel, spec_generate, evaluate_tau
"""

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
]

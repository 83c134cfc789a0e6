"""dflash: the DFlash block drafter, its training objective and lossless speculative decoding.

Public API::

    from dflash import DFlashConfig, DFlashDraftModel, TargetModel, spec_generate, evaluate_tau
"""

from .config import DFlashConfig, decay_weights, default_target_layer_ids
from .metrics import StepMetrics
from .model import DFlashDraftModel
from .objective import ObjectiveOutput, compute_loss_and_metrics, sample_anchors
from .target import TargetModel, TargetOutput

__all__ = [
    "DFlashConfig",
    "DFlashDraftModel",
    "ObjectiveOutput",
    "StepMetrics",
    "TargetModel",
    "TargetOutput",
    "compute_loss_and_metrics",
    "decay_weights",
    "default_target_layer_ids",
    "sample_anchors",
]

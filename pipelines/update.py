"""The optimizer update both training programs apply: scale, clip and step, unless the loss or the
gradient norm is not finite; and the step's metric sums and gradient scale across data-parallel
ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dflash import StepMetrics

from .distributed import DataParallel


@dataclass
class UpdateResult:
    applied: bool
    grad_norm: float


def apply_update(
    drafter: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr: float,
    grad_clip: float,
    loss: float,
    grad_scale: float = 1.0,
) -> UpdateResult:
    """Scale, clip and apply the accumulated gradients, unless the loss or the norm is not finite.

    Args:
        loss: the step's loss (only checked for finiteness).
        grad_scale: multiplies the accumulated gradients first (1 / the step's loss weight when
            the micro-batches backpropagated unnormalised sums).

    Returns:
        Whether the update was applied, and the gradient norm before clipping.
    """
    params = [p for p in drafter.parameters() if p.grad is not None]
    if grad_scale != 1.0:
        for p in params:
            p.grad.mul_(grad_scale)
    max_norm = grad_clip if grad_clip > 0 else math.inf
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0
    applied = math.isfinite(loss) and math.isfinite(norm)
    if applied:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return UpdateResult(applied=applied, grad_norm=norm)


def reduce_step(dp: DataParallel, metrics: StepMetrics) -> StepMetrics:
    """The step's metric sums over all ranks (the gradients were averaged by DDP in backward)."""
    if not dp.active:
        return metrics
    total = dp.all_reduce_sum(metrics.as_tensor(dp.device))
    return StepMetrics.from_tensor(total, metrics.block_size)


def grad_scale_for(dp: DataParallel, global_metrics: StepMetrics) -> float:
    """Factor turning the accumulated gradients into the step's exact per-token mean.

    Each micro-batch backpropagated its unnormalised loss sum and DDP averaged over the ranks, so
    the gradient holds (sum over every micro-batch of every rank) / world_size.
    """
    w = global_metrics.weight_sum
    return dp.grad_average / w if w else 1.0

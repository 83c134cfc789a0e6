"""One optimizer step, the same in both training programs: forward and backward over the step's
micro-batches, the walked tau before the update, the update itself (:func:`train_step`).

Where the micro-batches come from is the caller's business: the lock-step trainer reads one from
the loader (the target forward then runs inside the step), the pipeline's drafter stage takes
``grad_accum`` of them, target features attached, from its input channel. Given the same
micro-batches in the same order the two compute the same step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dflash import StepMetrics, compute_loss_and_metrics, walk_batch
from dflash.data import TokenBudgetLoader

from .distributed import DataParallel
from .resume import micro_batches_per_step
from .run_setup import Setup, anchor_generator
from .update import UpdateResult, apply_update, grad_scale_for, reduce_step


@dataclass
class MicroBatch:
    """One token-budget batch, as the loader read it (and, in the pipeline, as the target
    workers completed it)."""

    seq: int
    """Position in the loader's stream (restores order after parallel target workers)."""
    batch: dict[str, torch.Tensor]
    cursor: dict
    """Data cursor after this batch: what a checkpoint taken after consuming it must store."""
    epoch: float
    """The loader's epoch (fractional) after this batch."""
    features: torch.Tensor | None = None
    """The target's hidden-state features on the drafter's device; None: the step runs the
    target forward itself."""


def read_micro_batch(loader: TokenBudgetLoader, seq: int) -> MicroBatch:
    """The loader's next micro-batch, tagged with its position and the cursor after it."""
    batch = loader.next_batch()
    return MicroBatch(seq=seq, batch=batch, cursor=loader.state_dict(), epoch=loader.epoch_float)


@dataclass
class StepResult:
    """What one optimizer step did: the inputs of its log records, checkpoint and progress."""

    step: int
    lr: float
    metrics: StepMetrics
    """The step's metric sums over every micro-batch of every rank."""
    local: StepMetrics
    """This rank's own sums (the per-rank log)."""
    update: UpdateResult
    sync_wait: float
    """Seconds this rank waited for the others before the synchronising backward (per-rank
    logs only; 0 otherwise)."""
    cursor: dict
    """The data cursor after the step's last micro-batch (a checkpoint after it stores this)."""
    epoch: float
    walk: dict[str, Any] = field(default_factory=dict)
    """The walked tau's record fields (``walk_*``), when this step walked."""


def train_step(
    setup: Setup,
    dp: DataParallel,
    step: int,
    next_micro: Callable[[], MicroBatch],
    precision: contextlib.AbstractContextManager,
    *,
    per_rank: bool = False,
    walk: bool = False,
) -> StepResult:
    """Run optimizer step ``step``: forward and backward on ``micro_batches_per_step`` micro-batches,
    then clip and apply the update at the scheduled rate (skipped when not finite).

    Args:
        setup: the run (its model, target, optimizer and schedule).
        dp: data-parallel ranks (one rank: a no-op).
        step: the step's number, 1-based (the lr and the anchor draw are functions of it).
        next_micro: returns the step's next micro-batch, in the loader's order.
        precision: the drafter's autocast context (reusable).
        per_rank: measure this rank's wait for the others (``--log-all-ranks``).
        walk: walk the drafter before the update (rank 0; see :func:`walked_tau`).

    Returns:
        The step's metrics, learning rate, update, cursor and walked-tau fields.
    """
    cfg = setup.cfg
    n_micro = micro_batches_per_step(cfg)
    m = StepMetrics(block_size=setup.block_size)
    sync_wait = 0.0
    item: MicroBatch | None = None
    batch: dict[str, torch.Tensor] = {}
    for micro in range(n_micro):
        item = next_micro()
        batch = {n: t.to(cfg.device, non_blocking=True) for n, t in item.batch.items()}
        # Index in the step's global order (ranks get batches round-robin).
        anchors = anchor_generator(cfg.seed, step, micro * dp.world_size + dp.rank)
        # DDP all-reduces in the last micro-batch's backward only.
        last = micro == n_micro - 1
        with dp.grad_sync(setup.model, last=last):
            with precision:
                out = compute_loss_and_metrics(
                    setup.model, setup.target, batch, anchors, features=item.features
                )
            # Backpropagate the unnormalised sum; scaling the accumulated gradient by
            # world_size / the step's total loss weight below gives the exact per-token mean over
            # the step (not a mean of micro-batch means) without knowing the total in advance.
            if last and per_rank:
                sync_wait = dp.wait_for_others()
            out.loss_sum.backward()
        m = m + out.metrics
    assert item is not None  # micro_batches_per_step >= 1 (validated in the config)
    walked = walked_tau(setup, step, batch, item.features, precision) if walk else {}
    local, m = m, reduce_step(dp, m)
    lr = setup.schedule.lr_at(step)
    upd = apply_update(
        setup.drafter, setup.optimizer, lr, cfg.grad_clip, m.loss, grad_scale_for(dp, m)
    )
    return StepResult(
        step=step,
        lr=lr,
        metrics=m,
        local=local,
        update=upd,
        sync_wait=sync_wait,
        cursor=item.cursor,
        epoch=item.epoch,
        walk=walked,
    )


def walked_tau(
    setup: Setup,
    step: int,
    batch: dict[str, torch.Tensor],
    features: torch.Tensor | None,
    precision: contextlib.AbstractContextManager,
) -> dict[str, Any]:
    """The walked tau's record fields, measured before the update (the drafter state the step's
    other metrics describe), without gradients; its time counts in the step's tok/s.

    On the held-out split: sequences never trained on, in every epoch. Without one, on the step's
    last micro-batch ``batch`` (its own target ``features``): not yet trained on in the first
    epoch only.
    """
    cfg = setup.cfg
    layer_ids = setup.drafter.config.target_layer_ids
    with precision:
        if setup.held_out is not None:
            return setup.held_out.walk(
                setup.drafter,
                setup.target,
                layer_ids,
                setup.horizon,
                record=step // (cfg.log_every * cfg.walk_every) - 1,
                n=cfg.walk_seqs,
                device=cfg.device,
            )
        assert features is not None  # the pipeline's micro-batches carry their features
        return walk_batch(
            setup.drafter,
            setup.target,
            batch,
            features,
            horizon=setup.horizon,
            max_seqs=cfg.walk_seqs,
        ).to_log_dict()

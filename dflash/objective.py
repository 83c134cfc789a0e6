"""The DFlash training objective: anchors, packed blocks, masks, decayed cross-entropy, metrics.

For an anchor a of sequence n the drafter sees
    block input   [x_a, MASK, ..., MASK]         at positions a .. a+B-1
    context       target features of positions  0 .. a-1   (strictly before the anchor)
and block position k (1..B-1) predicts x_{a+k} (same-position labels). Two bugs that public
trainers shipped are excluded by construction here and by tests: labels shifted by one, and a
context that includes the anchor's own hidden state (which already encodes the target's
prediction of x_{a+1}).

All blocks of all sequences of a batch go through the drafter in one pass, laid out as M blocks
that each attend to their own sequence's context (masked to < anchor) plus their own B positions;
blocks never see each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .metrics import StepMetrics
from .model import DFlashDraftModel, unwrap_drafter
from .target import TargetModel


def valid_anchor_mask(loss_mask: torch.Tensor, block_size: int) -> torch.Tensor:
    """[N, T] bool: response positions a whose block targets x_{a+1} .. x_{a+B-1} are all
    supervised.

    The anchor is itself a response token: serving's first block is drafted right after prefill,
    anchored at the first response token (the target's prefill output), so the last prompt token
    is never an anchor. Requiring the whole block to be supervised keeps every block's B-1
    predictions real, so the per-position metrics share one denominator (the number of blocks);
    docs/dflash.md explains what this leaves out at the end of a response.
    """
    N, T = loss_mask.shape
    span = block_size - 1
    valid = torch.zeros(N, T, dtype=torch.bool, device=loss_mask.device)
    if span >= T:
        return valid
    lm = loss_mask.to(torch.int64)
    # Count of supervised tokens in the window a+1 .. a+span, via a cumulative sum.
    csum = torch.cat([torch.zeros(N, 1, dtype=torch.int64, device=lm.device), lm.cumsum(1)], dim=1)
    window = csum[:, 1 + span :] - csum[:, 1 : T - span + 1]  # a = 0 .. T-span-1
    valid[:, : T - span] = (window == span) & loss_mask[:, : T - span].bool()
    return valid


def sample_anchors(
    loss_mask: torch.Tensor, block_size: int, num_anchors: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random anchors, without replacement, among the valid positions of each sequence.

    Args:
        loss_mask: [N, T] bool, True on supervised tokens.
        block_size: B.
        num_anchors: blocks wanted per sequence (capped by the valid positions).
        generator: a CPU torch.Generator (seeded by the caller for reproducibility).
    Returns:
        (seq_idx [M], anchors [M]) long tensors on loss_mask's device, sorted by (seq, anchor).
    """
    valid = valid_anchor_mask(loss_mask, block_size).cpu()
    N, T = valid.shape
    keys = torch.rand(N, T, generator=generator)
    keys[~valid] = -1.0
    k = min(num_anchors, T)
    top, idx = keys.topk(k, dim=1)
    chosen = torch.zeros_like(valid)
    chosen.scatter_(1, idx, top >= 0)
    seq_idx, anchors = chosen.nonzero(as_tuple=True)
    return seq_idx.to(loss_mask.device), anchors.to(loss_mask.device)


def context_visibility(positions: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """[M, Tc] bool: block m may see context position j only if j < a_m.

    Strict: never the anchor's own hidden state, which already encodes the target's prediction of
    x_{a+1}, the first token the block must guess (a bug that public trainers shipped).
    """
    return positions[None, :] < anchors[:, None]


def block_labels(
    input_ids: torch.Tensor, seq_idx: torch.Tensor, anchors: torch.Tensor, block_size: int
) -> torch.Tensor:
    """[M, B-1] labels: block position k predicts x_{a+k} (k = 1..B-1), same-position."""
    offs = torch.arange(1, block_size, device=input_ids.device)
    return input_ids[seq_idx[:, None], anchors[:, None] + offs]


LAYOUTS = ("auto", "per_block", "per_sequence")
DEFAULT_LOGITS_BUDGET = 1 << 27  # 128M elements: 512 MB of float32 logits


def _sequence_layout(
    seq_idx: torch.Tensor, anchors: torch.Tensor, n_seq: int, block_size: int, n_ctx: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Places the M blocks row by row, all blocks of sequence n in row n.

    Returns:
        rows_cols: [M, B] flat index (n * S + column) of each block position in the [N, S] grid,
            S = (most blocks in one sequence) * B; unused slots stay padding.
        positions: [N, S] RoPE positions (a..a+B-1 per block; 0.. on padding slots).
        mask: [N, 1, S, Tc+S] bool: block i sees context j < a_i and its own B positions, never
            another block (padding slots see only themselves, so no row is empty).
    """
    device = anchors.device
    M, B = anchors.shape[0], block_size
    counts = torch.bincount(seq_idx, minlength=n_seq)
    first = torch.cumsum(counts, 0) - counts
    slot = torch.arange(M, device=device) - first[seq_idx]  # blocks are sorted by sequence
    n_slots = int(counts.max())
    S = n_slots * B
    offs = torch.arange(B, device=device)
    cols = slot[:, None] * B + offs  # [M, B]
    positions = torch.arange(S, device=device).remainder(B).repeat(n_seq, 1)
    positions[seq_idx[:, None], cols] = anchors[:, None] + offs
    # Anchor of every slot (-1 for padding slots: sees no context).
    slot_anchor = torch.full((n_seq, n_slots), -1, dtype=anchors.dtype, device=device)
    slot_anchor[seq_idx, slot] = anchors
    q_anchor = slot_anchor.repeat_interleave(B, dim=1)  # [N, S]
    ctx = context_visibility(torch.arange(n_ctx, device=device), q_anchor.reshape(-1))
    ctx = ctx.view(n_seq, S, n_ctx)
    slot_of = torch.arange(S, device=device) // B
    own = slot_of[:, None] == slot_of[None, :]  # [S, S] block-diagonal
    mask = torch.cat([ctx, own.expand(n_seq, S, S)], dim=2)[:, None]
    rows_cols = seq_idx[:, None] * S + cols
    return rows_cols, positions, mask


def draft_block_logits(
    drafter: DFlashDraftModel,
    target: TargetModel,
    input_ids: torch.Tensor,
    features: torch.Tensor,
    seq_idx: torch.Tensor,
    anchors: torch.Tensor,
    layout: str = "auto",
) -> torch.Tensor:
    """[M, B-1, V] logits of the predicted positions: the target's lm_head over
    :func:`draft_block_hidden`."""
    return target.lm_head(
        draft_block_hidden(drafter, target, input_ids, features, seq_idx, anchors, layout)
    )


def draft_block_hidden(
    drafter: DFlashDraftModel,
    target: TargetModel,
    input_ids: torch.Tensor,
    features: torch.Tensor,
    seq_idx: torch.Tensor,
    anchors: torch.Tensor,
    layout: str = "auto",
) -> torch.Tensor:
    """Drafter hidden states of the B-1 predicted positions of M packed blocks, in one pass.

    Args:
        input_ids: [N, T]; only the anchor tokens x_a are read.
        features: [N, T, K*H] target features of the same sequences.
        seq_idx, anchors: [M] which sequence each block comes from and its anchor position
            (sorted by sequence, as sample_anchors returns them).
        layout: "per_block": one block per attention row, each with a copy of its sequence's
            context keys/values (least attention work; the copies cost memory: M x Tc per
            layer). "per_sequence": all blocks of a sequence in one row against one context and
            a block-diagonal mask (no copies; scores grow with blocks^2). "auto": per_sequence on
            CUDA, per_block elsewhere. Both give the same logits.
    Returns:
        [M, B-1, H] hidden states for block positions 1..B-1 (before the lm_head).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "auto":
        layout = "per_sequence" if features.is_cuda else "per_block"
    cfg = unwrap_drafter(drafter).config
    B = cfg.block_size
    M = anchors.shape[0]
    device = input_ids.device
    # Positions at or after the last anchor are never visible: drop them from the context.
    Tc = int(anchors.max()) if M else 0
    pos = torch.arange(Tc, device=device)
    block_ids = torch.full((M, B), cfg.mask_token_id, dtype=input_ids.dtype, device=device)
    block_ids[:, 0] = input_ids[seq_idx, anchors]
    block_pos = anchors[:, None] + torch.arange(B, device=device)
    with torch.no_grad():
        embeds = target.embed_tokens(block_ids).to(features.dtype)
    ctx = features[:, :Tc]
    # One call through the (possibly DDP-wrapped) drafter: context projection included.
    if layout == "per_block":
        hidden = drafter(
            embeds,
            block_pos,
            ctx_features=ctx,
            ctx_positions=pos[None],
            ctx_mask=context_visibility(pos, anchors),
            seq_idx=seq_idx,
        )
    else:
        N = input_ids.shape[0]
        rows_cols, positions, mask = _sequence_layout(seq_idx, anchors, N, B, Tc)
        S = positions.shape[1]
        grid = embeds.new_zeros(N * S, embeds.shape[-1])
        grid[rows_cols.reshape(-1)] = embeds.reshape(M * B, -1)
        out = drafter(
            grid.view(N, S, -1),
            positions,
            ctx_features=ctx,
            ctx_positions=pos[None],
            attn_mask=mask,
        )
        hidden = out.reshape(N * S, -1)[rows_cols]  # back to [M, B, H]
    return hidden[:, 1:]


@dataclass
class ObjectiveOutput:
    """loss: loss_sum / weight_sum (differentiable; zero with a graph when no block was drawn).
    loss_sum: the differentiable weighted CE sum, for exact normalisation across micro-batches
    (divide each micro-batch's loss_sum by the whole step's weight_sum).
    metrics: the summable StepMetrics of this batch."""

    loss: torch.Tensor
    loss_sum: torch.Tensor
    metrics: StepMetrics


def compute_loss_and_metrics(
    drafter: DFlashDraftModel,
    target: TargetModel,
    batch: dict[str, torch.Tensor],
    generator: torch.Generator,
    features: torch.Tensor | None = None,
    anchors: tuple[torch.Tensor, torch.Tensor] | None = None,
    layout: str = "auto",
    logits_budget: int = DEFAULT_LOGITS_BUDGET,
) -> ObjectiveOutput:
    """The DFlash loss and metrics of one token-budget batch.

    Args:
        drafter: the model being trained.
        target: the frozen target (embedding, lm_head, and features when not given).
        batch: right-padded ``input_ids`` [N, T], ``attention_mask`` [N, T] and ``loss_mask``
            [N, T] bool (True on supervised response tokens).
        generator: CPU generator for the anchor draw.
        features: [N, T, K*H] target features, when a separate stage computed them.
        anchors: explicit (seq_idx, anchors) instead of a random draw (tests, evaluation),
            sorted by sequence.
        layout: attention layout of the packed blocks (see :func:`draft_block_logits`).
        logits_budget: most logits elements (blocks x (B-1) x vocab) held at once; above it the
            lm_head and loss run in checkpointed chunks (same result, less memory, one more
            lm_head pass in backward).
    Returns:
        ObjectiveOutput with loss = sum_k w_k CE_k / sum_k w_k over all blocks,
        w_k = exp(-(k-1)/gamma).
    """
    cfg = unwrap_drafter(drafter).config
    B = cfg.block_size
    input_ids = batch["input_ids"]
    loss_mask = batch["loss_mask"].bool() & batch["attention_mask"].bool()
    n_tokens = int(batch["attention_mask"].sum())
    if features is None:
        features = target.forward(
            input_ids, cfg.target_layer_ids, batch["attention_mask"], logits=False
        ).features
    if anchors is None:
        seq_idx, anchor_pos = sample_anchors(loss_mask, B, cfg.num_anchors, generator)
    else:
        seq_idx, anchor_pos = anchors
    M = int(anchor_pos.shape[0])
    if M == 0:
        # No block fits (responses shorter than B): run a dummy block through the drafter's
        # forward anyway and return 0 * it, so backward works and a DDP wrapper sees every
        # parameter used, as on the other ranks.
        device = input_ids.device
        embeds = target.embed_tokens(input_ids[:1, :1]).expand(1, B, -1).to(features.dtype)
        hidden = drafter(
            embeds,
            torch.arange(B, device=device)[None],
            ctx_features=features[:1, :1],
            ctx_positions=torch.zeros(1, 1, dtype=torch.long, device=device),
        )
        zero = hidden.sum() * 0.0
        return ObjectiveOutput(zero, zero, StepMetrics(block_size=B, n_tokens=n_tokens))

    hidden = draft_block_hidden(drafter, target, input_ids, features, seq_idx, anchor_pos, layout)
    labels = block_labels(input_ids, seq_idx, anchor_pos, B)
    w = torch.tensor(cfg.loss_weights(), dtype=torch.float32, device=hidden.device)

    def head_loss(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted CE sum and correctness of a chunk of blocks: h [m, B-1, H], y [m, B-1]."""
        logits = target.lm_head(h)
        ce = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
        return (ce.view_as(y) * w).sum(), logits.detach().argmax(-1) == y

    V = cfg.vocab_size
    chunk = max(1, logits_budget // ((B - 1) * V))
    if chunk >= M:
        loss_sum, correct = head_loss(hidden, labels)
    else:
        # [M, B-1, V] logits would not fit the budget: compute them chunk by chunk and recompute
        # each chunk in backward (activation checkpointing), so only one chunk lives at a time.
        parts = [
            checkpoint(head_loss, hidden[i : i + chunk], labels[i : i + chunk], use_reentrant=False)
            for i in range(0, M, chunk)
        ]
        loss_sum = torch.stack([p[0] for p in parts]).sum()
        correct = torch.cat([p[1] for p in parts])
    weight_sum = float(w.sum()) * M
    metrics = StepMetrics.from_correctness(
        correct.cpu(), loss_sum=float(loss_sum.detach()), weight_sum=weight_sum, n_tokens=n_tokens
    )
    return ObjectiveOutput(loss=loss_sum / weight_sum, loss_sum=loss_sum, metrics=metrics)

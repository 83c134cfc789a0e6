"""The walked tau: the drafter's teacher-forced predictions walked block by block as decoding does.

``tau_train`` averages 1 + correct prefix over anchors drawn uniformly from a response. Decoding
does not visit anchors uniformly: it crosses a long correct run in ONE step, while uniform anchors
count every position of that run (a size-biased average, too high). The walk reads the same
predictions the way decoding visits them:

    start at the first response token (index 0: the token the target emitted at prefill)
    repeat while fewer than H tokens are produced:
        n    = correct prefix of the block anchored at the current index
        gain = min(n + 1, H - produced)        (the accepted drafts plus the bonus token)
        step to index + gain

On data that is the target's own greedy output, the teacher-forced prediction at every anchor the
walk visits is exactly the draft decoding makes there (same context, same anchor), so the walk
reproduces greedy speculative decoding's acceptance sequence, step for step, without running the
target: tau_walk = walk_tokens / walk_steps equals the measured tau over the same horizon.

:func:`walk_accepted` is the pure walk; :func:`walk_batch` runs the drafter (no gradients) on the
dense anchors of a few sequences of a training batch, reusing the batch's target features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .model import unwrap_drafter
from .objective import draft_block_hidden
from .target import TargetModel


@dataclass
class WalkResult:
    """Sums over walked sequences (they add, so records and windows aggregate exactly).

    tokens: tokens produced by the decoding steps (the prefill token excluded).
    steps: decoding (verify) steps taken.
    hist: hist[k] = steps that produced k + 1 tokens (length = block size).
    """

    block_size: int
    tokens: int = 0
    steps: int = 0
    hist: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.hist:
            self.hist = [0] * self.block_size
        if len(self.hist) != self.block_size:
            raise ValueError(f"hist has {len(self.hist)} entries, block size is {self.block_size}")

    def __add__(self, other: WalkResult) -> WalkResult:
        if other.block_size != self.block_size:
            raise ValueError("cannot add walks of different block sizes")
        return WalkResult(
            self.block_size,
            self.tokens + other.tokens,
            self.steps + other.steps,
            [a + b for a, b in zip(self.hist, other.hist, strict=True)],
        )

    @property
    def tau(self) -> float:
        """tau_walk = tokens / steps (NaN before any step)."""
        return self.tokens / self.steps if self.steps else float("nan")

    def to_log_dict(self) -> dict[str, object]:
        """The metric-record fields ``walk_tokens``, ``walk_steps``, ``walk_hist``."""
        return {"walk_tokens": self.tokens, "walk_steps": self.steps, "walk_hist": list(self.hist)}


def walk_accepted(accepted: Sequence[int], horizon: int, block_size: int) -> WalkResult:
    """Walk one response as greedy decoding does.

    Args:
        accepted: accepted[j] = correct-prefix length (0..B-1) of the block anchored at response
            index j (index 0 = the first response token). Entries the walk needs: indices below
            ``horizon - 1``; a shorter list ends the walk early (no prediction there).
        horizon: H, the tokens decoding produces, the prefill token included (``max_new_tokens``);
            the walk takes steps until H tokens exist.
        block_size: B (hist length; gains are 1..B).
    Returns:
        WalkResult of this one response (tokens = H - 1 when the walk reached the horizon).
    """
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    res = WalkResult(block_size)
    produced, j = 1, 0
    while produced < horizon and j < len(accepted):
        n = int(accepted[j])
        if not 0 <= n < block_size:
            raise ValueError(f"accepted[{j}] = {n} outside 0..{block_size - 1}")
        gain = min(n + 1, horizon - produced)
        res.hist[gain - 1] += 1
        res.steps += 1
        res.tokens += gain
        produced += gain
        j += gain
    return res


def accepted_prefix(correct: torch.Tensor) -> torch.Tensor:
    """[M, B-1] bool correctness -> [M] long: leading correct positions of each block."""
    return torch.cumprod(correct.to(torch.int64), dim=1).sum(1)


def _accepted_lengths(
    lm_head: torch.nn.Module, hidden: torch.Tensor, labels: torch.Tensor, ok: torch.Tensor
) -> torch.Tensor:
    """Accepted prefix of each block: [M, B-1, D] hidden states, [M, B-1] labels and in-range
    flags -> [M] long.

    Equal to ``accepted_prefix((lm_head(hidden).argmax(-1) == labels) & ok)``, but position k's
    logits are computed only for the blocks still correct through position k-1: the prefix ends
    at the first miss, so later positions of a missed block never matter. With a large
    vocabulary the lm_head is most of the walk's cost, and it then scales with the mean
    accepted prefix + 1 (the size-biased tau_train) instead of the block size."""
    accepted = torch.zeros(hidden.shape[0], dtype=torch.long, device=hidden.device)
    alive = torch.arange(hidden.shape[0], device=hidden.device)
    for k in range(hidden.shape[1]):
        if alive.numel() == 0:
            break
        pred = lm_head(hidden[alive, k]).argmax(-1)
        alive = alive[(pred == labels[alive, k]) & ok[alive, k]]
        accepted[alive] += 1
    return accepted


@torch.no_grad()
def walk_batch(
    drafter: torch.nn.Module,
    target: TargetModel,
    batch: dict[str, torch.Tensor],
    features: torch.Tensor,
    horizon: int | None = None,
    max_seqs: int | None = None,
    layout: str = "auto",
) -> WalkResult:
    """The walked tau of the first ``max_seqs`` sequences of a training batch.

    One drafter pass (no gradients, no target forward: ``features`` are the batch's own) on every
    response anchor of those sequences, then :func:`walk_accepted` on each.

    Args:
        batch: the batch contract (``input_ids``, ``attention_mask``, ``loss_mask``); the response
            of a row is its run of ``loss_mask`` (prompt before, padding after).
        features: [N, T, K*H] the batch's target features.
        horizon: tokens per response, the prefill token included (default: each response's
            length; a longer value is capped at it, since the data ends there).
        max_seqs: walk only the first rows (None: all).
    Returns:
        The summed WalkResult (zero steps when no row has a response of two tokens or more).
    """
    cfg = unwrap_drafter(drafter).config
    B = cfg.block_size
    ids = batch["input_ids"]
    lm = batch["loss_mask"].bool() & batch["attention_mask"].bool()
    rows = range(ids.shape[0] if max_seqs is None else min(max_seqs, ids.shape[0]))
    spans = []  # (row, response start, horizon of this row)
    for r in rows:
        pos = lm[r].nonzero().flatten()
        if pos.numel() < 2:
            continue
        start, length = int(pos[0]), int(pos[-1]) + 1 - int(pos[0])
        spans.append((r, start, length if horizon is None else min(horizon, length)))
    total = WalkResult(B)
    if not spans:
        return total
    # Dense anchors: every response index the walk may visit (0 .. H-2) of every walked row.
    seq_idx = torch.cat([torch.full((h - 1,), r, dtype=torch.long) for r, _, h in spans])
    anchors = torch.cat([torch.arange(s, s + h - 1) for _, s, h in spans])
    seq_idx, anchors = seq_idx.to(ids.device), anchors.to(ids.device)
    # Labels x_{a+k}; beyond the row's horizon there is no label: count it wrong (the walk caps
    # the gain at the horizon anyway, so the value never matters).
    padded = torch.nn.functional.pad(ids, (0, B), value=-1)
    offs = torch.arange(1, B, device=ids.device)
    labels = padded[seq_idx[:, None], anchors[:, None] + offs]
    ends = torch.cat([torch.full((h - 1,), s + h, dtype=torch.long) for _, s, h in spans])
    in_range = (anchors[:, None] + offs) < ends.to(ids.device)[:, None]
    was_training = drafter.training
    drafter.eval()
    try:
        hidden = draft_block_hidden(drafter, target, ids, features, seq_idx, anchors, layout)
        accepted = _accepted_lengths(target.lm_head, hidden, labels, in_range).cpu().tolist()
    finally:
        drafter.train(was_training)
    i = 0
    for _, _, h in spans:
        total = total + walk_accepted(accepted[i : i + h - 1], h, B)
        i += h - 1
    return total

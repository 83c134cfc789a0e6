"""StepMetrics: summable training metrics (schema v1 fields) and the pure maths behind them.

Everything is kept as sums (numerators and denominators) so that micro-batches, steps and ranks
aggregate exactly: add the objects (or all_reduce ``as_tensor()``) and only then divide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


def prefix_accept(correct: torch.Tensor) -> torch.Tensor:
    """[M, B-1] bool correctness -> [M, B-1] bool: positions 1..k of the block all correct."""
    return torch.cumprod(correct.to(torch.int64), dim=1).bool()


def tau_from_accept(accept_pos: list[float]) -> float:
    """tau_train = 1 + sum_k accept_pos[k] (the mean of 1 + correct-prefix length)."""
    return 1.0 + float(sum(accept_pos))


@dataclass
class StepMetrics:
    """Sums over the blocks of one or more micro-batches.

    Every block is fully supervised (see ``dflash.objective.valid_anchor_mask``), so the
    per-position denominators all equal ``n_blocks``.
    """

    block_size: int
    loss_sum: float = 0.0
    """sum over predictions of w_k * CE."""
    weight_sum: float = 0.0
    """sum over predictions of w_k (the loss denominator)."""
    n_correct: int = 0
    n_pred: int = 0
    n_blocks: int = 0
    n_tokens: int = 0
    """real (non-padding) tokens in the batches."""
    correct_pos: list[int] = field(default_factory=list)
    """[B-1] correct predictions at block position k = 1..B-1."""
    accept_pos: list[int] = field(default_factory=list)
    """[B-1] blocks whose positions 1..k are all correct."""

    def __post_init__(self) -> None:
        if not self.correct_pos:
            self.correct_pos = [0] * (self.block_size - 1)
        if not self.accept_pos:
            self.accept_pos = [0] * (self.block_size - 1)
        if (
            len(self.correct_pos) != self.block_size - 1
            or len(self.accept_pos) != self.block_size - 1
        ):
            raise ValueError("correct_pos and accept_pos must have block_size - 1 entries")

    @classmethod
    def from_correctness(
        cls,
        correct: torch.Tensor,
        *,
        loss_sum: float = 0.0,
        weight_sum: float = 0.0,
        n_tokens: int = 0,
    ) -> StepMetrics:
        """Metrics of M fully supervised blocks from their [M, B-1] correctness matrix."""
        correct = correct.bool()
        M, Bm1 = correct.shape
        return cls(
            block_size=Bm1 + 1,
            loss_sum=float(loss_sum),
            weight_sum=float(weight_sum),
            n_correct=int(correct.sum()),
            n_pred=M * Bm1,
            n_blocks=M,
            n_tokens=int(n_tokens),
            correct_pos=[int(c) for c in correct.sum(0)],
            accept_pos=[int(c) for c in prefix_accept(correct).sum(0)],
        )

    def __add__(self, other: StepMetrics) -> StepMetrics:
        if other.block_size != self.block_size:
            raise ValueError(
                f"cannot add metrics of block sizes {self.block_size} and {other.block_size}"
            )
        return StepMetrics(
            block_size=self.block_size,
            loss_sum=self.loss_sum + other.loss_sum,
            weight_sum=self.weight_sum + other.weight_sum,
            n_correct=self.n_correct + other.n_correct,
            n_pred=self.n_pred + other.n_pred,
            n_blocks=self.n_blocks + other.n_blocks,
            n_tokens=self.n_tokens + other.n_tokens,
            correct_pos=[a + b for a, b in zip(self.correct_pos, other.correct_pos, strict=True)],
            accept_pos=[a + b for a, b in zip(self.accept_pos, other.accept_pos, strict=True)],
        )

    def add(self, other: StepMetrics) -> StepMetrics:
        """Same as ``self + other`` (a new object)."""
        return self + other

    def as_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """A float64 vector for ``dist.all_reduce(SUM)``; float64 keeps counts exact to 2**53."""
        vals = [
            self.loss_sum,
            self.weight_sum,
            self.n_correct,
            self.n_pred,
            self.n_blocks,
            self.n_tokens,
            *self.correct_pos,
            *self.accept_pos,
        ]
        return torch.tensor(vals, dtype=torch.float64, device=device)

    @classmethod
    def from_tensor(cls, t: torch.Tensor, block_size: int) -> StepMetrics:
        """Inverse of :meth:`as_tensor`."""
        v = t.detach().to("cpu", torch.float64).tolist()
        k = block_size - 1
        if len(v) != 6 + 2 * k:
            raise ValueError(f"metrics tensor has {len(v)} entries, expected {6 + 2 * k}")
        ints = [round(x) for x in v[2:]]
        return cls(
            block_size=block_size,
            loss_sum=v[0],
            weight_sum=v[1],
            n_correct=ints[0],
            n_pred=ints[1],
            n_blocks=ints[2],
            n_tokens=ints[3],
            correct_pos=ints[4 : 4 + k],
            accept_pos=ints[4 + k : 4 + 2 * k],
        )

    # -- derived values ---------------------------------------------------------------------
    @property
    def loss(self) -> float:
        """sum w_k CE / sum w_k; NaN when nothing was predicted."""
        return self.loss_sum / self.weight_sum if self.weight_sum else math.nan

    @property
    def acc(self) -> float:
        return self.n_correct / self.n_pred if self.n_pred else math.nan

    @property
    def acc_pos(self) -> list[float]:
        n = self.n_blocks
        return [c / n if n else math.nan for c in self.correct_pos]

    @property
    def accept_rate_pos(self) -> list[float]:
        n = self.n_blocks
        return [c / n if n else math.nan for c in self.accept_pos]

    @property
    def tau_train(self) -> float:
        return tau_from_accept(self.accept_rate_pos) if self.n_blocks else math.nan

    def to_log_dict(self) -> dict:
        """The schema v1 metric fields: loss, acc, n_pred, n_blocks, n_tokens, acc_pos,
        accept_pos, tau_train (ratios are NaN when no block was seen)."""
        return {
            "loss": self.loss,
            "acc": self.acc,
            "n_pred": self.n_pred,
            "n_blocks": self.n_blocks,
            "n_tokens": self.n_tokens,
            "acc_pos": self.acc_pos,
            "accept_pos": self.accept_rate_pos,
            "tau_train": self.tau_train,
        }

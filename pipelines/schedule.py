"""The learning-rate schedule: linear warmup, then cosine decay to a floor (a pure function).

Step numbering: ``lr_at(step)`` is the rate used by optimizer step ``step`` (1-based: the first
update of a run is step 1), so the rate logged with metrics record ``step`` is ``lr_at(step)``.
Resumed runs keep counting, so the schedule is a function of the absolute step, not of the
segment.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: Paper recipe (docs/design.md, DFlash in one page): AdamW at 6e-4, cosine, warmup ratio 0.04.
PEAK_LR = 6e-4
WARMUP_RATIO = 0.04


@dataclass(frozen=True)
class Schedule:
    """Linear warmup from 0 to ``peak_lr`` over ``warmup_steps``, cosine to ``min_lr`` at
    ``total_steps``, then constant at ``min_lr``.

    This is also the ``schedule`` object of the log's ``run_start`` header (``to_dict``).
    """

    peak_lr: float = PEAK_LR
    warmup_steps: int = 0
    total_steps: int = 1
    min_lr: float = 0.0
    kind: str = "cosine"

    def __post_init__(self) -> None:
        if self.kind != "cosine":
            raise ValueError(f"schedule kind must be 'cosine', got {self.kind!r}")
        if not (math.isfinite(self.peak_lr) and self.peak_lr > 0):
            raise ValueError(f"peak_lr must be > 0, got {self.peak_lr}")
        if not (math.isfinite(self.min_lr) and 0 <= self.min_lr <= self.peak_lr):
            raise ValueError(f"min_lr must be in [0, peak_lr], got {self.min_lr}")
        if self.total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {self.total_steps}")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError(
                f"warmup_steps must be in [0, total_steps={self.total_steps}], got {self.warmup_steps}"
            )

    @classmethod
    def from_ratio(
        cls, total_steps: int, peak_lr: float = PEAK_LR, warmup_ratio: float = WARMUP_RATIO,
        min_lr: float = 0.0,
    ) -> Schedule:
        """The paper's form: warmup as a fraction of the run (rounded up, so never 0 if ratio>0)."""
        if not 0 <= warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
        warmup = math.ceil(warmup_ratio * total_steps)
        return cls(peak_lr=peak_lr, warmup_steps=warmup, total_steps=total_steps, min_lr=min_lr)

    def to_dict(self) -> dict:
        return asdict(self)

    def lr_at(self, step: int) -> float:
        """Learning rate for optimizer step ``step`` (see :func:`lr_at`)."""
        return lr_at(step, self)


def lr_at(step: int, s: Schedule) -> float:
    """Learning rate of optimizer step ``step`` (1-based) under schedule ``s``.

    Warmup: ``peak * step / warmup_steps`` for ``step <= warmup_steps`` (so step 1 is not 0: a
    zero first step would waste a batch). Then cosine from ``peak`` to ``min_lr`` over the
    remaining steps, reaching ``min_lr`` exactly at ``total_steps``; ``min_lr`` after that.
    """
    if step < 1:
        raise ValueError(f"optimizer steps are 1-based, got {step}")
    if step <= s.warmup_steps:
        return s.peak_lr * step / s.warmup_steps
    if step >= s.total_steps:
        return s.min_lr
    # Here warmup_steps < step < total_steps, so the decay span is positive.
    progress = (step - s.warmup_steps) / (s.total_steps - s.warmup_steps)
    return s.min_lr + 0.5 * (s.peak_lr - s.min_lr) * (1.0 + math.cos(math.pi * progress))

"""The learning-rate schedule: linear warmup, then a decay to a floor (a pure function).

Step numbering: ``lr_at(step)`` is the rate used by optimizer step ``step`` (1-based: the first
update of a run is step 1), so the rate logged with metrics record ``step`` is ``lr_at(step)``.
Resumed runs keep counting, so the schedule is a function of the absolute step, not of the
segment. A schedule restarted at a resume (``--resume-schedule restart``) has ``start_step`` K:
its own step 1 is the run's step K+1, its warmup counts from there, and ``total_steps`` stays the
absolute step where the decay reaches the floor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: Paper recipe (docs/design.md, DFlash in one page): AdamW at 6e-4, cosine, warmup ratio 0.04.
PEAK_LR = 6e-4
WARMUP_RATIO = 0.04
#: Decay shapes after the warmup: cosine to the floor, a straight line to the floor, or none
#: (the peak until the end).
KINDS = ("cosine", "linear", "constant")


@dataclass(frozen=True)
class Schedule:
    """Linear warmup from 0 to ``peak_lr`` over ``warmup_steps``, then ``kind``: cosine or a
    straight line to ``min_lr`` at ``total_steps`` (the floor after that), or ``constant`` (the
    peak until the end). ``start_step`` shifts the whole schedule (see the module docstring).

    This is also the ``schedule`` object of the log's ``run_start`` header (``to_dict``).
    """

    peak_lr: float = PEAK_LR
    warmup_steps: int = 0
    total_steps: int = 1
    min_lr: float = 0.0
    kind: str = "cosine"
    start_step: int = 0
    """Steps of the run before this schedule's first step (0 unless restarted at a resume)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"schedule kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {self.start_step}")
        if not (math.isfinite(self.peak_lr) and self.peak_lr > 0):
            raise ValueError(f"peak_lr must be > 0, got {self.peak_lr}")
        if not (math.isfinite(self.min_lr) and 0 <= self.min_lr <= self.peak_lr):
            raise ValueError(f"min_lr must be in [0, peak_lr], got {self.min_lr}")
        if self.total_steps < self.start_step + 1:
            raise ValueError(
                f"total_steps must be >= {self.start_step + 1}, got {self.total_steps}"
            )
        if not 0 <= self.warmup_steps <= self.total_steps - self.start_step:
            raise ValueError(
                f"warmup_steps must be in [0, {self.total_steps - self.start_step}] (the schedule's "
                f"length), got {self.warmup_steps}"
            )

    @classmethod
    def from_ratio(
        cls,
        total_steps: int,
        peak_lr: float = PEAK_LR,
        warmup_ratio: float = WARMUP_RATIO,
        min_lr: float = 0.0,
        kind: str = "cosine",
        start_step: int = 0,
        warmup_steps: int | None = None,
    ) -> Schedule:
        """The paper's form: warmup as a fraction of the schedule's length (rounded up, so never
        0 if ratio > 0), unless ``warmup_steps`` gives it in steps."""
        if not 0 <= warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
        if warmup_steps is None:
            warmup_steps = math.ceil(warmup_ratio * (total_steps - start_step))
        return cls(
            peak_lr=peak_lr,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            min_lr=min_lr,
            kind=kind,
            start_step=start_step,
        )

    @classmethod
    def from_dict(cls, d: dict) -> Schedule:
        """Inverse of :meth:`to_dict` (a checkpoint's ``schedule``; unknown keys are an error)."""
        return cls(**d)

    def to_dict(self) -> dict:
        """The header's ``schedule`` object; ``start_step`` only when the schedule restarted, so
        a fresh run's header keeps the five original fields."""
        d = asdict(self)
        if not d["start_step"]:
            del d["start_step"]
        return d

    def describe(self) -> str:
        """One line for people: ``cosine 6.0e-04 -> 6.0e-05, warmup 8 steps, ends at step 200``."""
        shape = (
            f"constant {self.peak_lr:.1e}"
            if self.kind == "constant"
            else f"{self.kind} {self.peak_lr:.1e} -> {self.min_lr:.1e}"
        )
        start = f", from step {self.start_step + 1}" if self.start_step else ""
        end = "" if self.kind == "constant" else f", ends at step {self.total_steps}"
        steps = "step" if self.warmup_steps == 1 else "steps"
        return f"{shape}{start}, warmup {self.warmup_steps} {steps}{end}"

    def lr_at(self, step: int) -> float:
        """Learning rate for optimizer step ``step`` (see :func:`lr_at`)."""
        return lr_at(step, self)


def lr_at(step: int, s: Schedule) -> float:
    """Learning rate of optimizer step ``step`` (1-based) under schedule ``s``.

    With ``i = step - start_step``, the schedule's own step: warmup ``peak * i / warmup_steps``
    for ``i <= warmup_steps`` (so the first step is not 0: a zero step would waste a batch). Then
    cosine (or a straight line) from ``peak`` to ``min_lr`` over the remaining steps, reaching
    ``min_lr`` exactly at ``total_steps``; ``min_lr`` after that. ``constant`` stays at the peak.
    Steps before ``start_step`` (the previous schedule's) get the first warmup rate.
    """
    if step < 1:
        raise ValueError(f"optimizer steps are 1-based, got {step}")
    i = max(1, step - s.start_step)
    if i <= s.warmup_steps:
        return s.peak_lr * i / s.warmup_steps
    if s.kind == "constant":
        return s.peak_lr
    if step >= s.total_steps:
        return s.min_lr
    # Here warmup < i < total - start, so the decay span is positive.
    progress = (i - s.warmup_steps) / (s.total_steps - s.start_step - s.warmup_steps)
    if s.kind == "linear":
        return s.peak_lr + (s.min_lr - s.peak_lr) * progress
    return s.min_lr + 0.5 * (s.peak_lr - s.min_lr) * (1.0 + math.cos(math.pi * progress))

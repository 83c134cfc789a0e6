"""The plan of a run: where it is meant to end, and the lr it will train at until then.

A forecast "at the end of the run" needs the end: the ``run_start`` header's
``schedule.total_steps`` (this project's logs; another trainer's reader puts HF's ``max_steps``
there), else ``--end-step``. The schedule's shape says how much learning is left: the header's
``kind``/``peak_lr``/``min_lr``/``warmup_steps`` when it records them; else, for a log that only
records the end (an HF trainer state) but logs its lr, the shape is read off the logged lr (the
decay seen so far matched against a straight line and a cosine to zero, HF's two usual ones);
else ``--schedule``. With no end at all the forecast looks a fixed number of steps ahead and says
so (:data:`UNPLANNED_HORIZON`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dflash_diag.analysis.schedule import ScheduleHeader

#: Decay shapes the plan can continue.
KINDS = ("cosine", "linear", "constant")
#: With no planned end, the forecast looks ahead as many steps as the log already holds: a
#: horizon the observed curve can speak for, never a claim about the run's end.
UNPLANNED_HORIZON = 1.0
#: The logged lr matches a shape when its largest error is within this share of the peak.
_SHAPE_TOLERANCE = 0.05


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """The planned end and lr schedule of a run (any part may be unknown).

    Attributes:
        end_step: the planned last step, or None.
        end_source: "header", "max_steps" (another trainer's recorded length), "--end-step", or
            None without an end.
        kind: "cosine", "linear" or "constant" after the warmup, or None when unknown.
        kind_source: "header", "logged lr" (matched), "--schedule", or None.
        peak_lr: the schedule's peak (None when unknown).
        min_lr: its floor (0 when the shape was read off the logged lr).
        warmup_steps: warmup length in steps (0 when unknown).
        start_step: steps before the schedule's own first step (a schedule restarted at a
            resume).
    """

    end_step: int | None
    end_source: str | None
    kind: str | None = None
    kind_source: str | None = None
    peak_lr: float | None = None
    min_lr: float = 0.0
    warmup_steps: int = 0
    start_step: int = 0

    @property
    def knows_lr(self) -> bool:
        """Whether :meth:`lr_at` can give the lr of steps not yet logged."""
        return (
            self.kind is not None
            and self.peak_lr is not None
            and (self.end_step is not None or self.kind == "constant")
        )

    def lr_at(self, step: float) -> float | None:
        """The planned lr of ``step`` (None when the plan does not know it)."""
        kind, peak = self.kind, self.peak_lr
        # knows_lr implies both are set; the explicit checks narrow them for the type checker
        if not self.knows_lr or kind is None or peak is None:
            return None
        return schedule_lr(
            step,
            kind=kind,
            peak=peak,
            floor=self.min_lr,
            warmup=self.warmup_steps,
            end=self.end_step or 0,
            start=self.start_step,
        )

    def describe(self) -> str:
        """``ends at step 410 (header) · cosine 6e-04 -> 6e-05 (header)``, or what is unknown."""
        if self.end_step is None:
            text = "no planned end (give --end-step)"
        else:
            text = f"ends at step {self.end_step} ({self.end_source})"
        if self.kind is not None and self.peak_lr is not None:
            shape = (
                f"constant {self.peak_lr:.3g}"
                if self.kind == "constant"
                else f"{self.kind} {self.peak_lr:.3g} -> {self.min_lr:.3g}"
            )
            text += f" · {shape} ({self.kind_source})"
        else:
            text += " · lr schedule unknown"
        return text


def schedule_lr(
    step: float, *, kind: str, peak: float, floor: float, warmup: int, end: int, start: int = 0
) -> float:
    """The lr of ``step``: a linear warmup over ``warmup`` steps, then ``kind`` from ``peak`` to
    ``floor`` at ``end`` (the floor after it); ``constant`` stays at the peak. The same shapes as
    the training pipeline's schedule (the diagnostics never import it)."""
    i = max(1.0, step - start)
    if warmup and i <= warmup:
        return peak * i / warmup
    if kind == "constant":
        return peak
    span = end - start - warmup
    if span <= 0 or step >= end:
        return floor
    progress = (i - warmup) / span
    if kind == "linear":
        return floor + (peak - floor) * (1.0 - progress)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def matched_kind(
    steps: Sequence[float] | np.ndarray, lrs: Sequence[float | None] | np.ndarray, *, end: int
) -> tuple[str | None, float | None, int]:
    """The decay shape that explains a logged lr best: ``(kind, peak, warmup_steps)``.

    The warmup ends where the largest lr logged is (0 when the log starts at it); the decay after
    it is compared with a constant, a straight line and a cosine to zero at ``end``, each with its
    own least-squares peak (a log that starts after the peak, as HF's first logging call does,
    never shows the peak itself). None when the log shows no decay yet to tell them apart, or
    when no shape is within :data:`_SHAPE_TOLERANCE` of the peak.
    """
    # Arrays, not a Python float per point: a long log has 20,000 windows, and three shapes'
    # Python loops over them were most of the analysis' CPU. Every elementwise operation is the
    # one :func:`schedule_lr` does on the same floats (IEEE: the same bits); the sums stay
    # Python's ``sum`` over the same floats in the same order (compensated since 3.12, where
    # numpy's pairwise sum is not), the largest error Python's ``max``.
    xs = np.asarray(steps, dtype=float)
    ys = np.asarray(lrs, dtype=float)  # a None reads as NaN, left out with it
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} steps but {len(ys)} lrs")
    keep = np.isfinite(ys) & (ys >= 0)
    xs, ys = xs[keep], ys[keep]
    if len(ys) < 3:
        return None, None, 0
    # max of (lr, -step): the largest lr, at its first step
    peak = float(ys.max())
    peak_at = float(xs[ys == peak].min())
    if peak <= 0:
        return None, None, 0
    warmup = int(peak_at) if float(ys[0]) < peak * 0.9 else 0
    later = xs > peak_at
    if int(np.count_nonzero(later)) < 2:
        return None, peak, warmup
    if warmup:
        xs, ys = xs[later], ys[later]
    # else no warmup seen: the first logged lr is already on the decay, every point counts
    best, best_err, best_peak = None, math.inf, peak
    for kind in KINDS:
        unit = _unit_lrs(xs, kind=kind, warmup=warmup, end=end)
        norm = sum((unit * unit).tolist())
        if norm <= 0:
            continue
        scale = sum((unit * ys).tolist()) / norm
        err = max(np.abs(scale * unit - ys).tolist())
        if err < best_err:
            best, best_err, best_peak = kind, err, scale
    if best is None or best_err > _SHAPE_TOLERANCE * peak:
        return None, peak, warmup
    return best, max(best_peak, peak), warmup


def _unit_lrs(steps: np.ndarray, *, kind: str, warmup: int, end: int) -> np.ndarray:
    """:func:`schedule_lr` of each of ``steps`` with peak 1, floor 0 and start 0, as arrays: the
    same operations in the same order on each step (``math.cos`` itself for the cosine: numpy's
    may differ from the C library's in the last bit)."""
    peak, floor = 1.0, 0.0
    i = np.where(steps > 1.0, steps, 1.0)  # max(1.0, step), a NaN step included
    out = np.empty(len(steps))
    warming = (i <= warmup) if warmup else np.zeros(len(steps), dtype=bool)
    rest = ~warming
    if warmup:
        out[warming] = peak * i[warming] / warmup
    if kind == "constant":
        out[rest] = peak
        return out
    span = end - warmup
    ended = rest & (steps >= end) if span > 0 else rest
    out[ended] = floor
    decay = rest & ~ended
    progress = (i[decay] - warmup) / span
    if kind == "linear":
        out[decay] = floor + (peak - floor) * (1.0 - progress)
    else:
        cos = np.array([math.cos(x) for x in (math.pi * progress).tolist()], dtype=float)
        out[decay] = floor + (peak - floor) * 0.5 * (1.0 + cos)
    return out


def plan_of(
    header: ScheduleHeader | None,
    *,
    steps: Sequence[float] | np.ndarray = (),
    lrs: Sequence[float | None] | np.ndarray = (),
    end_step: int | None = None,
    schedule: str | None = None,
    peak_lr: float | None = None,
    recorded_by: str = "header",
) -> RunPlan:
    """The run's plan from its header, its logged lr and the user's flags.

    Args:
        header: the ``schedule`` of the governing ``run_start`` header, if any.
        steps, lrs: the logged lr per step (window means are enough), to read the shape off
            when the header does not record it.
        end_step: ``--end-step`` (wins over the header: the user knows the run was extended).
        schedule: ``--schedule`` (the shape where nothing records it).
        peak_lr: ``--peak-lr`` (where the header records no peak).
        recorded_by: how to name a header end in the report ("header", or "max_steps" for a
            length another trainer recorded).

    Raises:
        ValueError: an unknown ``--schedule`` or a non-positive ``--end-step``.
    """
    if schedule is not None and schedule not in KINDS:
        raise ValueError(f"--schedule must be one of {', '.join(KINDS)}, got {schedule!r}")
    if end_step is not None and end_step < 1:
        raise ValueError(f"--end-step must be >= 1, got {end_step}")
    h = header or ScheduleHeader()
    if end_step is not None:
        end, end_source = end_step, "--end-step"
    elif h.total_steps:
        end, end_source = h.total_steps, recorded_by
    else:
        end, end_source = None, None
    kind, kind_source = None, None
    peak = h.peak_lr if h.peak_lr else peak_lr
    floor = h.min_lr or 0.0
    warmup = h.warmup_steps or 0
    if h.kind is not None and h.kind.lower() in KINDS:
        kind, kind_source = h.kind.lower(), "header"
    elif schedule is not None:
        kind, kind_source = schedule, "--schedule"
    elif end is not None and len(lrs):
        matched, seen_peak, seen_warmup = matched_kind(steps, lrs, end=end)
        if matched is not None:
            kind, kind_source = matched, "logged lr"
            peak, warmup, floor = peak or seen_peak, warmup or seen_warmup, 0.0
    if kind is not None and peak is None and len(lrs):
        listed = lrs.tolist() if isinstance(lrs, np.ndarray) else lrs  # Python floats
        finite = [v for v in listed if v is not None and math.isfinite(v)]
        peak = max(finite) if finite else None
    return RunPlan(
        end_step=end,
        end_source=end_source,
        kind=kind,
        kind_source=kind_source,
        peak_lr=peak,
        min_lr=floor,
        warmup_steps=warmup,
        start_step=h.start_step,
    )

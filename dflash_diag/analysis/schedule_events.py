"""Where the learning-rate schedule restarted: at a resume, a new schedule instead of the old one.

When a run moves from one trainer to another (``dflash-train sync`` then ``pipeline --resume``),
the resumed launch either continues the checkpoint's schedule or starts its own, warmup included.
A restart changes the rate at once (the original analysis: the old script decayed to 6e-5, the new
one came back at 2.4e-4 warming toward 6e-4), which changes what the loss does right after it; so
the diagnostics name the event instead of leaving it to be mistaken for the program switch.

Detection, per resumed ``run_start`` header (pure, from the headers and the lr series):

* the header says ``resume_schedule: "restart"``: an event at the first step after the resume;
  ``"continue"``: none;
* an older header without the field: an event when the first lr after the resume differs from
  what the previous header's schedule gives at that step (more than :data:`REL_TOLERANCE`), or,
  without a schedule to compare with, when the lr jumps by :data:`JUMP_RATIO` or more.

The schedule formula mirrors the trainer's (docs/pipelines.md: linear warmup, then cosine or a
straight line to ``min_lr`` at ``total_steps``, or constant; ``start_step`` shifts a restarted
schedule).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import polars as pl

#: Relative distance between the logged lr and the old schedule's that counts as a restart.
REL_TOLERANCE = 0.05
#: Without a schedule to compare with: an lr change by this factor (either way) at a resume.
JUMP_RATIO = 1.5

HEADER, LR_JUMP = "header", "lr jump"


@dataclass(frozen=True, kw_only=True)
class ScheduleEvent:
    """The lr schedule restarted at ``step`` (the first step of the new schedule).

    Attributes:
        step: first step under the new schedule (resumed step + 1).
        lr_before: the last lr before it (logged, else the old schedule's), or None.
        lr_after: the lr at ``step`` (logged, else the new schedule's), or None.
        warmup_steps: steps of warmup from ``step`` on (0: none left), or None when unknown.
        source: "header" (``resume_schedule: restart``) or "lr jump" (older logs).
    """

    step: int
    lr_before: float | None
    lr_after: float | None
    warmup_steps: int | None
    source: str

    def text(self) -> str:
        """``lr schedule restarted at step 151: 6.0e-05 -> 3.1e-04, warmup 10 steps``."""
        before = f"{self.lr_before:.1e} -> " if self.lr_before is not None else ""
        after = f"{self.lr_after:.1e}" if self.lr_after is not None else "?"
        if self.warmup_steps is None:
            warmup = ""
        elif self.warmup_steps:
            warmup = f", warmup {self.warmup_steps} step{'s' if self.warmup_steps != 1 else ''}"
        else:
            warmup = ", no warmup"
        how = "" if self.source == HEADER else " (seen in the lr; the header does not say)"
        return f"lr schedule restarted at step {self.step}: {before}{after}{warmup}{how}"


def scheduled_lr(schedule: Mapping[str, Any], step: int) -> float | None:
    """The lr a header's ``schedule`` object gives optimizer step ``step`` (None when the object
    is incomplete or of a kind this formula does not know)."""
    try:
        peak = float(schedule["peak_lr"])
        floor = float(schedule.get("min_lr", 0.0))
        warmup = int(schedule.get("warmup_steps", 0))
        total = int(schedule["total_steps"])
        start = int(schedule.get("start_step", 0) or 0)
        kind = str(schedule.get("kind", "cosine"))
    except (KeyError, TypeError, ValueError):
        return None
    if kind not in ("cosine", "linear", "constant") or not all(map(math.isfinite, (peak, floor))):
        return None
    i = max(1, step - start)
    if warmup > 0 and i <= warmup:
        return peak * i / warmup
    if kind == "constant":
        return peak
    if step >= total:
        return floor
    span = total - start - warmup
    if span <= 0:
        return floor
    progress = (i - warmup) / span
    if kind == "linear":
        return peak + (floor - peak) * progress
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def _warmup_left(schedule: Mapping[str, Any] | None, step: int) -> int | None:
    """Warmup steps of ``schedule`` from ``step`` on (0: past its warmup)."""
    if not isinstance(schedule, Mapping):
        return None
    try:
        warmup = int(schedule["warmup_steps"])
        start = int(schedule.get("start_step", 0) or 0)
    except (KeyError, TypeError, ValueError):
        return None
    return max(0, start + warmup - (step - 1))


def _finite_lrs(
    steps: Sequence[int] | pl.Series, lrs: Sequence[float | None] | pl.Series
) -> pl.DataFrame:
    """The (step, lr) pairs with a finite lr, in the given order: one frame for every lookup, so
    that a million-record log costs one vectorised filter, not a Python loop per resume."""
    frame = pl.DataFrame(
        {
            "step": pl.Series("step", steps, dtype=pl.Int64, strict=False),
            "lr": pl.Series("lr", lrs, dtype=pl.Float64, strict=False),
        }
    )
    return frame.filter(pl.col("lr").is_finite())


def _lr_at(finite: pl.DataFrame, step: int, *, before: bool) -> float | None:
    """The logged lr at ``step`` (``before``: the one at the largest step < ``step``, the first
    such record on a tie) among ``finite`` (:func:`_finite_lrs`)."""
    if before:
        earlier = finite.filter(pl.col("step") < step)
        if earlier.height == 0:
            return None
        return earlier["lr"][cast(int, earlier["step"].arg_max())]  # the first largest step
    at = finite.filter(pl.col("step") == step)
    return at["lr"][0] if at.height else None


def detect_schedule_events(
    headers: Sequence[Mapping[str, Any]],
    steps: Sequence[int] | pl.Series,
    lrs: Sequence[float | None] | pl.Series,
) -> list[ScheduleEvent]:
    """The schedule restarts of one log, in header order.

    Args:
        headers: the ``run_start`` headers' fields, in log order.
        steps, lrs: the metric records' steps and lrs (restarts resolved: one per step), as
            sequences or polars Series.
    """
    events = []
    finite: pl.DataFrame | None = None
    previous: Mapping[str, Any] | None = None
    for header in headers:
        schedule = header.get("schedule") if isinstance(header.get("schedule"), Mapping) else None
        resumed = header.get("resumed_from")
        old = previous.get("schedule") if previous is not None else None
        old = old if isinstance(old, Mapping) else None
        previous = header
        if not isinstance(resumed, Mapping) or not isinstance(resumed.get("step"), int):
            continue
        k = resumed["step"] + 1
        mode = header.get("resume_schedule")
        if mode == "continue":
            continue
        if finite is None:
            finite = _finite_lrs(steps, lrs)
        logged_after = _lr_at(finite, k, before=False)
        before = _lr_at(finite, k, before=True)
        if before is None and old is not None and k > 1:
            before = scheduled_lr(old, k - 1)
        if mode == "restart":
            after = (
                logged_after
                if logged_after is not None
                else (scheduled_lr(schedule, k) if schedule is not None else None)
            )
            events.append(
                ScheduleEvent(
                    step=k,
                    lr_before=before,
                    lr_after=after,
                    warmup_steps=_warmup_left(schedule, k),
                    source=HEADER,
                )
            )
            continue
        if logged_after is None:
            continue  # an older log: only the lr can tell, and there is none at that step
        expected = scheduled_lr(old, k) if old is not None else None
        if expected is not None:
            jumped = abs(logged_after - expected) > REL_TOLERANCE * max(abs(expected), 1e-30)
        elif before is not None and before > 0 and logged_after > 0:
            ratio = logged_after / before
            jumped = ratio >= JUMP_RATIO or ratio <= 1 / JUMP_RATIO
        else:
            jumped = False
        if jumped:
            events.append(
                ScheduleEvent(
                    step=k,
                    lr_before=before,
                    lr_after=logged_after,
                    warmup_steps=_warmup_left(schedule, k),
                    source=LR_JUMP,
                )
            )
    return events


def event_at(events: Sequence[ScheduleEvent], step: int, slack: int = 1) -> ScheduleEvent | None:
    """The event within ``slack`` steps of ``step`` (a regime boundary), if any."""
    return next((e for e in events if abs(e.step - step) <= slack), None)


def resumes_anything(headers: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a ``run_start`` header resumes from a checkpoint (else there is no schedule
    event to look for, and no pass over the records)."""
    return any(isinstance(h.get("resumed_from"), Mapping) for h in headers)


def schedule_events_of(log: Any, keep_all: bool = False) -> list[ScheduleEvent]:
    """:func:`detect_schedule_events` of a parsed log (its headers and its lr series, restarts
    resolved); no pass over the records when no header resumes anything."""
    headers = [e.fields for e in log.run_starts]
    if not resumes_anything(headers):
        return []
    from dflash_diag.analysis.restarts import resolve_restarts

    # Only the step and lr series are needed: resolving the restarts of those columns alone
    # moves far less data than the whole frame (the same rows survive either way).
    columns = [c for c in ("source", "seq", "step", "lr") if c in log.metrics.columns]
    frame, _ = resolve_restarts(log.metrics.select(columns), keep_all=keep_all)
    return detect_schedule_events(headers, frame["step"], frame["lr"])

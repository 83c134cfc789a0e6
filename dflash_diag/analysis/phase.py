"""Selecting the records to analyse: the training phase and a step range.

The phase rule comes from the original analysis: a run migrated from the lock-step script to the
asynchronous pipeline has two regimes in one log, and only the pipeline's entries describe the run
as it is now. Pipeline entries carry ``tok_per_sec`` or follow a ``run_start`` header whose
``script`` is ``"pipeline"``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import cast

import polars as pl

from dflash_diag.errors import DiagError


class Phase(str, enum.Enum):
    """Which records to analyse."""

    AUTO = "auto"  #: the pipeline entries when there are any, otherwise all
    PIPELINE = "pipeline"  #: only pipeline entries
    ALL = "all"  #: every metric record


@dataclass(frozen=True)
class Selection:
    """What :func:`select_phase` kept, and why.

    Attributes:
        phase: the phase actually used ("pipeline" or "all"; never "auto").
        reason: one line for the report (e.g. "auto: 1200 pipeline entries of 2000").
        total: metric records before selecting.
        pipeline: pipeline entries among them.
        selected: records kept.
        from_step: the lower bound (inclusive) or None.
        to_step: the upper bound (inclusive) or None.
    """

    phase: str
    reason: str
    total: int
    pipeline: int
    selected: int
    from_step: int | None
    to_step: int | None


def pipeline_mask() -> pl.Expr:
    """True for pipeline entries: ``tok_per_sec`` present or governed by a pipeline header."""
    return pl.col("tok_per_sec").is_not_null() | (pl.col("script") == "pipeline").fill_null(False)


def _take(frame: pl.DataFrame, condition: pl.Expr) -> pl.DataFrame:
    """``frame.filter(condition)``, as a zero-copy slice when the kept rows are contiguous.

    The usual selections (the pipeline phase after a lock-step phase, a step range of a sorted
    frame) are one contiguous block, and a slice shares the columns instead of copying them.
    """
    if frame.height == 0:
        return frame
    mask = frame.select(pl.repeat(True, pl.len()).and_(condition.fill_null(False)).alias("m"))["m"]
    kept = int(mask.sum())
    if kept == 0:
        return frame.clear()
    # the first kept row (arg_true would list all of them: a million-row index column)
    first = int(cast(int, mask.arg_max()))
    if bool(mask.slice(first, kept).all()):
        return frame.slice(first, kept)
    return frame.filter(mask)


def select_phase(
    frame: pl.DataFrame,
    phase: Phase | str = Phase.AUTO,
    from_step: int | None = None,
    to_step: int | None = None,
) -> tuple[pl.DataFrame, Selection]:
    """Keep the records of ``phase`` with ``from_step <= step <= to_step``.

    Raises:
        DiagError: ``from_step`` > ``to_step``, or an unknown phase.
    """
    try:
        phase = Phase(phase)
    except ValueError:
        raise DiagError(f"unknown phase {phase!r} (auto, pipeline or all)") from None
    if from_step is not None and to_step is not None and from_step > to_step:
        raise DiagError(f"--from-step {from_step} is after --to-step {to_step}")
    is_pipeline = pipeline_mask()
    total = frame.height
    n_pipeline = int(frame.select(is_pipeline.sum()).item()) if total else 0
    if phase is Phase.ALL:
        used, reason = "all", f"all {total} entries"
    elif phase is Phase.PIPELINE:
        used, reason = "pipeline", f"{n_pipeline} pipeline entries of {total}"
    elif n_pipeline:
        used, reason = "pipeline", f"auto: {n_pipeline} pipeline entries of {total}"
    else:
        used, reason = "all", f"auto: no pipeline entries, all {total} entries"
    condition = is_pipeline if used == "pipeline" else pl.lit(True)
    if from_step is not None:
        condition = condition & (pl.col("step") >= from_step)
    if to_step is not None:
        condition = condition & (pl.col("step") <= to_step)
    selected = _take(frame, condition)
    return selected, Selection(
        phase=used,
        reason=reason,
        total=total,
        pipeline=n_pipeline,
        selected=selected.height,
        from_step=from_step,
        to_step=to_step,
    )

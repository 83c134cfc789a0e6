"""Where the learning-rate schedule stands: current lr, peak, phase, fraction of peak, epochs.

The peak comes from the ``run_start`` header's ``schedule.peak_lr`` when the log has one, else from
``--peak-lr``, else it is the largest lr seen in every metric record read (not only the analysed
ones; the report says which). A largest-seen lr is no peak while the lr still rises (warmup): then
the peak is unknown and a note says to give ``--peak-lr``. Every command uses this one rule.
The phase comes from the header's ``warmup_steps`` and ``kind`` when known, else it is inferred from
the direction the lr moved over the last entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl

from dflash_diag.analysis.numbers import finite_number

#: Entries looked at to infer the phase from the lr's direction when the header does not say.
_INFER_TAIL = 20

WARMUP, DECAY, CONSTANT = "warmup", "decay", "constant"


@dataclass(frozen=True)
class ScheduleHeader:
    """The ``schedule`` object of a ``run_start`` header (any field may be missing)."""

    kind: str | None = None
    peak_lr: float | None = None
    warmup_steps: int | None = None
    total_steps: int | None = None
    min_lr: float | None = None
    start_step: int = 0
    """Steps before the schedule's own step 1 (a schedule restarted at a resume); its warmup
    counts from there."""

    @classmethod
    def from_fields(cls, schedule: Any) -> ScheduleHeader | None:
        """Build from a header's decoded ``schedule`` (None when it is not an object)."""
        if not isinstance(schedule, dict):
            return None

        def number(name: str) -> float | None:
            return finite_number(schedule.get(name))

        def count(name: str) -> int | None:
            value = number(name)
            return int(value) if value is not None else None

        kind = schedule.get("kind")
        return cls(
            kind=str(kind) if kind is not None else None,
            peak_lr=number("peak_lr"),
            warmup_steps=count("warmup_steps"),
            total_steps=count("total_steps"),
            min_lr=number("min_lr"),
            start_step=count("start_step") or 0,
        )


@dataclass(frozen=True, kw_only=True)
class SchedulePosition:
    """The schedule at the last analysed step.

    Attributes:
        step: the last analysed step.
        current: its lr (the last finite one), or None when the log has no lr.
        peak: the peak lr, or None.
        peak_source: "header", "--peak-lr" or "max seen" (None without a peak).
        fraction_of_peak: ``current / peak``.
        phase: "warmup", "decay", "constant", or None when unknown.
        phase_source: "header" or "inferred" (from the lr's direction).
        warmup_fraction: ``step / warmup_steps`` capped at 1, when the header gives warmup steps.
        run_fraction: ``step / total_steps``, when the header gives total steps.
        epoch: the epoch position (float), from the record's ``epoch`` or from ``steps_per_epoch``.
        epoch_source: "log" or "steps_per_epoch".
        total_epochs: the epoch the schedule ends at: the logged epoch plus the steps left over
            ``steps_per_epoch`` (else ``total_steps / steps_per_epoch``), when both are known.
        notes: remarks for the report (e.g. a ``--peak-lr`` overridden by the header).
    """

    step: int
    current: float | None
    peak: float | None
    peak_source: str | None
    fraction_of_peak: float | None
    phase: str | None
    phase_source: str | None
    warmup_fraction: float | None = None
    run_fraction: float | None = None
    epoch: float | None = None
    epoch_source: str | None = None
    total_epochs: float | None = None
    notes: list[str] = field(default_factory=list)


def infer_phase(lrs: list[float]) -> str | None:
    """Decay if the lr is below its recent maximum, else warmup if it rose, else constant."""
    if len(lrs) < 2:
        return None
    first, last, top = lrs[0], lrs[-1], max(lrs)
    scale = max(abs(top), 1e-30)
    if (top - last) / scale > 1e-9:
        return DECAY
    if (last - first) / scale > 1e-9:
        return WARMUP
    return CONSTANT


def header_phase(step: int, header: ScheduleHeader) -> str | None:
    """The phase the header's schedule puts ``step`` in (None if the header cannot tell)."""
    if header.warmup_steps is not None and step - header.start_step < header.warmup_steps:
        return WARMUP
    if header.kind is None:
        return None
    if header.kind.lower() in ("constant", "const", "none"):
        return CONSTANT
    if header.warmup_steps is None and header.kind.lower().startswith("warmup"):
        return None
    return DECAY


def schedule_position(
    frame: pl.DataFrame,
    header: ScheduleHeader | None = None,
    *,
    peak_lr: float | None = None,
    steps_per_epoch: float | None = None,
    max_lr: float | None = None,
    earlier_lr: pl.Series | None = None,
) -> SchedulePosition:
    """Locate the last record of ``frame`` (sorted by step) in the lr schedule.

    Args:
        frame: the analysed metric records, sorted by step (``step``, ``lr``, ``epoch``).
        header: the schedule of the ``run_start`` header governing the last record, if any.
        peak_lr: the user's ``--peak-lr`` (used when the header gives no peak).
        steps_per_epoch: from the header, to place the step in epochs when records lack ``epoch``.
        max_lr: the largest finite lr of every metric record read (the "max seen" peak); None:
            the largest of ``frame``.
        earlier_lr: the lr of the records before ``frame``'s, in step order (watch's pruned
            ones): the current lr and the inferred phase read their last finite ones where
            ``frame`` holds too few, as converge reads the whole log.
    """
    assert frame.height, "schedule_position needs at least one record"
    step = int(frame["step"][-1])
    notes: list[str] = []
    # the lr column alone: a filter of the frame copies every column it keeps
    lr = frame["lr"]
    finite_lr = lr.filter(lr.is_finite().fill_null(False))
    if earlier_lr is not None and finite_lr.len() < _INFER_TAIL:
        # only the tail the phase reads (the peak is max_lr's): no pass over a million lrs
        before = earlier_lr.filter(earlier_lr.is_finite().fill_null(False))
        finite_lr = pl.concat(
            [before.tail(_INFER_TAIL).cast(pl.Float64), finite_lr.cast(pl.Float64)]
        )
    current = float(finite_lr[-1]) if finite_lr.len() else None
    if header is not None and header.peak_lr is not None:
        peak, peak_source = header.peak_lr, "header"
        if peak_lr is not None and not math.isclose(peak_lr, header.peak_lr):
            notes.append(
                f"--peak-lr {peak_lr:g} ignored: the run_start header says {header.peak_lr:g}"
            )
    elif peak_lr is not None:
        peak, peak_source = peak_lr, "--peak-lr"
    elif max_lr is not None or finite_lr.len():
        peak, peak_source = (
            max_lr if max_lr is not None else float(cast(float, finite_lr.max())),
            "max seen",
        )
    else:
        peak, peak_source = None, None
    phase, phase_source = None, None
    if header is not None:
        phase = header_phase(step, header)
        phase_source = "header" if phase is not None else None
    if phase is None and finite_lr.len():
        phase = infer_phase(finite_lr.tail(_INFER_TAIL).to_list())
        phase_source = "inferred" if phase is not None else None
    if peak_source == "max seen" and phase == WARMUP:
        # The lr is still rising: the largest lr so far is where it is now, not its peak.
        notes.append(
            f"peak lr unknown while warming up (largest so far {peak:.3g}): give --peak-lr"
        )
        peak, peak_source = None, None
    fraction = current / peak if current is not None and peak else None
    warmup_fraction = run_fraction = total_epochs = None
    if header is not None and header.warmup_steps:
        warmup_fraction = min(1.0, max(0, step - header.start_step) / header.warmup_steps)
    if header is not None and header.total_steps:
        run_fraction = step / header.total_steps
    epoch = epoch_source = None
    epochs = frame["epoch"].drop_nulls().drop_nans() if "epoch" in frame.columns else None
    if epochs is not None and len(epochs):
        epoch, epoch_source = float(epochs[-1]), "log"
    elif steps_per_epoch:
        epoch, epoch_source = step / steps_per_epoch, "steps_per_epoch"
    if header is not None and header.total_steps and steps_per_epoch:
        if epoch is not None and epoch_source == "log":
            # The header's steps_per_epoch is this run's; a resumed run's earlier steps may have
            # gone at another rate (sync: 1 micro-batch per step, the pipeline: grad_accum), so
            # the end is the logged epoch plus the steps left at this run's rate.
            total_epochs = epoch + max(0, header.total_steps - step) / steps_per_epoch
        else:
            total_epochs = header.total_steps / steps_per_epoch
    return SchedulePosition(
        step=step,
        current=current,
        peak=peak,
        peak_source=peak_source,
        fraction_of_peak=fraction,
        phase=phase,
        phase_source=phase_source,
        warmup_fraction=warmup_fraction,
        run_fraction=run_fraction,
        epoch=epoch,
        epoch_source=epoch_source,
        total_epochs=total_epochs,
        notes=notes,
    )

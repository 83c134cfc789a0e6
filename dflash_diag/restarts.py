"""Restarts: a step at or below an earlier step starts a new segment (DESIGN.md section 5).

A run that crashes at step 1200 and resumes from its step-1000 checkpoint logs steps 1001-1200
twice. The entries of the crashed attempt after the resume point are orphaned (the weights they
describe were thrown away), so by default they are purged, as TensorBoard purges orphaned data:
an entry survives only if no LATER entry of its source has a step at or below its own. For a step
logged twice, this means the later entry wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Restart:
    """One restart: the log went back to ``step`` right after ``previous_step``.

    Attributes:
        source: index of the file it happened in.
        step: the first step of the new segment.
        previous_step: the last step of the segment it ends.
        segment: the new segment's number (0 is the first segment of a file).
    """

    source: int
    step: int
    previous_step: int
    segment: int


def resolve_restarts(frame: pl.DataFrame, keep_all: bool = False) -> tuple[pl.DataFrame, list[Restart]]:
    """Number the segments of each source, purge orphaned entries, and merge in step order.

    Args:
        frame: metric records with ``source``, ``seq`` and ``step`` columns
            (:attr:`dflash_diag.reader.ParsedLog.metrics`), in file order per source.
        keep_all: keep every entry, orphaned ones included (still sorted by step).

    Returns:
        ``(frame, restarts)``: the records with a ``segment`` column (per source, 0-based), sorted
        by step (ties keep source then file order), and the restarts found.
    """
    # Sorting copies every column (lists included): skip it when the frame is already in file
    # order, as load_log's frames are.
    in_file_order = frame.height < 2 or bool(frame.select(
        ((pl.col("source").diff() > 0) | ((pl.col("source").diff() == 0) & (pl.col("seq").diff() > 0)))
        .fill_null(True).all()
    ).item())
    ordered = frame if in_file_order else frame.sort(["source", "seq"])
    # Within a segment steps strictly increase, so the record before a restart holds the
    # largest step of the segment it ends.
    previous_max = pl.col("step").shift(1).over("source")
    ordered = ordered.with_columns(
        previous_max.alias("_previous_max"),
        (pl.col("step") <= previous_max).fill_null(False).alias("_restart"),
    ).with_columns(pl.col("_restart").cum_sum().over("source").cast(pl.Int32).alias("segment"))
    restart_rows = ordered.filter(pl.col("_restart")).select("source", "step", "_previous_max", "segment")
    restarts = [
        Restart(source=int(s), step=int(st), previous_step=int(p), segment=int(seg))
        for s, st, p, seg in restart_rows.iter_rows()
    ]
    if not keep_all and restarts:
        # Smallest step among the entries written AFTER each one, in its source.
        later_min = pl.col("step").reverse().cum_min().reverse().shift(-1).over("source")
        ordered = ordered.filter(later_min.is_null() | (pl.col("step") < later_min))
    merged = ordered.drop("_previous_max", "_restart")
    # One source without kept restarts is already in step order (steps rise within a segment).
    single_segment = frame.height < 2 or (
        merged["source"].n_unique() == 1 and (not restarts or not keep_all))
    if not single_segment:
        merged = merged.sort(["step", "source", "seq"], maintain_order=True)
    return merged, restarts

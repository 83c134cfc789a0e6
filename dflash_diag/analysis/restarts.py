"""Restarts: a step at or below an earlier step starts a new segment (docs/design.md, Diagnosis rules).

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
        seq: the ``seq`` of the new segment's first record (its place in the file): what tells
            apart two restarts to the same step from the same step (k-fold runs, each from
            step 1), which a live view sees again at every refresh.
    """

    source: int
    step: int
    previous_step: int
    segment: int
    seq: int | None = None


def _with_zero_segment(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with a ``segment`` column of zeros, added without copying the others:
    ``with_columns`` would first bring every column to one chunk (a copy of the whole frame,
    about 0.1 s and 120 MB at a million records as the reader assembles them)."""
    return frame.hstack([pl.repeat(0, frame.height, dtype=pl.Int32, eager=True).alias("segment")])


#: Rows per piece of :func:`_strictly_rising`.
_RISE_PIECE = 1 << 16


def _strictly_rising(column: pl.Series) -> bool | None:
    """Whether every value of an integer column is above the one before (None: nulls or another
    type, which the polars query decides). Differenced a piece at a time: the query's
    differences, shifted copy and masks are million-row columns, which polars' allocator keeps
    after the query (+8 MiB of converge's peak at a million records)."""
    if not column.dtype.is_integer() or column.null_count():
        return None
    for low in range(0, len(column) - 1, _RISE_PIECE):
        # the piece overlaps the next by one row: every consecutive pair is compared once
        piece = column.slice(low, _RISE_PIECE + 1).to_numpy()
        if not bool((piece[1:] > piece[:-1]).all()):
            return False
    return True


def _not_superseded(single_source: bool) -> pl.Expr:
    """True for an entry no later entry of its source rewinds over (frame in file order per
    source): what a restart leaves of the segments before it."""
    # Smallest step among the entries written AFTER each one, in its source.
    later_min = pl.col("step").reverse().cum_min().reverse().shift(-1)
    if not single_source:
        later_min = later_min.over("source")
    return later_min.is_null() | (pl.col("step") < later_min)


def not_superseded(frame: pl.DataFrame) -> pl.Expr:
    """True for the records of ``frame`` (file order per source) that no later restart
    supersedes: the ones :func:`resolve_restarts` keeps."""
    return _not_superseded(frame.select(pl.col("source").n_unique()).item() <= 1)


def before_then(earlier: pl.DataFrame | None, later: pl.DataFrame) -> pl.DataFrame:
    """``earlier``'s records before ``later``'s first step, then ``later``'s, in ``earlier``'s
    columns (``later`` alone without ``earlier``): records at or past the step a later segment
    starts from are superseded by it, as :func:`resolve_restarts` purges them (watch's pruned
    records joined with newer ones); a column of ``earlier``'s that ``later`` lacks is null in
    ``later``'s rows."""
    if earlier is None or earlier.height == 0:
        return later
    first = later["step"].min()
    kept = earlier.filter(pl.col("step") < first)
    missing = [c for c in earlier.columns if c not in later.columns]
    if missing:
        later = later.with_columns(pl.lit(None, earlier.schema[c]).alias(c) for c in missing)
    return pl.concat([kept, later.select(earlier.columns)], how="vertical_relaxed")


def resolve_restarts(
    frame: pl.DataFrame, keep_all: bool = False
) -> tuple[pl.DataFrame, list[Restart]]:
    """Number the segments of each source, purge orphaned entries, and merge in step order.

    Args:
        frame: metric records with ``source``, ``seq`` and ``step`` columns
            (:attr:`dflash_diag.read.jsonl.ParsedLog.metrics`), in file order per source.
        keep_all: keep every entry, orphaned ones included (still sorted by step).

    Returns:
        ``(frame, restarts)``: the records with a ``segment`` column (per source, 0-based), sorted
        by step (ties keep source then file order), and the restarts found.
    """
    if frame.height < 2:
        return _with_zero_segment(frame), []
    # One source (the usual case) needs no per-source windows: `.over("source")` groups a
    # million rows for nothing.
    # (in a query: `frame["source"]` would materialise a reader's constant column, 4 MB a million
    # rows, and the frame would keep it)
    single_source = frame.select(pl.col("source").n_unique()).item() == 1
    if single_source and _strictly_rising(frame["seq"]) and _strictly_rising(frame["step"]):
        # file order and every step above the one before (the usual log): one segment
        return _with_zero_segment(frame), []

    def per_source(expr: pl.Expr) -> pl.Expr:
        return expr if single_source else expr.over("source")

    # Sorting copies every column (lists included): skip it when the frame is already in file
    # order, as load_log's frames are.
    rising = pl.col("seq").diff() > 0
    if not single_source:
        rising = (pl.col("source").diff() > 0) | ((pl.col("source").diff() == 0) & rising)
    in_file_order = bool(frame.select(rising.fill_null(True).all()).item())
    ordered = frame if in_file_order else frame.sort(["source", "seq"])
    # Within a segment steps strictly increase, so the record before a restart holds the
    # largest step of the segment it ends.
    previous_max = per_source(pl.col("step").shift(1))
    is_restart = (pl.col("step") <= previous_max).fill_null(False)
    restart_rows = ordered.select(
        pl.col("source").filter(is_restart),
        pl.col("step").filter(is_restart),
        previous_max.filter(is_restart).alias("_previous_max"),
        pl.col("seq").filter(is_restart),
    )
    if restart_rows.height == 0:  # one segment per source: nothing to number, purge or merge
        merged = _with_zero_segment(ordered)
        if not single_source:
            merged = merged.sort(["step", "source", "seq"], maintain_order=True)
        return merged, []
    ordered = ordered.with_columns(per_source(is_restart.cum_sum()).cast(pl.Int32).alias("segment"))
    segments = ordered.filter(is_restart)["segment"]
    restarts = [
        Restart(source=int(s), step=int(st), previous_step=int(p), segment=int(seg), seq=int(q))
        for (s, st, p, q), seg in zip(restart_rows.iter_rows(), segments, strict=True)
    ]
    merged = ordered if keep_all else ordered.filter(_not_superseded(single_source))
    # One source without kept restarts is already in step order (steps rise within a segment).
    if not (single_source and not keep_all):
        merged = merged.sort(["step", "source", "seq"], maintain_order=True)
    return merged, restarts

"""What every format reader's records are checked for, as the JSONL reader checks its own.

Two promises of docs/reliability.md hold whatever the format (TensorBoard, W&B, MLflow stores,
trainer_state.json, CSV, console, nested JSONL):

* a record whose step is NaN/Inf or at least :data:`~dflash_diag.read.records.STEP_LIMIT` in
  magnitude (2^63 included, or an integer beyond int64) is left out of the analysis and counted
  in :attr:`ParseIssues.bad_step`; it never ends the read with a TypeError, and never starts a
  restart segment that purges the good steps before it;
* NaN/Inf metric values are counted per canonical field in :attr:`ParseIssues.nonfinite` (list
  elements one by one), which the JSON ``nonfinite`` key and the report's alert line read.

A reader cannot put a step beyond int64 in the Int64 ``step`` column, so it writes
:data:`OUT_OF_RANGE` there (:func:`step_value`, :func:`step_expr`); :func:`drop_bad_steps`
leaves those records out with the in-range-but-too-large ones and counts them.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from dflash_diag.read.records import FIRST_N, STEP_LIMIT, ParseIssues

#: Stands in for a step that is no usable integer (NaN/Inf, beyond int64): itself out of range.
OUT_OF_RANGE = -(2**63)


def step_value(number: float) -> int:
    """The Int64 step of a number a reader read: itself, or :data:`OUT_OF_RANGE`."""
    if isinstance(number, float) and not math.isfinite(number):
        return OUT_OF_RANGE
    if abs(number) >= STEP_LIMIT:
        return OUT_OF_RANGE
    return int(number)


def step_expr(value: pl.Expr) -> pl.Expr:
    """:func:`step_value` over a Float64 expression (nulls stay null: no step)."""
    return (
        pl.when(value.is_finite() & (value.abs() < STEP_LIMIT))
        .then(value.round(0).cast(pl.Int64, strict=False))
        .otherwise(pl.when(value.is_not_null()).then(pl.lit(OUT_OF_RANGE, pl.Int64)))
    )


def _in_range() -> pl.Expr:
    # two comparisons, not abs(): the abs of OUT_OF_RANGE overflows int64
    return (pl.col("step") > -STEP_LIMIT) & (pl.col("step") < STEP_LIMIT)


def drop_bad_steps(
    frame: pl.DataFrame, wides: list[pl.DataFrame], issues: ParseIssues
) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """``frame`` and ``wides`` (columns ``row``, ``step``; no null steps) without the records
    whose step is out of range, counted in ``issues`` with their record numbers (``row + 1``)."""
    keep = _in_range().fill_null(False)
    bad_rows: list[pl.Series] = []
    if frame.height and not frame.select(keep.all()).item():
        bad_rows.append(frame.filter(~keep)["row"].unique())
        frame = frame.filter(keep)
    for i, wide in enumerate(wides):
        if wide.height and not wide.select(keep.all()).item():
            bad_rows.append(wide.filter(~keep)["row"])
            wides[i] = wide.filter(keep)
    if bad_rows:
        rows = pl.concat(bad_rows).unique().sort()
        issues.bad_step += rows.len()
        issues.bad_step_lines = (
            issues.bad_step_lines + [(0, int(r) + 1) for r in rows.head(FIRST_N)]
        )[:FIRST_N]
    return frame, wides


def count_nonfinite(metrics: pl.DataFrame, issues: ParseIssues, names: Any) -> None:
    """Count the NaN/Inf values of the metric columns ``names`` of a canonical metrics frame
    (Float64 columns, and List(Float64) ones element by element) into ``issues``."""
    exprs = []
    for name in names:
        dtype = metrics.schema.get(name)
        if dtype == pl.Float64:
            exprs.append((~pl.col(name).is_finite()).sum().alias(name))
        elif dtype == pl.List(pl.Float64):
            exprs.append((~pl.col(name).explode().is_finite()).sum().alias(name))
    if not exprs or metrics.height == 0:
        return
    for name, count in metrics.select(exprs).row(0, named=True).items():
        if count:
            issues.nonfinite[name] = issues.nonfinite.get(name, 0) + int(count)

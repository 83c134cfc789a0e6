"""Means over metric rows that respect schema v1: NaN/Inf left out (the reader counts them), acc
per predicted token where every row carries ``n_pred``.

Shared by the regime summaries (`dflash_diag.compare.regimes`) and the boundary measurements
(`dflash_diag.compare.boundary`).
"""

from __future__ import annotations

import polars as pl


def finite_rows(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """The rows whose ``column`` is a finite number (none when the column is missing)."""
    if column not in frame.columns:
        return frame.clear()
    values = pl.col(column).cast(pl.Float64, strict=False)
    return frame.filter(values.is_not_null() & values.is_finite())


def mean_loss(frame: pl.DataFrame) -> float | None:
    """Plain mean of the finite losses, None when there are none."""
    rows = finite_rows(frame, "loss")
    if rows.is_empty():
        return None
    return float(rows["loss"].cast(pl.Float64).mean())


def mean_acc(frame: pl.DataFrame, *, weighted: bool = True) -> float | None:
    """Mean accuracy, weighted by ``n_pred`` where every finite row has it (an exact per-token mean
    across batches of different size), else a plain mean; None when there is no finite acc."""
    rows = finite_rows(frame, "acc")
    if rows.is_empty():
        return None
    acc = rows["acc"].cast(pl.Float64)
    if weighted and "n_pred" in rows.columns:
        w = rows["n_pred"].cast(pl.Float64, strict=False)
        if w.null_count() == 0 and bool((w > 0).all()):
            return float((acc * w).sum() / w.sum())
    return float(acc.mean())


def weighted_loss(frame: pl.DataFrame) -> float | None:
    """Loss weighted by ``n_pred``: the per-token loss when each row's loss is a per-token mean."""
    rows = finite_rows(frame, "loss")
    if rows.is_empty() or "n_pred" not in rows.columns:
        return None
    w = rows["n_pred"].cast(pl.Float64, strict=False)
    if w.null_count() or not bool((w > 0).all()):
        return None
    return float((rows["loss"].cast(pl.Float64) * w).sum() / w.sum())


def mean_of(rows: pl.DataFrame, column: str) -> float | None:
    """Plain mean of the finite values of ``column``, None when there are none."""
    sub = finite_rows(rows, column)
    return None if sub.is_empty() else float(sub[column].cast(pl.Float64).mean())

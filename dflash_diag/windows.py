"""N-step windows: per-window counts and means of loss and accuracy (DESIGN.md section 5).

A window's mean is weighted by ``n_pred`` (the accuracy denominator) when every entry of the window
carries it: batches hold different numbers of predicted tokens, and the per-token mean is the exact
accuracy of the window. Otherwise it is the plain mean of the entries. NaN and Inf are left out of
the means and counted per window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Window:
    """One window of ``size`` steps, ``start <= step <= end``.

    Attributes:
        index: position of the window from the aligned start (gaps skip indices).
        start: first step of the window (aligned), inclusive.
        end: last step of the window, inclusive (``start + size - 1``).
        n: metric entries in the window.
        first_step: the smallest step actually present.
        last_step: the largest step actually present.
        loss: mean loss (None if no finite loss).
        acc: mean accuracy (None if no finite accuracy).
        weighted: the means are ``n_pred``-weighted.
        acc_se: standard error of the entries' accuracy (None with fewer than two).
        loss_se: standard error of the entries' loss (None with fewer than two).
        nonfinite: NaN/Inf values of ``loss``, ``acc``, ``tau_train`` and ``lr`` in the window.
        tau_train: mean prefix acceptance length (``n_blocks``-weighted where present) or None.
        lr: plain mean of the finite learning rates (None if none).
        tok_per_sec: plain mean of the finite throughputs (None if none; legacy records have
            no ``tok_per_sec``).
    """

    index: int
    start: int
    end: int
    n: int
    first_step: int
    last_step: int
    loss: float | None
    acc: float | None
    weighted: bool
    acc_se: float | None
    loss_se: float | None
    nonfinite: int
    tau_train: float | None
    lr: float | None = None
    tok_per_sec: float | None = None


def window_index(start: int, size: int) -> pl.Expr:
    """The window number of each row's step, for windows aligned to ``start``."""
    return ((pl.col("step") - start) // size).alias("_window")


def _weighted_mean_parts(value: str, weight: str) -> list[pl.Expr]:
    ok = pl.col(value).is_finite().fill_null(False)
    has_weight = ok & pl.col(weight).is_finite().fill_null(False) & (pl.col(weight) > 0).fill_null(False)
    return [
        ok.sum().alias(f"_{value}_n"),
        pl.col(value).filter(ok).mean().alias(f"_{value}_plain"),
        pl.col(value).filter(ok).std().alias(f"_{value}_sd"),
        has_weight.sum().alias(f"_{value}_wn"),
        (pl.col(value) * pl.col(weight)).filter(has_weight).sum().alias(f"_{value}_wsum"),
        pl.col(weight).filter(has_weight).sum().alias(f"_{value}_wden"),
    ]


def _finite_mean(value: str) -> pl.Expr:
    """Plain mean of a column's finite values (lr and tok/s are not weighted by tokens)."""
    finite = pl.col(value).is_finite().fill_null(False)
    return pl.col(value).filter(finite).mean().alias(f"_{value}_mean")


def _pick_mean(row: dict, value: str) -> tuple[float | None, bool, float | None]:
    n = row[f"_{value}_n"]
    if not n:
        return None, False, None
    sd = row[f"_{value}_sd"]
    se = sd / math.sqrt(n) if n >= 2 and sd is not None and math.isfinite(sd) else None
    if row[f"_{value}_wn"] == n and row[f"_{value}_wden"]:
        return row[f"_{value}_wsum"] / row[f"_{value}_wden"], True, se
    return row[f"_{value}_plain"], False, se


def compute_windows(frame: pl.DataFrame, size: int = 50, start: int | None = None) -> list[Window]:
    """Bin metric records into ``size``-step windows aligned to ``start`` (default: first step).

    Args:
        frame: metric records (``step``, ``loss``, ``acc``, ``n_pred``; ``n_blocks``, ``tau_train``,
            ``lr`` and ``tok_per_sec`` are used when present).
        size: steps per window (>= 1).
        start: the first window's first step; records before it are ignored.

    Returns:
        The non-empty windows in step order.

    Raises:
        ValueError: ``size`` < 1.
    """
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    if frame.height == 0:
        return []
    if start is None:
        start = int(frame["step"].min())
    for name in ("n_pred", "n_blocks", "tau_train", "lr", "tok_per_sec", "loss", "acc"):
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.Float64).alias(name))
    nonfinite = sum(
        (pl.col(name).is_nan() | pl.col(name).is_infinite()).fill_null(False).cast(pl.Int64)
        for name in ("loss", "acc", "tau_train", "lr")
    )
    tau_ok = pl.col("tau_train").is_finite().fill_null(False)
    blocks_ok = tau_ok & pl.col("n_blocks").is_finite().fill_null(False) & (pl.col("n_blocks") > 0).fill_null(False)
    grouped = (
        frame.filter(pl.col("step") >= start)
        .with_columns(window_index(start, size), nonfinite.alias("_nonfinite"))
        .group_by("_window")
        .agg(
            pl.len().alias("_n"),
            pl.col("step").min().alias("_first"),
            pl.col("step").max().alias("_last"),
            pl.col("_nonfinite").sum(),
            *_weighted_mean_parts("acc", "n_pred"),
            *_weighted_mean_parts("loss", "n_pred"),
            tau_ok.sum().alias("_tau_n"),
            pl.col("tau_train").filter(tau_ok).mean().alias("_tau_plain"),
            blocks_ok.sum().alias("_tau_wn"),
            (pl.col("tau_train") * pl.col("n_blocks")).filter(blocks_ok).sum().alias("_tau_wsum"),
            pl.col("n_blocks").filter(blocks_ok).sum().alias("_tau_wden"),
            *(_finite_mean(name) for name in ("lr", "tok_per_sec")),
        )
        .sort("_window")
    )
    windows = []
    for row in grouped.iter_rows(named=True):
        acc, weighted, acc_se = _pick_mean(row, "acc")
        loss, loss_weighted, loss_se = _pick_mean(row, "loss")
        if row["_tau_n"]:
            use_blocks = row["_tau_wn"] == row["_tau_n"] and row["_tau_wden"]
            tau = row["_tau_wsum"] / row["_tau_wden"] if use_blocks else row["_tau_plain"]
        else:
            tau = None
        index = int(row["_window"])
        windows.append(Window(
            index=index,
            start=start + index * size,
            end=start + (index + 1) * size - 1,
            n=int(row["_n"]),
            first_step=int(row["_first"]),
            last_step=int(row["_last"]),
            loss=loss,
            acc=acc,
            weighted=weighted or (acc is None and loss_weighted),
            acc_se=acc_se,
            loss_se=loss_se,
            nonfinite=int(row["_nonfinite"]),
            tau_train=tau,
            lr=row["_lr_mean"],
            tok_per_sec=row["_tok_per_sec_mean"],
        ))
    return windows


def window_rows(frame: pl.DataFrame, window: Window) -> pl.DataFrame:
    """The records of ``frame`` that fall in ``window``."""
    return frame.filter(pl.col("step").is_between(window.start, window.end))

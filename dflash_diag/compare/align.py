"""Two runs side by side: windows on a shared axis, steps or tokens seen.

Input is each run's metrics frame after restart resolution (and phase selection), step order, with
the columns of schema v1 (``step``, ``loss``, ``acc`` and, where logged, ``n_tokens``, ``n_pred``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import polars as pl

from dflash_diag.analysis import defaults


@dataclass(frozen=True, kw_only=True)
class AlignedWindow:
    """One x window of two runs side by side; ``*_diff`` is run B minus run A."""

    start: float
    end: float
    n_a: int
    n_b: int
    loss_a: float | None
    loss_b: float | None
    loss_diff: float | None
    acc_a: float | None
    acc_b: float | None
    acc_diff: float | None


@dataclass(frozen=True)
class RunAlignment:
    """Two runs binned on a shared x axis (``step`` or ``tokens`` seen)."""

    x: str
    width: float
    names: tuple[str, str]
    windows: list[AlignedWindow]
    tokens_source: tuple[str | None, str | None] = (None, None)
    last_x: float | None = None
    """The largest x of either run: the last window's label ends there, at the data."""


def tokens_seen(frame: pl.DataFrame, tokens_per_step: float | None = None) -> tuple[pl.Series, str]:
    """Tokens trained on before each row's step, counted from the run's first step (so the first
    row is at 0 and a window of N steps holds N rows, as on the step axis).

    Uses ``n_tokens`` times the step gap since the previous row (a log written every 10 steps
    stands for 10 steps of tokens; a missing value takes the run's mean), else ``tokens_per_step``
    times the steps elapsed.

    Raises:
        ValueError: when neither ``n_tokens`` nor ``tokens_per_step`` is available.
    """
    steps = frame["step"].cast(pl.Float64)
    gaps = steps.diff().fill_null(1.0)
    if "n_tokens" in frame.columns:
        n = frame["n_tokens"].cast(pl.Float64, strict=False)
        n = n.set(~n.is_finite().fill_null(False), None) if n.len() else n
        if n.drop_nulls().len():
            n = n.fill_null(n.drop_nulls().mean())
            return ((n * gaps).cum_sum() - n).alias("tokens"), "n_tokens"
    if tokens_per_step:
        return ((steps - steps[0]) * tokens_per_step).alias("tokens"), "tokens_per_step"
    raise ValueError(
        "cannot align on tokens: the log has no n_tokens and no token budget in a run_start header"
    )


def _bin_means(frame: pl.DataFrame, x: pl.Series, origin: float, width: float) -> pl.DataFrame:
    weighted = "n_pred" in frame.columns and frame["n_pred"].null_count() == 0
    w = frame["n_pred"].cast(pl.Float64) if weighted else pl.Series([1.0] * frame.height)
    loss = frame["loss"].cast(pl.Float64, strict=False) if "loss" in frame.columns else None
    acc = frame["acc"].cast(pl.Float64, strict=False) if "acc" in frame.columns else None
    data = pl.DataFrame(
        {
            "bin": ((x - origin) / width).floor().cast(pl.Int64),
            "loss": loss
            if loss is not None
            else pl.Series([None] * frame.height, dtype=pl.Float64),
            "acc": acc if acc is not None else pl.Series([None] * frame.height, dtype=pl.Float64),
            "w": w,
        }
    )
    finite_loss = pl.col("loss").is_finite().fill_null(False)
    finite_acc = pl.col("acc").is_finite().fill_null(False)
    return data.group_by("bin").agg(
        pl.len().alias("n"),
        (  # n_pred-weighted where every row has it, as converge's windows and the regimes
            (pl.col("loss") * pl.col("w")).filter(finite_loss).sum()
            / pl.col("w").filter(finite_loss).sum()
        ).alias("loss"),
        (
            (pl.col("acc") * pl.col("w")).filter(finite_acc).sum()
            / pl.col("w").filter(finite_acc).sum()
        ).alias("acc"),
    )


def align_runs(
    run_a: pl.DataFrame,
    run_b: pl.DataFrame,
    *,
    x: str = "step",
    window: int = defaults.WINDOW,
    names: tuple[str, str] = ("A", "B"),
    tokens_per_step: tuple[float | None, float | None] = (None, None),
) -> RunAlignment:
    """Bin two runs on a shared axis and put their windows side by side.

    Args:
        run_a, run_b: metrics after restart resolution, step order.
        x: "step" (windows of ``window`` steps aligned to the earlier first step) or "tokens"
            (tokens seen since each run's start; windows of ``window`` times run A's mean tokens
            per step, so a window spans about as much training as ``window`` steps of run A).
        window: window width in steps of run A.
        names: labels of the two runs.
        tokens_per_step: per-run fallback when a log has no ``n_tokens`` (from its header).

    Returns:
        A `RunAlignment` with one row per window holding data from either run.

    Raises:
        ValueError: for an unknown ``x``, a bad window, empty runs, or tokens that cannot be counted.
    """
    if x not in ("step", "tokens"):
        raise ValueError(f"--x must be 'step' or 'tokens', got {x!r}")
    if window < 1:
        raise ValueError(f"--window must be at least 1, got {window}")
    if run_a.is_empty() or run_b.is_empty():
        raise ValueError("both runs need at least one metrics record to be compared")
    sources: tuple[str | None, str | None] = (None, None)
    if x == "step":
        xa, xb = run_a["step"].cast(pl.Float64), run_b["step"].cast(pl.Float64)
        origin = float(min(xa[0], xb[0]))
        width = float(window)
    else:
        (xa, sa), (xb, sb) = (
            tokens_seen(run_a, tokens_per_step[0]),
            tokens_seen(run_b, tokens_per_step[1]),
        )
        sources = (sa, sb)
        span = float(run_a["step"][-1] - run_a["step"][0])
        per_step_a = float(xa[-1]) / span if span > 0 else float(tokens_per_step[0] or 1.0)
        origin, width = 0.0, window * per_step_a
    bins_a = _bin_means(run_a, xa, origin, width)
    bins_b = _bin_means(run_b, xb, origin, width)
    joined = bins_a.join(bins_b, on="bin", how="full", coalesce=True, suffix="_b").sort("bin")
    out = []
    for row in joined.iter_rows(named=True):
        la, lb, aa, ab = row["loss"], row["loss_b"], row["acc"], row["acc_b"]
        out.append(
            AlignedWindow(
                start=origin + row["bin"] * width,
                end=origin + (row["bin"] + 1) * width,
                n_a=row["n"] or 0,
                n_b=row["n_b"] or 0,
                loss_a=la,
                loss_b=lb,
                loss_diff=lb - la if la is not None and lb is not None else None,
                acc_a=aa,
                acc_b=ab,
                acc_diff=ab - aa if aa is not None and ab is not None else None,
            )
        )
    last_x = max(float(cast(float, xa.max())), float(cast(float, xb.max())))
    return RunAlignment(
        x=x, width=width, names=names, windows=out, tokens_source=sources, last_x=last_x
    )

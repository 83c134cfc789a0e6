"""The walk the primary estimate reads: the latest walked records, not the whole last window.

The windows are sized for the trend statistics (``--window auto``: 50 steps of a log written
every step), not for the current value: on a rising tau, the walk of a whole window lags by half
a window. Measured on our own pipeline runs with the evals hidden (80 steps, 3.3 epochs, a walk on
every step): the last window's walk at the default window missed 7 of 28 measured evals past the
first epoch by more than 10% (up to -14%, each a window reaching back to the run's first steps),
the latest 8 walked records none (max 8.2%).

So the walk reads the latest records: at least :data:`RECENT_RECORDS` of them where the span holds
so many, more while they are too noisy to lead (:func:`~dflash_diag.analysis.estimators.walk_held_back`),
never reaching back more than one window's length of steps from the latest walked record. A
window that holds fewer walked records (a walk every 10 steps, the trainer's default, gives 5
in 50 steps) is read whole, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from dflash_diag.analysis.estimators import walk_held_back

#: Fewest latest walked records the walk reads when the span holds them: the standard error of
#: fewer records is itself too noisy to judge the walk by (on the sample log's looping data a
#: walk of three records within ±6% was 26% off).
RECENT_RECORDS = 8


@dataclass(frozen=True)
class RecentWalk:
    """The walked tau of the latest walked records.

    Attributes:
        tau: ``sum walk_tokens / sum walk_steps`` over them.
        se: its standard error (:func:`~dflash_diag.analysis.windows.ratio_se`; None with fewer
            than two records).
        n: the records read.
        first_step: the step of the earliest of them.
        last_step: the step of the latest.
    """

    tau: float
    se: float | None
    n: int
    first_step: int
    last_step: int


def _walked(frame: pl.DataFrame, up_to_step: int | None) -> pl.DataFrame:
    """The walked records (finite ``walk_tokens`` and positive ``walk_steps``), step order."""
    if "walk_tokens" not in frame.columns or "walk_steps" not in frame.columns:
        return frame.clear()
    ok = (
        pl.col("walk_tokens").is_finite().fill_null(False)
        & pl.col("walk_steps").is_finite().fill_null(False)
        & (pl.col("walk_steps") > 0).fill_null(False)
    )
    if up_to_step is not None:
        ok = ok & (pl.col("step") <= up_to_step)
    # the three columns first: a filter copies every column it keeps (the frame's twenty)
    return frame.select("step", "walk_tokens", "walk_steps").filter(ok).sort("step")


def recent_walk(
    frame: pl.DataFrame,
    span_steps: int,
    up_to_step: int | None = None,
    min_records: int = RECENT_RECORDS,
) -> RecentWalk | None:
    """The walked tau of the latest walked records of ``frame`` (see the module docstring).

    Args:
        frame: the records analysed (restarts resolved).
        span_steps: the most steps the records may span, counted back from the latest walked
            record (the window's size).
        up_to_step: ignore records after this step (None: every record).
        min_records: the fewest records read when the span holds so many.

    Returns:
        None without a walked record (at most ``up_to_step``).
    """
    walked = _walked(frame, up_to_step)
    if walked.height == 0:
        return None
    last = int(walked["step"][-1])
    span = walked.filter(pl.col("step") > last - span_steps)
    steps_col = span["step"].to_list()[::-1]
    tokens = [float(t) for t in span["walk_tokens"].to_list()[::-1]]
    walk_steps = [float(s) for s in span["walk_steps"].to_list()[::-1]]
    # Running sums from the latest record back: the ratio and its SE for every k in one pass.
    t = s = tt = ts = ss = 0.0
    best: RecentWalk | None = None
    for k, (tok, stp) in enumerate(zip(tokens, walk_steps, strict=True), start=1):
        t, s = t + tok, s + stp
        tt, ts, ss = tt + tok * tok, ts + tok * stp, ss + stp * stp
        if k < min(min_records, len(tokens)):
            continue
        tau = t / s
        se = None
        if k >= 2:
            # sum (t_i - R s_i)^2 expanded, clipped at zero (equal ratios can cancel below it)
            residual = max(0.0, tt - 2.0 * tau * ts + tau * tau * ss)
            se = math.sqrt(residual / (k * (k - 1))) / (s / k)
        best = RecentWalk(tau, se, k, int(steps_col[k - 1]), last)
        if walk_held_back(tau, se, k) is None:
            break
    return best

"""The verdict: converging, plateau, diverging or not enough data, and an ETA to the target.

The trend is measured on window means (x = window middle step, y = mean accuracy, or minus the
loss for logs without accuracy) with a Theil-Sen slope and a Mann-Kendall test over the selected
range. A significant rise is "converging", a significant fall "diverging", anything else
"plateau". The ETA extends the slope from the current accuracy to the target accuracy; hours come
from the median seconds per step (``time`` stamps, else ``n_tokens / tok_per_sec``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import polars as pl

from dflash_diag.analysis.robust_trend import mann_kendall, theil_sen_slope
from dflash_diag.analysis.windows import Window

if TYPE_CHECKING:
    from dflash_diag.analysis.acceptance import Acceptance

CONVERGING, PLATEAU, DIVERGING, NOT_ENOUGH = "converging", "plateau", "diverging", "not enough data"
#: Statuses in the order a watchdog would worry about them.
STATUSES = (CONVERGING, PLATEAU, DIVERGING, NOT_ENOUGH)
#: The O(n^2) statistics run on at most this many points; more windows are merged in groups.
MAX_POINTS = 300


@dataclass(frozen=True)
class VerdictConfig:
    """Verdict settings.

    Attributes:
        alpha: significance level of the Mann-Kendall test.
        min_points: fewest windows to judge on (with 4 or fewer no trend can reach p < 0.05).
    """

    alpha: float = 0.05
    min_points: int = 5

    def __post_init__(self) -> None:
        if not (0 < self.alpha < 1):
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.min_points < 3:
            raise ValueError(f"min_points must be >= 3, got {self.min_points}")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The verdict section of the report.

    Attributes:
        status: one of :data:`STATUSES`.
        metric: "acc" or "loss" (the series judged).
        slope_per_1k_steps: Theil-Sen slope of that metric per 1000 steps (loss: its own sign).
        p_value: Mann-Kendall two-sided p-value.
        n_points: windows used.
        eta_steps: steps until the target accuracy at this slope (0 if reached; None if the
            slope does not lead there or there is no accuracy).
        eta_hours: the same in hours, when a step time is known.
        seconds_per_step: the median seconds per step used for hours.
        seconds_source: "time" or "tok_per_sec".
        reason: one line explaining the status.
    """

    status: str
    metric: str | None
    slope_per_1k_steps: float | None
    p_value: float | None
    n_points: int
    eta_steps: float | None
    eta_hours: float | None
    seconds_per_step: float | None
    seconds_source: str | None
    reason: str


def _points(windows: Sequence[Window], metric: str) -> tuple[list[float], list[float], list[int]]:
    isfinite = math.isfinite
    kept = [(w, value) for w in windows if (value := getattr(w, metric)) is not None and isfinite(value)]
    xs = [(w.first_step + w.last_step) / 2.0 for w, _ in kept]
    ys = [value for _, value in kept]
    ns = [w.n for w, _ in kept]
    if len(xs) > MAX_POINTS:
        # Merge consecutive windows into MAX_POINTS groups (entry-weighted means) to bound O(n^2).
        group = math.ceil(len(xs) / MAX_POINTS)
        gx, gy, gn = [], [], []
        for i in range(0, len(xs), group):
            n = sum(ns[i:i + group])
            gx.append(sum(x * k for x, k in zip(xs[i:i + group], ns[i:i + group])) / n)
            gy.append(sum(y * k for y, k in zip(ys[i:i + group], ns[i:i + group])) / n)
            gn.append(n)
        xs, ys, ns = gx, gy, gn
    return xs, ys, ns


def seconds_per_step(frame: pl.DataFrame) -> tuple[float | None, str | None]:
    """Median seconds per step from ``time`` stamps, else from ``n_tokens / tok_per_sec``."""
    if frame.height >= 2 and "time" in frame.columns:
        rates = (
            frame.select(
                (pl.col("time").diff() / pl.col("step").diff().cast(pl.Float64)).alias("r")
            )
            .filter(pl.col("r").is_finite() & (pl.col("r") > 0))["r"]
        )
        if len(rates):
            return float(rates.median()), "time"
    if {"n_tokens", "tok_per_sec"} <= set(frame.columns):
        rates = frame.select((pl.col("n_tokens") / pl.col("tok_per_sec")).alias("r")).filter(
            pl.col("r").is_finite() & (pl.col("r") > 0))["r"]
        if len(rates):
            return float(rates.median()), "tok_per_sec"
    return None, None


def judge(
    windows: Sequence[Window],
    *,
    current_acc: float | None,
    target_acc: float,
    frame: pl.DataFrame | None = None,
    config: VerdictConfig | None = None,
) -> Verdict:
    """Judge the trend of the windows and estimate the time to ``target_acc``.

    Args:
        windows: the analysed windows in step order.
        current_acc: the accuracy the ETA starts from (the last window's mean).
        target_acc: the accuracy to reach.
        frame: the analysed records, for the seconds per step (optional).
        config: significance level and minimum number of windows.
    """
    config = config or VerdictConfig()
    metric = "acc" if any(w.acc is not None for w in windows) else "loss"
    if not any(getattr(w, metric) is not None for w in windows):
        metric = None
    xs, ys, _ = _points(windows, metric) if metric else ([], [], [])
    sec, sec_source = seconds_per_step(frame) if frame is not None else (None, None)
    if len(xs) < config.min_points or len(set(xs)) < 2:
        reason = (f"{len(xs)} window(s) with {metric or 'acc/loss'}; need {config.min_points}"
                  " (try a smaller --window)")
        return Verdict(status=NOT_ENOUGH, metric=metric, slope_per_1k_steps=None, p_value=None,
                       n_points=len(xs), eta_steps=None, eta_hours=None, seconds_per_step=sec,
                       seconds_source=sec_source, reason=reason)
    slope = theil_sen_slope(xs, ys)
    test = mann_kendall(ys)
    # "Better" is up for accuracy, down for loss.
    better = test.s > 0 if metric == "acc" else test.s < 0
    if test.p_value < config.alpha and test.s != 0:
        status = CONVERGING if better else DIVERGING
    else:
        status = PLATEAU
    reason = (f"Theil-Sen slope of {metric} over {len(xs)} windows, Mann-Kendall "
              f"p = {test.p_value:.3g} ({'<' if test.p_value < config.alpha else '>='} {config.alpha:g})")
    eta_steps = None
    if metric == "acc" and current_acc is not None:
        if current_acc >= target_acc:
            eta_steps = 0.0
        elif slope > 0:
            eta_steps = (target_acc - current_acc) / slope
    eta_hours = eta_steps * sec / 3600.0 if eta_steps is not None and sec is not None else None
    return Verdict(status=status, metric=metric, slope_per_1k_steps=slope * 1000.0,
                   p_value=test.p_value, n_points=len(xs), eta_steps=eta_steps, eta_hours=eta_hours,
                   seconds_per_step=sec, seconds_source=sec_source, reason=reason)


def accuracy_goal(acceptance: Acceptance) -> float | None:
    """The accuracy at which the chosen tau estimator reaches the target tau.

    The ETA extrapolates the accuracy slope, so it needs the target in accuracy. Assuming the
    extra tokens per verify step (tau - 1) stay proportional to accuracy at the ratio measured now,
    the goal is acc * (target_tau - 1) / (tau - 1): exactly ``target_acc`` under the linear
    estimator, and consistent with the progress figure under the others (whose tau may lag or lead
    what the linear formula promises). None when any input is missing or tau has not left 1.
    """
    acc, tau, target_tau = acceptance.acc, acceptance.tau, acceptance.target_tau
    if acc is None or tau is None or target_tau is None or acc <= 0 or tau <= 1.0:
        return None
    if acceptance.estimator == "linear" and acceptance.target_acc is not None:
        return acceptance.target_acc  # the same value, without a rounding step
    return acc * (target_tau - 1.0) / (tau - 1.0)


def judge_toward(windows: Sequence[Window], acceptance: Acceptance, *,
                 frame: pl.DataFrame | None = None, config: VerdictConfig | None = None) -> Verdict:
    """:func:`judge` with the ETA aimed at the accuracy where ``acceptance`` reaches its target.

    A goal above accuracy 1 (the measured tau lags what accuracy promises too far) gives no ETA,
    and the reason says so.
    """
    goal = accuracy_goal(acceptance)
    verdict = judge(windows, current_acc=acceptance.acc,
                    target_acc=goal if goal is not None else acceptance.target_acc,
                    frame=frame, config=config)
    if goal is not None and goal > 1.0:
        verdict = replace(verdict, eta_steps=None, eta_hours=None,
                          reason=verdict.reason + f"; no ETA: at the current tau/acc ratio the "
                          f"target tau {acceptance.target_tau:.2f} would need acc {goal:.2f} > 1")
    return verdict

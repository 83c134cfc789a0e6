"""The verdict: converging, plateau, diverging, overfitting, broken or not enough data, and an
ETA to the target.

The trend is measured on window means (x = window middle step, y = mean accuracy, or minus the
loss for logs without accuracy) with a Theil-Sen slope and a Mann-Kendall test over the selected
range. A significant rise is "converging", a significant fall "diverging", anything else
"plateau". Two judgements override the trend (:func:`with_health`): a run that is not alive
(:mod:`dflash_diag.analysis.alive`: a constant or exactly-zero loss) is "broken", whatever its
trend; a converging or plateau run whose validation series got significantly worse than its best
(:mod:`dflash_diag.analysis.validation`) is "overfitting", naming the best step.

The ETA is fitted in the target's own units (:func:`eta_toward`): an accuracy target on the
accuracy windows (the verdict's own slope), a tau target on the series of the estimator that
measures progress (eval points for ``measured``, per-window estimates otherwise). It is given only
when the verdict supports one: the target already reached (0), or a converging verdict with a
rising series; otherwise ``eta_reason`` says why there is none. Hours come from the median seconds
per step (``time`` stamps, else ``n_tokens / tok_per_sec``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.numbers import plural
from dflash_diag.analysis.robust_trend import (
    MAX_POINTS,
    bounded_points,
    mann_kendall,
    merge_points,
    theil_sen_slope,
)
from dflash_diag.analysis.validation import ValidationTrend
from dflash_diag.analysis.windows import Window, WindowTable

CONVERGING, PLATEAU, DIVERGING, NOT_ENOUGH = "converging", "plateau", "diverging", "not enough data"
OVERFITTING, BROKEN = "overfitting", "broken"


@dataclass(frozen=True)
class VerdictConfig:
    """Verdict settings.

    Attributes:
        alpha: significance level of the Mann-Kendall test.
        min_points: fewest windows to judge on (with 4 or fewer no trend can reach p < 0.05).
    """

    alpha: float = defaults.ALPHA
    min_points: int = defaults.MIN_POINTS

    def __post_init__(self) -> None:
        if not (0 < self.alpha < 1):
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.min_points < 3:
            raise ValueError(f"min_points must be >= 3, got {self.min_points}")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The verdict section of the report.

    Attributes:
        status: converging, plateau, overfitting, diverging, broken or "not enough data".
        metric: "acc" or "loss" (the series judged).
        slope_per_1k_steps: Theil-Sen slope of that metric per 1000 steps (loss: its own sign).
        p_value: Mann-Kendall two-sided p-value.
        n_points: windows used.
        eta_steps: steps until the target at the fitted slope (0 if reached; None when the
            verdict does not support one: see ``eta_reason``).
        eta_hours: the same in hours, when a step time is known.
        seconds_per_step: the median seconds per step used for hours.
        seconds_source: "time" or "tok_per_sec".
        reason: one line explaining the status.
        eta_reason: one line saying how the ETA was fitted, or why there is none.
        eta_basis: the series the ETA was fitted on (e.g. "accuracy windows", "3 eval points").
        validation: the judgement of each validation series the log has (eval loss, eval acc,
            measured tau), empty without evals.
        best_step: the best validation step of the series that made the verdict "overfitting".
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
    eta_reason: str = ""
    eta_basis: str | None = None
    validation: list[ValidationTrend] = field(default_factory=list)
    best_step: int | None = None


def _points(table: WindowTable, metric: str) -> tuple[list[float], list[float], list[int]]:
    """The ``(x, y, n)`` points of ``metric``: each window with a finite value (x its middle
    step, n its entries), merged past :data:`MAX_POINTS` into entry-weighted groups."""
    values = table.array(metric)
    kept = table.given(metric) & np.isfinite(values)
    xs = (table.array("first_step")[kept] + table.array("last_step")[kept]) / 2.0
    ys = values[kept]
    ns = table.array("n")[kept]
    gx, gy, gn = merge_points(xs, ys, ns, MAX_POINTS)  # entry-weighted groups: bounds O(n^2)
    return gx.tolist(), gy.tolist(), gn.tolist()


def _has_values(frame: pl.DataFrame, name: str) -> bool:
    return name in frame.columns and frame[name].null_count() < frame.height


#: Records per piece of :func:`positive_rates`: the rates are computed a piece at a time into one
#: array. As a polars query (a column of time differences, one of step differences, their
#: quotients, the filtered copy, the median's sorted copy) they held five million-row columns,
#: which polars' allocator keeps after the query: +23 MiB of converge's peak at 1M records.
_RATE_PIECE = 1 << 16

#: The column types :func:`positive_rates` reads as numpy arrays with the polars query's values;
#: any other type takes the query.
_RATE_TYPES = (pl.Float64, pl.Int64)


def positive_rates(top: pl.Series, bottom: pl.Series, *, differences: bool) -> np.ndarray | None:
    """The finite positive values of ``top / bottom``, in row order; with ``differences``, of
    their consecutive differences' quotients: what polars gives for
    ``(top.diff() / bottom.diff().cast(Float64)).filter(finite & > 0)`` (``top / bottom``
    without), the same IEEE operations on the same values (a null is a NaN here: both drop it).

    None when a column is not of the types this reads exactly (Float64, Int64 without nulls: as a
    float with NaN for its nulls, an integer past 2^53 would be rounded before it is differenced):
    the caller takes the polars query.
    """
    for column in (top, bottom):
        if column.dtype not in _RATE_TYPES or (column.dtype == pl.Int64 and column.null_count()):
            return None
    # Zero-copy views of one-chunk columns without nulls (a copy with NaN for the nulls otherwise).
    a, b = top.to_numpy(), bottom.to_numpy()
    height = len(a)
    out = np.empty(max(height - 1 if differences else height, 0), dtype=np.float64)
    kept = 0
    step = _RATE_PIECE
    with np.errstate(divide="ignore", invalid="ignore"):
        for low in range(0, height - 1 if differences else height, step):
            if differences:
                # the piece overlaps the next by one row: every consecutive pair is differenced once
                num = np.diff(a[low : low + step + 1])
                den = np.diff(b[low : low + step + 1]).astype(np.float64)
            else:
                num, den = a[low : low + step], b[low : low + step]
            rates = np.true_divide(num, den, dtype=np.float64)
            rates = rates[np.isfinite(rates) & (rates > 0)]
            out[kept : kept + len(rates)] = rates
            kept += len(rates)
    return out[:kept]


def polars_median(values: np.ndarray) -> float:
    """The median of ``values`` (not empty, no NaN) as polars' ``Series.median`` gives it: the
    middle value, or ``lo + 0.5 (hi - lo)`` of the two middle ones (its linear interpolation, which
    is not always ``(lo + hi) / 2`` in the last bit). ``values`` is partitioned in place."""
    n = len(values)
    middle = n // 2
    if n % 2:
        values.partition(middle)
        return float(values[middle])
    values.partition([middle - 1, middle])
    lo, hi = float(values[middle - 1]), float(values[middle])
    return 0.5 * (hi - lo) + lo


def _median_rate(frame: pl.DataFrame, top: str, bottom: str, differences: bool) -> float | None:
    """The median of :func:`positive_rates` of two columns (None without any)."""
    rates = positive_rates(frame[top], frame[bottom], differences=differences)
    if rates is not None:
        return polars_median(rates) if len(rates) else None
    quotient = (
        pl.col(top).diff() / pl.col(bottom).diff().cast(pl.Float64)
        if differences
        else pl.col(top) / pl.col(bottom)
    )
    column = frame.select(quotient.alias("r")).filter(pl.col("r").is_finite() & (pl.col("r") > 0))[
        "r"
    ]
    return float(cast(float, column.median())) if len(column) else None


def seconds_per_step(frame: pl.DataFrame) -> tuple[float | None, str | None]:
    """Median seconds per step from ``time`` stamps, else from ``n_tokens / tok_per_sec``."""
    # A column of nulls only (the reader's schema holds every field, another trainer's log
    # writes no time) gives no rate: skipped, not computed as a million nulls.
    if frame.height >= 2 and _has_values(frame, "time"):
        median = _median_rate(frame, "time", "step", differences=True)
        if median is not None:
            return median, "time"
    if _has_values(frame, "n_tokens") and _has_values(frame, "tok_per_sec"):
        median = _median_rate(frame, "n_tokens", "tok_per_sec", differences=False)
        if median is not None:
            return median, "tok_per_sec"
    return None, None


def judge(
    windows: Sequence[Window] | WindowTable,
    *,
    current_acc: float | None,
    target_acc: float,
    frame: pl.DataFrame | None = None,
    config: VerdictConfig | None = None,
    skip: frozenset[str] | set[str] = frozenset(),
) -> Verdict:
    """Judge the trend of the windows and estimate the time to the accuracy ``target_acc``.

    Args:
        windows: the analysed windows in step order (objects, or their
            :class:`~dflash_diag.analysis.windows.WindowTable`).
        current_acc: the accuracy the ETA starts from (the last window's mean).
        target_acc: the accuracy to reach.
        frame: the analysed records, for the seconds per step (optional).
        config: significance level and minimum number of windows.
        skip: metrics not to judge ("acc" when it is constant beside a moving loss).
    """
    config = config or VerdictConfig()
    table = windows if isinstance(windows, WindowTable) else WindowTable.from_windows(windows)
    metric: str | None = "acc" if "acc" not in skip and table.given("acc").any() else "loss"
    if metric == "loss" and "loss" in skip:
        metric = None
    # An accuracy at its ceiling (every record of the newest window 1.0: a classifier that fits
    # its training batches) cannot rise; whether the model still learns is the loss's to say.
    newest_acc = table.newest_given("acc")
    saturated = (
        metric == "acc"
        and "loss" not in skip
        and bool(table.given("loss").any())
        and newest_acc is not None
        and float(table.array("acc")[newest_acc]) >= 1.0
    )
    if saturated:
        metric = "loss"
    if metric is not None and not table.given(metric).any():
        metric = None
    xs, ys, _ = _points(table, metric) if metric else ([], [], [])
    used = int((table.given(metric) & np.isfinite(table.array(metric))).sum()) if metric else 0
    sec, sec_source = seconds_per_step(frame) if frame is not None else (None, None)
    if len(xs) < config.min_points or len(set(xs)) < 2:
        # a window of one step cannot shrink
        wide = bool((table.array("end") > table.array("start")).any())
        reason = (
            f"{plural(len(xs), 'window')} with {metric or 'acc/loss'}; need {config.min_points}"
            + (" (try a smaller --window)" if wide and xs else "")
        )
        verdict = Verdict(
            status=NOT_ENOUGH,
            metric=metric,
            slope_per_1k_steps=None,
            p_value=None,
            n_points=len(xs),
            eta_steps=None,
            eta_hours=None,
            seconds_per_step=sec,
            seconds_source=sec_source,
            reason=reason,
        )
        return eta_toward(
            verdict,
            current=current_acc if metric == "acc" else None,
            goal=target_acc,
            slope=None,
            basis="accuracy windows",
            units="acc",
        )
    slope = theil_sen_slope(xs, ys)
    test = mann_kendall(ys)
    # "Better" is up for accuracy, down for loss.
    better = test.s > 0 if metric == "acc" else test.s < 0
    if test.p_value < config.alpha and test.s != 0:
        status = CONVERGING if better else DIVERGING
    else:
        status = PLATEAU
    # The wording counts the windows analysed; past MAX_POINTS they were merged into groups.
    merged = f" (merged into {len(xs)} groups)" if len(xs) < used else ""
    reason = (
        f"Theil-Sen slope of {metric} over {plural(used, 'window')}{merged}, Mann-Kendall "
        f"p = {test.p_value:.3g} ({'<' if test.p_value < config.alpha else '>='} {config.alpha:g})"
        + ("; acc is at its ceiling (1.0) in the newest window" if saturated else "")
    )
    verdict = Verdict(
        status=status,
        metric=metric,
        slope_per_1k_steps=slope * 1000.0,
        p_value=test.p_value,
        n_points=used,
        eta_steps=None,
        eta_hours=None,
        seconds_per_step=sec,
        seconds_source=sec_source,
        reason=reason,
    )
    if metric != "acc" and not saturated:
        return replace(verdict, eta_reason="no ETA: the log has no accuracy")
    return eta_toward(
        verdict,
        current=current_acc,
        goal=target_acc,
        slope=None if saturated else slope,  # a loss slope is no accuracy's
        basis="accuracy windows",
        units="acc",
    )


def with_health(
    verdict: Verdict, *, broken: str | None = None, validation: Sequence[ValidationTrend] = ()
) -> Verdict:
    """``verdict`` with the run's health judged: ``broken`` (the reason the run is not alive)
    overrides every trend; a validation series worse than its best beside a converging or flat
    training trend makes it ``overfitting`` (the first such series names the best step). The
    ETA is dropped with either (an ETA along a dead or overfitting curve is no forecast)."""
    verdict = replace(verdict, validation=list(validation))
    if broken is not None:
        return replace(
            verdict,
            status=BROKEN,
            reason=broken,
            eta_steps=None,
            eta_hours=None,
            eta_reason="no ETA: the run is broken",
        )
    worse = next((v for v in validation if v.worse), None)
    if worse is None or verdict.status not in (CONVERGING, PLATEAU):
        return verdict
    if any(v.status == "improving" for v in validation if v is not worse):
        # Another validation series still improves significantly (eval loss falling while eval
        # accuracy slips from its best): the evidence disagrees, so no overfitting is called.
        return verdict
    train = (
        "while the training trend improves"
        if verdict.status == CONVERGING
        else "while the training trend is flat"
    )
    return replace(
        verdict,
        status=OVERFITTING,
        best_step=worse.best_step,
        reason=f"{worse.reason}, {train} ({verdict.reason})",
        eta_steps=None,
        eta_hours=None,
        eta_reason=f"no ETA: the verdict is overfitting (best {worse.label} at step {worse.best_step})",
    )


#: Fewest points an ETA is fitted on (a line through two evals is no trend).
MIN_ETA_POINTS = 3


def fitted_slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Theil-Sen slope per step of ``(step, value)`` points; None with fewer than
    :data:`MIN_ETA_POINTS` finite points or a single step."""
    kept = [(x, y) for x, y in points if y is not None and math.isfinite(y)]
    if len(kept) < MIN_ETA_POINTS or len({x for x, _ in kept}) < 2:
        return None
    # a tau target's per-window estimates can be 20,000 points: merged first, as the verdict's
    return theil_sen_slope(*bounded_points([x for x, _ in kept], [y for _, y in kept]))


def eta_toward(
    verdict: Verdict,
    *,
    current: float | None,
    goal: float,
    slope: float | None,
    basis: str,
    units: str,
) -> Verdict:
    """``verdict`` with the ETA from ``current`` to ``goal`` at ``slope`` (per step).

    Only a verdict that supports an ETA gets one: the goal reached (0 steps), or a converging
    verdict and a rising fitted series. Otherwise ``eta_steps`` is None and ``eta_reason`` says
    why (a verdict that is not converging prints no ETA sentence at all).
    """
    eta = None
    if current is None:
        reason = f"no ETA: no current {units}"
    elif current >= goal:
        eta, reason = 0.0, f"target reached: {units} {current:.4g} >= {goal:.4g}"
    elif verdict.status == NOT_ENOUGH:
        reason = "no ETA without a trend (not enough data)"
    elif verdict.status != CONVERGING:
        reason = f"no ETA: the verdict is {verdict.status}"
    elif slope is None:
        reason = f"no ETA: too few {basis} to fit a slope (need {MIN_ETA_POINTS})"
    elif slope <= 0:
        reason = f"no ETA: the {basis} do not rise ({slope * 1000:+.3g} per 1k steps)"
    else:
        eta = (goal - current) / slope
        reason = (
            f"{units} {current:.4g} -> {goal:.4g} at {slope * 1000:+.3g} per 1k steps, "
            f"fitted on the {basis}"
        )
    sec = verdict.seconds_per_step
    hours = eta * sec / 3600.0 if eta is not None and sec is not None else None
    return replace(verdict, eta_steps=eta, eta_hours=hours, eta_reason=reason, eta_basis=basis)

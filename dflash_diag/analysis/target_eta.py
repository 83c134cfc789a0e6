"""The ETA to a target, read off a metric's forecast path: the first step the forecast crosses it.

The interval of the ETA comes from the forecast's band: the optimistic edge crosses first (the
early end), the pessimistic edge last (the late end; None when it never crosses before the end).
When the plan ends before the forecast gets there, the answer is "not within this run" with the
value forecast at the planned end; an ETA past the end is never given as reachable. Without a
planned end the path stops at the horizon and ``within_run`` is None.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dflash_diag.analysis.forecast import MetricForecast
from dflash_diag.analysis.verdict import Verdict


@dataclass(frozen=True, kw_only=True)
class TargetEta:
    """The ETA of one target.

    Attributes:
        metric: the forecast metric the target is in ("acc", "tau", "loss").
        target: the target value.
        current: the newest observed value.
        eta_step: the step the forecast reaches the target (the current step when already
            reached); None when it does not before the end (or horizon).
        eta_low_step, eta_high_step: the early and late ends of the ETA (None: the late edge
            never crosses before the end).
        eta_hours: hours from the newest step to ``eta_step`` (None without a step time).
        within_run: True when the forecast crosses before the planned end, False when it does
            not, None without a planned end (or without a forecast).
        at_end: the forecast at the planned end (or horizon), for "not within this run".
        reason: one line for the report.
    """

    metric: str
    target: float
    current: float | None
    eta_step: int | None
    eta_low_step: int | None
    eta_high_step: int | None
    eta_hours: float | None
    within_run: bool | None
    at_end: MetricForecast | None
    reason: str


def _crossing(path, column: int, target: float, higher: bool) -> float | None:
    """The first step where ``path[column]`` reaches ``target`` (linear between path points)."""
    prev = None
    for point in path:
        value = point[column]
        if (value >= target) if higher else (value <= target):
            if prev is None:
                return point[0]
            (s0, v0), (s1, v1) = (prev[0], prev[column]), (point[0], value)
            if v1 == v0:
                return s1
            return s0 + (target - v0) / (v1 - v0) * (s1 - s0)
        prev = point
    return None


def eta_to(
    forecast: MetricForecast,
    *,
    target: float,
    current: float | None,
    last_step: int,
    planned: bool,
    seconds_per_step: float | None,
) -> TargetEta:
    """The ETA of ``target`` from ``forecast``'s path.

    Args:
        forecast: the target metric's forecast (its path ends at the planned end or horizon).
        target: the target value.
        current: the newest observed value (the ETA is 0 when it already meets the target).
        last_step: the newest step.
        planned: whether the path ends at a planned end (else at a horizon).
        seconds_per_step: for hours.
    """
    higher = forecast.higher_is_better
    word = forecast.metric
    hours = None

    def to_hours(step: float | None) -> float | None:
        if step is None or seconds_per_step is None:
            return None
        return max(0.0, step - last_step) * seconds_per_step / 3600.0

    if current is not None and ((current >= target) if higher else (current <= target)):
        return TargetEta(
            metric=word,
            target=target,
            current=current,
            eta_step=last_step,
            eta_low_step=last_step,
            eta_high_step=last_step,
            eta_hours=0.0,
            within_run=True,
            at_end=forecast,
            reason=f"target reached: {word} {current:.4g} {'>=' if higher else '<='} {target:.4g}",
        )
    if not forecast.available:
        return TargetEta(
            metric=word,
            target=target,
            current=current,
            eta_step=None,
            eta_low_step=None,
            eta_high_step=None,
            eta_hours=None,
            within_run=None,
            at_end=forecast,
            reason=f"no ETA: {forecast.reason}",
        )
    # value column 1; the optimistic edge is the high one for a rising metric, the low one else.
    early_col, late_col = (3, 2) if higher else (2, 3)
    mid = _crossing(forecast.path, 1, target, higher)
    early = _crossing(forecast.path, early_col, target, higher)
    late = _crossing(forecast.path, late_col, target, higher)
    end_text = f"{forecast.value:.4g} ({forecast.low:.4g}-{forecast.high:.4g})"
    where = "the planned end" if planned else f"the horizon (step {forecast.step})"
    if mid is None:
        within = False if planned else None
        head = "not within this run" if planned else "not within the horizon"
        reach = (
            f"; reachable only at the band's edge from step {round(early):,}"
            if early is not None
            else ""
        )
        return TargetEta(
            metric=word,
            target=target,
            current=current,
            eta_step=None,
            eta_low_step=round(early) if early is not None else None,
            eta_high_step=None,
            eta_hours=None,
            within_run=within,
            at_end=forecast,
            reason=f"{head}: at {where} {word} {end_text}{reach}",
        )
    eta_step = round(mid)
    hours = to_hours(eta_step)
    return TargetEta(
        metric=word,
        target=target,
        current=current,
        eta_step=eta_step,
        eta_low_step=round(early) if early is not None else eta_step,
        eta_high_step=round(late) if late is not None else None,
        eta_hours=hours,
        within_run=True if planned else None,
        at_end=forecast,
        reason=f"{word} {target:.4g} forecast at step {eta_step:,} ({forecast.method})",
    )


def verdict_with_eta(verdict: Verdict, eta: TargetEta | None, last_step: int) -> Verdict:
    """``verdict`` with its ETA taken from the forecast's (steps to go from ``last_step``)."""
    if eta is None:
        return replace(
            verdict,
            eta_steps=None,
            eta_hours=None,
            eta_reason="no ETA: no target series in the log",
            eta_basis=None,
        )
    steps = None if eta.eta_step is None else float(max(0, eta.eta_step - last_step))
    hours = eta.eta_hours
    if steps is not None and hours is None and verdict.seconds_per_step is not None:
        hours = steps * verdict.seconds_per_step / 3600.0
    return replace(
        verdict,
        eta_steps=steps,
        eta_hours=hours,
        eta_reason=eta.reason,
        eta_basis=f"forecast of {eta.metric}",
    )

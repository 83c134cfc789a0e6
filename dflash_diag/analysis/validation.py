"""The validation side of the verdict: eval loss, eval accuracy and measured tau over the evals.

Training metrics say whether the model fits its training data; the eval records say whether that
still helps on held-out data. Each validation series the log has (``loss`` and ``acc`` of eval
records, as the readers name them, e.g. HF's ``eval_loss``; ``tau`` of measured evals) is judged
with the statistics of the training verdict, point by point (an eval is already an average over
many tokens):

* with an interval on both points (tau: ``tau_se``, ``tau_ci`` or the ``tau_hist`` histogram of
  verify-step lengths), the latest eval is **worse** than the best one when they differ by more
  than :data:`Z_95` combined standard errors: "tau peaked at step S";
* otherwise it is **worse** when the evals after the best one (at least ``min_points`` of them;
  the best itself is left out, or noise after a maximum would read as a fall) fall
  significantly (Mann-Kendall, ``alpha``), or the whole series does;
* it is **improving** when the whole series rises significantly (falls, for the loss), else
  **flat**; fewer than :data:`MIN_EVALS` evals are **not enough data**.

The verdict (:mod:`dflash_diag.analysis.verdict`) turns a worse series beside an improving or flat
training trend into ``overfitting``, naming the best step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dflash_diag.analysis import defaults
from dflash_diag.analysis.eval_columns import eval_steps, field_values, in_range, latest_per_step
from dflash_diag.analysis.numbers import finite_number, plural
from dflash_diag.analysis.robust_trend import bounded_points, mann_kendall, theil_sen_slope
from dflash_diag.read.records import LogEvent

IMPROVING, FLAT, WORSE, NOT_ENOUGH = "improving", "flat", "worse", "not enough data"
#: Fewest evals a validation series is judged on.
MIN_EVALS = 3
#: Standard errors two points must differ by to be told apart (a two-sided 95% interval).
Z_95 = 1.96
#: The validation series, in the order they are reported: field, label, higher is better.
SERIES = (("tau", "measured tau", True), ("acc", "eval acc", True), ("loss", "eval loss", False))


@dataclass(frozen=True)
class EvalPoint:
    """One eval's value of a series, with its standard error where the record gives one."""

    step: int
    value: float
    se: float | None = None


@dataclass(frozen=True, kw_only=True)
class ValidationTrend:
    """The judgement of one validation series.

    Attributes:
        field: the eval field judged: "tau", "acc" or "loss".
        label: how the report names it ("measured tau", "eval acc", "eval loss").
        status: "improving", "flat", "worse" or "not enough data".
        n_points: evals judged.
        best_step, best_value, best_se: the best eval (highest tau/acc, lowest loss; the
            earliest of equal ones).
        latest_step, latest_value, latest_se: the newest eval.
        slope_per_1k_steps: Theil-Sen slope over every eval (None with too few).
        p_value: Mann-Kendall p of the test that decided (None with too few).
        reason: one line saying what was found.
    """

    field: str
    label: str
    status: str
    n_points: int
    best_step: int | None = None
    best_value: float | None = None
    best_se: float | None = None
    latest_step: int | None = None
    latest_value: float | None = None
    latest_se: float | None = None
    slope_per_1k_steps: float | None = None
    p_value: float | None = None
    reason: str = ""

    @property
    def worse(self) -> bool:
        """Whether held-out quality fell from its best."""
        return self.status == WORSE


def tau_se(fields: dict) -> float | None:
    """The standard error of a measured tau: ``tau_se``, else half a 95% ``tau_ci`` over 1.96,
    else the spread of verify-step lengths in ``tau_hist`` over sqrt(steps).

    The histogram's steps are not independent (steps of one prompt are correlated), so this
    interval is too narrow rather than too wide; a record's own ``tau_ci`` is preferred.
    """
    se = finite_number(fields.get("tau_se"))
    if se is not None and se >= 0:
        return se
    ci = fields.get("tau_ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        lo, hi = finite_number(ci[0]), finite_number(ci[1])
        if lo is not None and hi is not None and hi >= lo:
            return (hi - lo) / (2 * Z_95)
    hist = fields.get("tau_hist")
    if isinstance(hist, (list, tuple)) and hist:
        counts = [finite_number(c) or 0.0 for c in hist]
        n = sum(c for c in counts if c > 0)
        if n >= 2:
            mean = sum((i + 1) * c for i, c in enumerate(counts) if c > 0) / n
            var = sum(c * ((i + 1) - mean) ** 2 for i, c in enumerate(counts) if c > 0) / (n - 1)
            return math.sqrt(var / n)
    return None


def _eval_column(
    evals: Sequence[LogEvent], name: str, up_to_step: int | None, from_step: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`eval_series` as columns: the steps, the values and the index in ``evals`` of the
    record each point comes from (columns, not a Python test per record: a log may hold 100,000
    evals)."""
    steps, has = eval_steps(evals)
    values = field_values(evals, name)
    index = latest_per_step(steps, in_range(steps, has, up_to_step, from_step) & ~np.isnan(values))
    return steps[index], values[index], index


def eval_series(
    evals: Sequence[LogEvent],
    name: str,
    up_to_step: int | None = None,
    from_step: int | None = None,
) -> list[EvalPoint]:
    """The finite values of eval field ``name`` in step order (for a step evaluated twice the
    later record wins), with the tau's standard error where known."""
    steps, values, index = _eval_column(evals, name, up_to_step, from_step)
    return [
        EvalPoint(step, value, tau_se(evals[i].fields) if name == "tau" else None)
        for step, value, i in zip(steps.tolist(), values.tolist(), index.tolist(), strict=True)
    ]


def _se_of(
    evals: Sequence[LogEvent], name: str, index: np.ndarray
) -> Callable[[int], float | None]:
    """The standard error of point ``i`` of a column of ``evals`` (:func:`tau_se` of its record
    for tau, else None), read for the few points a judgement names, not for every eval."""
    if name != "tau":
        return lambda i: None
    return lambda i: tau_se(evals[int(index[i])].fields)


def _fmt(value: float, se: float | None) -> str:
    return f"{value:.4g}" + (f" ± {Z_95 * se:.2g}" if se is not None else "")


def judge_series(
    points: Sequence[EvalPoint],
    *,
    field: str,
    label: str,
    higher_is_better: bool,
    alpha: float = defaults.ALPHA,
    min_points: int = defaults.MIN_POINTS,
) -> ValidationTrend:
    """Judge one validation series (see the module docstring for the rules)."""
    return _judge(
        np.array([p.step for p in points], dtype=np.int64),
        np.array([p.value for p in points], dtype=np.float64),
        lambda i: points[i].se,
        field=field,
        label=label,
        higher_is_better=higher_is_better,
        alpha=alpha,
        min_points=min_points,
    )


def _judge(
    steps: np.ndarray,
    values: np.ndarray,
    se_of: Callable[[int], float | None],
    *,
    field: str,
    label: str,
    higher_is_better: bool,
    alpha: float,
    min_points: int,
) -> ValidationTrend:
    """:func:`judge_series` of a series as columns (step order), ``se_of(i)`` the standard
    error of point ``i``."""
    n = len(values)
    if n < MIN_EVALS or not bool((steps != steps[0]).any()):
        return ValidationTrend(
            field=field,
            label=label,
            status=NOT_ENOUGH,
            n_points=n,
            reason=f"{plural(n, 'eval')} with {label}; need {MIN_EVALS}",
        )
    sign = 1.0 if higher_is_better else -1.0
    best_i = int(np.argmax(sign * values))  # the earliest of equal ones
    best = EvalPoint(int(steps[best_i]), float(values[best_i]), se_of(best_i))
    latest = EvalPoint(int(steps[-1]), float(values[-1]), se_of(n - 1))
    values_list = values.tolist()
    xs, ys = bounded_points(steps.astype(np.float64).tolist(), values_list)
    slope = theil_sen_slope(xs, ys) * 1000.0
    whole = mann_kendall(ys)
    common: dict[str, Any] = {
        "field": field,
        "label": label,
        "n_points": n,
        "best_step": best.step,
        "best_value": best.value,
        "best_se": best.se,
        "latest_step": latest.step,
        "latest_value": latest.value,
        "latest_se": latest.se,
        "slope_per_1k_steps": slope,
    }
    at_best = f"best {_fmt(best.value, best.se)} at step {best.step}"
    now = f"latest {_fmt(latest.value, latest.se)} at step {latest.step}"
    worse_word = "lower" if higher_is_better else "higher"
    if best_i < n - 1:
        if best.se is not None and latest.se is not None:
            gap = sign * (best.value - latest.value)
            if gap > Z_95 * math.hypot(best.se, latest.se):
                verb = "peaked" if higher_is_better else "was lowest"
                return ValidationTrend(
                    status=WORSE,
                    p_value=None,
                    reason=(
                        f"{label} {verb} at step {best.step} ({_fmt(best.value, best.se)}); the latest "
                        f"eval (step {latest.step}, {_fmt(latest.value, latest.se)}) is {worse_word} "
                        f"beyond their 95% intervals"
                    ),
                    **common,
                )
        # The evals after the best one, not the best itself: every later eval is below a
        # maximum by construction, so a test that includes it finds a fall in pure noise.
        after = values_list[best_i + 1 :]
        if len(after) >= min_points:
            test = mann_kendall(bounded_points(list(range(len(after))), after)[1])
            if test.p_value < alpha and sign * test.s < 0:
                return ValidationTrend(
                    status=WORSE,
                    p_value=test.p_value,
                    reason=(
                        f"{label} {at_best}, {worse_word} since: {now} (Mann-Kendall p = "
                        f"{test.p_value:.3g} over the {len(after)} evals after the best)"
                    ),
                    **common,
                )
    if whole.p_value < alpha and whole.s != 0:
        if sign * whole.s < 0:
            return ValidationTrend(
                status=WORSE,
                p_value=whole.p_value,
                reason=(
                    f"{label} {at_best}, {worse_word} over the run: {now} (Mann-Kendall p = "
                    f"{whole.p_value:.3g} over {plural(n, 'eval')})"
                ),
                **common,
            )
        return ValidationTrend(
            status=IMPROVING,
            p_value=whole.p_value,
            reason=(
                f"{label} improving over {plural(n, 'eval')} (Mann-Kendall p = {whole.p_value:.3g}); {now}"
            ),
            **common,
        )
    return ValidationTrend(
        status=FLAT,
        p_value=whole.p_value,
        reason=(
            f"{label} without a significant trend over {plural(n, 'eval')} (Mann-Kendall p = "
            f"{whole.p_value:.3g}); {at_best}, {now}"
        ),
        **common,
    )


def judge_validation(
    evals: Sequence[LogEvent],
    *,
    up_to_step: int | None = None,
    from_step: int | None = None,
    with_tau: bool = True,
    alpha: float = defaults.ALPHA,
    min_points: int = defaults.MIN_POINTS,
) -> list[ValidationTrend]:
    """Every validation series the evals hold (tau only when ``with_tau``: a drafter's), judged."""
    out = []
    for name, label, higher in SERIES:
        if name == "tau" and not with_tau:
            continue
        steps, values, index = _eval_column(evals, name, up_to_step, from_step)
        if len(steps):
            out.append(
                _judge(
                    steps,
                    values,
                    _se_of(evals, name, index),
                    field=name,
                    label=label,
                    higher_is_better=higher,
                    alpha=alpha,
                    min_points=min_points,
                )
            )
    return out

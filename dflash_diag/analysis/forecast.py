"""A forecast of each tracked metric at the planned end of the run, with an 80% interval.

The observed series (binned records, or eval points) is fitted by the saturating families of
:mod:`dflash_diag.analysis.curve_families`, recent points weighted more. Which family to trust is
decided inside the observed prefix by rolling-origin validation: each family is fitted on the
points up to an earlier origin and asked for the newest points; its errors, scaled by how far it
had to look ahead, give it a weight (inverse mean squared error) and give the combination an
error per unit of look-ahead. The forecast is the weighted median of the families fitted to the
whole prefix; the interval's half-width is that validation error times the look-ahead to the
target step, plus the scatter of the points around the fit (the truth is itself one noisy bin),
times the 80% normal quantile and a calibration factor measured on real runs
(``benchmarks/bench_forecast.py``).

Look-ahead is measured in the progress variable learning follows: ``log`` of the lr summed so far
when the lr is known (a decayed lr buys little more), else ``log`` of the step. With fewer than
:data:`MIN_POINTS` points there is no forecast ("not enough evidence yet").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dflash_diag.analysis.curve_families import FAMILIES, Fit, Progress, fit_family
from dflash_diag.analysis.plan import RunPlan

#: Fewest points (bins or evals) a forecast is made from: three rolling origins need at least
#: three points before the first and a tail to predict after the last; with six, the fits at
#: the origins are exactly determined and their errors say little (the backtest's forecasts
#: from 6-7 points missed by more than "no change" did).
MIN_POINTS = 8
#: Fewest points the saturating part of a curve is fitted on (three parameters and one point
#: to spare): a curve that only now bends is fitted on its bend, not on its flat start.
MIN_CONVEX_POINTS = 4
#: Interval level.
LEVEL = 0.8
#: The two-sided 80% quantile of the standard normal.
_Z80 = 1.2815515655446004
#: Multiplies the interval's half-width; measured on the corpus of completed public runs so that
#: the 80% intervals cover about 80% of the final values (bench_forecast.py, 30% cut).
CALIBRATION = 2.0
#: Rolling origins, as shares of the observed step range.
ORIGINS = (0.45, 0.6, 0.75)
#: The newest share of the observed range whose mean each origin's fit must predict.
_VALIDATION_TAIL = 0.1
#: Recency weighting: a point's weight halves every this share of the observed range back.
RECENCY_HALF_LIFE = 0.35
#: Records are averaged into at most this many bins of equal step width before fitting.
MAX_BINS = 40
#: Points of the forecast path kept for ETA look-ups and plots.
_PATH_POINTS = 64


@dataclass(frozen=True)
class Series:
    """An observed series: steps, values and how many records each value averages.

    Attributes:
        steps: the point's step (a bin's mean step, or an eval's step).
        values: its value.
        counts: records behind it (1 for an eval).
        basis: what the points are, for the report ("40 bins of train records", "7 evals").
    """

    steps: tuple[float, ...]
    values: tuple[float, ...]
    counts: tuple[int, ...]
    basis: str


@dataclass(frozen=True, kw_only=True)
class MetricForecast:
    """The forecast of one metric at one step.

    Attributes:
        metric: "loss", "acc", "tau", "eval_loss", "eval_acc".
        step: the step forecast (the planned end, or the horizon).
        value, low, high: the forecast and its interval (None: not enough evidence).
        level: the interval's level (0.8).
        method: how it was made: the families and their weights (``power-lr 0.62 + exp 0.38``),
            "observed" when the plan has already ended, or "not enough evidence".
        reason: one line on the evidence (points used, or why there is no forecast).
        n_points: points fitted.
        higher_is_better: the metric's direction.
        last_value: the newest point's value (what the forecast starts from).
        path: ``(step, value, low, high)`` from the newest point to ``step``, for the ETA and
            plots.
    """

    metric: str
    step: int | None
    value: float | None
    low: float | None
    high: float | None
    level: float = LEVEL
    method: str = "not enough evidence"
    reason: str = ""
    n_points: int = 0
    higher_is_better: bool = False
    last_value: float | None = None
    path: tuple[tuple[float, float, float, float], ...] = field(default=(), repr=False)

    @property
    def available(self) -> bool:
        """Whether there is a forecast (enough evidence)."""
        return self.value is not None


class Timeline:
    """The lr the run trains at from step 0 to its end, summed: the progress variables.

    Observed steps use the logged lr (linear between logged points); steps after the last one use
    the plan's lr when it knows it, else the last logged lr (said in :attr:`note`). Without any
    logged lr and no plan, ``s1`` is the step and ``s2`` is 0.
    """

    def __init__(
        self, plan: RunPlan, lr_steps: Sequence[float], lrs: Sequence[float], end: float
    ) -> None:
        pairs = sorted(
            (float(s), float(v))
            for s, v in zip(lr_steps, lrs)
            if v is not None and math.isfinite(v) and v >= 0
        )
        n = 4096
        self.grid = np.linspace(0.0, max(end, 1.0), n)
        self.note = ""
        self.knows_lr = bool(pairs) or plan.knows_lr
        if not self.knows_lr:
            self.s1 = self.grid.copy()
            self.s2 = np.zeros(n)
            return
        if pairs:
            xs, ys = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
            lr = np.interp(self.grid, xs, ys)
            after = self.grid > xs[-1]
            if after.any():
                if plan.knows_lr:
                    lr[after] = [plan.lr_at(s) for s in self.grid[after]]
                else:
                    self.note = "lr after the last record assumed constant (schedule unknown)"
        else:
            lr = np.array([plan.lr_at(max(s, 1.0)) for s in self.grid])
        peak = float(lr.max()) if float(lr.max()) > 0 else 1.0
        dx = np.diff(self.grid, prepend=0.0)
        rel = lr / peak
        self.s1 = np.cumsum(rel * dx)
        # Annealing area: the lr given up below its running maximum (zero while it warms up).
        self.s2 = np.cumsum((np.maximum.accumulate(rel) - rel) * dx)

    def progress(self, steps: np.ndarray, scale: float) -> Progress:
        """The progress variables at ``steps``."""
        return Progress(
            step=np.asarray(steps, dtype=float),
            s1=np.maximum(np.interp(steps, self.grid, self.s1), 1e-9),
            s2=np.interp(steps, self.grid, self.s2),
            scale=scale,
        )

    def lookahead(self, start: float, end: float) -> float:
        """How far ``end`` is from ``start`` in the progress variable (``log`` ratio, >= 0)."""
        if end <= start:
            return 0.0
        a = float(np.interp(start, self.grid, self.s1))
        b = float(np.interp(end, self.grid, self.s1))
        if a <= 0:
            return 0.0
        return max(0.0, math.log(max(b, a) / a))


def binned(
    steps: Sequence[float], values: Sequence[float | None], *, basis: str, max_bins: int = MAX_BINS
) -> Series:
    """Finite ``values`` averaged into at most ``max_bins`` bins of equal step width."""
    # arrays, not a Python float per record (10M records: 1.5 GB and seconds)
    all_x = np.asarray(steps, dtype=float)
    all_y = np.asarray(values, dtype=float)  # None (a list's null) is NaN: left out with it
    finite = np.isfinite(all_y)
    xs, ys = all_x[finite], all_y[finite]
    del all_x, all_y, finite
    if not xs.size:
        return Series((), (), (), basis)
    lo, hi = float(xs.min()), float(xs.max())
    bins = min(max_bins, xs.size)
    if hi <= lo or bins <= 1:
        return Series((float(xs.mean()),), (float(ys.mean()),), (xs.size,), basis)
    index = np.minimum(((xs - lo) / (hi - lo) * bins).astype(int), bins - 1)
    counts = np.bincount(index, minlength=bins)
    keep = counts > 0
    mean_x = np.bincount(index, weights=xs, minlength=bins)[keep] / counts[keep]
    mean_y = np.bincount(index, weights=ys, minlength=bins)[keep] / counts[keep]
    return Series(
        tuple(mean_x.tolist()), tuple(mean_y.tolist()), tuple(int(c) for c in counts[keep]), basis
    )


def _weights(steps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    span = max(float(steps[-1] - steps[0]), 1e-9)
    age = (steps[-1] - steps) / span
    return np.sqrt(counts) * np.power(0.5, age / RECENCY_HALF_LIFE)


def _convex_part(
    x: np.ndarray, z: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points from the steepest improvement on (keeping at least :data:`MIN_CONVEX_POINTS`).

    A saturating family is convex: it cannot follow a curve that starts flat and then drops (a
    sigmoid, a delayed start), and fitted to one it extrapolates the drop. From the steepest
    point on, the curve is the saturating part the families describe.
    """
    if len(x) <= MIN_CONVEX_POINTS:
        return x, z, counts
    slope = -np.diff(z) / np.maximum(np.diff(x), 1e-12)  # improvement per step
    if len(slope) >= 3:
        slope = np.convolve(slope, np.ones(3) / 3.0, mode="same")
    start = min(int(np.argmax(slope)), len(x) - MIN_CONVEX_POINTS)
    return x[start:], z[start:], counts[start:]


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per column of ``values`` (families x points), the weighted median of the families."""
    order = np.argsort(values, axis=0)
    sorted_values = np.take_along_axis(values, order, axis=0)
    cum = np.cumsum(weights[order], axis=0)
    index = np.argmax(cum >= 0.5 * weights.sum(), axis=0)
    return sorted_values[index, np.arange(values.shape[1])]


#: The schedule-aware law is fitted only once the observed steps hold this share of the run's
#: annealing area: its annealing coefficient is measured on the annealing seen, and from a
#: sliver of it (a cosine barely begun) the noise decides how much drop the rest will buy.
MIN_ANNEALING_SEEN = 0.25


def _families(timeline: Timeline, last_step: float) -> tuple[str, ...]:
    if not timeline.knows_lr:
        return ("power-steps", "exp", "flat")
    total = float(timeline.s2[-1])
    seen = float(np.interp(last_step, timeline.grid, timeline.s2))
    if total <= 0 or seen < MIN_ANNEALING_SEEN * total:
        return ("power-steps", "power-lr", "exp", "flat")
    return FAMILIES


def _validation(
    families: Sequence[str],
    x: np.ndarray,
    z: np.ndarray,
    w: np.ndarray,
    timeline: Timeline,
    scale: float,
    floor: float | None,
) -> tuple[dict[str, list[float]], list[float]]:
    """Rolling-origin errors per family, each divided by its look-ahead; and the origin weights."""
    lo, hi = float(x[0]), float(x[-1])
    tail = x >= hi - _VALIDATION_TAIL * (hi - lo)
    if tail.sum() < 2:
        tail[-2:] = True
    target_x = float(np.average(x[tail], weights=w[tail]))
    target_z = float(np.average(z[tail], weights=w[tail]))
    errors: dict[str, list[float]] = {f: [] for f in families}
    origin_weights: list[float] = []
    for k, share in enumerate(ORIGINS):
        cut = lo + share * (hi - lo)
        inside = x <= cut
        if inside.sum() < 3:
            continue
        ahead = timeline.lookahead(float(x[inside][-1]), target_x)
        if ahead <= 0:
            continue
        progress = timeline.progress(x[inside], scale)
        wi = _weights(x[inside], w[inside])
        at = timeline.progress(np.array([target_x]), scale)
        for family in families:
            fit = fit_family(family, progress, z[inside], wi, floor)
            errors[family].append((float(fit.predict(at)[0]) - target_z) / ahead)
        origin_weights.append(float(k + 1))
    return errors, origin_weights


def forecast_series(
    metric: str,
    series: Series,
    *,
    timeline: Timeline,
    target_step: float,
    higher_is_better: bool,
    best: float | None = None,
    worst: float | None = None,
) -> MetricForecast:
    """The forecast of ``series`` at ``target_step`` (see the module docstring).

    Args:
        metric: the metric's name for the report.
        series: the observed points in step order.
        timeline: the run's lr, observed and planned.
        target_step: the step to forecast (the planned end, or the horizon).
        higher_is_better: the metric's direction (acc, tau: True; loss: False).
        best: the best value the metric can take (a loss 0, an accuracy 1), if bounded: no
            curve saturates beyond it and no interval reaches past it.
        worst: the worst value it can take (an accuracy 0, a tau 1), if bounded: the interval
            stops there.
    """
    n = len(series.steps)
    last = series.values[-1] if n else None
    step = round(target_step)
    if n < MIN_POINTS:
        return MetricForecast(
            metric=metric,
            step=step,
            value=None,
            low=None,
            high=None,
            reason=f"not enough evidence yet: {n} point(s) of {series.basis} (need {MIN_POINTS})",
            n_points=n,
            higher_is_better=higher_is_better,
            last_value=last,
        )
    sign = -1.0 if higher_is_better else 1.0
    x = np.array(series.steps, dtype=float)
    z = sign * np.array(series.values, dtype=float)
    counts = np.array(series.counts, dtype=float)
    scale = float(x[-1])
    families = _families(timeline, float(x[-1]))
    floor = sign * best if best is not None else None
    x, z, counts = _convex_part(x, z, counts)
    errors, origin_w = _validation(families, x, z, counts, timeline, scale, floor)
    ow = np.array(origin_w) if origin_w else np.ones(1)
    scores = {
        f: float(np.average(np.square(e), weights=ow)) if e else math.inf for f, e in errors.items()
    }
    finite = {f: s for f, s in scores.items() if math.isfinite(s)}
    if not finite:
        weights = {f: 1.0 / len(families) for f in families}
    else:
        least = max(min(finite.values()), 1e-12)
        raw = {f: 1.0 / max(s, least * 1e-3) for f, s in finite.items()}
        total = sum(raw.values())
        weights = {f: v / total for f, v in raw.items() if v / total >= 0.02}
        total = sum(weights.values())
        weights = {f: v / total for f, v in weights.items()}
    # The combination's own validation error per unit of look-ahead.
    k_origins = min((len(errors[f]) for f in weights), default=0)
    if k_origins:
        combined = np.array(
            [sum(weights[f] * errors[f][i] for f in weights) for i in range(k_origins)]
        )
        per_lookahead = math.sqrt(float(np.average(np.square(combined), weights=ow[:k_origins])))
    else:
        per_lookahead = 0.0
    progress = timeline.progress(x, scale)
    wfit = _weights(x, counts)
    fits: dict[str, Fit] = {f: fit_family(f, progress, z, wfit, floor) for f in weights}
    fitted = sum(weights[f] * fits[f].predict(progress) for f in weights)
    # Scatter of a point around the fit, in the newer half (the early transient is no guide to
    # the noise at the end): the truth at the end is one such point.
    newer = x >= x[0] + 0.5 * (x[-1] - x[0])
    scatter = math.sqrt(float(np.average(np.square(z - fitted)[newer], weights=wfit[newer])))
    start = float(x[-1])
    end = max(float(target_step), start)
    path_steps = np.unique(np.concatenate([np.linspace(start, end, _PATH_POINTS), [end]]))
    at = timeline.progress(path_steps, scale)
    preds = {f: fits[f].predict(at) for f in weights}
    # The weighted median of the families, not their mean: when validation cannot tell them
    # apart (a noisy, nearly flat prefix) one family's wild extrapolation must not move the
    # forecast; its distance still widens the band through the spread.
    names = list(weights)
    stack = np.stack([preds[f] for f in names])
    centre = _weighted_median(stack, np.array([weights[f] for f in names]))
    spread = np.sqrt(sum(weights[f] * np.square(preds[f] - centre) for f in weights))
    path = []
    for s, c, sp in zip(path_steps, centre, spread):
        ahead = timeline.lookahead(start, float(s))
        half = (
            CALIBRATION
            * _Z80
            * math.sqrt((per_lookahead * ahead) ** 2 + scatter**2 + float(sp) ** 2)
        )
        lo_z, hi_z = float(c) - half, float(c) + half
        if floor is not None:
            lo_z = max(lo_z, floor)
        if worst is not None:
            hi_z = min(hi_z, sign * worst)
        value = sign * float(c)
        low, high = sorted((sign * lo_z, sign * hi_z))
        path.append((float(s), value, low, high))
    value, low, high = path[-1][1:]
    method = " + ".join(f"{f} {weights[f]:.2f}" for f in sorted(weights, key=lambda f: -weights[f]))
    if end <= start:
        method = "observed (the plan has ended): " + method
    return MetricForecast(
        metric=metric,
        step=step,
        value=value,
        low=low,
        high=high,
        method=method,
        reason=f"{n} points of {series.basis}",
        n_points=n,
        higher_is_better=higher_is_better,
        last_value=last,
        path=tuple(path),
    )

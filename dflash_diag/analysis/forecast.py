"""A forecast of each tracked metric at the planned end of the run, with an 80% interval.

The observed series (binned records, or eval points) is fitted by the saturating families of
:mod:`dflash_diag.analysis.curve_families`, recent points weighted more, each from the curve's
steepest point and from a later start (:data:`LATE_STARTS`): a fast initial collapse (a loss
falling tenfold in a few steps) followed by slow learning is two phases no single saturating
curve follows, and the later starts fit the slow one alone. Which members to trust is decided
inside the observed prefix by rolling-origin validation: each member is fitted on the points up
to an earlier origin and asked for every point after it. A member's mean squared error, less the
points' own noise (common to every member: it says nothing about the curve), gives it a weight
(the inverse of that excess), so a noisy prefix on which no curve beats "no change" (the ``flat``
member) leaves the forecast there. The forecast is the weighted median of the members fitted to
the whole prefix. The interval's half-width combines three errors, times the 80% normal quantile
and a calibration factor measured on real runs (``benchmarks/bench_forecast.py``):

* the combination's validation error at the target step's look-ahead: its squared errors
  (less the points' noise) grow about linearly with look-ahead (:func:`error_variance_rate`);
* the noise of what the forecast is of: the metric's level at the target step, measured as the
  mean of the records in the run's last :data:`FINAL_SHARE` of steps (``final_records`` of
  them), or as one point like the newest (an eval, a per-window estimate);
* the members' spread.

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
from dflash_diag.analysis.robust_trend import merge_points

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
#: Multiplies the interval's half-width: the errors of real runs have heavier tails than a
#: normal's. Measured on the tuning material of bench_forecast.py (the corpus' completed public
#: runs and the tuning pipeline runs, cut at 20/30/50%): the factor that puts 80% of the final
#: values inside is 1.56 (it was 1.5 before the interval's noise and growth were fixed).
CALIBRATION = 1.5
#: Rolling origins, as shares of the observed step range (of the saturating part).
ORIGINS = (0.45, 0.6, 0.75)
#: Later starts of the fitted part, as shares of its step range: each curve is also fitted from
#: there (a member of its own), where at least three points lie before the first origin. One is
#: enough: starts at 15% and 30% forecast the backtest as well and cost half as much again.
LATE_STARTS = (0.2,)
#: A member's validation weight is ``1 / (mse - noise)``; the excess is floored at this share of
#: the largest member's mse, so a member that matches the noise exactly does not take all.
_EXCESS_FLOOR = 1e-6
#: Recency weighting: a point's weight halves every this share of the observed range back.
RECENCY_HALF_LIFE = 0.35
#: Records are averaged into at most this many bins of equal step width before fitting.
MAX_BINS = 40
#: An eval series is fitted on at most this many points; past it, runs of consecutive evals are
#: merged (:func:`bounded`). Every fit is O(points) per grid value and refit, and evals arrive
#: one point per record: an eval every 2 steps of a 200k-step run is 100,000 points and seconds
#: of fitting. The longest eval series of the corpus and of the committed runs has 100 points,
#: so none of them is merged (their forecasts are unchanged); 1,000 points cost about 0.1 s.
MAX_EVAL_POINTS = 1000
#: Points of the forecast path kept for ETA look-ups and plots.
_PATH_POINTS = 64
#: What a training metric's forecast is of: its level at the target step, measured as the mean
#: of the records in the run's last this share of steps (as the backtest measures the truth).
FINAL_SHARE = 0.05


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


#: Records per piece of :func:`binned` and of the lr timeline's passes (half a MiB of floats).
_BIN_PIECE = 1 << 16
#: Integers up to this magnitude are floats exactly: a step column of them is read as it is and
#: converted a piece at a time, with the same values (and order) as a float64 copy of it.
_EXACT_INT = 2**53


def steps_array(steps: Sequence[float] | np.ndarray) -> np.ndarray:
    """``steps`` as a numpy array whose values are those of its float64 conversion: an integer
    array as it is (no 8 MB float copy of a million steps) when every value is a float exactly,
    else the float64 array (None: NaN)."""
    xs = np.asarray(steps)
    if xs.dtype.kind in "iu" and xs.size:
        if int(xs.max()) < _EXACT_INT and int(xs.min()) > -_EXACT_INT:
            return xs
    elif xs.dtype == np.float64:
        return xs
    return np.asarray(steps, dtype=float)


def _finite_lr_pairs(
    lr_steps: Sequence[float] | np.ndarray, lrs: Sequence[float | None] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(step, lr)`` pairs with a finite lr >= 0, sorted by step then lr (as sorting the
    pairs would: the order of equal steps decides what ``np.interp`` reads there). The steps
    are :func:`steps_array`'s: integers where they were (the same values as floats)."""
    xs, ys, _ = _sorted_lr_pairs(lr_steps, lrs)
    return xs, ys


def _sorted_lr_pairs(
    lr_steps: Sequence[float] | np.ndarray, lrs: Sequence[float | None] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, bool]:
    """:func:`_finite_lr_pairs`, and whether its steps rise strictly."""
    xs = steps_array(lr_steps)
    ys = np.asarray(lrs, dtype=float)  # a None reads as NaN, and is left out below
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} lr steps but {len(ys)} lrs")
    keep = np.isfinite(ys) & (ys >= 0)
    if not keep.all():  # a copy only where some lr is left out (a million records: 16 MB)
        xs, ys = xs[keep], ys[keep]
    del keep
    if _rising(xs):
        # distinct steps in order (a log's records): the sort would keep every pair in place
        return xs, ys, True
    order = np.lexsort((ys, xs))  # exact integers sort as their floats do
    return xs[order].astype(float), ys[order], False


def _rising(xs: np.ndarray) -> bool:
    """Whether ``xs`` rises strictly (a piece at a time: no million-row temporary)."""
    for low in range(0, xs.size - 1, _BIN_PIECE):
        piece = xs[low : low + _BIN_PIECE + 1]
        if not bool((piece[1:] > piece[:-1]).all()):
            return False
    return True


def _interp(grid: np.ndarray, xs: np.ndarray, ys: np.ndarray, *, rising: bool) -> np.ndarray:
    """``np.interp(grid, xs, ys)`` (``xs`` as floats) for :func:`_finite_lr_pairs`' pairs
    (``rising``: its steps rise strictly).

    ``np.interp`` copies an array it may not write to (polars' columns are read-only views): a
    million lrs is an 8 MB copy. Each grid value reads only the two points around it (the last
    ``xs`` at or below it and the next one: unique where ``xs`` rises strictly), so where they
    do, ``np.interp`` is given those points and the first and last ones (its ``left`` and
    ``right``): the same points, the same slopes, the same bits.
    """
    n = len(xs)
    if n <= 2 * len(grid) + 2 or not rising:
        return np.interp(grid, xs.astype(float, copy=False), ys)
    if xs.dtype.kind in "iu":
        # float(x) <= g exactly when x <= floor(g), for integers that are floats exactly
        top = float(grid[-1])
        if not top < _EXACT_INT:
            return np.interp(grid, xs.astype(float), ys)
        below = np.searchsorted(xs, np.floor(grid).astype(np.int64), side="right") - 1
    else:
        below = np.searchsorted(xs, grid, side="right") - 1
    near = np.concatenate(([0, n - 1], below, below + 1))
    near.sort()
    # distinct indexes in [0, n) (what np.unique gives; its first call imports numpy.ma)
    distinct = np.ones(len(near), dtype=bool)
    distinct[1:] = near[1:] != near[:-1]
    near = near[distinct & (near >= 0) & (near < n)]
    return np.interp(grid, xs[near].astype(float), ys[near])


class Timeline:
    """The lr the run trains at from step 0 to its end, summed: the progress variables.

    Observed steps use the logged lr (linear between logged points); steps after the last one use
    the plan's lr when it knows it, else the last logged lr (said in :attr:`note`). Without any
    logged lr and no plan, ``s1`` is the step and ``s2`` is 0.
    """

    def __init__(
        self,
        plan: RunPlan,
        lr_steps: Sequence[float] | np.ndarray,
        lrs: Sequence[float | None] | np.ndarray,
        end: float,
    ) -> None:
        xs, ys, rising = _sorted_lr_pairs(lr_steps, lrs)
        n = 4096
        self.grid = np.linspace(0.0, max(end, 1.0), n)
        self.note = ""
        self.knows_lr = bool(len(xs)) or plan.knows_lr
        if not self.knows_lr:
            self.s1 = self.grid.copy()
            self.s2 = np.zeros(n)
            return
        if len(xs):
            lr = _interp(self.grid, xs, ys, rising=rising)
            after = self.grid > float(xs[-1])
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

    def lookaheads(self, start: float, ends: np.ndarray) -> np.ndarray:
        """:meth:`lookahead` from ``start`` to each of ``ends``."""
        a = float(np.interp(start, self.grid, self.s1))
        if a <= 0:
            return np.zeros(len(ends))
        b = np.interp(np.maximum(ends, start), self.grid, self.s1)
        return np.log(np.maximum(b, a) / a)

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
    steps: Sequence[float] | np.ndarray,
    values: Sequence[float | None] | np.ndarray,
    *,
    basis: str,
    max_bins: int = MAX_BINS,
) -> Series:
    """Finite ``values`` averaged into at most ``max_bins`` bins of equal step width."""
    # arrays, not a Python float per record (10M records: 1.5 GB and seconds); read a piece at
    # a time: no float copy of integer steps, no million-row bin index, no copy of a read-only
    # column (np.bincount copies weights it may not write to)
    all_x = steps_array(steps)
    all_y = np.asarray(values, dtype=float)  # None (a list's null) is NaN: left out with it
    if len(all_x) != len(all_y):
        raise ValueError(f"{len(all_x)} steps but {len(all_y)} values")
    size, lo_x, hi_x = 0, None, None
    if all_y.size and np.isfinite(all_y).all():
        # every value finite (the usual column): the step range of every record in one pass,
        # with no float copy of a piece (a NaN step wins in np.min/np.max as in the pieces')
        size, lo_x, hi_x = all_y.size, all_x.min(), all_x.max()
    else:
        for low in range(0, all_y.size, _BIN_PIECE):
            xs, _ = _finite_piece(all_x, all_y, low)
            if xs.size:
                size += xs.size
                # np.minimum/np.maximum: a NaN step wins, as in min() of the whole column
                piece_lo, piece_hi = xs.min(), xs.max()
                lo_x = piece_lo if lo_x is None else np.minimum(lo_x, piece_lo)
                hi_x = piece_hi if hi_x is None else np.maximum(hi_x, piece_hi)
    if not size or lo_x is None or hi_x is None:
        return Series((), (), (), basis)
    lo, hi = float(lo_x), float(hi_x)
    bins = min(max_bins, size)
    if hi <= lo or bins <= 1:
        # one step: the means of every finite record (numpy's pairwise sums of the whole arrays)
        finite = np.isfinite(all_y)
        xs, ys = all_x[finite].astype(float), all_y[finite]
        return Series((float(xs.mean()),), (float(ys.mean()),), (xs.size,), basis)
    counts = np.zeros(bins, dtype=np.int64)
    sum_x: np.ndarray = np.zeros(bins)
    sum_y: np.ndarray = np.zeros(bins)
    carried = np.arange(bins)
    for low in range(0, all_y.size, _BIN_PIECE):
        xs, ys = _finite_piece(all_x, all_y, low)
        if not xs.size:
            continue
        # the bin index ((xs - lo) / (hi - lo) * bins) as int, as astype(int) truncates
        scaled = xs - lo
        scaled /= hi - lo
        scaled *= bins
        index = scaled.astype(int)
        del scaled
        np.minimum(index, bins - 1, out=index)
        counts += np.bincount(index, minlength=bins)
        # np.bincount adds each record's weight to its bin's in record order, from 0.0: the
        # sums so far as the first weights continue them (0.0 + s is s) with the same additions
        # in the same order as one bincount over every record
        keys = np.concatenate((carried, index))
        sum_x = np.bincount(keys, weights=np.concatenate((sum_x, xs)), minlength=bins)
        sum_y = np.bincount(keys, weights=np.concatenate((sum_y, ys)), minlength=bins)
    keep = counts > 0
    mean_x = sum_x[keep] / counts[keep]
    mean_y = sum_y[keep] / counts[keep]
    return Series(
        tuple(mean_x.tolist()), tuple(mean_y.tolist()), tuple(int(c) for c in counts[keep]), basis
    )


def _finite_piece(all_x: np.ndarray, all_y: np.ndarray, low: int) -> tuple[np.ndarray, np.ndarray]:
    """The records ``low`` to ``low + _BIN_PIECE`` with a finite value: steps as float64."""
    xs = all_x[low : low + _BIN_PIECE].astype(float, copy=False)
    ys = all_y[low : low + _BIN_PIECE]
    finite = np.isfinite(ys)
    if finite.all():
        return xs, ys
    return xs[finite], ys[finite]


def bounded(series: Series, max_points: int = MAX_EVAL_POINTS) -> Series:
    """``series`` with at most ``max_points`` points: past it, runs of consecutive points merged
    into their count-weighted mean step and value, the counts summed
    (:func:`~dflash_diag.analysis.robust_trend.merge_points`); at or below it, ``series`` itself.

    Weighted by counts, not by the evals' standard errors: the fits treat every record as
    equally noisy (an eval counts 1, a bin of c records c), so a merged run of k evals is the
    bin of k records :func:`binned` would make of them, and the fits, the noise estimate and the
    validation read it as such. Weighting by a tau's standard error would give the merged points
    a noise model the unmerged ones do not have.
    """
    n = len(series.steps)
    if n <= max_points:
        return series
    xs, ys, counts = merge_points(
        np.asarray(series.steps, dtype=float),
        np.asarray(series.values, dtype=float),
        np.asarray(series.counts, dtype=np.int64),
        max_points,
    )
    return Series(
        tuple(xs.tolist()),
        tuple(ys.tolist()),
        tuple(counts.tolist()),
        f"{series.basis} merged in runs of {math.ceil(n / max_points)}",
    )


def _weights(steps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    span = max(float(steps[-1] - steps[0]), 1e-9)
    age = (steps[-1] - steps) / span
    return np.sqrt(counts) * np.power(0.5, age / RECENCY_HALF_LIFE)


def _convex_part(
    x: np.ndarray, z: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points from the steepest improvement on (keeping at least :data:`MIN_CONVEX_POINTS`
    and the newer half).

    A saturating family is convex: it cannot follow a curve that starts flat and then drops (a
    sigmoid, a delayed start), and fitted to one it extrapolates the drop. From the steepest
    point on, the curve is the saturating part the families describe. The slope is smoothed over
    a fifth of the points and the start kept in the older half: on noisy records (one per bin)
    the steepest three-point slope is often a noise spike among the newest points, and a curve
    fitted to the few points after it extrapolates that spike.
    """
    if len(x) <= MIN_CONVEX_POINTS:
        return x, z, counts
    slope = -np.diff(z) / np.maximum(np.diff(x), 1e-12)  # improvement per step
    width = max(3, len(slope) // 5)
    if len(slope) >= width:
        slope = np.convolve(slope, np.ones(width) / width, mode="same")
    start = min(int(np.argmax(slope)), len(x) // 2, len(x) - MIN_CONVEX_POINTS)
    return x[start:], z[start:], counts[start:]


def _noise(
    curves: Sequence[Fit],
    x: np.ndarray,
    z: np.ndarray,
    counts: np.ndarray,
    records: np.ndarray,
    timeline: Timeline,
    scale: float,
) -> float:
    """The noise the best-fitting of ``curves`` leaves in the newer half of the points (the
    early transient is no guide to the noise at the end): the weighted mean of the squared
    residuals, each times its ``records`` (``counts``: the noise of one record, a point of c
    records having 1/c of it; ones: the noise of one point)."""
    newer = x >= x[0] + 0.5 * (x[-1] - x[0])
    progress = timeline.progress(x[newer], scale)
    wn = _weights(x, counts)[newer]
    return min(
        float(np.average(np.square(z[newer] - fit.predict(progress)) * records[newer], weights=wn))
        for fit in curves
    )


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per column of ``values`` (members x points), the weighted median of the members."""
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


#: An ensemble member: a family fitted from the point at an index of the fitted part.
Member = tuple[str, int]


def _members(families: Sequence[str], x: np.ndarray) -> list[Member]:
    """Every family from the first point; every curve (not ``flat``) from each admissible late
    start (:data:`LATE_STARTS`)."""
    lo, hi = float(x[0]), float(x[-1])
    first_origin = lo + ORIGINS[0] * (hi - lo)
    starts = [0]
    for share in LATE_STARTS:
        j = int(np.searchsorted(x, lo + share * (hi - lo)))
        if j in starts or j > len(x) - MIN_CONVEX_POINTS:
            continue
        if int(np.sum((x >= x[j]) & (x <= first_origin))) >= 3:
            starts.append(j)
    return [(f, 0) for f in families] + [
        (f, j) for j in starts[1:] for f in families if f != "flat"
    ]


def _fit_member(
    member: Member,
    keep: np.ndarray,
    x: np.ndarray,
    z: np.ndarray,
    counts: np.ndarray,
    progress: Progress,
    floor: float | None,
) -> Fit | None:
    """``member`` fitted on the points ``keep`` selects from its start on (None: under 3);
    ``progress``: every point's (the progress of a point is its own, whatever else is fitted)."""
    family, start = member
    use = keep & (np.arange(len(x)) >= start)
    if use.sum() < 3:
        return None
    return fit_family(family, progress.at(use), z[use], _weights(x[use], counts[use]), floor)


@dataclass(frozen=True)
class _Validated:
    """Rolling-origin validation: each member's error at every point after every origin.

    Attributes:
        errors: per member that every origin could fit, ``prediction - observed`` per point.
        ahead: each point's look-ahead from its origin's newest point.
        weight: each point's weight (its origin's, later origins more, shared among its points).
    """

    errors: dict[Member, np.ndarray]
    ahead: np.ndarray
    weight: np.ndarray


def _validate(
    members: Sequence[Member],
    x: np.ndarray,
    z: np.ndarray,
    counts: np.ndarray,
    timeline: Timeline,
    progress: Progress,
    floor: float | None,
) -> _Validated:
    """Every member fitted at every origin of :data:`ORIGINS` and asked for every later point:
    all of them, not only the newest, so a noisy prefix scores the members on many points."""
    lo, hi = float(x[0]), float(x[-1])
    errors: dict[Member, list[np.ndarray]] = {m: [] for m in members}
    ahead: list[np.ndarray] = []
    weight: list[np.ndarray] = []
    for k, share in enumerate(ORIGINS):
        inside = x <= lo + share * (hi - lo)
        later = ~inside
        if inside.sum() < 3 or not later.any():
            continue
        origin = float(x[inside][-1])
        at = progress.at(later)
        for m in members:
            fit = _fit_member(m, inside, x, z, counts, progress, floor)
            errors[m].append(
                fit.predict(at) - z[later] if fit is not None else np.full(later.sum(), np.nan)
            )
        ahead.append(timeline.lookaheads(origin, x[later]))
        weight.append(float(k + 1) * np.sqrt(counts[later]) / later.sum())
    if not ahead:
        return _Validated({}, np.zeros(0), np.zeros(0))
    joined = {m: np.concatenate(e) for m, e in errors.items()}
    return _Validated(
        {m: e for m, e in joined.items() if np.isfinite(e).all()},
        np.concatenate(ahead),
        np.concatenate(weight),
    )


def _member_weights(
    validated: _Validated, members: Sequence[Member], noise: float
) -> dict[Member, float]:
    """Weights ``1 / (mse - noise)``, normalised, of ``flat`` and of the curves whose mse is below
    its; members under 2% dropped. ``noise`` is the mean squared error a perfect curve would
    still make on the validated points."""
    if not validated.errors:
        return {m: 1.0 / len(members) for m in members}
    mse = {
        m: float(np.average(np.square(e), weights=validated.weight))
        for m, e in validated.errors.items()
    }
    # A curve must beat "no further change" on the validated points to count at all.
    flat = mse.get(("flat", 0))
    if flat is not None:
        mse = {m: v for m, v in mse.items() if m[0] == "flat" or v < flat}
    least = _EXCESS_FLOOR * max(max(mse.values()), 1e-300)
    raw = {m: 1.0 / max(v - noise, least) for m, v in mse.items()}
    total = sum(raw.values())
    weights = {m: v / total for m, v in raw.items() if v / total >= 0.02}
    total = sum(weights.values())
    return {m: v / total for m, v in weights.items()}


def error_variance_rate(
    errors: np.ndarray, ahead: np.ndarray, weight: np.ndarray, noise: float
) -> float:
    """How fast a forecast's squared error grows with look-ahead: ``rate`` in
    ``errors**2 - noise ~ rate * ahead``, a weighted least-squares line through zero.

    ``errors`` are the rolling-origin errors at their look-ahead ``ahead`` from their origin and
    ``noise`` the points' own mean squared noise (a perfect curve would still make it). The
    squared error grows about linearly with look-ahead, not with its square: on the backtest's
    real runs its exponent is 0.9 (median) within the validated points, and the target step's
    errors follow the validation's by the same law on the corpus and on the pipeline runs. A
    square, extrapolated from validation look-aheads several times shorter than the target's,
    made the pipeline runs' intervals several times too wide.
    """
    total = float(np.sum(weight * ahead))
    if not len(errors) or not total > 0:
        return 0.0
    return max(float(np.sum(weight * (np.square(errors) - noise))), 0.0) / total


def _at_the_ceiling(fit: Fit | None, ceiling: float) -> bool:
    """Whether a curve of a higher-is-better metric saturates only at the metric's bound.

    An accuracy of 1 or a tau of the block size is the perfect drafter, not a level any run
    settles at: a curve that needs it has found no saturation in the data and extrapolates its
    recent rise (the straight line the backtest shows to be worse than no change). A loss
    floored at 0 is different (a model can fit its training data), so this is for the ceiling
    only.
    """
    return fit is not None and fit.family != "flat" and fit.c <= ceiling + 1e-9


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct ``values`` in order, as ``np.unique`` gives them: without its check for a
    masked array, whose first call imports ``numpy.ma`` (15 ms of a 0.5 s command)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _label(member: Member, x: np.ndarray) -> str:
    family, start = member
    return family if start == 0 else f"{family} from step {x[start]:.0f}"


def forecast_series(
    metric: str,
    series: Series,
    *,
    timeline: Timeline,
    target_step: float,
    higher_is_better: bool,
    best: float | None = None,
    worst: float | None = None,
    final_records: float | None = None,
    max_points: int | None = None,
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
            A bound the points already pass is no bound of this metric (a loss logged below 0:
            a log-likelihood term, a contrastive loss): it is dropped, so the forecast is never
            outside its own interval.
        final_records: how many records the value at ``target_step`` is the mean of (a
            training metric: those of the run's last :data:`FINAL_SHARE` of steps); None: one
            point like the newest (an eval, a per-window estimate). Sets the interval's noise.
        max_points: past this many points, runs of consecutive points are merged before the
            fits (:func:`bounded`: an eval series of 100,000 points); the forecast still starts
            at the newest point as recorded, and its noise is still that of one such point.
            None: every point is fitted.
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
    # The newest point as recorded, whether or not the points are merged below: the forecast
    # starts there, and what it forecasts is one point like it.
    newest_step, newest_count = float(series.steps[-1]), float(series.counts[-1])
    raw = series
    if max_points is not None:
        series = bounded(series, max_points)
        n = len(series.steps)
    sign = -1.0 if higher_is_better else 1.0
    x = np.array(series.steps, dtype=float)
    z = sign * np.array(series.values, dtype=float)
    if best is not None and bool(np.any(z < sign * best)):
        best = None  # the points are past it: not this metric's bound
    if worst is not None and bool(np.any(z > sign * worst)):
        worst = None
    counts = np.array(series.counts, dtype=float)
    scale = newest_step
    families = _families(timeline, newest_step)
    floor = sign * best if best is not None else None
    x, z, counts = _convex_part(x, z, counts)
    members = _members(families, x)
    everything = np.ones(len(x), dtype=bool)
    progress = timeline.progress(x, scale)  # each point's, read by every fit
    fits = {m: _fit_member(m, everything, x, z, counts, progress, floor) for m in members}
    curves = [fit for m, fit in fits.items() if fit is not None and m[0] != "flat"]
    # The noise of one record (a bin of c records having 1/c of it) and of one point.
    record_noise = _noise(curves, x, z, counts, counts, timeline, scale)
    point_noise = record_noise / float(np.average(counts))
    if series is not raw and max_points is not None:
        # Merged evals: one eval's noise measured on the evals themselves, a merged point's on
        # the merged points. Consecutive evals of one eval set (the same prompts a few steps
        # apart) are correlated, so a mean of k of them keeps more than 1/k of an eval's noise:
        # its squared residual times k would overstate an eval's noise, and the interval.
        group = math.ceil(len(raw.steps) / max_points)  # merge_points' runs
        first = (len(series.steps) - len(x)) * group  # the fitted part's first eval
        raw_x = np.array(raw.steps[first:], dtype=float)
        raw_counts = np.array(raw.counts[first:], dtype=float)
        raw_z = sign * np.array(raw.values[first:], dtype=float)
        record_noise = _noise(curves, raw_x, raw_z, raw_counts, raw_counts, timeline, scale)
        point_noise = _noise(curves, x, z, counts, np.ones(len(x)), timeline, scale)
    if higher_is_better and floor is not None:
        members = [m for m in members if not _at_the_ceiling(fits[m], floor)]
    validated = _validate(members, x, z, counts, timeline, progress, floor)
    weights = _member_weights(validated, members, point_noise)
    # How the combination's own validation error grows with look-ahead, its noise removed.
    names = [m for m in weights if m in validated.errors]
    rate = 0.0
    if names:
        combined = _weighted_median(
            np.stack([validated.errors[m] for m in names]), np.array([weights[m] for m in names])
        )
        rate = error_variance_rate(combined, validated.ahead, validated.weight, point_noise)
    # The noise of what the forecast is of (a mean of final_records records, or one point).
    truth_records = final_records if final_records is not None else newest_count
    truth_noise = record_noise / max(truth_records, 1.0)
    start = newest_step
    end = max(float(target_step), start)
    path_steps = _distinct(np.concatenate([np.linspace(start, end, _PATH_POINTS), [end]]))
    at = timeline.progress(path_steps, scale)
    names = list(weights)
    preds = {}
    for m in names:
        fit = fits[m]
        assert fit is not None  # every member starts at least MIN_CONVEX_POINTS from the end
        preds[m] = fit.predict(at)
    # The weighted median of the members, not their mean: when validation cannot tell them
    # apart (a noisy, nearly flat prefix) one member's wild extrapolation must not move the
    # forecast; its distance still widens the band through the spread.
    stack = np.stack([preds[m] for m in names])
    centre = _weighted_median(stack, np.array([weights[m] for m in names]))
    spread = np.sqrt(sum(weights[m] * np.square(preds[m] - centre) for m in names))
    path = []
    for s, c, sp in zip(path_steps, centre, spread, strict=True):
        ahead = timeline.lookahead(start, float(s))
        half = CALIBRATION * _Z80 * math.sqrt(rate * ahead + truth_noise + float(sp) ** 2)
        lo_z, hi_z = float(c) - half, float(c) + half
        if floor is not None:
            lo_z = max(lo_z, floor)
        if worst is not None:
            hi_z = min(hi_z, sign * worst)
        value = sign * float(c)
        low, high = sorted((sign * lo_z, sign * hi_z))
        path.append((float(s), value, low, high))
    value, low, high = path[-1][1:]
    method = " + ".join(
        f"{_label(m, x)} {weights[m]:.2f}" for m in sorted(weights, key=lambda m: -weights[m])
    )
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

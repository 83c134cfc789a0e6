"""Robust trend statistics (Theil-Sen slope, Mann-Kendall test) and the bound on their points.

Both are rank-based, so a few wild windows (a NaN burst, a restart) cannot fake or hide a trend,
and neither assumes normal noise. They are O(n^2) in the number of points (a trend of 20,000
windows is 200M pairs: minutes and gigabytes), so every caller first bounds its points with
:func:`bounded_points` (:func:`merge_points` for the group sizes too), which merges consecutive
points into at most :data:`MAX_POINTS` entry-weighted groups.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

#: The O(n^2) statistics run on at most this many points; more are merged in groups.
MAX_POINTS = 300


def merge_points(
    xs: np.ndarray, ys: np.ndarray, weights: np.ndarray, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, weight)`` of at most ``max_points`` points: past it, runs of
    ``ceil(n / max_points)`` consecutive points merged into their ``weights``-weighted means and
    summed weights. The weighted sums add left to right from 0, as Python's ``sum`` does (numpy's
    own sum adds pairwise: other last bits), so a merge gives the same bits wherever it is made;
    the weights are entry counts, whose sums are exact in any order."""
    if len(xs) <= max_points:
        return xs, ys, weights
    group = math.ceil(len(xs) / max_points)
    total = np.add.reduceat(weights, np.arange(0, len(weights), group))  # the weights' own type
    return _group_sums(xs * weights, group) / total, _group_sums(ys * weights, group) / total, total


def _group_sums(values: np.ndarray, group: int) -> np.ndarray:
    """The sums of consecutive runs of ``group`` values, each added left to right from 0; the
    last run is padded with zeros, which change no sum."""
    rows = -(-len(values) // group)
    padded = np.zeros(rows * group)
    padded[: len(values)] = values
    grid = padded.reshape(rows, group)
    total = np.zeros(rows)
    for column in range(group):
        total += grid[:, column]
    return total


def bounded_points(
    xs: Sequence[float],
    ys: Sequence[float],
    weights: Sequence[float] | None = None,
    max_points: int = MAX_POINTS,
) -> tuple[list[float], list[float]]:
    """:func:`merge_points` of plain sequences, weighted by ``weights`` (e.g. each window's
    entries) or plain: at most ``max_points`` ``(x, y)`` points."""
    if len(xs) <= max_points:
        return list(xs), list(ys)
    w = np.ones(len(xs)) if weights is None else np.asarray(weights, dtype=float)
    gx, gy, _ = merge_points(
        np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), w, max_points
    )
    return gx.tolist(), gy.tolist()


def theil_sen_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """The median of the pairwise slopes (y_j - y_i) / (x_j - x_i) over pairs with x_i != x_j.

    Raises:
        ValueError: fewer than two distinct x values, or lengths that differ.
    """
    if len(x) != len(y):
        raise ValueError("x and y differ in length")
    fast = _pairwise_slopes(x, y)
    if fast is not None:
        if not fast.size:
            raise ValueError("Theil-Sen needs at least two distinct x values")
        return _median_sorted(fast)
    slopes = [
        (y[j] - y[i]) / (x[j] - x[i])
        for i in range(len(x))
        for j in range(i + 1, len(x))
        if x[j] != x[i]
    ]
    if not slopes:
        raise ValueError("Theil-Sen needs at least two distinct x values")
    return median(slopes)


#: Fewest points before the pairwise loops run in numpy (below it, the arrays cost more).
_VECTOR_POINTS = 16
#: Integers below this magnitude and their differences are float64 exactly (as in Python).
_EXACT = 2.0**52


def _as_exact_floats(values: Sequence[float]) -> np.ndarray | None:
    """``values`` as float64 when every one is a finite float (or an int that converts exactly),
    else None: the pairwise loops' arithmetic is then the same in numpy as in Python."""
    if len(values) < _VECTOR_POINTS:
        return None
    if not all(type(v) is float or type(v) is int for v in values):
        return None  # numpy scalars, bools, Decimals...: the Python loop as it was
    array = np.asarray(values, dtype=float)
    if not np.isfinite(array).all() or np.abs(array).max() >= _EXACT:
        return None
    return array


def _pairwise_slopes(x: Sequence[float], y: Sequence[float]) -> np.ndarray | None:
    """The slopes of :func:`theil_sen_slope`'s pairs (i < j, x_i != x_j) in its loop's order,
    sorted stably; None where the inputs need the Python loop."""
    xs, ys = _as_exact_floats(x), _as_exact_floats(y)
    if xs is None or ys is None:
        return None
    i, j = np.triu_indices(len(xs), k=1)  # row-major: the loop's (i, j) order
    dx = xs[j] - xs[i]
    keep = dx != 0
    slopes = (ys[j] - ys[i])[keep] / dx[keep]
    # stable, as sorted() is: equal slopes (0.0 and -0.0) keep the loop's order
    return np.sort(slopes, kind="stable")


def _median_sorted(values: np.ndarray) -> float:
    """statistics.median of sorted ``values``: the middle one, or the mean of the two middle."""
    n = len(values)
    if n % 2 == 1:
        return float(values[n // 2])
    return (float(values[n // 2 - 1]) + float(values[n // 2])) / 2


def _sign_sum(y: Sequence[float]) -> int:
    """sum of sign(y_j - y_i) over i < j."""
    ys = _as_exact_floats(y)
    if ys is not None:
        total = 0
        for i in range(len(ys) - 1):  # a row at a time: n memory, not n^2 / 2
            diff = ys[i + 1 :] - ys[i]
            total += int(np.count_nonzero(diff > 0)) - int(np.count_nonzero(diff < 0))
        return total
    s = 0
    n = len(y)
    for i in range(n - 1):
        yi = y[i]
        for j in range(i + 1, n):
            diff = y[j] - yi
            s += (diff > 0) - (diff < 0)
    return s


@dataclass(frozen=True)
class MannKendall:
    """Mann-Kendall trend test result.

    Attributes:
        s: the statistic, sum of sign(y_j - y_i) over i < j.
        variance: Var(S) under no trend, corrected for ties.
        z: normal score with continuity correction.
        p_value: two-sided p-value.
        tau: Kendall's tau-a (S over the number of pairs).
    """

    s: int
    variance: float
    z: float
    p_value: float
    tau: float


def mann_kendall(y: Sequence[float]) -> MannKendall:
    """Two-sided Mann-Kendall test for a monotonic trend in ``y`` (in order), normal approximation.

    Var(S) = [n(n-1)(2n+5) - sum_t t(t-1)(2t+5)] / 18 over groups of t tied values; the z score
    uses a continuity correction of 1; p = erfc(|z| / sqrt(2)).

    Raises:
        ValueError: fewer than three values.
    """
    n = len(y)
    if n < 3:
        raise ValueError("Mann-Kendall needs at least three values")
    s = _sign_sum(y)
    ties = sum(t * (t - 1) * (2 * t + 5) for t in Counter(y).values() if t > 1)
    variance = (n * (n - 1) * (2 * n + 5) - ties) / 18.0
    if variance <= 0:
        return MannKendall(s=s, variance=0.0, z=0.0, p_value=1.0, tau=0.0)
    if s > 0:
        z = (s - 1) / math.sqrt(variance)
    elif s < 0:
        z = (s + 1) / math.sqrt(variance)
    else:
        z = 0.0
    p_value = math.erfc(abs(z) / math.sqrt(2.0))
    return MannKendall(s=s, variance=variance, z=z, p_value=p_value, tau=s / (n * (n - 1) / 2))

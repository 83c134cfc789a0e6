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
    slopes = [
        (y[j] - y[i]) / (x[j] - x[i])
        for i in range(len(x))
        for j in range(i + 1, len(x))
        if x[j] != x[i]
    ]
    if not slopes:
        raise ValueError("Theil-Sen needs at least two distinct x values")
    return median(slopes)


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
    s = 0
    for i in range(n - 1):
        yi = y[i]
        for j in range(i + 1, n):
            diff = y[j] - yi
            s += (diff > 0) - (diff < 0)
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

"""Robust trend statistics in pure Python: Theil-Sen slope and the Mann-Kendall test.

Both are rank-based, so a few wild windows (a NaN burst, a restart) cannot fake or hide a trend,
and neither assumes normal noise. They are O(n^2) in the number of points (a trend of 20,000 windows is 200M pairs: minutes and
gigabytes), so every caller first bounds its points with :func:`bounded_points`, which merges
consecutive points into at most :data:`MAX_POINTS` groups, as the verdict merges its windows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

#: The O(n^2) statistics run on at most this many points; more are merged in groups.
MAX_POINTS = 300


def bounded_points(
    xs: Sequence[float],
    ys: Sequence[float],
    weights: Sequence[float] | None = None,
    max_points: int = MAX_POINTS,
) -> tuple[list[float], list[float]]:
    """At most ``max_points`` ``(x, y)`` points: past it, runs of ``ceil(n / max_points)``
    consecutive points merged into their means, weighted by ``weights`` (e.g. each window's
    entries) or plain. Each sum adds left to right, as the verdict's merge does, so the same
    points give the same groups bit for bit wherever they are merged.
    """
    if len(xs) <= max_points:
        return list(xs), list(ys)
    size = math.ceil(len(xs) / max_points)
    w = [1.0] * len(xs) if weights is None else list(weights)
    gx, gy = [], []
    for start in range(0, len(xs), size):
        part = range(start, min(start + size, len(xs)))
        total = sum(w[i] for i in part)
        gx.append(sum(xs[i] * w[i] for i in part) / total)
        gy.append(sum(ys[i] * w[i] for i in part) / total)
    return gx, gy


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

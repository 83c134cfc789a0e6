"""Plain-Python references of the per-window stages that run on columns.

The trend arrows, the loss-spike test and the verdict's points are array operations over
:class:`dflash_diag.analysis.windows.WindowTable`; these are the loops they replaced, one window
at a time, kept here so ``test_window_table.py`` can compare the two bit for bit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from dflash_diag.analysis import defaults
from dflash_diag.analysis.trend import (
    Trend,
    TrendConfig,
    _standard_error_of_difference,
    classify,
)
from dflash_diag.analysis.verdict import MAX_POINTS
from dflash_diag.analysis.windows import Window


def compute_trends_reference(
    windows: Sequence[Window], config: TrendConfig | None = None
) -> list[Trend]:
    """:func:`dflash_diag.analysis.trend.compute_trends` one window at a time (the plain-Python reference the tests compare
    the array version with)."""
    config = config or TrendConfig()
    trends: list[Trend] = []
    previous: Window | None = None
    for window in windows:
        acc_delta = acc_trend = loss_delta = loss_trend = None
        if previous is not None:
            if window.acc is not None and previous.acc is not None:
                acc_delta = window.acc - previous.acc
                tolerance = config.acc_threshold
                if config.noise_aware:
                    se = _standard_error_of_difference(window.acc_se, previous.acc_se)
                    tolerance = se if se is not None else tolerance
                acc_trend = classify(acc_delta, tolerance)
            if window.loss is not None and previous.loss is not None:
                loss_delta = window.loss - previous.loss
                tolerance = config.loss_threshold * abs(previous.loss)
                if config.noise_aware:
                    se = _standard_error_of_difference(window.loss_se, previous.loss_se)
                    tolerance = se if se is not None else tolerance
                loss_trend = classify(loss_delta, tolerance, higher_is_better=False)
        trends.append(Trend(acc_delta, acc_trend, loss_delta, loss_trend))
        previous = window
    return trends


def loss_spikes_reference(
    losses: Sequence[float | None],
    *,
    neighbours: int = 3,
    factor: float = defaults.SPIKE_FACTOR,
    rel_floor: float = 0.02,
    resolution: float = 0.0,
) -> list[int]:
    """:func:`dflash_diag.analysis.alerts.loss_spikes` one window at a time (the plain-Python reference the tests compare
    the array version with)."""
    finite = [v if v is not None and math.isfinite(v) else None for v in losses]
    out = []
    for i, v in enumerate(finite):
        if v is None:
            continue
        before = [u for u in finite[max(0, i - neighbours) : i] if u is not None]
        if not before:
            continue
        if v <= before[-1]:
            continue
        after = [u for u in finite[i + 1 : i + 1 + neighbours] if u is not None]
        if after and v <= after[0]:
            continue
        around = before + after
        if len(around) < 2:
            continue
        median = statistics.median(around)
        mad = statistics.median(abs(u - median) for u in around)
        scale = max(1.4826 * mad, rel_floor * abs(median), resolution)
        if scale > 0 and v - median > factor * scale:
            out.append(i)
    return out


def points_reference(
    windows: Sequence[Window], metric: str
) -> tuple[list[float], list[float], list[int]]:
    """:func:`dflash_diag.analysis.verdict._points` one window at a time (the plain-Python reference the tests compare the
    array version with)."""
    isfinite = math.isfinite
    kept = [
        (w, value) for w in windows if (value := getattr(w, metric)) is not None and isfinite(value)
    ]
    xs = [(w.first_step + w.last_step) / 2.0 for w, _ in kept]
    ys = [value for _, value in kept]
    ns = [w.n for w, _ in kept]
    if len(xs) > MAX_POINTS:
        group = math.ceil(len(xs) / MAX_POINTS)
        gx, gy, gn = [], [], []
        for i in range(0, len(xs), group):
            n = sum(ns[i : i + group])
            gx.append(
                sum(x * k for x, k in zip(xs[i : i + group], ns[i : i + group], strict=True)) / n
            )
            gy.append(
                sum(y * k for y, k in zip(ys[i : i + group], ns[i : i + group], strict=True)) / n
            )
            gn.append(n)
        xs, ys, ns = gx, gy, gn
    return xs, ys, ns

"""The O(n^2) robust statistics never see more than MAX_POINTS points, whoever calls them.

Bug guarded (a class): compare's per-regime trend and a tau target's ETA fitted Theil-Sen on
every window, 14,000-20,000 of them in a 1M-record log: 100-200M pairwise slopes, minutes of CPU
and gigabytes of memory (compare on a 1M-record log: 252 s, 5.3 GB), while the verdict and the
validation merged theirs. Each caller now bounds its points with ``bounded_points``, the
verdict's merge, so a regime's trend is converge's verdict slope over the same records.
"""

from __future__ import annotations

import math
import random

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dflash_diag.analysis.verdict as verdict_module
from dflash_diag.analysis import robust_trend
from dflash_diag.analysis.robust_trend import MAX_POINTS, bounded_points
from dflash_diag.analysis.verdict import _points, fitted_slope, judge
from dflash_diag.analysis.windows import compute_window_table
from dflash_diag.compare import regimes


def _frame(steps: int, seed: int = 0) -> pl.DataFrame:
    rng = random.Random(seed)
    return pl.DataFrame(
        {
            "step": list(range(1, steps + 1)),
            "loss": [2.0 - s / steps + rng.gauss(0, 0.05) for s in range(1, steps + 1)],
        }
    )


@pytest.fixture
def sizes(monkeypatch):
    """The number of points each Theil-Sen call gets, wherever it is called from."""
    seen: list[int] = []
    real = robust_trend.theil_sen_slope

    def recording(x, y):
        seen.append(len(x))
        return real(x, y)

    for module in (regimes, verdict_module):
        monkeypatch.setattr(module, "theil_sen_slope", recording)
    return seen


def test_a_regime_trend_of_many_windows_is_fitted_on_bounded_points(sizes):
    trend = regimes.regime_trend(_frame(40_000), "loss", window=10)  # 4,000 windows
    assert trend is not None
    assert sizes
    assert max(sizes) <= MAX_POINTS


def test_one_regimes_trend_is_the_verdicts_slope_over_the_same_windows():
    frame = _frame(40_000, seed=3)
    table = compute_window_table(frame, 10)
    verdict = judge(table, current_acc=None, target_acc=0.5)
    assert verdict.metric == "loss"
    assert regimes.regime_trend(frame, "loss", window=10) == verdict.slope_per_1k_steps


def test_an_eta_fit_of_many_points_is_bounded(sizes):
    points = [(float(s), 1.0 + s / 1e4) for s in range(20_000)]
    assert fitted_slope(points) == pytest.approx(1e-4)
    assert max(sizes) <= MAX_POINTS


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=2 * MAX_POINTS + 50),
    weights=st.integers(1, 50),
)
def test_the_merge_is_weighted_means_of_consecutive_runs_summed_left_to_right(values, weights):
    rng = random.Random(len(values) * weights)
    n = [rng.randint(1, weights) for _ in values]
    xs = [float(i) for i in range(len(values))]
    expected_x, expected_y = xs, list(values)
    if len(xs) > MAX_POINTS:
        group = math.ceil(len(xs) / MAX_POINTS)
        expected_x, expected_y = [], []
        for a in range(0, len(xs), group):
            total = sx = sy = 0.0
            for i in range(a, min(a + group, len(xs))):
                total += n[i]
                sx += xs[i] * n[i]
                sy += values[i] * n[i]
            expected_x.append(sx / total)
            expected_y.append(sy / total)
    assert bounded_points(xs, values, n) == (expected_x, expected_y)
    assert len(bounded_points(xs, values)[0]) <= MAX_POINTS


def test_the_merge_agrees_with_the_verdicts_table_merge():
    frame = _frame(5_000, seed=7)
    table = compute_window_table(frame, 3)
    xs, ys, ns = _points(table, "loss")  # merged by the verdict (numpy)
    values = table.array("loss")
    raw_x = ((table.array("first_step") + table.array("last_step")) / 2.0).tolist()
    assert len(raw_x) > MAX_POINTS
    assert bounded_points(raw_x, values.tolist(), table.array("n").tolist()) == (xs, ys)
    assert len(ns) <= MAX_POINTS
    assert np.isfinite(xs).all()


def test_few_points_are_kept_as_they_are():
    assert bounded_points([1.0, 2.0], [3.0, 4.0]) == ([1.0, 2.0], [3.0, 4.0])
    # plain means past the bound: 601 points in groups of 3
    xs = [float(i) for i in range(601)]
    gx, gy = bounded_points(xs, xs)
    assert len(gx) == 201
    assert gx[0] == 1.0
    assert gy[-1] == 600.0

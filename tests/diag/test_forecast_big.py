"""The forecast's paths for long logs give the bits of the code they replace.

``plan.matched_kind`` compares the lr shapes with numpy elementwise operations and Python's own
``sum``/``max`` over them; ``forecast.binned`` bins a piece of records at a time; the lr
timeline hands ``np.interp`` only the points it reads. Each test keeps the code replaced as the
reference and compares on seeded random inputs (warmups, decays past the end, NaN, None and
negative lrs, integer and float steps, repeated and shuffled steps, read-only columns).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dflash_diag.analysis.forecast import (
    MAX_BINS,
    Series,
    Timeline,
    _finite_lr_pairs,
    _interp,
    binned,
    steps_array,
)
from dflash_diag.analysis.plan import (
    _SHAPE_TOLERANCE,
    KINDS,
    RunPlan,
    matched_kind,
    plan_of,
    schedule_lr,
)
from dflash_diag.analysis.schedule import ScheduleHeader


def reference_matched_kind(steps, lrs, *, end):
    """The per-point Python ``matched_kind`` before the arrays (the reference)."""
    pairs = [
        (s, v)
        for s, v in zip(steps, lrs, strict=True)
        if v is not None and math.isfinite(v) and v >= 0
    ]
    if len(pairs) < 3:
        return None, None, 0
    peak_at, peak = max(pairs, key=lambda p: (p[1], -p[0]))
    if peak <= 0:
        return None, None, 0
    warmup = int(peak_at) if pairs[0][1] < peak * 0.9 else 0
    after = [(s, v) for s, v in pairs if s > peak_at]
    if len(after) < 2:
        return None, peak, warmup
    if warmup == 0:
        after = pairs
    best, best_err, best_peak = None, math.inf, peak
    for kind in KINDS:
        unit = [
            schedule_lr(s, kind=kind, peak=1.0, floor=0.0, warmup=warmup, end=end) for s, _ in after
        ]
        norm = sum(u * u for u in unit)
        if norm <= 0:
            continue
        scale = sum(u * v for u, (_, v) in zip(unit, after, strict=True)) / norm
        err = max(abs(scale * u - v) for u, (_, v) in zip(unit, after, strict=True))
        if err < best_err:
            best, best_err, best_peak = kind, err, scale
    if best is None or best_err > _SHAPE_TOLERANCE * peak:
        return None, peak, warmup
    return best, max(best_peak, peak), warmup


def _schedule(rng: random.Random) -> tuple[list[float], list[float | None], int]:
    """A logged lr: window middles (or integer steps) of a random schedule, with noise, gaps,
    NaN/None/negative entries and flat runs."""
    n = rng.choice([0, 1, 2, 3, 5, 40, 400, 3000])
    end = rng.choice([50, 1000, 20_000, 200_000])
    kind = rng.choice(KINDS)
    warmup = rng.choice([0, 0, 10, 200, 5000])
    peak = rng.choice([1e-3, 6e-4, 2.5e-5, 1.0])
    stride = rng.choice([1, 7, 50, 333])
    first = rng.choice([0, 1, 5, 120])
    half = rng.random() < 0.5
    steps: list[float] = []
    lrs: list[float | None] = []
    for k in range(n):
        step = first + k * stride + (0.5 * (stride - 1) if half else 0)
        if rng.random() < 0.3:
            step = int(step) if not half else step
        lr = schedule_lr(step, kind=kind, peak=peak, floor=0.0, warmup=warmup, end=end)
        noise = rng.choice([0.0, 0.0, 1e-3, 0.05, 0.2])
        lr *= 1.0 + noise * rng.uniform(-1, 1)
        bad = rng.random()
        value: float | None = lr
        if bad < 0.02:
            value = None
        elif bad < 0.04:
            value = math.nan
        elif bad < 0.05:
            value = -lr
        elif bad < 0.06:
            value = math.inf
        elif bad < 0.08 and lrs:
            value = lrs[-1]  # a tie (also at the peak)
        steps.append(step)
        lrs.append(value)
    return steps, lrs, end


@pytest.mark.parametrize("seed", range(12))
def test_matched_kind_gives_the_per_point_bits(seed):
    rng = random.Random(seed)
    for _ in range(60):
        steps, lrs, end = _schedule(rng)
        want = reference_matched_kind(steps, lrs, end=end)
        got = matched_kind(steps, lrs, end=end)
        assert got == want, (seed, end)
        assert [type(x) for x in got] == [type(x) for x in want]
        # the diagnosis passes arrays (its windows' columns): the same answer
        arrays = matched_kind(np.asarray(steps, float), np.asarray(lrs, float), end=end)
        assert arrays == want


def test_matched_kind_reads_the_shapes():
    steps = [float(s) for s in range(10, 2000, 20)]
    for kind in ("linear", "cosine"):
        lrs = [schedule_lr(s, kind=kind, peak=3e-4, floor=0.0, warmup=0, end=4000) for s in steps]
        assert matched_kind(steps, lrs, end=4000)[0] == kind
    warm = [
        schedule_lr(s, kind="cosine", peak=1e-3, floor=0.0, warmup=400, end=4000) for s in steps
    ]
    kind, peak, warmup = matched_kind(steps, warm, end=4000)
    assert (kind, warmup) == ("cosine", 410)
    assert peak == pytest.approx(1e-3, rel=1e-2)
    assert matched_kind(steps, [2e-4] * len(steps), end=4000)[0] == "constant"


def test_plan_of_takes_arrays_as_lists():
    rng = random.Random(7)
    for _ in range(40):
        steps, lrs, end = _schedule(rng)
        header = rng.choice([None, ScheduleHeader(total_steps=end), ScheduleHeader(kind="cosine")])
        for schedule in (None, "linear"):
            want = plan_of(header, steps=steps, lrs=lrs, schedule=schedule, end_step=end)
            got = plan_of(
                header,
                steps=np.asarray(steps, float),
                lrs=np.asarray(lrs, float),
                schedule=schedule,
                end_step=end,
            )
            assert got == want
            assert type(got.peak_lr) is type(want.peak_lr)


def reference_binned(steps, values, *, basis, max_bins=MAX_BINS):
    """``binned`` before the pieces: one float copy, one index, one bincount per sum."""
    all_x = np.asarray(steps, dtype=float)
    all_y = np.asarray(values, dtype=float)
    finite = np.isfinite(all_y)
    xs, ys = (all_x, all_y) if finite.all() else (all_x[finite], all_y[finite])
    if not xs.size:
        return Series((), (), (), basis)
    lo, hi = float(xs.min()), float(xs.max())
    bins = min(max_bins, xs.size)
    if hi <= lo or bins <= 1:
        return Series((float(xs.mean()),), (float(ys.mean()),), (xs.size,), basis)
    index = ((xs - lo) / (hi - lo) * bins).astype(int)
    np.minimum(index, bins - 1, out=index)
    counts = np.bincount(index, minlength=bins)
    keep = counts > 0
    mean_x = np.bincount(index, weights=xs, minlength=bins)[keep] / counts[keep]
    mean_y = np.bincount(index, weights=ys, minlength=bins)[keep] / counts[keep]
    return Series(
        tuple(mean_x.tolist()), tuple(mean_y.tolist()), tuple(int(c) for c in counts[keep]), basis
    )


def _records(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded steps (in order, repeated, shuffled, integer or float) and noisy values with
    NaN/Inf, read-only as polars' columns are."""
    rng = np.random.default_rng(seed)
    kind = seed % 4
    if kind == 0:
        steps = np.arange(n, dtype=np.int64) * int(rng.integers(1, 9)) + int(rng.integers(0, 50))
    elif kind == 1:
        steps = np.sort(rng.integers(0, n // 3 + 2, n))  # repeated steps
    elif kind == 2:
        steps = rng.permutation(n).astype(np.int64)  # out of order
    else:
        steps = np.cumsum(rng.uniform(0.1, 3.0, n))  # float steps
    values = 2.0 + np.sin(np.arange(n) / 997.0) + rng.normal(0, 0.3, n)
    bad = rng.random(n)
    values[bad < 0.01] = np.nan
    values[(bad > 0.01) & (bad < 0.012)] = np.inf
    if seed % 3 == 0:
        values[: n // 2] = np.nan  # a column that starts late
    steps.setflags(write=False)
    values.setflags(write=False)
    return steps, values


@pytest.mark.parametrize("seed", range(8))
def test_binned_in_pieces_gives_the_bits_of_one_pass(seed):
    # a few hundred thousand records: bins cross the pieces' edges (65,536 records)
    for n in (1, 2, 3, 77, 70_000, 300_001):
        steps, values = _records(seed, n)
        for max_bins in (MAX_BINS, 7, 1):
            want = reference_binned(steps, values, basis="b", max_bins=max_bins)
            assert binned(steps, values, basis="b", max_bins=max_bins) == want, (n, max_bins)
            # a list of Python numbers (and None) reads as the same records
            if n <= 77:
                listed = [None if math.isnan(v) else v for v in values.tolist()]
                assert binned(steps.tolist(), listed, basis="b", max_bins=max_bins) == want


def test_binned_of_one_step_and_of_nothing():
    steps = np.full(100_000, 7, dtype=np.int64)
    values = np.linspace(0.0, 1.0, 100_000)
    assert binned(steps, values, basis="b") == reference_binned(steps, values, basis="b")
    nothing = np.full(10, np.nan)
    assert binned(np.arange(10), nothing, basis="b") == Series((), (), (), "b")


@pytest.mark.parametrize("seed", range(6))
def test_the_lr_timeline_reads_the_points_np_interp_reads(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([5, 9000, 250_000]))
    if seed % 2:
        steps = np.cumsum(rng.integers(1, 5, n)).astype(np.int64)
    else:
        steps = np.cumsum(rng.uniform(0.5, 2.0, n))
    lrs = np.abs(rng.normal(3e-4, 1e-4, n))
    lrs[rng.random(n) < 0.01] = np.nan
    lrs[: n // 10] = np.linspace(0.0, 3e-4, n // 10)  # a warmup from 0
    steps.setflags(write=False)
    lrs.setflags(write=False)
    end = float(steps[-1]) * float(rng.choice([0.5, 1.0, 1.7]))
    plan = RunPlan(end_step=int(end) + 1, end_source="header")
    timeline = Timeline(plan, steps, lrs, end)
    keep = np.isfinite(lrs)
    want = Timeline(plan, steps[keep].astype(float).copy(), lrs[keep].copy(), end)
    assert timeline.note == want.note
    for name in ("grid", "s1", "s2"):
        assert getattr(timeline, name).tobytes() == getattr(want, name).tobytes(), name
    grid = np.linspace(0.0, end, 4096)
    xs, ys = _finite_lr_pairs(steps, lrs)
    direct = np.interp(grid, xs.astype(float), ys.copy())
    assert _interp(grid, xs, ys, rising=True).tobytes() == direct.tobytes()


def test_steps_array_keeps_exact_integers_only():
    ints = np.arange(5, dtype=np.int64)
    assert steps_array(ints) is ints
    big = np.array([0, 2**53 + 1], dtype=np.int64)
    assert steps_array(big).dtype == np.float64
    assert steps_array([1, None, 3]).dtype == np.float64
    floats = np.arange(3.0)
    assert steps_array(floats) is floats

"""The forecast's array paths on long logs give the bits of the per-point Python they replace.

``plan.matched_kind`` compares the lr shapes with numpy elementwise operations and Python's own
``sum``/``max`` over them; these tests keep the per-point Python it replaced as the reference and
compare on seeded random schedules (warmups, decays past the end, NaN, None and negative lrs,
integer steps, ties at the peak).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dflash_diag.analysis.plan import KINDS, _SHAPE_TOLERANCE, matched_kind, plan_of, schedule_lr
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
        assert got == want and [type(x) for x in got] == [type(x) for x in want], (seed, end)
        # the diagnosis passes arrays (its windows' columns): the same answer
        arrays = matched_kind(np.asarray(steps, float), np.asarray(lrs, float), end=end)
        assert arrays == want


def test_matched_kind_reads_the_shapes():
    steps = [float(s) for s in range(10, 2000, 20)]
    for kind in ("linear", "cosine"):
        lrs = [schedule_lr(s, kind=kind, peak=3e-4, floor=0.0, warmup=0, end=4000) for s in steps]
        assert matched_kind(steps, lrs, end=4000)[0] == kind
    warm = [schedule_lr(s, kind="cosine", peak=1e-3, floor=0.0, warmup=400, end=4000) for s in steps]
    kind, peak, warmup = matched_kind(steps, warm, end=4000)
    assert (kind, warmup) == ("cosine", 410) and peak == pytest.approx(1e-3, rel=1e-2)
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
            assert got == want and type(got.peak_lr) is type(want.peak_lr)

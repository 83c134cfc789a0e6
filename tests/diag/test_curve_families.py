"""The curve fits' linear part (edge cases on seeded synthetic problems): the subsets solved
together give the exact constrained minimum a one-row-at-a-time search finds, and the median the
robust refits use is numpy's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dflash_diag.analysis import curve_families
from dflash_diag.analysis.curve_families import Progress, _median, _profile, fit_family


def _reference(F, s2, z, w, floor):
    """Per row, every subset of ``[1, f, -s2]`` solved alone with numpy's solver, the feasible
    one of least weighted error kept (the first of equal ones; everything at the floor first)."""
    shift = 0.0 if floor is None else floor
    zs = z - shift
    out = []
    for f in F:
        columns = [np.ones_like(z), f] + ([-s2] if s2 is not None else [])
        best = (np.inf, (0.0, 0.0, 0.0)) if floor is None else (float(w @ zs**2), (0.0, 0.0, 0.0))
        for size in (3, 2, 1):
            for subset in itertools.combinations(range(len(columns)), size):
                if floor is None and 0 not in subset:
                    continue
                X = np.stack([columns[i] for i in subset], axis=1)
                gram = X.T @ (X * w[:, None])
                if abs(np.linalg.det(gram)) < 1e-9:
                    continue
                coef = np.linalg.solve(gram, X.T @ (w * zs))
                full = np.zeros(3)
                full[list(subset)] = coef
                if full[1] < 0 or full[2] < 0 or (floor is not None and full[0] < 0):
                    continue
                sse = float(w @ (zs - X @ coef) ** 2)
                if best[0] == np.inf or sse < best[0] - 1e-9 * max(1.0, best[0]):
                    best = (sse, tuple(full))
        c, a, C = best[1]
        out.append((c + shift, a, C, best[0]))
    return np.array(out).T


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("floor", [None, 0.0])
@pytest.mark.parametrize("with_s2", [False, True])
def test_the_batched_subsets_find_the_constrained_minimum(seed, floor, with_s2):
    rng = np.random.default_rng(seed)
    n = 12
    step = np.linspace(1.0, 12.0, n)
    # decaying curves of several shapes on a grid of exponents, some rows bending the wrong way
    F = np.power(step, -np.linspace(-0.5, 2.0, 9)[:, None])
    s2 = np.cumsum(rng.uniform(0.0, 1.0, n)) if with_s2 else None
    z = 1.0 + 2.0 * step**-0.7 + rng.normal(scale=0.3, size=n) - (0.1 * s2 if with_s2 else 0.0)
    w = rng.uniform(0.2, 1.0, n)
    got = np.array(_profile(F, s2, z, w, floor))
    expected = _reference(F, s2, z, w, floor)
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize(
    "values",
    [[3.0, 1.0, 2.0], [4.0, 1.0, 3.0, 2.0], [0.1, 0.7], [5.0], [2.0, np.nan, 1.0], [0.0, 0.0]],
)
def test_the_median_is_numpys(values):
    array = np.array(values)
    np.testing.assert_equal(_median(array), np.median(array))


def test_a_series_beyond_the_floor_is_fitted_at_the_floor():
    # every subset breaks a sign (the constant would sit below the floor, the curve's amplitude
    # would be negative), so each row keeps "everything at the floor"
    step = np.arange(1.0, 9.0)
    F = np.power(step, -np.array([0.5, 1.0])[:, None])
    z = np.full(8, -0.5)
    w = np.ones(8)
    c, a, C, sse = _profile(F, None, z, w, floor=0.0)
    np.testing.assert_equal(c, [0.0, 0.0])
    np.testing.assert_equal(a, [0.0, 0.0])
    np.testing.assert_equal(C, [0.0, 0.0])
    np.testing.assert_equal(sse, [2.0, 2.0])


def test_a_fit_with_no_point_beyond_hubers_bound_is_not_refitted(monkeypatch):
    # residuals of one size: every Huber weight is 1, so a refit would repeat the fit
    step = np.arange(1.0, 13.0)
    p = Progress(step=step, s1=step, s2=np.zeros(12), scale=12.0)
    z = 1.0 + 2.0 * (step / 12.0) ** -0.5 + 0.01 * np.tile([1.0, -1.0], 6)
    w = np.ones(12)
    calls = []
    real = curve_families._fit_once
    monkeypatch.setattr(
        curve_families, "_fit_once", lambda *args: calls.append(args) or real(*args)
    )
    fit = fit_family("power-steps", p, z, w)
    assert len(calls) == 1
    assert fit == real("power-steps", p, z, w, None)


def test_of_equal_errors_the_first_subset_in_order_is_kept():
    # f is the column of ones: the pair is singular, and "c alone" and "a alone" fit the
    # same mean with the same error; the constant comes first
    c, a, _, _ = _profile(np.ones((1, 4)), None, np.array([1.0, 2.0, 3.0, 4.0]), np.ones(4), 0.0)
    assert c[0] == 2.5
    assert a[0] == 0.0

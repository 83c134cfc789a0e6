"""Saturating learning-curve families and their weighted least-squares fits (pure maths).

Every family is ``z = c + a * f_b(u) - C * s2`` on an *oriented* series ``z`` (the metric times
+1 when lower is better, -1 when higher is): with ``a >= 0`` and ``b > 0`` the curve improves
and saturates at ``c``, as a learning curve does. The families differ in the progress variable
``u`` and the shape ``f``:

* ``power-steps``: ``f = (step / scale)^-b``, a power law in steps (the HPO-literature default);
* ``power-lr``: ``f = s1^-b`` with ``s1`` the lr summed over the steps so far (in steps at the
  peak lr): progress slows as the lr decays, so a decaying schedule ends lower than a power law in
  steps says;
* ``exp``: ``f = exp(-b * step / scale)``, fast saturation;
* ``schedule-law``: ``power-lr`` plus ``-C * s2``, the annealing area (the lr given up below its
  peak, summed), the schedule-aware law of Tissue et al. 2024 (``L = L0 + A*S1^-alpha - C*S2``)
  without its momentum term: the extra drop a decaying lr buys;
* ``flat``: no further change (the newest points' mean), so a curve that bends the wrong way in
  validation loses its weight to "stays where it is".

The asymptote ``c`` may be floored where the metric has a bound (a loss is never below 0, an
accuracy never above 1): an almost straight prefix otherwise lets ``c`` run off to infinity.

Each fit is robust: two refits with Huber's weights after the least-squares one (see
:func:`fit_family`).

For a given ``b`` the model is linear in ``c``, ``a`` and ``C``, so each fit solves that part
exactly (weighted least squares with the signs enforced) for every ``b`` of a bounded log grid
at once and keeps the best (variable projection): no starting guess to get wrong, no iterations
to fail, and about a tenth of a millisecond per fit.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

#: Family names, in the order reports list them.
FAMILIES = ("power-steps", "power-lr", "exp", "schedule-law", "flat")
#: Bounds of the shape parameter ``b`` per family (log-spaced grid, then a bounded search).
_B_BOUNDS = {
    "power-steps": (0.02, 4.0),
    "power-lr": (0.02, 4.0),
    "exp": (0.05, 40.0),
    "schedule-law": (0.02, 4.0),
}
_GRID = 48
_FINE = 17
#: Refits with Huber's weights after the least-squares fit (two settle the weights: a third
#: moved the backtest's combined medians by at most 0.03x).
ROBUST_REFITS = 2
#: Huber's constant, in robust standard deviations: the textbook value (95% of least squares'
#: efficiency on normal noise), not tuned.
HUBER_K = 1.345


@dataclass(frozen=True)
class Progress:
    """Where each point is along the run: its step and the lr it has trained with.

    Attributes:
        step: steps (float array).
        s1: lr summed up to the step, in steps at the peak lr (equal to ``step`` without lr).
        s2: annealing area up to the step: ``sum (running max lr - lr) / peak`` (0 without lr).
        scale: the step scale of ``power-steps`` and ``exp`` (the last observed step), so ``b``
            has the same meaning on every run.
    """

    step: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    scale: float

    def at(self, index: np.ndarray) -> Progress:
        """The points ``index`` selects."""
        return Progress(self.step[index], self.s1[index], self.s2[index], self.scale)


@dataclass(frozen=True)
class Fit:
    """One family fitted: ``z = c + a * f_b(u) - C * s2``.

    Attributes:
        family: one of :data:`FAMILIES`.
        c, a, b, C: the parameters (``C`` is 0 outside ``schedule-law``).
        sse: the weighted sum of squared residuals.
        floor: the bound the predictions stop at, if any.
    """

    family: str
    c: float
    a: float
    b: float
    C: float
    sse: float
    floor: float | None = None

    def predict(self, p: Progress) -> np.ndarray:
        """The fitted oriented values at ``p`` (never below the floor: the annealing term alone
        is unbounded)."""
        value = self.unfloored(p)
        return value if self.floor is None else np.maximum(value, self.floor)

    def unfloored(self, p: Progress) -> np.ndarray:
        """The curve at ``p`` without the floor (what the residuals of a fit are taken from)."""
        return self.c + self.a * shape(self.family, self.b, p) - self.C * p.s2


def shape(family: str, b: float | np.ndarray, p: Progress) -> np.ndarray:
    """``f_b(u)`` of ``family`` at ``p`` (``u`` floored at a small positive value); ``b`` of
    shape ``(G, 1)`` gives one row per value."""
    if family == "exp":
        return np.exp(-b * (p.step / p.scale))
    u = p.step / p.scale if family == "power-steps" else p.s1
    return np.power(np.maximum(u, 1e-9), -b)


#: The subsets of the columns ``[1, f, -s2]`` :func:`_profile` solves, in its order (the
#: order decides ties: the first subset of least error is kept; :func:`_profile_two` keeps the
#: same order among those without ``-s2``).
_ORDER = ((0, 1, 2), (0, 1), (0, 2), (0,), (1, 2), (1,), (2,))


@dataclass(frozen=True)
class _Group:
    """The subsets of one size :func:`_profile` solves together.

    Attributes:
        size: columns per subset.
        cols: each subset's columns, ``(S, size)``.
        where: each subset's candidate index (0 is "everything at the floor").
        flat_where, flat_cols: where each coefficient goes among the candidates' ``(c, a, C)``
            (subset by subset, column by column).
    """

    size: int
    cols: np.ndarray
    where: np.ndarray
    flat_where: np.ndarray
    flat_cols: np.ndarray


@functools.cache
def _groups(floored: bool) -> tuple[int, tuple[_Group, ...]]:
    """The subsets :func:`_profile` solves, in :data:`_ORDER` (those with the constant only,
    unless ``c`` may sit at a floor), grouped by size: their number and the groups."""
    subsets = [s for s in _ORDER if floored or 0 in s]
    groups = []
    for size in (1, 2, 3):
        where = [i for i, s in enumerate(subsets, start=1) if len(s) == size]
        if where:
            cols = np.array([subsets[i - 1] for i in where])
            groups.append(
                _Group(
                    size=size,
                    cols=cols,
                    where=np.array(where),
                    flat_where=np.repeat(where, size),
                    flat_cols=cols.ravel(),
                )
            )
    return len(subsets), tuple(groups)


def _profile(
    F: np.ndarray, s2: np.ndarray | None, z: np.ndarray, w: np.ndarray, floor: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares of ``z`` on ``[1, f, -s2]`` for every row ``f`` of ``F`` at once,
    with ``a >= 0``, ``C >= 0`` and, given a ``floor``, ``c >= floor``: per row
    ``(c, a, C, sse)``.

    Every subset of the columns is solved from the same normal equations for all rows together
    (a column left out has coefficient 0; ``c`` left out sits at the floor); a subset whose
    solution breaks a sign is infeasible, and each row keeps its feasible subset of least error.
    With at most three columns this enumeration is the exact constrained minimum (the optimum
    of a convex problem lies on the face where the active constraints hold with equality).

    The subsets of one size are solved together (one set of array operations for the three
    pairs, one for the three single columns): a fit is a few dozen points on a grid of 48 or
    17 rows, so the cost is the number of numpy calls, not the arithmetic. Every operation is
    elementwise, as when each subset was solved alone, so the results are the same to the bit.
    Without ``s2`` (three fits in four) :func:`_profile_two` solves the two columns.
    """
    if s2 is None:
        return _profile_two(F, z, w, floor)
    shift = floor if floor is not None else 0.0
    z = z - shift
    G = F.shape[0]
    # The normal equations of [1, f, -s2] for every row at once: a few matrix-vector products.
    gram = np.empty((G, 3, 3))
    rhs = np.empty((G, 3))
    wf = F * w
    gram[:, 0, 0] = w.sum()
    gram[:, 0, 1] = gram[:, 1, 0] = wf.sum(axis=1)
    gram[:, 1, 1] = np.einsum("gn,gn->g", wf, F)
    rhs[:, 0] = w @ z
    rhs[:, 1] = wf @ z
    g = -s2
    gram[:, 0, 2] = gram[:, 2, 0] = w @ g
    gram[:, 1, 2] = gram[:, 2, 1] = wf @ g
    gram[:, 2, 2] = w @ (g * g)
    rhs[:, 2] = w @ (g * z)
    zz = float(w @ (z * z))
    count, groups = _groups(floor is not None)
    # Per candidate: the full coefficients (c, a, C) and the error, inf where the solution is
    # singular; candidate 0 is "everything at the floor", then the subsets in order.
    full = np.zeros((G, count + 1, 3))
    sse = np.empty((G, count + 1))
    sse[:, 0] = zz if floor is not None else np.inf
    for group in groups:
        coef, error = _SOLVERS[group.size](gram, rhs, group.cols, zz)  # (G, S, size), (G, S)
        full[:, group.flat_where, group.flat_cols] = coef.reshape(G, -1)
        sse[:, group.where] = error
    # c may sit below 0 (at the floor) only when floored; a NaN fails every comparison
    feasible = (full if floor is not None else full[:, :, 1:]) >= 0
    feasible = feasible.all(axis=2) & (sse < np.inf)
    # argmin keeps the first candidate of least error, as a strict comparison in order would
    sse = np.where(feasible, sse, np.inf)
    pick = np.argmin(sse, axis=1)
    rows = np.arange(G)
    best, best_sse = full[rows, pick], sse[rows, pick]
    assert np.isfinite(best_sse).all()  # the constant (or the floor) is always feasible
    return best[:, 0] + shift, best[:, 1], best[:, 2], np.maximum(best_sse, 0.0)


def _profile_two(
    F: np.ndarray, z: np.ndarray, w: np.ndarray, floor: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_profile` without the annealing column (every family but ``schedule-law``, three
    fits in four): the same arithmetic on the same values, the column of ones' entries of the
    normal equations kept as the scalars they are (the same in every row) instead of a
    ``(G, 2, 2)`` matrix, which halves the calls of a fit."""
    shift = floor if floor is not None else 0.0
    z = z - shift
    G = F.shape[0]
    wf = F * w
    # the normal equations [[g00, g01], [g01, g11]] (c, a) = (r0, r1), g00 and r0 scalars
    g00, r0 = w.sum(), w @ z
    g01 = wf.sum(axis=1)
    g11 = np.einsum("gn,gn->g", wf, F)
    r1 = wf @ z
    zz = float(w @ (z * z))
    # (c, a) together, by Cramer's rule
    det = g00 * g11 - g01 * g01
    ok = np.abs(det) > 1e-12 * np.maximum(np.abs(g00 * g11), 1e-300)
    safe = np.where(ok, det, 1.0)
    c_both = np.where(ok, (r0 * g11 - g01 * r1) / safe, 0.0)
    a_both = np.where(ok, (g00 * r1 - g01 * r0) / safe, 0.0)
    sse_both = np.where(ok, zz - (c_both * r0 + a_both * r1), np.inf)
    # c alone (a = 0): the same in every row
    c_alone = r0 / g00 if abs(g00) > 1e-300 else math.nan
    sse_alone = zz - c_alone * r0
    # a NaN fails every comparison: a NaN error is never kept (nor a first one, below)
    both_fits = (a_both >= 0) & (sse_both < np.inf)
    best_c: np.ndarray | float
    best_a: np.ndarray | float
    best_sse: np.ndarray | float
    candidates: list[tuple[np.ndarray | float, np.ndarray | float, np.ndarray | float]]
    if floor is None:
        best_c, best_a = c_both, a_both
        best_sse = np.where(both_fits, sse_both, np.inf)
        candidates = [(c_alone, 0.0, sse_alone)]
    else:
        both_fits &= c_both >= 0
        best_c, best_a, best_sse = 0.0, 0.0, zz  # everything at the floor
        # a alone (c at the floor)
        a_ok = np.abs(g11) > 1e-300
        a_alone = np.where(a_ok, r1 / np.where(a_ok, g11, 1.0), 0.0)
        sse_a = np.where(a_ok, zz - a_alone * r1, np.inf)
        candidates = [
            (c_both, a_both, np.where(both_fits, sse_both, np.inf)),
            (c_alone, 0.0, sse_alone if c_alone >= 0 else np.inf),
            (0.0, a_alone, np.where(a_alone >= 0, sse_a, np.inf)),
        ]
    # each row keeps the first candidate of least error (a strict comparison, in order)
    for c, a, sse in candidates:
        take = sse < best_sse
        best_c, best_a = np.where(take, c, best_c), np.where(take, a, best_a)
        best_sse = np.where(take, sse, best_sse)
    assert np.isfinite(best_sse).all()  # the constant (or the floor) is always feasible
    # arrays: every row took a candidate's array or compared with one
    return np.asarray(best_c) + shift, np.asarray(best_a), np.zeros(G), np.maximum(best_sse, 0.0)


def _solve_one(
    gram: np.ndarray, rhs: np.ndarray, cols: np.ndarray, zz: float
) -> tuple[np.ndarray, np.ndarray]:
    """The one-column subsets ``cols`` (S, 1) of every row: the coefficients and the error (inf
    where the determinant is negligible)."""
    i = cols[:, 0]
    det, b = gram[:, i, i], rhs[:, i]
    ok = np.abs(det) > 1e-300
    x = np.where(ok, b / np.where(ok, det, 1.0), 0.0)
    return x[:, :, None], np.where(ok, zz - x * b, np.inf)


def _solve_two(
    gram: np.ndarray, rhs: np.ndarray, cols: np.ndarray, zz: float
) -> tuple[np.ndarray, np.ndarray]:
    """The two-column subsets ``cols`` (S, 2) of every row by Cramer's rule: the coefficients
    and the error (inf where the determinant is negligible)."""
    i, j = cols[:, 0], cols[:, 1]
    a, c, d = gram[:, i, i], gram[:, i, j], gram[:, j, j]
    b0, b1 = rhs[:, i], rhs[:, j]
    det = a * d - c * c
    ok = np.abs(det) > 1e-12 * np.maximum(np.abs(a * d), 1e-300)
    safe = np.where(ok, det, 1.0)
    x0 = np.where(ok, (b0 * d - c * b1) / safe, 0.0)
    x1 = np.where(ok, (a * b1 - c * b0) / safe, 0.0)
    return np.stack([x0, x1], axis=2), np.where(ok, zz - (x0 * b0 + x1 * b1), np.inf)


def _det3(M: np.ndarray) -> np.ndarray:
    return (
        M[..., 0, 0] * (M[..., 1, 1] * M[..., 2, 2] - M[..., 1, 2] * M[..., 2, 1])
        - M[..., 0, 1] * (M[..., 1, 0] * M[..., 2, 2] - M[..., 1, 2] * M[..., 2, 0])
        + M[..., 0, 2] * (M[..., 1, 0] * M[..., 2, 1] - M[..., 1, 1] * M[..., 2, 0])
    )


def _solve_three(
    gram: np.ndarray, rhs: np.ndarray, cols: np.ndarray, zz: float
) -> tuple[np.ndarray, np.ndarray]:
    """The three-column subset (all of them) of every row by Cramer's rule: the coefficients
    and the error (inf where the determinant is negligible)."""
    assert cols.tolist() == [[0, 1, 2]]
    # the matrix and its three copies with a column replaced by the right-hand side: their
    # determinants in one evaluation
    M = np.empty((4, *gram.shape))
    M[:] = gram
    for j in range(3):
        M[j + 1, :, :, j] = rhs
    det, *numerators = _det3(M)
    scale = np.abs(gram).max(axis=(1, 2)) ** 3
    ok = np.abs(det) > 1e-12 * np.maximum(scale, 1e-300)
    safe = np.where(ok, det, 1.0)
    coef = np.where(ok[:, None], np.stack(numerators, axis=1) / safe[:, None], 0.0)
    error = np.where(ok, zz - np.einsum("gi,gi->g", coef, rhs), np.inf)
    return coef[:, None, :], error[:, None]


_SOLVERS = {1: _solve_one, 2: _solve_two, 3: _solve_three}


def fit_family(
    family: str, p: Progress, z: np.ndarray, w: np.ndarray, floor: float | None = None
) -> Fit:
    """Fit ``family`` to the oriented values ``z`` with weights ``w`` (variable projection: the
    linear part solved exactly for every ``b`` of a fine log-spaced grid at once, the best kept),
    robustly: :data:`ROBUST_REFITS` refits with Huber's weights.

    Robust because training records are noisy one by one (a DFlash drafter's per-step accuracy
    scatters by a fifth of its whole rise on a short run) and the recency weights give the
    newest few records the most say: by least squares, two high records at the end of the prefix
    bend every curve upwards and the forecast extrapolates the spike.

    A grid of :data:`_GRID` values between the family's bounds, then :data:`_FINE` across the
    best one's neighbours, place ``b`` within about 1%, finer than the data can tell apart; a
    scalar optimiser would add little precision and cost more than every fit (importing
    scipy.optimize alone takes longer than the whole forecast may run).
    """
    if family == "flat":
        return flat_fit(p, z, w)
    coarse = shape(family, _grid(family)[:, None], p)  # the same for the fit and its refits
    fit = _fit_once(family, p, z, w, floor, coarse)
    fitted_with = w
    root_w = np.sqrt(w)
    for _ in range(ROBUST_REFITS):
        # Huber's weights: a point further than HUBER_K robust standard deviations from the
        # curve counts as if it were that far (its weight falls as 1/|residual|).
        scaled = (z - fit.unfloored(p)) * root_w
        sigma = 1.4826 * _median(np.abs(scaled))  # the MAD of a normal's residuals
        if not sigma > 0:
            break
        weights = w * np.minimum(1.0, HUBER_K * sigma / np.abs(scaled).clip(1e-300))
        if np.array_equal(weights, fitted_with):
            # no point beyond the bound (or the same ones as before): the same weights give the
            # same fit, and the same weights again (one refit in seven on the committed runs)
            break
        fit = _fit_once(family, p, z, weights, floor, coarse)
        fitted_with = weights
    return fit


def _median(values: np.ndarray) -> float:
    """The median of a 1-D array, as ``np.median`` gives it (NaN if any value is): without its
    NaN check, whose first call imports ``numpy.ma`` (15 ms of a 0.5 s command)."""
    ordered = np.sort(values)
    if not len(ordered) or np.isnan(ordered[-1]):  # NaN sorts last
        return math.nan
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return float((ordered[mid - 1] + ordered[mid]) / 2)


@functools.cache
def _grid(family: str) -> np.ndarray:
    """The coarse grid of ``b``: :data:`_GRID` log-spaced values between the family's bounds
    (made once: every fit reads the same one)."""
    lo, hi = _B_BOUNDS[family]
    grid = np.geomspace(lo, hi, _GRID)
    grid.flags.writeable = False
    return grid


@functools.cache
def _fine_grid(family: str, i: int) -> np.ndarray:
    """The fine grid across the neighbours of coarse value ``i``: :data:`_FINE` values."""
    grid = _grid(family)
    fine = np.geomspace(grid[max(0, i - 1)], grid[min(_GRID - 1, i + 1)], _FINE)
    fine.flags.writeable = False
    return fine


def _fit_once(
    family: str,
    p: Progress,
    z: np.ndarray,
    w: np.ndarray,
    floor: float | None,
    coarse: np.ndarray | None = None,
) -> Fit:
    """One weighted least-squares fit of ``family`` (see :func:`fit_family`); ``coarse``: the
    shape on the coarse grid at ``p``, when the caller has it (the refits share it)."""
    grid = _grid(family)
    F = shape(family, grid[:, None], p) if coarse is None else coarse
    use_s2 = family == "schedule-law" and float(np.ptp(p.s2)) > 0
    s2 = p.s2 if use_s2 else None
    c, a, C, sse = _profile(F, s2, z, w, floor)
    i = int(np.argmin(sse))
    # A second, finer grid across the best cell's neighbours: b to about 1%, in one more call.
    fine = _fine_grid(family, i)
    c, a, C, sse = _profile(shape(family, fine[:, None], p), s2, z, w, floor)
    j = int(np.argmin(sse))
    return Fit(
        family=family,
        c=float(c[j]),
        a=float(a[j]),
        b=float(fine[j]),
        C=float(C[j]),
        sse=float(sse[j]),
        floor=floor,
    )


#: The flat curve is the mean of the newest points: this share of the observed step range.
FLAT_TAIL = 0.1


def flat_fit(p: Progress, z: np.ndarray, w: np.ndarray) -> Fit:
    """No further change: the weighted mean of the points in the newest :data:`FLAT_TAIL` of
    the range (at least the last two), the contender every curve must beat in validation."""
    tail = p.step >= p.step[-1] - FLAT_TAIL * (p.step[-1] - p.step[0])
    if tail.sum() < 2:
        tail[-2:] = True
    c = float(np.average(z[tail], weights=w[tail]))
    return Fit(family="flat", c=c, a=0.0, b=1.0, C=0.0, sse=float(w @ np.square(z - c)))

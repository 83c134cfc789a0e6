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
  without its momentum term: the extra drop a decaying lr buys.

For a given ``b`` the model is linear in ``c``, ``a`` and ``C``, so each fit solves that part
exactly (weighted least squares with the signs enforced) for every ``b`` of a bounded log grid
at once and keeps the best (variable projection): no starting guess to get wrong, no iterations
to fail, and about a tenth of a millisecond per fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Family names, in the order reports list them.
FAMILIES = ("power-steps", "power-lr", "exp", "schedule-law")
#: Bounds of the shape parameter ``b`` per family (log-spaced grid, then a bounded search).
_B_BOUNDS = {"power-steps": (0.02, 4.0), "power-lr": (0.02, 4.0), "exp": (0.05, 40.0),
             "schedule-law": (0.02, 4.0)}
_GRID = 64


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
    """

    family: str
    c: float
    a: float
    b: float
    C: float
    sse: float

    def predict(self, p: Progress) -> np.ndarray:
        """The fitted oriented values at ``p``."""
        return self.c + self.a * shape(self.family, self.b, p) - self.C * p.s2


def shape(family: str, b: float | np.ndarray, p: Progress) -> np.ndarray:
    """``f_b(u)`` of ``family`` at ``p`` (``u`` floored at a small positive value); ``b`` of
    shape ``(G, 1)`` gives one row per value."""
    if family == "exp":
        return np.exp(-b * (p.step / p.scale))
    u = p.step / p.scale if family == "power-steps" else p.s1
    return np.power(np.maximum(u, 1e-9), -b)


def _profile(F: np.ndarray, s2: np.ndarray | None, z: np.ndarray,
             w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares of ``z`` on ``[1, f, -s2]`` for every row ``f`` of ``F`` at once,
    with ``a >= 0`` and ``C >= 0``: per row ``(c, a, C, sse)``.

    The normal equations of each column subset are solved in closed form for all rows together;
    a subset whose solution breaks a sign is infeasible, and each row keeps its feasible subset
    of least error (the constant alone is always feasible, so every row has one). With two or
    three columns this is the exact constrained minimum.
    """
    sw, zz = float(w.sum()), float(w @ (z * z))
    sz = float(w @ z)
    sf, sff, sfz = F @ w, (F * F) @ w, F @ (w * z)
    G = F.shape[0]
    best_sse = np.full(G, zz - sz * sz / sw)  # the constant alone
    best = np.stack([np.full(G, sz / sw), np.zeros(G), np.zeros(G)], axis=1)
    # c + a f
    det = sw * sff - sf * sf
    ok = det > 1e-12 * np.maximum(sw * sff, 1e-300)
    a = np.where(ok, (sw * sfz - sf * sz) / np.where(ok, det, 1.0), 0.0)
    c = (sz - a * sf) / sw
    sse = zz - (c * sz + a * sfz)
    take = ok & (a >= 0) & (sse < best_sse)
    best_sse = np.where(take, sse, best_sse)
    best[take] = np.stack([c, a, np.zeros(G)], axis=1)[take]
    if s2 is not None:
        g = -s2
        sg, sgg, sgz = float(w @ g), float(w @ (g * g)), float(w @ (g * z))
        sfg = F @ (w * g)
        # c - C s2
        d2 = sw * sgg - sg * sg
        if d2 > 1e-12 * max(sw * sgg, 1e-300):
            C = (sw * sgz - sg * sz) / d2
            c2 = (sz - C * sg) / sw
            sse2 = zz - (c2 * sz + C * sgz)
            if C >= 0:
                take = sse2 < best_sse
                best_sse = np.where(take, sse2, best_sse)
                best[take] = np.array([c2, 0.0, C])
        # c + a f - C s2: the 3x3 system per row
        A = np.empty((G, 3, 3))
        A[:, 0, 0], A[:, 0, 1], A[:, 0, 2] = sw, sf, sg
        A[:, 1, 0], A[:, 1, 1], A[:, 1, 2] = sf, sff, sfg
        A[:, 2, 0], A[:, 2, 1], A[:, 2, 2] = sg, sfg, sgg
        rhs = np.stack([np.full(G, sz), sfz, np.full(G, sgz)], axis=1)
        dets = np.linalg.det(A)
        ok = np.abs(dets) > 1e-12 * np.maximum(np.abs(A).max(axis=(1, 2)) ** 3, 1e-300)
        coef = np.zeros((G, 3))
        if ok.any():
            coef[ok] = np.linalg.solve(A[ok], rhs[ok][..., None])[..., 0]
        sse3 = zz - np.einsum("ij,ij->i", coef, rhs)
        take = ok & (coef[:, 1] >= 0) & (coef[:, 2] >= 0) & (sse3 < best_sse)
        best_sse = np.where(take, sse3, best_sse)
        best[take] = coef[take]
    return best[:, 0], best[:, 1], best[:, 2], np.maximum(best_sse, 0.0)


def fit_family(family: str, p: Progress, z: np.ndarray, w: np.ndarray) -> Fit:
    """Fit ``family`` to the oriented values ``z`` with weights ``w`` (variable projection: the
    linear part solved exactly for every ``b`` of a fine log-spaced grid at once, the best kept).

    A grid of :data:`_GRID` values between the family's bounds steps ``b`` by a few percent,
    finer than the data can tell apart; a scalar optimiser would add little precision and cost
    more than every fit (scipy.optimize alone takes longer to import than the whole forecast
    may run).
    """
    lo, hi = _B_BOUNDS[family]
    grid = np.geomspace(lo, hi, _GRID)
    F = shape(family, grid[:, None], p)
    use_s2 = family == "schedule-law" and float(np.ptp(p.s2)) > 0
    c, a, C, sse = _profile(F, p.s2 if use_s2 else None, z, w)
    i = int(np.argmin(sse))
    return Fit(family=family, c=float(c[i]), a=float(a[i]), b=float(grid[i]), C=float(C[i]),
               sse=float(sse[i]))

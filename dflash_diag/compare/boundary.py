"""The jump at a regime boundary, and whether a loss-normalisation difference explains it.

In the original analysis the loss went from about 1.57 to 3.11 at the switch from the old script to
the pipeline while accuracy barely moved, because one script divided the loss by the data-parallel
size and the other did not. `measure_boundary` compares the last K steps before a boundary with the
first K after it (loss ratio, acc delta); `explain_boundary` says when the ratio matches a
normalisation factor present in the configs (`normalisation_factors`), so the jump is not mistaken
for the model getting worse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.frame_means import mean_acc, mean_loss, weighted_loss
from dflash_diag.compare.regimes import Regime, RunConfig


@dataclass(frozen=True)
class CompareConfig:
    """Settings of the regime comparison.

    Attributes:
        k: steps on each side of a boundary whose means are compared (``--k``).
        factor_tolerance: relative distance within which a loss ratio "matches" a normalisation
            factor (0.05: x1.98 matches 2, x1.85 does not).
        acc_tolerance: an absolute acc change below which accuracy "barely moved" across a
            boundary, the tell-tale that a loss jump is a normalisation artefact.
        window: steps per window for each regime's robust trend (and two-run alignment);
            None: ``--window auto``, chosen once from the whole log (converge's rule).
    """

    k: int = defaults.BOUNDARY_K
    factor_tolerance: float = 0.05
    acc_tolerance: float = 0.02
    window: int | None = None

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"--k must be at least 1, got {self.k}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"--window must be at least 1, got {self.window}")
        if not 0 < self.factor_tolerance < 1:
            raise ValueError(f"factor tolerance must be in (0, 1), got {self.factor_tolerance}")
        if self.acc_tolerance < 0:
            raise ValueError(f"acc tolerance must be >= 0, got {self.acc_tolerance}")


@dataclass(frozen=True, kw_only=True)
class Boundary:
    """The jump between two adjacent regimes, measured over K steps on each side."""

    step: int
    loss_ratio: float | None
    acc_delta: float | None
    explanation: str
    matched: str | None = None
    loss_before: float | None = None
    loss_after: float | None = None
    acc_before: float | None = None
    acc_after: float | None = None
    n_before: int = 0
    n_after: int = 0
    per_token_loss_ratio: float | None = None
    run: str | None = None
    """With two runs, which run the boundary is in (its file name); None with one log."""


def normalisation_factors(
    before: RunConfig | None,
    after: RunConfig | None,
    tokens_before: float | None = None,
    tokens_after: float | None = None,
) -> list[tuple[str, float]]:
    """Candidate loss-normalisation factors between two regimes, simplest first.

    A loss averaged over data-parallel ranks or accumulation micro-batches in one script and summed
    (or divided twice) in the other differs by that factor; a per-step sum versus a per-token mean
    differs by the tokens-per-step ratio.

    Returns:
        ``(label, factor)`` pairs with factor > 1, e.g. ``("dp=2", 2.0)``.
    """
    out: list[tuple[str, float]] = []
    if before is not None and after is not None:
        for name, a, b in (
            ("dp", before.world_size, after.world_size),
            ("grad_accum", before.grad_accum, after.grad_accum),
        ):
            a, b = a or 1, b or 1  # a header without the setting does not use it
            if a != b:
                label = f"{name}={max(a, b)}" if min(a, b) == 1 else f"{name} {a}->{b}"
                out.append((label, max(a, b) / min(a, b)))
        if before.token_budget and after.token_budget and before.token_budget != after.token_budget:
            a, b = before.token_budget, after.token_budget
            out.append((f"token budget {a}->{b}", max(a, b) / min(a, b)))
    if tokens_before and tokens_after:
        r = max(tokens_before, tokens_after) / min(tokens_before, tokens_after)
        if r > 1.05 and not any(abs(f - r) / r < 1e-9 for _, f in out):
            out.append(("tokens per step", r))
    singles = list(out)
    for i in range(len(singles)):  # products of two settings (dp and accumulation together)
        for j in range(i + 1, len(singles)):
            (la, fa), (lb, fb) = singles[i], singles[j]
            if not any(abs(f - fa * fb) / (fa * fb) < 1e-9 for _, f in out):
                out.append((f"{la} x {lb}", fa * fb))
    return out


def _match(ratio: float, factors: Sequence[tuple[str, float]], tol: float) -> str | None:
    """The first factor the ratio (or its inverse) lies within ``tol`` of, relatively."""
    for label, f in factors:
        for r in (ratio, 1 / ratio):
            if abs(r - f) / f <= tol:
                return label
    return None


def _near_whole(ratio: float, tol: float) -> int | None:
    """The whole number 2..16 that ``ratio`` (or its inverse) lies within ``tol`` of, if any."""
    r = max(ratio, 1 / ratio)
    n = round(r)
    return n if 2 <= n <= 16 and abs(r - n) / n <= tol else None


def _no_acc_signal(acc_before: float | None, acc_after: float | None) -> str | None:
    """Why the accuracy around a boundary says nothing about the model, or None when it does."""
    if acc_before is None and acc_after is None:
        return "no acc is logged around it"
    if acc_before is None or acc_after is None:
        return "acc is logged on one side only"
    if acc_before == 0 and acc_after == 0:
        return "acc is 0 on both sides (no accuracy signal)"
    return None


def explain_boundary(
    step: int,
    loss_ratio: float | None,
    acc_delta: float | None,
    factors: Sequence[tuple[str, float]],
    config: CompareConfig,
    headerless: str | None = None,
    no_acc_signal: str | None = None,
) -> tuple[str, str | None]:
    """The sentence describing a boundary jump, and the matched factor's label if any.

    ``headerless`` names a regime without a ``run_start`` header: its settings are unknown, so a
    ratio close to a small whole number is reported as a likely, unconfirmed normalisation.
    ``no_acc_signal`` says why accuracy tells nothing here (no acc on a side, or acc 0 on both):
    an unchanged acc is then no evidence that the model did not change, so a jump no config
    factor explains is reported as unexplained, not as a likely normalisation.
    """
    if loss_ratio is None:
        acc_part = f"; acc {acc_delta:+.4f}" if acc_delta is not None else ""
        return f"not enough finite loss around step {step} to measure the jump{acc_part}", None
    acc_small = acc_delta is None or abs(acc_delta) < config.acc_tolerance
    acc_text = "n/a" if acc_delta is None else f"{acc_delta:+.4f}"
    if not (math.isfinite(loss_ratio) and loss_ratio > 0):
        # a zero, negative or overflowing mean loss: no normalisation factor can explain it
        return f"loss ratio {loss_ratio:g} at step {step} (acc {acc_text}): not comparable", None
    if abs(loss_ratio - 1) <= config.factor_tolerance:
        return f"no loss jump at step {step} (x{loss_ratio:.2f}, acc {acc_text})", None
    matched = _match(loss_ratio, factors, config.factor_tolerance)
    head = f"loss x{loss_ratio:.2f} at step {step}"
    if matched is not None and acc_small:
        return (
            f"{head} matches {matched}: the two scripts normalise the loss differently; "
            "not a change in the model"
        ), matched
    if matched is not None:
        return (
            f"{head} matches {matched} (a loss-normalisation difference), but acc also moved "
            f"{acc_text}: the model changed as well"
        ), matched
    tried = ", ".join(f"{label} (x{f:.3g})" for label, f in factors) or "none known from headers"
    whole = _near_whole(loss_ratio, config.factor_tolerance)
    if no_acc_signal is not None:
        near = (
            f"; it is close to x{whole}, a typical loss-normalisation factor, but the "
            f"{headerless} regime has no run_start header to confirm it"
            if headerless is not None and whole is not None
            else ""
        )
        return (
            f"{head} matches no normalisation factor in the configs ({tried}){near}; "
            f"{no_acc_signal}, so nothing tells a normalisation from a change in training: "
            "the loss jump is unexplained"
        ), None
    if headerless is not None and whole is not None and acc_small:
        return (
            f"{head} is close to x{whole}, a typical loss-normalisation factor (data-parallel size "
            f"or gradient accumulation), but the {headerless} regime has no run_start header to "
            f"confirm it; acc barely moved ({acc_text}), so most likely the two scripts normalise "
            "the loss differently, not a change in the model"
        ), None
    if acc_small:
        return (
            f"{head} matches no normalisation factor in the configs ({tried}); acc barely moved "
            f"({acc_text}), so a normalisation the headers do not record is likely"
        ), None
    return (
        f"{head} matches no normalisation factor in the configs ({tried}); with acc {acc_text} "
        "this looks like a real change in training"
    ), None


def measure_boundary(
    before: pl.DataFrame,
    after: pl.DataFrame,
    regime_before: Regime,
    regime_after: Regime,
    config: CompareConfig,
) -> Boundary:
    """Loss ratio and acc delta between the last K steps of ``before`` and the first K of
    ``after`` (K in steps, so a log written every 10 steps compares K/10 entries)."""
    step = regime_after.start_step
    last = int(before["step"][-1])
    first = int(after["step"][0])
    tail = before.filter(pl.col("step") > last - config.k)
    head = after.filter(pl.col("step") < first + config.k)
    lb, la = mean_loss(tail), mean_loss(head)
    ab, aa = mean_acc(tail), mean_acc(head)
    ratio = la / lb if lb is not None and la is not None and lb != 0 else None
    delta = aa - ab if aa is not None and ab is not None else None
    wb, wa = weighted_loss(tail), weighted_loss(head)
    per_token = wa / wb if wb and wa is not None else None
    factors = normalisation_factors(
        regime_before.config,
        regime_after.config,
        regime_before.tokens_per_step,
        regime_after.tokens_per_step,
    )
    headerless = next((r.name for r in (regime_before, regime_after) if r.config is None), None)
    text, matched = explain_boundary(
        step, ratio, delta, factors, config, headerless, _no_acc_signal(ab, aa)
    )
    return Boundary(
        step=step,
        loss_ratio=ratio,
        acc_delta=delta,
        explanation=text,
        matched=matched,
        loss_before=lb,
        loss_after=la,
        acc_before=ab,
        acc_after=aa,
        n_before=tail.height,
        n_after=head.height,
        per_token_loss_ratio=per_token,
    )

"""From training metrics to acceptance length (tau), ranked by evidence (docs/diagnostics.md,
"Acceptance"; docs/design.md, "Metrics").

Estimators, strongest first; the report's primary estimate is the strongest the log supports:

* ``measured`` tau of the latest ``eval`` record: real speculative decoding on held-out prompts.
* ``walk``     sum ``walk_tokens`` / sum ``walk_steps`` over a window: the trainer walks its own
  teacher-forced predictions the way decoding does (start at the first response token, step by
  1 + accepted prefix), so it is the decoding tau on training data. A ratio of sums, with its
  standard error over the window's walked records. It leads only on adequate evidence: at least
  ``defaults.WALK_MIN_RECORDS`` walked records and a relative standard error of at most
  ``defaults.WALK_MAX_REL_SE`` (:func:`walk_held_back`); otherwise it is listed, with the reason,
  and the next estimator leads.
* ``harmonic`` 1 / sum_{k=0}^{B-1} (A_k - A_{k+1}) / (k+1), with A_0 = 1, A_k = ``accept_pos[k-1]``
  (the share of uniformly drawn anchors whose correct prefix is at least k), A_B = 0. Uniform
  anchors see a decoding step of length s with probability proportional to s (size bias); the
  harmonic mean undoes it, exactly when the accepted length is the same from every anchor inside
  a decoding step. When correct runs are correlated (an anchor inside a long run sees only its
  remainder), anchors see shorter steps than decoding takes, and it reads low.
* ``chain``    1 + sum_k prod_{j<=k} acc_pos[j]: treats block positions as independent.
* ``linear``   1 + (B-1) * acc: the original analysis' rough formula.

``prefix`` (``tau_train``, or 1 + sum_k accept_pos[k]) is the mean correct prefix over uniformly
drawn anchors: size-biased, an upper view. It stays in the report, labelled so, and is never the
primary estimate.

Targets keep their own units: an accuracy target is compared
with the accuracy, a tau target with the primary estimate, and neither is converted through
another estimator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.estimators import (
    BY_NAME,
    ESTIMATOR_LABELS,
    ESTIMATOR_ORDER,
    LINEAR,
    Evidence,
    TauEstimate,
    Walk,
    chain_tau,
    estimates_of,
    harmonic_tau,
    leading,
    linear_tau,
    mean_positions,
    measurements,
    prefix_tau,
    walk_held_back,
    walk_in_sample,
)
from dflash_diag.read.records import LogEvent

# The estimators' table, formulas and records live in ``estimators``; the acceptance's public API
# has always offered these names too.
__all__ = [
    "ESTIMATOR_LABELS",
    "ESTIMATOR_ORDER",
    "MISMATCH_RATIO",
    "Acceptance",
    "AcceptanceConfig",
    "Calibration",
    "Target",
    "TauEstimate",
    "Walk",
    "block_size_for",
    "calibration_at",
    "chain_tau",
    "estimate_acceptance",
    "harmonic_tau",
    "latest_measurement",
    "linear_tau",
    "mean_positions",
    "measured_pick",
    "measurements",
    "mismatch_warnings",
    "prefix_tau",
    "progress_to",
    "target_of",
    "walk_held_back",
    "walk_in_sample",
    "with_errors",
]

#: A measured tau gaining less than this fraction of the tokens that the walked (else harmonic)
#: estimate promises is the tell-tale of a train/serve mismatch (docs/design.md, Pitfalls).
MISMATCH_RATIO = 0.5


def progress_to(tau: float, target_tau: float) -> float:
    """(tau - 1) / (target_tau - 1): the share of the extra tokens per verify step gained."""
    return (tau - 1.0) / (target_tau - 1.0)


@dataclass(frozen=True)
class Calibration:
    """How far the strongest training-data estimate was from the measured tau at the last eval.

    Attributes:
        estimator: the estimate compared: the one that would have been primary at the eval's
            step without the eval (the same rule as the primary estimate's).
        step: the eval's step.
        estimate: that estimator's value over the window holding the eval's step.
        measured: the eval's tau.
        ratio: ``measured / estimate``: how far to trust the estimate between evals.
    """

    estimator: str
    step: int
    estimate: float
    measured: float

    @property
    def ratio(self) -> float:
        """measured / estimate."""
        return self.measured / self.estimate


@dataclass(frozen=True)
class AcceptanceConfig:
    """Targets, baseline and block size.

    Attributes:
        block_size: B, tokens per drafted block (None: the header's, else 16).
        target_acc: target accuracy (the target when ``target_tau`` is None).
        target_tau: target acceptance length (replaces the accuracy target).
        baseline_tau: the reference drafter's tau (None: the original analysis' 3.1).
    """

    block_size: int | None = None
    target_acc: float = defaults.TARGET_ACC
    target_tau: float | None = None
    baseline_tau: float | None = None

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size < 2:
            raise ValueError(f"block size must be >= 2, got {self.block_size}")
        if not (0 < self.target_acc <= 1):
            raise ValueError(f"target accuracy must be in (0, 1], got {self.target_acc}")
        if self.target_tau is not None and not (
            self.target_tau > 1 and math.isfinite(self.target_tau)
        ):
            raise ValueError(f"target tau must be > 1, got {self.target_tau}")
        if self.baseline_tau is not None and not (
            self.baseline_tau >= 1 and math.isfinite(self.baseline_tau)
        ):
            raise ValueError(f"baseline tau must be >= 1, got {self.baseline_tau}")

    @property
    def baseline(self) -> tuple[float, str]:
        """The baseline tau and where it comes from."""
        if self.baseline_tau is None:
            return defaults.BASELINE_TAU, defaults.BASELINE_SOURCE
        return self.baseline_tau, "--baseline-tau"


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """The acceptance section of a diagnosis.

    Attributes:
        acc: the current accuracy: the mean of the last window (None without accuracy).
        acc_basis: where ``acc`` comes from (e.g. "mean of the last window, steps 401-410").
        block_size: B used.
        block_size_source: "--block-size", "header" or "default".
        estimates: every estimate the log supports, strongest first, ``prefix`` last.
        estimator: the primary estimate's name (None without any): never ``prefix``.
        tau: its value.
        target_kind: "acc" (``--target-acc``, the default) or "tau" (``--target-tau``).
        target_acc: the accuracy target; with a tau target only under the linear estimator
            (its inverse), else None.
        target_tau: the tau target; with an accuracy target only under the linear estimator
            (1 + (B-1) * target_acc), else None: a target never crosses scales otherwise.
        progress: in the target's own units: ``acc / target_acc``, or
            ``(tau - 1) / (target_tau - 1)`` of the primary estimate.
        baseline_tau: the reference tau; ``baseline_source`` says where it comes from.
        vs_baseline: ``tau - baseline_tau``.
        measured_step: the step of the eval record used, when one is.
        measured_age: steps from that eval to the last analysed step.
        calibration: measured / estimate at the last eval, when both exist.
        warnings: train/serve mismatch and similar alarms.
    """

    acc: float | None
    acc_basis: str
    block_size: int
    block_size_source: str
    estimates: list[TauEstimate]
    estimator: str | None
    tau: float | None
    target_kind: str
    target_acc: float | None
    target_tau: float | None
    progress: float | None
    baseline_tau: float
    baseline_source: str
    vs_baseline: float | None
    measured_step: int | None = None
    measured_age: int | None = None
    calibration: Calibration | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def primary(self) -> TauEstimate | None:
        """The primary estimate."""
        return next((e for e in self.estimates if e.name == self.estimator), None)


def latest_measurement(evals: Sequence[LogEvent], up_to_step: int | None) -> LogEvent | None:
    """The eval record with the largest step (at most ``up_to_step``) and a finite tau."""
    found = measurements(evals, up_to_step)  # in step order
    return found[-1] if found else None


def block_size_for(config: AcceptanceConfig, header_block_size: float | None) -> tuple[int, str]:
    """B and where it comes from: ``--block-size``, else the header's, else the default."""
    if config.block_size is not None:
        return config.block_size, "--block-size"
    if header_block_size:
        return int(header_block_size), "header"
    return defaults.BLOCK_SIZE, "default"


# -- the jobs of estimate_acceptance, one function each -------------------------------------------


def measured_pick(
    evals: Sequence[LogEvent], up_to_step: int | None
) -> tuple[LogEvent | None, int | None]:
    """The eval record the measured tau comes from (the latest with a finite tau, at most
    ``up_to_step``) and its age in steps to ``up_to_step`` (None without either)."""
    measured = latest_measurement(evals, up_to_step)
    if measured is None or measured.step is None or up_to_step is None:
        return measured, None
    return measured, max(0, up_to_step - measured.step)


def with_errors(estimates: Sequence[TauEstimate], measured_tau: float) -> list[TauEstimate]:
    """The estimates, each but the measured one (the first) with ``tau - measured_tau``."""
    return [estimates[0]] + [replace(e, error=e.tau - measured_tau) for e in estimates[1:]]


def mismatch_warnings(estimates: Sequence[TauEstimate], measured_tau: float) -> list[str]:
    """The train/serve mismatch alarm, when the measured tau gains less than
    :data:`MISMATCH_RATIO` of the extra tokens the strongest promising estimate implies.

    Compared with the walked tau (the same predictions walked as decoding walks them), else the
    harmonic one: the estimators that undo the size bias of uniform anchors (``promises`` in the
    table). Not with prefix or linear, which read well above the measured tau in healthy runs
    (docs/design.md, "Metrics"). A walk held back as too noisy to lead is too noisy to raise an
    alarm too.
    """
    promised = next(
        (e for e in estimates if e.can_lead and BY_NAME[e.name].promises),
        None,
    )
    if (
        promised is None
        or promised.tau <= 1
        or (measured_tau - 1) >= MISMATCH_RATIO * (promised.tau - 1)
    ):
        return []
    warning = (
        f"train/serve mismatch? training predictions walked as decoding imply tau "
        f"{promised.tau:.2f} ({promised.name}) but the measured tau is {measured_tau:.2f}: "
        "check label shift and context visibility (anchor must not see itself)"
    )
    return [warning]


def calibration_at(
    measured: LogEvent, estimates_at: Callable[[int], list[TauEstimate]] | None
) -> Calibration | None:
    """measured / estimate at the eval ``measured``, for the estimator that would have been
    primary at the eval's step (the same rule as the primary estimate's); None without
    ``estimates_at`` or an estimate there."""
    if estimates_at is None or measured.step is None:
        return None
    at_eval = leading(estimates_at(measured.step))
    if at_eval is None or not at_eval.tau > 0:
        return None
    return Calibration(at_eval.name, measured.step, at_eval.tau, float(measured.fields["tau"]))


@dataclass(frozen=True)
class Target:
    """The target in its own units and the progress toward it (see :class:`Acceptance`)."""

    kind: str
    target_acc: float | None
    target_tau: float | None
    progress: float | None


def target_of(
    config: AcceptanceConfig, acc: float | None, primary: TauEstimate | None, block_size: int
) -> Target:
    """The target and the progress toward it: a tau target against the primary estimate, an
    accuracy target against the accuracy; converted to the other scale only under the linear
    estimator, where the two are one scale."""
    tau = primary.tau if primary else None
    linear = primary is not None and primary.name == LINEAR
    if config.target_tau is not None:
        target_tau = config.target_tau
        return Target(
            "tau",
            (target_tau - 1.0) / (block_size - 1) if linear else None,
            target_tau,
            progress_to(tau, target_tau) if tau is not None else None,
        )
    target_acc = config.target_acc
    return Target(
        "acc",
        target_acc,
        linear_tau(target_acc, block_size) if linear else None,
        acc / target_acc if acc is not None else None,
    )


def estimate_acceptance(
    acc: float | None,
    acc_basis: str,
    last_rows: pl.DataFrame,
    evals: Sequence[LogEvent],
    config: AcceptanceConfig,
    *,
    header_block_size: float | None = None,
    tau_train: float | None = None,
    up_to_step: int | None = None,
    walk: Walk | None = None,
    estimates_at: Callable[[int], list[TauEstimate]] | None = None,
) -> Acceptance:
    """Every estimate the data supports, the primary one chosen, the target and warnings.

    Args:
        acc: current accuracy (the last window's mean).
        acc_basis: words saying where ``acc`` comes from.
        last_rows: the last window's records (for ``acc_pos``/``accept_pos`` means).
        evals: eval records of the log.
        config: block size, target and baseline.
        header_block_size: ``block_size`` from the ``run_start`` header.
        tau_train: the last window's mean ``tau_train``.
        up_to_step: ignore eval records after this step; the measured tau's age counts to it.
        walk: the latest walked tau (it leads only on adequate evidence, never in-sample).
        estimates_at: ``step -> training estimates over the window holding step``, for the
            measured/estimate ratio at the last eval (None: not reported).
    """
    block_size, block_source = block_size_for(config, header_block_size)
    measured, age = measured_pick(evals, up_to_step)
    evidence = Evidence(
        last_rows, block_size, acc=acc, tau_train=tau_train, walk=walk, measured=measured
    )
    estimates = estimates_of(evidence)
    warnings: list[str] = []
    calibration = None
    if measured is not None:
        measured_tau = float(measured.fields["tau"])
        estimates = with_errors(estimates, measured_tau)
        warnings = mismatch_warnings(estimates, measured_tau)
        calibration = calibration_at(measured, estimates_at)
    primary = leading(estimates)
    target = target_of(config, acc, primary, block_size)
    baseline, baseline_source = config.baseline
    return Acceptance(
        acc=acc,
        acc_basis=acc_basis,
        block_size=block_size,
        block_size_source=block_source,
        estimates=estimates,
        estimator=primary.name if primary else None,
        tau=primary.tau if primary else None,
        target_kind=target.kind,
        target_acc=target.target_acc,
        target_tau=target.target_tau,
        progress=target.progress,
        baseline_tau=baseline,
        baseline_source=baseline_source,
        vs_baseline=primary.tau - baseline if primary else None,
        measured_step=measured.step if measured is not None else None,
        measured_age=age,
        calibration=calibration,
        warnings=warnings,
    )

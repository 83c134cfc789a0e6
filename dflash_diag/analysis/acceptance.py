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
from dflash_diag.analysis.numbers import plural
from dflash_diag.read.records import LogEvent

MEASURED, WALK, HARMONIC, CHAIN, LINEAR, PREFIX = (
    "measured",
    "walk",
    "harmonic",
    "chain",
    "linear",
    "prefix",
)
#: The estimators that can be the primary estimate, strongest evidence first.
ESTIMATOR_ORDER = (MEASURED, WALK, HARMONIC, CHAIN, LINEAR)
#: What each estimator is, in a few words, for the report.
ESTIMATOR_LABELS = {
    MEASURED: "measured by speculative decoding",
    WALK: "training predictions walked as decoding",
    HARMONIC: "harmonic, from accept_pos",
    CHAIN: "independent positions, from acc_pos",
    LINEAR: "1 + (B-1) * acc",
    PREFIX: "tau_train: size-biased upper view, never primary",
}

#: A measured tau gaining less than this fraction of the tokens that the walked (else harmonic)
#: estimate promises is the tell-tale of a train/serve mismatch (docs/design.md, Pitfalls).
MISMATCH_RATIO = 0.5


def linear_tau(acc: float, block_size: int) -> float:
    """1 + (B-1) * acc."""
    return 1.0 + (block_size - 1) * acc


def chain_tau(acc_pos: Sequence[float]) -> float:
    """1 + sum_k prod_{j<=k} acc_pos[j] (positions treated as independent)."""
    total, running = 1.0, 1.0
    for p in acc_pos:
        running *= p
        total += running
    return total


def prefix_tau(accept_pos: Sequence[float]) -> float:
    """1 + sum_k accept_pos[k]: mean over uniformly drawn anchors of 1 + the correct prefix."""
    return 1.0 + sum(accept_pos)


def harmonic_tau(accept_pos: Sequence[float], block_size: int) -> float | None:
    """1 / sum_{k=0}^{B-1} (A_k - A_{k+1}) / (k+1), A_0 = 1, A_k = accept_pos[k-1], A_B = 0.

    ``A_k - A_{k+1}`` is the share of anchors whose step advances k + 1 tokens; decoding visits
    such a step once per k + 1 anchors, so the harmonic mean of the step lengths over anchors is
    the mean step length of decoding (exact when the accepted length is constant within a step).
    Positions beyond the list, or beyond B - 1, count as never accepted. None when the sum is not
    positive (a list that is not a survival curve).
    """
    survival = [1.0, *(float(a) for a in list(accept_pos)[: block_size - 1])]
    survival += [0.0] * (block_size + 1 - len(survival))  # ... A_{B-1}, and A_B = 0
    total = sum((survival[k] - survival[k + 1]) / (k + 1) for k in range(block_size))
    return 1.0 / total if total > 0 and math.isfinite(total) else None


def progress_to(tau: float, target_tau: float) -> float:
    """(tau - 1) / (target_tau - 1): the share of the extra tokens per verify step gained."""
    return (tau - 1.0) / (target_tau - 1.0)


@dataclass(frozen=True)
class TauEstimate:
    """One acceptance-length estimate.

    Attributes:
        name: one of :data:`ESTIMATOR_ORDER` or :data:`PREFIX` (the upper view).
        tau: the estimate.
        basis: what it was computed from, for the report (with the reason when ``held_back``).
        error: ``tau - measured tau`` when a measured tau exists (None for the measured one).
        se: the estimate's standard error where known (the walk's), else None.
        held_back: why the estimate may not lead although its rank would let it (a short
            phrase: the walk on too little or too noisy evidence); None when it may.
    """

    name: str
    tau: float
    basis: str
    error: float | None = None
    se: float | None = None
    held_back: str | None = None

    @property
    def upper_view(self) -> bool:
        """The size-biased ``prefix`` view: listed, never the primary estimate."""
        return self.name == PREFIX

    @property
    def can_lead(self) -> bool:
        """Ranked (not ``prefix``) and not held back: may be the primary estimate."""
        return self.name in ESTIMATOR_ORDER and self.held_back is None


def walk_held_back(
    tau: float,
    se: float | None,
    n_records: int,
    min_records: int = defaults.WALK_MIN_RECORDS,
    max_rel_se: float = defaults.WALK_MAX_REL_SE,
) -> str | None:
    """Why a walked tau may not lead the estimates, or None when its evidence is adequate.

    Each walked record walks only a few training sequences, and on looping data a sequence is
    accepted nearly all or nothing, so per-record walked tau can spread over several tokens: the
    ratio of a few records is then no better evidence than the harmonic estimate from every
    record's ``accept_pos``. The walk leads with at least ``min_records`` records and a relative
    standard error ``se / tau`` of at most ``max_rel_se``.
    """
    if n_records < min_records:
        return f"walk too thin to lead: {plural(n_records, 'record')}, {min_records} needed"
    if se is None or not math.isfinite(se) or tau <= 0:
        return "walk too noisy to lead: no standard error"
    rel = se / tau
    if rel > max_rel_se:
        return (
            f"walk too noisy to lead: ±{rel:.0%} over {plural(n_records, 'record')} "
            f"(limit ±{max_rel_se:.0%}; more walk_seqs would help)"
        )
    return None


def walk_in_sample(held_out_named: bool, epoch: float | None) -> str | None:
    """Why a walk may not lead because it walked sequences the drafter has trained on, or None.

    A log whose ``run_start`` header names no held-out split (``walk_held_out``: logs written
    before the trainer held one out) walked the step's own training batch: out of sample in the
    first epoch, but from epoch 1 on the drafter has trained on those sequences and the walk
    drifts high as it memorises them. ``epoch``: the latest epoch of the window's walked records.
    """
    if held_out_named or epoch is None or not math.isfinite(epoch) or epoch < 1:
        return None
    return (
        f"walk in-sample, unfit to lead: it walks training sequences (no held-out split "
        f"in the header), trained on since epoch 1; epoch {epoch:.1f} here"
    )


def leading(estimates: Sequence[TauEstimate]) -> TauEstimate | None:
    """The primary estimate: the strongest that may lead; when every ranked one is held back,
    the strongest ranked one (a noisy walk is still better than no estimate)."""
    ranked = [e for e in estimates if e.name in ESTIMATOR_ORDER]
    return next((e for e in ranked if e.can_lead), ranked[0] if ranked else None)


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


def _weight(rows: pl.DataFrame) -> pl.Expr:
    if (
        "n_blocks" in rows.columns
        and rows["n_blocks"].is_not_null().all()
        and bool((rows["n_blocks"] > 0).all())
    ):
        return pl.col("n_blocks").cast(pl.Float64)
    return pl.lit(1.0)


def mean_positions(
    rows: pl.DataFrame, column: str, positions: int | None = None
) -> list[float] | None:
    """Per-position mean of a list column, weighted by ``n_blocks`` where every row has it;
    the first ``positions`` only (None: all)."""
    if column not in rows.columns or rows.height == 0:
        return None
    by_window = position_means_by_group(
        rows.with_columns(pl.lit(0).alias("_g")), column, "_g", positions
    )
    return by_window.get(0)


def position_means_by_group(
    rows: pl.DataFrame, column: str, group: str, positions: int | None = None
) -> dict[int, list[float]]:
    """Per-position means of a list column for each value of ``group`` (one polars query),
    weighted by ``n_blocks`` where every row has it; NaN/Inf elements are left out.

    ``positions``: the first so many positions only (a block of B tokens drafts B - 1: a
    longer list's tail is no position and must not change tau; None: all).
    """
    if column not in rows.columns or rows.height == 0:
        return {}
    values = pl.col(column) if positions is None else pl.col(column).list.head(positions)
    exploded = (
        rows.select(pl.col(group), values, _weight(rows).alias("_w"))
        .filter(pl.col(column).is_not_null() & (pl.col(column).list.len() > 0))
        .with_columns(pl.int_ranges(pl.col(column).list.len()).alias("_pos"))
        .explode([column, "_pos"])
        .filter(pl.col(column).is_finite())
    )
    if exploded.height == 0:
        return {}
    means = (
        exploded.group_by(group, "_pos")
        .agg(((pl.col(column) * pl.col("_w")).sum() / pl.col("_w").sum()).alias("_mean"))
        .sort(group, "_pos")
    )
    out: dict[int, list[float]] = {}
    for g, value in zip(means[group].to_list(), means["_mean"].to_list()):
        out.setdefault(int(g), []).append(float(value))
    return out


def latest_measurement(evals: Sequence[LogEvent], up_to_step: int | None) -> LogEvent | None:
    """The eval record with the largest step (at most ``up_to_step``) and a finite tau."""
    best = None
    for event in measurements(evals, up_to_step):
        if best is None or event.step >= best.step:
            best = event
    return best


def measurements(
    evals: Sequence[LogEvent], up_to_step: int | None = None, from_step: int | None = None
) -> list[LogEvent]:
    """The eval records with a step and a finite tau, within the bounds, in step order (for a
    step evaluated twice the later record wins)."""
    by_step: dict[int, LogEvent] = {}
    for event in evals:
        tau = event.fields.get("tau")
        if (
            isinstance(tau, bool)
            or not isinstance(tau, (int, float))
            or not math.isfinite(tau)
            or event.step is None
        ):
            continue
        if up_to_step is not None and event.step > up_to_step:
            continue
        if from_step is not None and event.step < from_step:
            continue
        by_step[event.step] = event
    return [by_step[s] for s in sorted(by_step)]


def block_size_for(config: AcceptanceConfig, header_block_size: float | None) -> tuple[int, str]:
    """B and where it comes from: ``--block-size``, else the header's, else the default."""
    if config.block_size is not None:
        return config.block_size, "--block-size"
    if header_block_size:
        return int(header_block_size), "header"
    return defaults.BLOCK_SIZE, "default"


def training_estimates(
    *,
    acc: float | None,
    rows: pl.DataFrame,
    block_size: int,
    tau_walk: float | None = None,
    walk_basis: str = "walk_tokens / walk_steps",
    tau_train: float | None = None,
    where: str = "last window",
    tau_walk_se: float | None = None,
    walk_n: int | None = None,
    in_sample: str | None = None,
) -> list[TauEstimate]:
    """The estimates from training metrics (not ``measured``), strongest first, ``prefix`` last.

    Args:
        acc: the window's accuracy.
        rows: the window's records, with ``acc_pos``/``accept_pos`` where logged.
        block_size: B.
        tau_walk: the window's walked tau.
        walk_basis: words for the walked tau's basis.
        tau_train: the window's mean ``tau_train`` (preferred over ``accept_pos`` for prefix).
        where: words naming the window, for the bases.
        tau_walk_se: the walked tau's standard error.
        walk_n: the walked records behind ``tau_walk`` (None: unknown, and the walk leads as
            before: a caller that does not count records does not judge them).
        in_sample: why the walk read training sequences (:func:`walk_in_sample`): it is then
            listed, never leading.
    """
    out: list[TauEstimate] = []
    if tau_walk is not None and math.isfinite(tau_walk):
        held = walk_held_back(tau_walk, tau_walk_se, walk_n) if walk_n is not None else None
        held = in_sample or held
        basis = walk_basis
        if held is not None:
            basis += f"; {held}"  # the phrase names the record count
        elif walk_n is not None:
            basis += f", {plural(walk_n, 'record')}"
        out.append(TauEstimate(WALK, tau_walk, basis, se=tau_walk_se, held_back=held))
    accept = mean_positions(rows, "accept_pos", block_size - 1)
    harmonic = harmonic_tau(accept, block_size) if accept else None
    if harmonic is not None:
        out.append(TauEstimate(HARMONIC, harmonic, f"accept_pos, {where}"))
    acc_pos = mean_positions(rows, "acc_pos", block_size - 1)
    if acc_pos:
        out.append(TauEstimate(CHAIN, chain_tau(acc_pos), f"acc_pos, {where}"))
    if acc is not None and math.isfinite(acc):
        out.append(TauEstimate(LINEAR, linear_tau(acc, block_size), f"1 + {block_size - 1} * acc"))
    if tau_train is not None and math.isfinite(tau_train):
        out.append(TauEstimate(PREFIX, tau_train, f"tau_train, {where}: size-biased upper view"))
    elif accept:
        out.append(
            TauEstimate(
                PREFIX, prefix_tau(accept), f"1 + sum accept_pos, {where}: size-biased upper view"
            )
        )
    return out


def estimate_acceptance(
    acc: float | None,
    acc_basis: str,
    last_rows: pl.DataFrame,
    evals: Sequence[LogEvent],
    config: AcceptanceConfig,
    *,
    header_block_size: int | None = None,
    tau_train: float | None = None,
    up_to_step: int | None = None,
    tau_walk: float | None = None,
    walk_basis: str = "walk_tokens / walk_steps, last window",
    tau_walk_se: float | None = None,
    walk_n: int | None = None,
    estimates_at: Callable[[int], list[TauEstimate]] | None = None,
    walk_in_sample: str | None = None,
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
        tau_walk: the walked tau of the latest window that has one.
        walk_basis: where ``tau_walk`` comes from.
        tau_walk_se: its standard error.
        walk_n: the walked records behind it (the walk leads only on adequate evidence).
        estimates_at: ``step -> training estimates over the window holding step``, for the
            measured/estimate ratio at the last eval (None: not reported).
        walk_in_sample: why the walk read training sequences (it then never leads).
    """
    block_size, block_source = block_size_for(config, header_block_size)
    estimates: list[TauEstimate] = []
    measured = latest_measurement(evals, up_to_step)
    age = None
    if measured is not None:
        n_prompts = measured.fields.get("n_prompts")
        basis = f"eval at step {measured.step}"
        if isinstance(n_prompts, (int, float)) and not isinstance(n_prompts, bool):
            basis += f", {int(n_prompts)} prompts"
        if up_to_step is not None:
            age = max(0, up_to_step - measured.step)
        estimates.append(TauEstimate(MEASURED, float(measured.fields["tau"]), basis))
    estimates += training_estimates(
        acc=acc,
        rows=last_rows,
        block_size=block_size,
        tau_walk=tau_walk,
        walk_basis=walk_basis,
        tau_train=tau_train,
        tau_walk_se=tau_walk_se,
        walk_n=walk_n,
        in_sample=walk_in_sample,
    )

    warnings: list[str] = []
    calibration = None
    if measured is not None:
        measured_tau = estimates[0].tau
        estimates = [estimates[0]] + [replace(e, error=e.tau - measured_tau) for e in estimates[1:]]
        # Compare with the walked tau (the same predictions walked as decoding walks them), else
        # the harmonic one: both undo the size bias of uniform anchors. Not with prefix or linear,
        # which read well above the measured tau in healthy runs (docs/design.md, "Metrics"). A
        # walk held back as too noisy to lead is too noisy to raise an alarm too.
        promised = next((e for e in estimates if e.name in (WALK, HARMONIC) and e.can_lead), None)
        if (
            promised is not None
            and promised.tau > 1
            and (measured_tau - 1) < MISMATCH_RATIO * (promised.tau - 1)
        ):
            warnings.append(
                f"train/serve mismatch? training predictions walked as decoding imply tau "
                f"{promised.tau:.2f} ({promised.name}) but the measured tau is {measured_tau:.2f}: "
                "check label shift and context visibility (anchor must not see itself)"
            )
        if estimates_at is not None:
            # The estimator that would have been primary at the eval's step, by the same rule.
            at_eval = leading(estimates_at(measured.step))
            if at_eval is not None and at_eval.tau > 0:
                calibration = Calibration(at_eval.name, measured.step, at_eval.tau, measured_tau)
    primary = leading(estimates)
    tau = primary.tau if primary else None
    estimator = primary.name if primary else None
    baseline, baseline_source = config.baseline
    if config.target_tau is not None:
        kind = "tau"
        target_tau = config.target_tau
        target_acc = (target_tau - 1.0) / (block_size - 1) if estimator == LINEAR else None
        progress = progress_to(tau, target_tau) if tau is not None else None
    else:
        kind = "acc"
        target_acc = config.target_acc
        target_tau = linear_tau(target_acc, block_size) if estimator == LINEAR else None
        progress = acc / target_acc if acc is not None else None
    return Acceptance(
        acc=acc,
        acc_basis=acc_basis,
        block_size=block_size,
        block_size_source=block_source,
        estimates=estimates,
        estimator=estimator,
        tau=tau,
        target_kind=kind,
        target_acc=target_acc,
        target_tau=target_tau,
        progress=progress,
        baseline_tau=baseline,
        baseline_source=baseline_source,
        vs_baseline=tau - baseline if tau is not None else None,
        measured_step=measured.step if measured is not None else None,
        measured_age=age,
        calibration=calibration,
        warnings=warnings,
    )

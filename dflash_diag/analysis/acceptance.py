"""From accuracy to acceptance length (tau), and progress toward a target (docs/design.md, Metrics).

Estimators, weakest to strongest; the report uses the strongest the log supports and names it:

* ``linear``   1 + (B-1) * acc: the original analysis' rough formula; marginal accuracy is not
  prefix acceptance, so it can be far off.
* ``chain``    1 + sum_k prod_{j<=k} acc_pos[j]: treats block positions as independent.
* ``prefix``   tau_train (or 1 + sum_k accept_pos[k]): the mean correct prefix over uniformly
  drawn anchors; size-biased (a long correct run counts once per token of it), so it reads high.
* ``measured`` tau of the latest ``eval`` record: real speculative decoding on held-out prompts.

Target: ``--target-tau``, or ``--target-acc`` mapped through the linear formula
(target_tau = 1 + (B-1) * target_acc; 0.27 gives 5.05 at B = 16). Progress is
(tau - 1) / (target_tau - 1): the fraction of the extra tokens per verify step still to gain, which
under the linear estimator is exactly acc / target_acc.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from dflash_diag.read.jsonl import LogEvent

LINEAR, CHAIN, PREFIX, MEASURED = "linear", "chain", "prefix", "measured"
#: Strongest first.
ESTIMATOR_ORDER = (MEASURED, PREFIX, CHAIN, LINEAR)

#: A measured tau gaining less than this fraction of the tokens that training metrics promise
#: is the tell-tale of a train/serve mismatch (docs/design.md, Pitfalls).
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
    """1 + sum_k accept_pos[k]: mean over blocks of 1 + the correct prefix length."""
    return 1.0 + sum(accept_pos)


def target_tau_for(target_acc: float, block_size: int) -> float:
    """The target acceptance length a target accuracy stands for (linear mapping)."""
    return linear_tau(target_acc, block_size)


def progress_to(tau: float, target_tau: float) -> float:
    """(tau - 1) / (target_tau - 1)."""
    return (tau - 1.0) / (target_tau - 1.0)


@dataclass(frozen=True)
class TauEstimate:
    """One acceptance-length estimate.

    Attributes:
        name: "linear", "chain", "prefix" or "measured".
        tau: the estimate.
        basis: what it was computed from, for the report.
        error: ``tau - measured tau`` when a measured tau exists (None for the measured one).
    """

    name: str
    tau: float
    basis: str
    error: float | None = None


@dataclass(frozen=True)
class AcceptanceConfig:
    """Targets and block size.

    Attributes:
        block_size: B, tokens per drafted block (header's ``block_size`` wins when None).
        target_acc: target accuracy (used when ``target_tau`` is None).
        target_tau: target acceptance length.
        baseline_tau: the reference drafter's tau to compare with (3.1 in the original analysis).
    """

    block_size: int | None = None
    target_acc: float = 0.27
    target_tau: float | None = None
    baseline_tau: float = 3.1

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size < 2:
            raise ValueError(f"block size must be >= 2, got {self.block_size}")
        if not (0 < self.target_acc <= 1):
            raise ValueError(f"target accuracy must be in (0, 1], got {self.target_acc}")
        if self.target_tau is not None and not (self.target_tau > 1 and math.isfinite(self.target_tau)):
            raise ValueError(f"target tau must be > 1, got {self.target_tau}")
        if not (self.baseline_tau >= 1 and math.isfinite(self.baseline_tau)):
            raise ValueError(f"baseline tau must be >= 1, got {self.baseline_tau}")


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """The acceptance section of the report.

    Attributes:
        acc: the current accuracy: the mean of the last window (None without accuracy).
        acc_basis: where ``acc`` comes from (e.g. "mean of window 15300-15349").
        block_size: B used.
        block_size_source: "--block-size", "header" or "default".
        estimates: every estimate the log supports, strongest first.
        estimator: the name of the strongest (None without any).
        tau: its value.
        target_acc: the target accuracy (from ``--target-tau`` via the linear inverse if given).
        target_tau: the target acceptance length.
        progress: ``(tau - 1) / (target_tau - 1)``.
        baseline_tau: the reference tau.
        vs_baseline: ``tau - baseline_tau``.
        measured_step: the step of the eval record used, when one is.
        warnings: train/serve mismatch and similar alarms.
    """

    acc: float | None
    acc_basis: str
    block_size: int
    block_size_source: str
    estimates: list[TauEstimate]
    estimator: str | None
    tau: float | None
    target_acc: float
    target_tau: float
    progress: float | None
    baseline_tau: float
    vs_baseline: float | None
    measured_step: int | None = None
    warnings: list[str] = field(default_factory=list)


def mean_positions(rows: pl.DataFrame, column: str) -> list[float] | None:
    """Per-position mean of a list column, weighted by ``n_blocks`` where every row has it."""
    if column not in rows.columns or rows.height == 0:
        return None
    weight = (
        pl.col("n_blocks") if "n_blocks" in rows.columns
        and rows["n_blocks"].is_not_null().all() and bool((rows["n_blocks"] > 0).all())
        else pl.lit(1.0)
    )
    exploded = (
        rows.select(pl.col(column), weight.alias("_w"))
        .filter(pl.col(column).is_not_null() & (pl.col(column).list.len() > 0))
        .with_columns(pl.int_ranges(pl.col(column).list.len()).alias("_pos"))
        .explode([column, "_pos"])
        .filter(pl.col(column).is_finite())
    )
    if exploded.height == 0:
        return None
    means = (
        exploded.group_by("_pos")
        .agg(((pl.col(column) * pl.col("_w")).sum() / pl.col("_w").sum()).alias("_mean"))
        .sort("_pos")
    )
    return [float(v) for v in means["_mean"]]


def latest_measurement(evals: Sequence[LogEvent], up_to_step: int | None) -> LogEvent | None:
    """The eval record with the largest step (at most ``up_to_step``) and a finite tau."""
    best = None
    for event in evals:
        tau = event.fields.get("tau")
        if not isinstance(tau, (int, float)) or not math.isfinite(tau) or event.step is None:
            continue
        if up_to_step is not None and event.step > up_to_step:
            continue
        if best is None or event.step >= best.step:
            best = event
    return best


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
) -> Acceptance:
    """Every estimate the data supports, the strongest chosen, progress and warnings.

    Args:
        acc: current accuracy (the last window's mean).
        acc_basis: words saying where ``acc`` comes from.
        last_rows: the last window's records (for ``acc_pos``/``accept_pos`` means).
        evals: eval records of the log.
        config: block size and targets.
        header_block_size: ``block_size`` from the ``run_start`` header.
        tau_train: the last window's mean ``tau_train`` (preferred over ``accept_pos``).
        up_to_step: ignore eval records after this step.
    """
    if config.block_size is not None:
        block_size, block_source = config.block_size, "--block-size"
    elif header_block_size:
        block_size, block_source = int(header_block_size), "header"
    else:
        block_size, block_source = 16, "default"
    if config.target_tau is not None:
        target_tau = config.target_tau
        target_acc = (target_tau - 1.0) / (block_size - 1)
    else:
        target_acc = config.target_acc
        target_tau = target_tau_for(target_acc, block_size)

    estimates: list[TauEstimate] = []
    measured = latest_measurement(evals, up_to_step)
    if measured is not None:
        n_prompts = measured.fields.get("n_prompts")
        basis = f"eval at step {measured.step}"
        if isinstance(n_prompts, (int, float)):
            basis += f", {int(n_prompts)} prompts"
        estimates.append(TauEstimate(MEASURED, float(measured.fields["tau"]), basis))
    if tau_train is not None and math.isfinite(tau_train):
        estimates.append(TauEstimate(PREFIX, tau_train, "tau_train, last window"))
    else:
        accept = mean_positions(last_rows, "accept_pos")
        if accept:
            estimates.append(TauEstimate(PREFIX, prefix_tau(accept), "accept_pos, last window"))
    acc_pos = mean_positions(last_rows, "acc_pos")
    if acc_pos:
        estimates.append(TauEstimate(CHAIN, chain_tau(acc_pos), "acc_pos, last window"))
    if acc is not None:
        estimates.append(TauEstimate(LINEAR, linear_tau(acc, block_size), f"1 + {block_size - 1} * acc"))

    warnings: list[str] = []
    if measured is not None:
        measured_tau = estimates[0].tau
        estimates = [estimates[0]] + [
            TauEstimate(e.name, e.tau, e.basis, e.tau - measured_tau) for e in estimates[1:]
        ]
        # Compare with the chain estimate (positions treated as independent), not with prefix or
        # linear: tau_train averages the correct prefix over uniformly drawn anchors, so long
        # correct runs count once per token while decoding crosses them in one verify step, and
        # the linear formula ignores that acceptance stops at the first miss. Both read well above
        # the measured tau in healthy runs (on the bundled sample: 6.0 and 8.7 against a measured
        # 2.0, chain 2.7), so only a measured tau far below the chain estimate is a mismatch.
        promised = next((e for e in estimates if e.name in (CHAIN, LINEAR)), None)
        if promised is not None and promised.tau > 1 and (measured_tau - 1) < MISMATCH_RATIO * (promised.tau - 1):
            warnings.append(
                f"train/serve mismatch? training metrics imply tau {promised.tau:.2f} ({promised.name}) "
                f"but the measured tau is {measured_tau:.2f}: check label shift and context "
                "visibility (anchor must not see itself)"
            )
    best = estimates[0] if estimates else None
    tau = best.tau if best else None
    return Acceptance(
        acc=acc,
        acc_basis=acc_basis,
        block_size=block_size,
        block_size_source=block_source,
        estimates=estimates,
        estimator=best.name if best else None,
        tau=tau,
        target_acc=target_acc,
        target_tau=target_tau,
        progress=progress_to(tau, target_tau) if tau is not None else None,
        baseline_tau=config.baseline_tau,
        vs_baseline=tau - config.baseline_tau if tau is not None else None,
        measured_step=measured.step if measured is not None else None,
        warnings=warnings,
    )

"""`dflash-diag compare`: the regimes of one log and the jump at each boundary between them.

The analysis lives in one module per concept; this one assembles it into the report:

* `dflash_diag.compare.regimes`: finding the regimes (`find_regimes`, `RunConfig`, `Regime`);
* `dflash_diag.compare.boundary`: the loss ratio and acc delta at a boundary and their explanation
  (`measure_boundary`, `explain_boundary`, `normalisation_factors`, `CompareConfig`);
* `dflash_diag.compare.align`: two runs side by side on steps or tokens seen (`align_runs`);
* here: `compare_regimes`, which runs the first two over a log into a `RegimeComparison`.

The public names of those modules are importable from here as well.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.diagnosis import Diagnosis, DiagnosisConfig, diagnose_frame
from dflash_diag.analysis.frame_means import mean_acc, mean_loss
from dflash_diag.analysis.phase import Selection
from dflash_diag.analysis.schedule_events import ScheduleEvent
from dflash_diag.analysis.windows import choose_window
from dflash_diag.compare.align import AlignedWindow, RunAlignment, align_runs, tokens_seen
from dflash_diag.compare.boundary import (
    Boundary,
    CompareConfig,
    explain_boundary,
    measure_boundary,
    normalisation_factors,
)
from dflash_diag.compare.regimes import Regime, RunConfig, find_regimes, regime_trend
from dflash_diag.read.records import LogEvent

__all__ = [
    "AlignedWindow",
    "Boundary",
    "CompareConfig",
    "Regime",
    "RegimeComparison",
    "RunAlignment",
    "RunConfig",
    "align_runs",
    "compare_regimes",
    "explain_boundary",
    "find_regimes",
    "mean_acc",
    "mean_loss",
    "measure_boundary",
    "normalisation_factors",
    "regime_trend",
    "tokens_seen",
]


@dataclass(frozen=True)
class RegimeComparison:
    """Regimes of one log and the boundaries between them.

    ``split_on`` says which rule found the regimes: "script", "fields" (records with and without
    ``tok_per_sec``), "config" (a normalisation setting changed between headers) or None (one
    regime, no boundary).
    """

    regimes: list[Regime]
    boundaries: list[Boundary]
    split_on: str | None
    k: int = defaults.BOUNDARY_K
    notes: list[str] = field(default_factory=list)
    diagnoses: list[Diagnosis | None] = field(default_factory=list)
    """One :class:`~dflash_diag.analysis.diagnosis.Diagnosis` per regime (the analysis converge
    shows, run on the regime's records), when the comparison was asked for them."""
    schedule_events: list[ScheduleEvent] = field(default_factory=list)
    """lr schedule restarts at resumes (additive ``schedule_events`` JSON key when any)."""


def compare_regimes(
    frame: pl.DataFrame,
    headers: Sequence[Mapping[str, Any]] = (),
    config: CompareConfig | None = None,
    *,
    diagnosis: DiagnosisConfig | None = None,
    evals: Sequence[LogEvent] = (),
    run_starts: Sequence[LogEvent] | None = None,
    max_lr: float | None = None,
    foreign: bool = False,
    presets: Sequence[str] = (),
) -> RegimeComparison:
    """Find the regimes of one log and measure every boundary between them.

    Args:
        frame: metrics after restart resolution, step order (see the module docstring).
        headers: the ``run_start`` headers' fields, which the frame's ``run`` column indexes.
        config: K and tolerances; defaults to `CompareConfig()`.
        diagnosis: when given, each regime also gets the one diagnosis (acc, tau and its
            estimators, target progress, verdict) run on its own records with these settings.
        evals: the log's eval records (each regime uses those within its steps).
        run_starts: the ``run_start`` events ``headers`` come from (the governing header of a
            regime's last record feeds its schedule and block size).
        max_lr: the largest lr of the whole log (the "max seen" peak rule).
        foreign, presets: how the log was read (the drafter detector's evidence, as converge's).

    Returns:
        A `RegimeComparison`; ``boundaries`` is empty when the log holds one regime.
    """
    config = config or CompareConfig()
    size = config.window if config.window is not None else choose_window(frame).size
    config = replace(config, window=size)
    if diagnosis is not None and diagnosis.window is None:
        diagnosis = replace(diagnosis, window=config.window)
    # each regime's trends over size-step windows (regime_trend)
    found, split_on = find_regimes(frame, headers, window=size)
    boundaries = [
        measure_boundary(rows_a, rows_b, reg_a, reg_b, config)
        for (reg_a, rows_a), (reg_b, rows_b) in itertools.pairwise(found)
    ]
    diagnoses: list[Diagnosis | None] = []
    if diagnosis is not None:
        events = (
            list(run_starts)
            if run_starts is not None
            else [LogEvent("run_start", 0, 0, None, dict(h)) for h in headers]
        )
        for regime, rows in found:
            run = rows["run"][-1] if "run" in rows.columns else None
            header = events[run] if run is not None and 0 <= run < len(events) else None
            selection = Selection(
                phase="all",
                reason=f"regime {regime.name}: {regime.n} entries",
                total=regime.n,
                pipeline=regime.n if regime.tok_per_sec is not None else 0,
                selected=regime.n,
                from_step=None,
                to_step=None,
            )
            diagnoses.append(
                diagnose_frame(
                    rows,
                    selection=selection,
                    evals=evals,
                    header=header,
                    config=replace(diagnosis, from_step=None, to_step=None),
                    max_lr=max_lr,
                    foreign=foreign,
                    presets=presets,
                )
            )
    return RegimeComparison(
        regimes=[r for r, _ in found],
        boundaries=boundaries,
        split_on=split_on,
        k=config.k,
        diagnoses=diagnoses,
    )

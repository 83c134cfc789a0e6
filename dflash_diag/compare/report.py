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
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from dflash_diag.analysis.frame_means import mean_acc, mean_loss
from dflash_diag.compare.align import AlignedWindow, RunAlignment, align_runs, tokens_seen
from dflash_diag.compare.boundary import (
    Boundary,
    CompareConfig,
    explain_boundary,
    measure_boundary,
    normalisation_factors,
)
from dflash_diag.compare.regimes import Regime, RunConfig, TrendFn, find_regimes, regime_trend

__all__ = [
    "AlignedWindow",
    "Boundary",
    "CompareConfig",
    "Regime",
    "RegimeComparison",
    "RunAlignment",
    "RunConfig",
    "TrendFn",
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
    k: int = 50
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: ``regimes`` and ``boundaries`` with their documented keys first."""
        regimes = []
        for r in self.regimes:
            d = asdict(r)
            d["config"] = asdict(r.config) if r.config is not None else None
            regimes.append(d)
        return {
            "regimes": regimes,
            "boundaries": [asdict(b) for b in self.boundaries],
            "split_on": self.split_on,
            "k": self.k,
            "notes": list(self.notes),
        }


def compare_regimes(
    frame: pl.DataFrame,
    headers: Sequence[Mapping[str, Any]] = (),
    config: CompareConfig | None = None,
    *,
    trend: TrendFn | None = None,
) -> RegimeComparison:
    """Find the regimes of one log and measure every boundary between them.

    Args:
        frame: metrics after restart resolution, step order (see the module docstring).
        headers: the ``run_start`` headers' fields, which the frame's ``run`` column indexes.
        config: K and tolerances; defaults to `CompareConfig()`.
        trend: ``trend(rows, column) -> slope per 1k steps`` for each regime; by default
            `regime_trend` over ``config.window``-step windows.

    Returns:
        A `RegimeComparison`; ``boundaries`` is empty when the log holds one regime.
    """
    config = config or CompareConfig()
    if trend is None:

        def trend(rows: pl.DataFrame, column: str) -> float | None:
            return regime_trend(rows, column, config.window)

    found, split_on = find_regimes(frame, headers, trend=trend)
    boundaries = [
        measure_boundary(rows_a, rows_b, reg_a, reg_b, config)
        for (reg_a, rows_a), (reg_b, rows_b) in itertools.pairwise(found)
    ]
    return RegimeComparison(
        regimes=[r for r, _ in found], boundaries=boundaries, split_on=split_on, k=config.k
    )

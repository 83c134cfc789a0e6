"""Assemble the ``converge`` report from a parsed log: plain data, rendered elsewhere.

``build_converge_report(load_log(path))`` is the whole analysis of ``dflash-diag converge``;
:meth:`ConvergeReport.to_json_dict` is the JSON contract for scripts (keys kept stable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dflash_diag.analysis.acceptance import Acceptance, AcceptanceConfig, estimate_acceptance
from dflash_diag.analysis.phase import Phase, Selection, select_phase
from dflash_diag.analysis.restarts import Restart, resolve_restarts
from dflash_diag.analysis.schedule import ScheduleHeader, SchedulePosition, schedule_position
from dflash_diag.analysis.trend import Trend, TrendConfig, compute_trends
from dflash_diag.analysis.verdict import Verdict, VerdictConfig, judge_toward
from dflash_diag.analysis.windows import Window, compute_windows, window_rows
from dflash_diag.errors import DiagError
from dflash_diag.read.jsonl import LogEvent, ParsedLog, ParseIssues, fetch_lists
from dflash_diag.read.ranks import RankSkew


@dataclass(frozen=True)
class ConvergeConfig:
    """Every knob of ``dflash-diag converge`` (CLI flags map one to one).

    Attributes:
        phase: "auto", "pipeline" or "all".
        from_step: first step analysed (inclusive); windows align to it.
        to_step: last step analysed (inclusive).
        window: steps per window.
        keep_all: keep entries orphaned by restarts instead of purging them.
        peak_lr: peak lr when the header does not give one.
        trend: arrow thresholds.
        acceptance: block size and targets.
        verdict: significance settings.
    """

    phase: Phase | str = Phase.AUTO
    from_step: int | None = None
    to_step: int | None = None
    window: int = 50
    keep_all: bool = False
    peak_lr: float | None = None
    trend: TrendConfig = field(default_factory=TrendConfig)
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"--window must be >= 1, got {self.window}")
        if self.peak_lr is not None and not (self.peak_lr > 0 and math.isfinite(self.peak_lr)):
            raise ValueError(f"--peak-lr must be > 0, got {self.peak_lr}")
        Phase(self.phase)  # raises ValueError for an unknown phase


@dataclass(frozen=True)
class WindowRow:
    """A window with its trend against the previous one."""

    window: Window
    trend: Trend


@dataclass(kw_only=True)
class ConvergeReport:
    """Everything ``converge`` shows.

    Attributes:
        sources: input names.
        selection: which records were analysed and why.
        windows: windows with trends, in step order.
        schedule: lr schedule position at the last step.
        acceptance: acceptance-length estimates and progress.
        verdict: trend verdict and ETA.
        restarts: restarts found (all sources).
        issues: parse account (skipped lines, NaN/Inf...).
        header: the ``run_start`` header governing the last analysed record, if any.
        notes: remarks worth a line in the report.
    """

    sources: list[str]
    selection: Selection
    windows: list[WindowRow]
    schedule: SchedulePosition
    acceptance: Acceptance
    verdict: Verdict
    restarts: list[Restart]
    issues: ParseIssues
    header: LogEvent | None = None
    notes: list[str] = field(default_factory=list)
    ranks: RankSkew | None = None
    """Per-rank throughput skew, when per-rank logs were given (additive ``ranks`` JSON key)."""

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON contract: exactly the keys documented in docs/diagnostics.md (plus ``ranks``
        when per-rank logs were given); built by :func:`dflash_diag.render.json.converge_json`."""
        from dflash_diag.render.json import converge_json

        return converge_json(self)


def governing_header(log: ParsedLog, frame: pl.DataFrame) -> LogEvent | None:
    """The ``run_start`` header of the last record of ``frame``, if any."""
    if frame.height == 0:
        return None
    run = frame["run"][-1]
    headers = log.run_starts
    if run is None or run < 0 or run >= len(headers):
        return None
    return headers[run]


def _header_number(header: LogEvent | None, name: str) -> float | None:
    if header is None:
        return None
    value = header.fields.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def build_converge_report(log: ParsedLog, config: ConvergeConfig | None = None) -> ConvergeReport:
    """Run the whole ``converge`` analysis on a parsed log.

    Raises:
        DiagError: nothing left to analyse after phase and step selection.
    """
    config = config or ConvergeConfig()
    frame, restarts = resolve_restarts(log.metrics, keep_all=config.keep_all)
    selected, selection = select_phase(frame, config.phase, config.from_step, config.to_step)
    if selected.height == 0:
        bounds = ""
        if config.from_step is not None or config.to_step is not None:
            bounds = f" in steps {config.from_step or '...'}-{config.to_step or '...'}"
        raise DiagError(f"nothing selected: no {selection.phase} entries{bounds} "
                        f"({selection.total} metric records in the log)")
    windows = compute_windows(selected, config.window, start=config.from_step)
    trends = compute_trends(windows, config.trend)
    header = governing_header(log, selected)
    schedule = schedule_position(
        selected,
        ScheduleHeader.from_fields(header.fields.get("schedule")) if header else None,
        peak_lr=config.peak_lr,
        steps_per_epoch=_header_number(header, "steps_per_epoch"),
    )
    last = windows[-1]
    acc_window = next((w for w in reversed(windows) if w.acc is not None), None)
    if acc_window is not None:
        acc_basis = f"mean of the last window, steps {acc_window.start}-{acc_window.end} ({acc_window.n} entries)"
    else:
        acc_basis = "no accuracy in the log"
    acceptance = estimate_acceptance(
        acc_window.acc if acc_window else None,
        acc_basis,
        fetch_lists(log, window_rows(selected, last)),
        log.evals,
        config.acceptance,
        header_block_size=_header_number(header, "block_size"),
        tau_train=last.tau_train,
        up_to_step=int(selected["step"].max()),
    )
    verdict = judge_toward(windows, acceptance, frame=selected, config=config.verdict)
    notes = list(schedule.notes) + log.issues.reader_notes()
    return ConvergeReport(
        sources=list(log.sources),
        selection=selection,
        windows=[WindowRow(w, t) for w, t in zip(windows, trends)],
        schedule=schedule,
        acceptance=acceptance,
        verdict=verdict,
        restarts=restarts,
        issues=log.issues,
        header=header,
        notes=notes,
    )


"""The ``converge`` report: the log's :class:`~dflash_diag.analysis.diagnosis.Diagnosis` plus what
the command adds (inputs, parse account, per-rank skew). Plain data, rendered elsewhere.

``build_converge_report(load_log(path))`` is the whole analysis of ``dflash-diag converge``;
:func:`dflash_diag.render.json.converge_json` is the JSON contract for scripts (keys kept stable).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from dflash_diag.analysis.diagnosis import (
    Diagnosis,
    DiagnosisConfig,
    WindowRow,
    diagnose,
    governing_header,
)
from dflash_diag.analysis.schedule_events import ScheduleEvent, schedule_events_of
from dflash_diag.read.jsonl import fetch_lists
from dflash_diag.read.records import ParsedLog, ParseIssues

if TYPE_CHECKING:  # the per-rank reader: imported by the command only when rank logs are given
    from dflash_diag.analysis.rank_skew import RankSkew

#: The converge command's settings are the analysis settings (one config for every command).
ConvergeConfig = DiagnosisConfig

__all__ = [
    "ConvergeConfig",
    "ConvergeReport",
    "WindowRow",
    "build_converge_report",
    "governing_header",
]


@dataclass(kw_only=True)
class ConvergeReport(Diagnosis):
    """Everything ``converge`` shows: the diagnosis, and

    Attributes:
        sources: input names.
        issues: parse account (skipped lines, NaN/Inf...).
        ranks: per-rank throughput skew, when per-rank logs were given (additive ``ranks`` key).
    """

    sources: list[str] = field(default_factory=list)
    issues: ParseIssues = field(default_factory=ParseIssues)
    ranks: RankSkew | None = None
    schedule_events: list[ScheduleEvent] = field(default_factory=list)
    """lr schedule restarts at resumes (additive ``schedule_events`` JSON key when any)."""


def build_converge_report(log: ParsedLog, config: DiagnosisConfig | None = None) -> ConvergeReport:
    """Run the whole ``converge`` analysis on a parsed log (per-position lists read back from the
    files for the windows that need them when the log was loaded without them).

    Raises:
        DiagError: nothing left to analyse after phase and step selection.
    """
    diagnosis = diagnose(log, config, lists=lambda rows: fetch_lists(log, rows))
    parts = {f.name: getattr(diagnosis, f.name) for f in fields(Diagnosis)}
    parts["notes"] = [*diagnosis.notes, *log.issues.reader_notes()]
    keep_all = config.keep_all if config is not None else False
    return ConvergeReport(
        **parts,
        sources=list(log.sources),
        issues=log.issues,
        schedule_events=schedule_events_of(log, keep_all),
    )

"""dflash_diag: convergence diagnostics for DFlash drafter training logs (JSONL schema v1).

Read a log, then analyse it in plain data (frames and dataclasses) and render separately::

    from dflash_diag import load_log, resolve_restarts, select_phase

    log = load_log("logs/train.jsonl")            # files, .gz or "-"; polars underneath
    frame, restarts = resolve_restarts(log.metrics)
    frame, selection = select_phase(frame, "auto")  # the pipeline entries, if any

This package never imports torch, transformers or dflash.
"""

from dflash_diag.errors import DiagError
from dflash_diag.phase import Phase, Selection, select_phase
from dflash_diag.reader import LogEvent, ParsedLog, ParseIssues, load_log, parse_records, read_input
from dflash_diag.restarts import Restart, resolve_restarts
from dflash_diag.schema import parse_field_map

__all__ = [
    "DiagError",
    "LogEvent",
    "ParseIssues",
    "ParsedLog",
    "Phase",
    "Restart",
    "Selection",
    "load_log",
    "parse_field_map",
    "parse_records",
    "read_input",
    "resolve_restarts",
    "select_phase",
]

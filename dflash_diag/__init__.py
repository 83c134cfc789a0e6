"""dflash_diag: convergence diagnostics for DFlash drafter training logs (JSONL schema v1).

Read a log, analyse it into plain data (polars frames and dataclasses), render separately::

    from dflash_diag import build_converge_report, load_log, render_text

    log = load_log("logs/train.jsonl")           # files, .gz or "-"; parsed by polars
    report = build_converge_report(log)           # windows, trends, lr, acceptance, verdict
    print(report.verdict.status, report.acceptance.tau, report.acceptance.estimator)
    print(render_text(report))                    # or report.to_json_dict()

The steps are public too: ``resolve_restarts(log.metrics)`` -> ``select_phase(...)`` ->
``compute_windows(...)`` -> ``compute_trends(...)``, ``schedule_position``, ``estimate_acceptance``,
``judge``. This package never imports torch, transformers or dflash; names are imported lazily so
that ``dflash-diag --help`` does not load polars.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "DiagError": "errors",
    "LogEvent": "records", "ParseIssues": "records", "ParsedLog": "records",
    "load_log": "reader", "parse_records": "reader", "read_input": "reader",
    "parse_field_map": "schema",
    "Restart": "restarts", "resolve_restarts": "restarts",
    "Phase": "phase", "Selection": "phase", "select_phase": "phase",
    "Window": "windows", "compute_windows": "windows",
    "Trend": "trend", "TrendConfig": "trend", "compute_trends": "trend",
    "ScheduleHeader": "schedule", "SchedulePosition": "schedule", "schedule_position": "schedule",
    "Acceptance": "acceptance", "AcceptanceConfig": "acceptance", "TauEstimate": "acceptance",
    "estimate_acceptance": "acceptance", "linear_tau": "acceptance", "chain_tau": "acceptance",
    "prefix_tau": "acceptance",
    "Verdict": "verdict", "VerdictConfig": "verdict", "judge": "verdict",
    "judge_toward": "verdict", "accuracy_goal": "verdict",
    "theil_sen_slope": "robust_trend", "mann_kendall": "robust_trend",
    "ConvergeConfig": "report", "ConvergeReport": "report", "build_converge_report": "report",
    "render_rich": "render", "render_text": "render", "render_markdown": "render",
    "render_csv": "render", "render_json": "render",
    "CompareConfig": "boundary", "RegimeComparison": "compare", "compare_regimes": "compare",
    "align_runs": "align", "LogTail": "tail",
    "LiveLog": "watch_state", "WatchConfig": "watch_state", "build_view": "watch_view",
    "render_view": "watch_render",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dflash_diag' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dflash_diag.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static analysers and IDEs see the real names
    from dflash_diag.acceptance import (  # noqa: F401
        Acceptance,
        AcceptanceConfig,
        TauEstimate,
        chain_tau,
        estimate_acceptance,
        linear_tau,
        prefix_tau,
    )
    from dflash_diag.align import align_runs  # noqa: F401
    from dflash_diag.boundary import CompareConfig  # noqa: F401
    from dflash_diag.compare import RegimeComparison, compare_regimes  # noqa: F401
    from dflash_diag.errors import DiagError  # noqa: F401
    from dflash_diag.phase import Phase, Selection, select_phase  # noqa: F401
    from dflash_diag.reader import load_log, parse_records, read_input  # noqa: F401
    from dflash_diag.records import LogEvent, ParsedLog, ParseIssues  # noqa: F401
    from dflash_diag.render import (  # noqa: F401
        render_csv,
        render_json,
        render_markdown,
        render_rich,
        render_text,
    )
    from dflash_diag.report import ConvergeConfig, ConvergeReport, build_converge_report  # noqa: F401
    from dflash_diag.restarts import Restart, resolve_restarts  # noqa: F401
    from dflash_diag.robust_trend import mann_kendall, theil_sen_slope  # noqa: F401
    from dflash_diag.schedule import ScheduleHeader, SchedulePosition, schedule_position  # noqa: F401
    from dflash_diag.schema import parse_field_map  # noqa: F401
    from dflash_diag.tail import LogTail  # noqa: F401
    from dflash_diag.trend import Trend, TrendConfig, compute_trends  # noqa: F401
    from dflash_diag.verdict import (  # noqa: F401
        Verdict,
        VerdictConfig,
        accuracy_goal,
        judge,
        judge_toward,
    )
    from dflash_diag.watch_render import render_view  # noqa: F401
    from dflash_diag.watch_state import LiveLog, WatchConfig  # noqa: F401
    from dflash_diag.watch_view import build_view  # noqa: F401
    from dflash_diag.windows import Window, compute_windows  # noqa: F401

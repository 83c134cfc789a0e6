"""dflash_diag: convergence diagnostics for DFlash drafter training logs (JSONL schema v1).

Read a log, analyse it into plain data (polars frames and dataclasses), render separately::

    from dflash_diag import build_converge_report, load_log, render_text

    log = load_log("logs/train.jsonl")           # files, .gz or "-"; parsed by polars
    report = build_converge_report(log)           # windows, trends, lr, acceptance, verdict
    print(report.verdict.status, report.acceptance.tau, report.acceptance.estimator)
    print(render_text(report))                    # or render_json(report)

The steps are public too: ``resolve_restarts(log.metrics)`` -> ``select_phase(...)`` ->
``compute_windows(...)`` -> ``compute_trends(...)``, ``schedule_position``, ``estimate_acceptance``,
``judge``; ``diagnose(log)`` runs them all into the one ``Diagnosis`` every command renders. This package never imports torch, transformers or dflash; names are imported lazily so
that ``dflash-diag --help`` does not load polars.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "DiagError": "errors",
    "LogEvent": "read.records",
    "ParseIssues": "read.records",
    "ParsedLog": "read.records",
    "load_log": "read.formats.load",
    "parse_records": "read.jsonl",
    "read_input": "read.files",
    "parse_field_map": "read.schema",
    "Restart": "analysis.restarts",
    "resolve_restarts": "analysis.restarts",
    "Phase": "analysis.phase",
    "Selection": "analysis.phase",
    "select_phase": "analysis.phase",
    "Window": "analysis.windows",
    "compute_windows": "analysis.windows",
    "Trend": "analysis.trend",
    "TrendConfig": "analysis.trend",
    "compute_trends": "analysis.trend",
    "ScheduleHeader": "analysis.schedule",
    "SchedulePosition": "analysis.schedule",
    "schedule_position": "analysis.schedule",
    "Acceptance": "analysis.acceptance",
    "AcceptanceConfig": "analysis.acceptance",
    "TauEstimate": "analysis.acceptance",
    "estimate_acceptance": "analysis.acceptance",
    "linear_tau": "analysis.acceptance",
    "chain_tau": "analysis.acceptance",
    "prefix_tau": "analysis.acceptance",
    "harmonic_tau": "analysis.acceptance",
    "Verdict": "analysis.verdict",
    "VerdictConfig": "analysis.verdict",
    "judge": "analysis.verdict",
    "eta_toward": "analysis.verdict",
    "Diagnosis": "analysis.diagnosis",
    "DiagnosisConfig": "analysis.diagnosis",
    "diagnose": "analysis.diagnosis",
    "diagnose_frame": "analysis.diagnosis",
    "theil_sen_slope": "analysis.robust_trend",
    "mann_kendall": "analysis.robust_trend",
    "ConvergeConfig": "converge.report",
    "ConvergeReport": "converge.report",
    "build_converge_report": "converge.report",
    "render_rich": "render.rich",
    "render_text": "render.text",
    "render_markdown": "render.markdown",
    "render_csv": "render.csv",
    "render_json": "render.json",
    "converge_json": "render.json",
    "CompareConfig": "compare.boundary",
    "RegimeComparison": "compare.report",
    "compare_regimes": "compare.report",
    "align_runs": "compare.align",
    "LogTail": "read.tail",
    "LiveLog": "watch.state",
    "WatchConfig": "watch.state",
    "build_view": "watch.view",
    "render_view": "watch.render",
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
    from dflash_diag.analysis.acceptance import (  # noqa: F401
        Acceptance,
        AcceptanceConfig,
        TauEstimate,
        chain_tau,
        estimate_acceptance,
        harmonic_tau,
        linear_tau,
        prefix_tau,
    )
    from dflash_diag.analysis.diagnosis import Diagnosis, DiagnosisConfig, diagnose, diagnose_frame  # noqa: F401
    from dflash_diag.analysis.phase import Phase, Selection, select_phase  # noqa: F401
    from dflash_diag.analysis.restarts import Restart, resolve_restarts  # noqa: F401
    from dflash_diag.analysis.robust_trend import mann_kendall, theil_sen_slope  # noqa: F401
    from dflash_diag.analysis.schedule import ScheduleHeader, SchedulePosition, schedule_position  # noqa: F401
    from dflash_diag.analysis.trend import Trend, TrendConfig, compute_trends  # noqa: F401
    from dflash_diag.analysis.verdict import (  # noqa: F401
        Verdict,
        VerdictConfig,
        eta_toward,
        judge,
    )
    from dflash_diag.analysis.windows import Window, compute_windows  # noqa: F401
    from dflash_diag.compare.align import align_runs  # noqa: F401
    from dflash_diag.compare.boundary import CompareConfig  # noqa: F401
    from dflash_diag.compare.report import RegimeComparison, compare_regimes  # noqa: F401
    from dflash_diag.converge.report import ConvergeConfig, ConvergeReport, build_converge_report  # noqa: F401
    from dflash_diag.errors import DiagError  # noqa: F401
    from dflash_diag.read.files import read_input  # noqa: F401
    from dflash_diag.read.formats.load import load_log  # noqa: F401
    from dflash_diag.read.jsonl import parse_records  # noqa: F401
    from dflash_diag.read.records import LogEvent, ParsedLog, ParseIssues  # noqa: F401
    from dflash_diag.read.schema import parse_field_map  # noqa: F401
    from dflash_diag.read.tail import LogTail  # noqa: F401
    from dflash_diag.render.csv import render_csv  # noqa: F401
    from dflash_diag.render.json import converge_json, render_json  # noqa: F401
    from dflash_diag.render.markdown import render_markdown  # noqa: F401
    from dflash_diag.render.rich import render_rich  # noqa: F401
    from dflash_diag.render.text import render_text  # noqa: F401
    from dflash_diag.watch.render import render_view  # noqa: F401
    from dflash_diag.watch.state import LiveLog, WatchConfig  # noqa: F401
    from dflash_diag.watch.view import build_view  # noqa: F401

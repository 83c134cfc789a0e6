"""Loading logs for `dflash-diag compare`: one log's regimes, or two runs aligned side by side.

Library-level entry points used by the command and by tests; polars is imported inside the
functions so that the command module stays cheap to import (``dflash-diag --help``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dflash_diag.errors import DiagError

if TYPE_CHECKING:
    from dflash_diag.compare.report import CompareConfig, RegimeComparison, RunAlignment
    from dflash_diag.read.formats.load import ReadOptions


def compare_log(
    path: str,
    config: CompareConfig,
    *,
    keep_all: bool = False,
    strict: bool = False,
    fields: dict[str, str] | None = None,
    read: ReadOptions | None = None,
) -> RegimeComparison:
    """Load one log and compare its regimes (every record: regimes are what is compared).

    Raises:
        DiagError: a missing, unreadable or empty log.
    """
    from dflash_diag.analysis.restarts import resolve_restarts
    from dflash_diag.compare.report import compare_regimes
    from dflash_diag.read.jsonl import load_log

    log = load_log([path], strict=strict, **_read_kwargs(read, fields, 1, None))
    frame, restarts = resolve_restarts(log.metrics, keep_all=keep_all)
    comparison = compare_regimes(frame, [e.fields for e in log.run_starts], config)
    comparison.notes.extend(log.notes)
    if restarts:
        comparison.notes.append("restarts at steps " + ", ".join(str(r.step) for r in restarts))
    if log.issues.malformed:
        comparison.notes.append(f"{log.issues.malformed} malformed lines skipped")
    if log.issues.nonfinite_total:
        comparison.notes.append(f"{log.issues.nonfinite_total} NaN/Inf values left out of means")
    comparison.notes.extend(log.issues.reader_notes())
    return comparison


def compare_two_runs(
    path_a: str,
    path_b: str,
    config: CompareConfig,
    *,
    x: str = "step",
    phase: str = "auto",
    keep_all: bool = False,
    strict: bool = False,
    fields: dict[str, str] | None = None,
    read: ReadOptions | None = None,
) -> tuple[RunAlignment, list[RegimeComparison]]:
    """Load two runs, align them on ``x`` and compare each one's own regimes.

    Returns:
        The side-by-side windows and, per run, its `RegimeComparison` (names prefixed by run).

    Raises:
        DiagError: unreadable logs, nothing selected, or tokens that cannot be counted.
    """
    from dflash_diag.analysis.phase import select_phase
    from dflash_diag.analysis.restarts import resolve_restarts
    from dflash_diag.compare.report import align_runs, compare_regimes
    from dflash_diag.read.jsonl import load_log

    names = _run_names(path_a, path_b)
    frames, comparisons = [], []
    for index, (path, name) in enumerate(zip((path_a, path_b), names)):
        log = load_log([path], strict=strict, **_read_kwargs(read, fields, 2, index))
        frame, _ = resolve_restarts(log.metrics, keep_all=keep_all)
        comparison = compare_regimes(frame, [e.fields for e in log.run_starts], config)
        comparison.notes.extend(log.notes)
        comparisons.append(_prefixed(comparison, name))
        comparisons[-1].notes.extend(log.issues.reader_notes())
        selected, selection = select_phase(frame, phase)
        if selected.height == 0:
            raise DiagError(f"{path}: no records selected ({selection.reason})")
        frames.append(selected)
    tokens = tuple(c.regimes[-1].tokens_per_step if c.regimes else None for c in comparisons)
    try:
        alignment = align_runs(
            frames[0], frames[1], x=x, window=config.window, names=names, tokens_per_step=tokens
        )
    except ValueError as exc:
        raise DiagError(str(exc)) from None
    return alignment, comparisons


def _read_kwargs(read: ReadOptions | None, fields: dict[str, str] | None, n_inputs: int,
                 only: int | None) -> dict[str, object]:
    """load_log's reading options: a run's own format, preset and field map."""
    if read is None:
        return {"fields": fields}
    return read.load_kwargs(n_inputs, only)


def _run_names(path_a: str, path_b: str) -> tuple[str, str]:
    a, b = Path(path_a).name, Path(path_b).name
    return (path_a, path_b) if a == b else (a, b)


def _prefixed(comparison: RegimeComparison, run: str) -> RegimeComparison:
    from dataclasses import replace

    regimes = [replace(r, name=f"{run}: {r.name}") for r in comparison.regimes]
    return replace(comparison, regimes=regimes)

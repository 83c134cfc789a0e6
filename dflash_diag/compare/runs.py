"""Loading logs for `dflash-diag compare`: one log's regimes, or two runs aligned side by side.

Library-level entry points used by the command and by tests; polars is imported inside the
functions so that the command module stays cheap to import (``dflash-diag --help``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from dflash_diag.analysis.numbers import plural
from dflash_diag.errors import DiagError

if TYPE_CHECKING:
    from dflash_diag.analysis.diagnosis import DiagnosisConfig
    from dflash_diag.compare.report import CompareConfig, RegimeComparison, RunAlignment
    from dflash_diag.read.formats.load import LoadKwargs, ReadOptions


def compare_log(
    path: str,
    config: CompareConfig,
    *,
    keep_all: bool = False,
    strict: bool = False,
    fields: dict[str, str] | None = None,
    diagnosis: DiagnosisConfig | None = None,
    read: ReadOptions | None = None,
) -> RegimeComparison:
    """Load one log and compare its regimes (every record: regimes are what is compared).

    Raises:
        DiagError: a missing, unreadable or empty log.
    """
    _, comparison = _load_and_compare(
        path,
        config,
        keep_all=keep_all,
        strict=strict,
        diagnosis=diagnosis,
        read_kwargs=_read_kwargs(read, fields, 1, None),
    )
    return comparison


def _load_and_compare(
    path: str,
    config: CompareConfig,
    *,
    keep_all: bool,
    strict: bool,
    diagnosis: DiagnosisConfig | None,
    read_kwargs: LoadKwargs | _FieldsOnly,
):
    """One log read, its restarts resolved, cut to the step range and compared, with its notes.

    Returns:
        ``(frame, comparison)``: the records compared and their `RegimeComparison`.
    """
    from dflash_diag.analysis.restarts import resolve_restarts
    from dflash_diag.read.formats.load import load_log

    # every regime is diagnosed from the frame: the lists are read with it
    log = load_log([path], strict=strict, lists=True, **read_kwargs)
    frame, restarts = resolve_restarts(log.metrics, keep_all=keep_all)
    frame = _step_range(frame, diagnosis, path)
    restarts = _restarts_in_range(restarts, diagnosis)
    comparison = with_schedule_events(_compare(log, frame, config, diagnosis), log, frame)
    comparison.notes.extend(log.notes)
    comparison.notes.extend(_log_notes(log, restarts))
    return frame, comparison


def _step_range(frame, diagnosis: DiagnosisConfig | None, path: str):
    """The records within ``--from-step``/``--to-step`` (the diagnosis config's bounds), after
    restart resolution so that a rewound run's replaced records stay out.

    Raises:
        DiagError: no record lies within the bounds.
    """
    import polars as pl

    low = diagnosis.from_step if diagnosis is not None else None
    high = diagnosis.to_step if diagnosis is not None else None
    if low is None and high is None:
        return frame
    condition = pl.lit(True)
    if low is not None:
        condition = condition & (pl.col("step") >= low)
    if high is not None:
        condition = condition & (pl.col("step") <= high)
    kept = frame.filter(condition)
    if kept.height == 0:
        bounds = f"{low if low is not None else '...'}-{high if high is not None else '...'}"
        raise DiagError(
            f"{path}: nothing selected: no records in steps {bounds} "
            f"({plural(frame.height, 'metric record')} in the log)"
        )
    return kept


def _restarts_in_range(restarts, diagnosis: DiagnosisConfig | None) -> list:
    """The restarts whose new segment starts within ``--from-step``/``--to-step``."""
    low = diagnosis.from_step if diagnosis is not None else None
    high = diagnosis.to_step if diagnosis is not None else None
    return [
        r for r in restarts if (low is None or r.step >= low) and (high is None or r.step <= high)
    ]


def _log_notes(log, restarts) -> list[str]:
    """The restarts, skipped lines, NaN/Inf values and reader notes of one log."""
    notes = []
    if restarts:
        at = "restart at step " if len(restarts) == 1 else f"{len(restarts)} restarts at steps "
        notes.append(at + ", ".join(f"{r.step} (after {r.previous_step})" for r in restarts))
    if log.issues.malformed:
        notes.append(f"{plural(log.issues.malformed, 'malformed line')} skipped")
    if log.issues.nonfinite_total:
        notes.append(f"{plural(log.issues.nonfinite_total, 'NaN/Inf value')} left out of means")
    return notes + log.issues.reader_notes()


def _compare(
    log, frame, config: CompareConfig, diagnosis: DiagnosisConfig | None
) -> RegimeComparison:
    """`compare_regimes` with the log's headers, evals and largest lr (the diagnosis inputs)."""
    from dataclasses import replace

    from dflash_diag.analysis.diagnosis import max_lr_of
    from dflash_diag.analysis.windows import choose_window
    from dflash_diag.compare.report import compare_regimes

    # One window size for the whole log (converge's, for the same records), not one per regime.
    wanted = diagnosis.window if diagnosis is not None else config.window
    size = choose_window(frame, wanted if wanted is not None else config.window).size
    config = replace(config, window=size)
    if diagnosis is not None:
        diagnosis = replace(diagnosis, window=size)
    return compare_regimes(
        frame,
        [e.fields for e in log.run_starts],
        config,
        diagnosis=diagnosis,
        evals=log.evals,
        run_starts=log.run_starts,
        max_lr=max_lr_of(log.metrics),
        foreign=log.foreign,
        presets=log.presets,
    )


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
    diagnosis: DiagnosisConfig | None = None,
    read: ReadOptions | None = None,
) -> tuple[RunAlignment, list[RegimeComparison]]:
    """Load two runs, align them on ``x`` and compare each one's own regimes.

    Returns:
        The side-by-side windows and, per run, its `RegimeComparison` (names prefixed by run).

    Raises:
        DiagError: unreadable logs, nothing selected, or tokens that cannot be counted.
    """
    from dflash_diag.analysis.phase import select_phase
    from dflash_diag.compare.report import align_runs

    names = _run_names(path_a, path_b)
    frames, comparisons = [], []
    for index, (path, name) in enumerate(zip((path_a, path_b), names, strict=True)):
        frame, comparison = _load_and_compare(
            path,
            config,
            keep_all=keep_all,
            strict=strict,
            diagnosis=diagnosis,
            read_kwargs=_read_kwargs(read, fields, 2, index),
        )
        comparisons.append(_prefixed(comparison, name))
        selected, selection = select_phase(frame, phase)
        if selected.height == 0:
            raise DiagError(f"{path}: no records selected ({selection.reason})")
        frames.append(selected)
    tokens = (_tokens_per_step(comparisons[0]), _tokens_per_step(comparisons[1]))
    from dflash_diag.analysis.windows import choose_window

    window = choose_window(frames[0], config.window).size  # windows in steps of run A
    try:
        alignment = align_runs(
            frames[0], frames[1], x=x, window=window, names=names, tokens_per_step=tokens
        )
    except ValueError as exc:
        raise DiagError(str(exc)) from None
    return alignment, comparisons


def with_schedule_events(comparison: RegimeComparison, log, frame) -> RegimeComparison:
    """The comparison with the log's lr schedule restarts: listed, in the notes, and named in
    the explanation of a boundary they coincide with (a rate that jumps at the boundary changes
    what the loss does after it, whichever program runs)."""
    from dataclasses import replace

    from dflash_diag.analysis.schedule_events import detect_schedule_events, event_at

    steps = frame["step"].to_list()
    events = detect_schedule_events(
        [e.fields for e in log.run_starts], steps, frame["lr"].to_list()
    )
    # With --from-step/--to-step the frame is a step range: an event outside it is not this
    # comparison's (a restart of the schedule at its first step is, like a boundary there).
    if steps:
        events = [e for e in events if min(steps) <= e.step <= max(steps)]
    if not events:
        return comparison
    boundaries = []
    for b in comparison.boundaries:
        event = event_at(events, b.step)
        if event is not None:
            why = (
                "; also, the " + event.text()
                if b.matched
                else f"; but the {event.text()}: part of the change is the new learning rate, "
                "not the program"
            )
            b = replace(b, explanation=b.explanation + why)
        boundaries.append(b)
    notes = [*comparison.notes, *(e.text() for e in events)]
    return replace(comparison, boundaries=boundaries, notes=notes, schedule_events=events)


class _FieldsOnly(TypedDict):
    """load_log's reading options when no :class:`ReadOptions` is given: the field map only."""

    fields: dict[str, str] | None


def _read_kwargs(
    read: ReadOptions | None, fields: dict[str, str] | None, n_inputs: int, only: int | None
) -> LoadKwargs | _FieldsOnly:
    """load_log's reading options: a run's own format, preset and field map."""
    if read is None:
        return {"fields": fields}
    return read.load_kwargs(n_inputs, only)


def _tokens_per_step(comparison: RegimeComparison) -> float | None:
    """The tokens per step of a run's newest regime (None: no regime)."""
    return comparison.regimes[-1].tokens_per_step if comparison.regimes else None


def _run_names(path_a: str, path_b: str) -> tuple[str, str]:
    a, b = Path(path_a).name, Path(path_b).name
    return (path_a, path_b) if a == b else (a, b)


def _prefixed(comparison: RegimeComparison, run: str) -> RegimeComparison:
    from dataclasses import replace

    # Both runs' boundaries and notes are listed together: each says which run it belongs to.
    regimes = [replace(r, name=f"{run}: {r.name}") for r in comparison.regimes]
    boundaries = [replace(b, run=run) for b in comparison.boundaries]
    notes = [f"{run}: {note}" for note in comparison.notes]
    return replace(comparison, regimes=regimes, boundaries=boundaries, notes=notes)

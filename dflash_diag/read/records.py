"""The parsed form of a log: metric records as a polars frame, events, and the parse account.

Produced by :mod:`dflash_diag.read.jsonl`; consumed by every analysis (converge, compare, watch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

#: How many offending line numbers a report keeps (the count is always exact).
FIRST_N = 5

#: Steps must be below this in magnitude: every step is then exact as a float (the reader parses
#: numbers as floats) and window arithmetic (``start + window``) cannot overflow 64-bit integers.
#: A record with a step at or beyond it (or NaN/Inf) is counted in
#: :attr:`ParseIssues.bad_step` and left out, never wrapped around or dropped silently.
STEP_LIMIT = 2**53

#: Elements of a list field (``acc_pos``, ``accept_pos``, the walk's histogram) kept per record:
#: a block has B - 1 drafted positions (B is 16 in DFlash, 8 in EAGLE-3), so the rest of a
#: longer list is no position and is not read; without a bound a log with a few lists of 10^6
#: elements cost half a gigabyte and more.
MAX_LIST_ELEMENTS = 1024

#: Columns of :attr:`ParsedLog.metrics` besides the metric fields.
BOOKKEEPING_COLUMNS = ("source", "seq", "run", "script")


@dataclass
class ParseIssues:
    """What the parse had to skip, coerce or flag. Counts are exact; line lists are the first few.

    Attributes:
        lines: non-blank lines seen (complete ones plus a torn tail).
        malformed: lines that are not a JSON object (the torn last line excluded).
        malformed_lines: ``(source, line number)`` of the first few malformed lines.
        torn_tail: sources whose last line was incomplete and ignored.
        coerced: values given as strings where numbers belong (``"1.5"``, ``"nan"``), converted.
        nonnumeric: values that should be numbers but are not (``"abc"``, ``true``, an object),
            read as null.
        nonnumeric_lines: ``(source, line number)`` of the first few lines with such values.
        without_step: non-event records lacking a ``step``: not metric records, not analysed.
        nonfinite: NaN/Inf values per metric field (list elements counted one by one).
        bad_step: records whose ``step`` is NaN/Inf or at least :data:`STEP_LIMIT` in magnitude
            (an integer beyond 2^63, say): left out of the analysis, counted here.
        bad_step_lines: ``(source, line number)`` of the first few of them.
    """

    lines: int = 0
    malformed: int = 0
    malformed_lines: list[tuple[int, int]] = field(default_factory=list)
    torn_tail: list[int] = field(default_factory=list)
    coerced: int = 0
    nonnumeric: int = 0
    nonnumeric_lines: list[tuple[int, int]] = field(default_factory=list)
    without_step: int = 0
    nonfinite: dict[str, int] = field(default_factory=dict)
    bad_step: int = 0
    bad_step_lines: list[tuple[int, int]] = field(default_factory=list)

    def reader_notes(self) -> list[str]:
        """Remarks about the input for a report's notes (what has no line of its own)."""
        notes = []
        if self.bad_step:
            where = ", ".join(str(line) for _, line in self.bad_step_lines)
            more = ", ..." if self.bad_step > len(self.bad_step_lines) else ""
            notes.append(
                f"{self.bad_step} record(s) with a step out of range (NaN/Inf or beyond "
                f"±2^53) left out: line(s) {where}{more}"
            )
        return notes

    @property
    def nonfinite_total(self) -> int:
        """All NaN/Inf values in metric records."""
        return sum(self.nonfinite.values())

    def merge(self, other: ParseIssues) -> None:
        """Add ``other``'s counts to this one (used when several files or chunks are joined)."""
        self.lines += other.lines
        self.malformed += other.malformed
        self.malformed_lines = (self.malformed_lines + other.malformed_lines)[:FIRST_N]
        self.torn_tail = self.torn_tail + other.torn_tail
        self.coerced += other.coerced
        self.nonnumeric += other.nonnumeric
        self.nonnumeric_lines = (self.nonnumeric_lines + other.nonnumeric_lines)[:FIRST_N]
        self.without_step += other.without_step
        self.bad_step += other.bad_step
        self.bad_step_lines = (self.bad_step_lines + other.bad_step_lines)[:FIRST_N]
        for name, count in other.nonfinite.items():
            self.nonfinite[name] = self.nonfinite.get(name, 0) + count


@dataclass
class LogEvent:
    """One non-metric record (``run_start``, ``eval``, ``checkpoint``, ``nonfinite``, ``stop``, ...).

    Attributes:
        kind: the record's ``event`` value.
        source: index of the file it came from.
        seq: its line number in that file (1-based), comparable with the metrics' ``seq``.
        step: its ``step`` (for ``run_start``: ``resumed_from.step``), or None.
        fields: every field of the record but ``event``, decoded by :mod:`json` (field maps
            applied; NaN/Inf as floats).
    """

    kind: str
    source: int
    seq: int
    step: int | None
    fields: dict[str, Any]


@dataclass(kw_only=True)
class ParsedLog:
    """A parsed log: metric records as a frame, events as a list, and what went wrong.

    Attributes:
        metrics: one row per metric record in file order, columns ``source`` (file index),
            ``seq`` (the record's 1-based line number in its source), ``run`` (index into
            :attr:`run_starts` of the header governing the record, -1 before any), ``script``
            (that header's ``script``), ``step`` (Int64) and the metric fields of
            :data:`dflash_diag.logschema.METRIC_NUMBERS` (Float64) and
            :data:`~dflash_diag.logschema.METRIC_LISTS` (List(Float64)), plus any ``extra`` fields.
        events: the event records in file order.
        issues: the parse account.
        consumed_bytes: bytes up to and including the last complete line; a watch loop keeps
            ``data[consumed_bytes:]`` and prepends it to the next read.
        sources: the names of the inputs, by ``source`` index.
        first_line_no: line number of the first line parsed.
        next_line_no: line number of the first line after the consumed bytes.
        lists_pending: sources whose list columns (``acc_pos``, ``accept_pos``) were not read
            (null in :attr:`metrics`); :func:`fetch_lists` reads them for the rows that need them.
        fields: the field map the log was read with (to read it again the same way).
        chunk_starts: per source, ``(byte offset, line number)`` where each parsed chunk began,
            so :func:`fetch_lists` can seek instead of reading a file from its start.
        notes: how the inputs were read (format, preset) and fields mapped but never found,
            one line each, for the user (the CLI prints them on stderr).
        foreign: some input was read by another trainer's reader (not this project's JSONL
            schema): the drafter detector then needs evidence of a drafter.
        presets: the trainer presets those readers applied (given or detected), by name.
    """

    metrics: pl.DataFrame
    events: list[LogEvent]
    issues: ParseIssues
    consumed_bytes: int = 0
    sources: list[str] = field(default_factory=list)
    first_line_no: int = 1
    next_line_no: int = 1
    lists_pending: list[int] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    chunk_starts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    foreign: bool = False
    presets: list[str] = field(default_factory=list)

    @property
    def run_starts(self) -> list[LogEvent]:
        """The ``run_start`` headers; a metric row's ``run`` column indexes this list."""
        return [e for e in self.events if e.kind == "run_start"]

    @property
    def evals(self) -> list[LogEvent]:
        """The ``eval`` records (measured acceptance lengths)."""
        return [e for e in self.events if e.kind == "eval"]

    def append(self, later: ParsedLog) -> ParsedLog:
        """Join ``later``, parsed from the bytes that follow this log's in the SAME source.

        Records of ``later`` written before its first header belong to this log's last header;
        its ``run`` indices are shifted to follow this log's headers. Line numbers (``seq``) are
        shifted too when ``later`` was parsed without ``first_line_no`` (it then starts at 1).
        """
        return join_sequential([self, later])


def join_sequential(parts: Sequence[ParsedLog]) -> ParsedLog:
    """Join logs parsed from consecutive pieces of one source (see :meth:`ParsedLog.append`)."""
    assert parts, "nothing to join"
    frames: list[pl.DataFrame] = []
    events: list[LogEvent] = []
    issues = ParseIssues()
    n_runs = 0
    last_script: str | None = None
    next_line = parts[0].first_line_no
    consumed = 0
    for part in parts:
        shift = max(0, next_line - part.first_line_no) if frames or events else 0
        metrics = part.metrics
        if n_runs or shift:
            metrics = metrics.with_columns(
                (pl.col("seq") + shift).alias("seq"),
                pl.when(pl.col("run") < 0)
                .then(n_runs - 1)
                .otherwise(pl.col("run") + n_runs)
                .cast(pl.Int32)
                .alias("run"),
                pl.when(pl.col("run") < 0)
                .then(pl.lit(last_script, pl.String))
                .otherwise(pl.col("script"))
                .alias("script"),
            )
        frames.append(metrics)
        for e in part.events:
            events.append(
                LogEvent(e.kind, e.source, e.seq + shift, e.step, e.fields) if shift else e
            )
            if e.kind == "run_start":
                n_runs += 1
                script = e.fields.get("script")
                last_script = script if isinstance(script, str) else None
        issues.merge(part.issues)
        consumed += part.consumed_bytes
        next_line = part.next_line_no + shift
    return ParsedLog(
        metrics=frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False),
        events=events,
        issues=issues,
        consumed_bytes=consumed,
        sources=next((p.sources for p in parts if p.sources), []),
        first_line_no=parts[0].first_line_no,
        next_line_no=next_line,
        lists_pending=sorted({s for p in parts for s in p.lists_pending}),
        fields=dict(parts[0].fields),
        foreign=any(p.foreign for p in parts),
        presets=sorted({name for p in parts for name in p.presets}),
    )

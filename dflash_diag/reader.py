"""Reading JSONL training logs into polars frames, robustly and fast.

Layers (each usable alone, so a watch loop can feed new bytes as they arrive):

1. :func:`parse_records` turns bytes into a :class:`ParsedLog`: a frame of metric records with a
   declared schema, the event records (``run_start``, ``eval``, ``checkpoint``, ...) and a
   :class:`ParseIssues` account of torn, malformed and non-numeric lines and of NaN/Inf values.
2. :func:`load_log` reads files, ``.gz`` files and ``-`` (standard input) and merges them.
3. :func:`dflash_diag.restarts.resolve_restarts` and :func:`dflash_diag.phase.select_phase`
   work on the resulting frame.

How the parse stays fast on clean logs and robust on dirty ones: the whole buffer goes to polars'
NDJSON reader with an explicit schema (only the declared fields are materialised). polars rejects a
buffer as a whole when any line is bad, so on failure the buffer is bisected on line boundaries until
the bad lines sit in small chunks, which are parsed line by line with :func:`json.loads` and coerced
leniently (numeric strings become numbers and are counted). One bad line in a million therefore
costs about two extra polars passes, not a Python pass.

Python's ``json`` writes NaN and infinities as bare ``NaN``/``Infinity`` tokens, which polars
rejects; the lines holding them are re-encoded with sentinel numbers before parsing, and the
sentinels turned back into NaN/inf after (only those lines pay a Python pass).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.schema import (
    EVENT_JSON_FIELDS,
    EVENT_TEXTS,
    read_schema,
)

#: Lines per chunk below which a failing chunk is parsed line by line in Python.
_LEAF_LINES = 64
#: How many offending line numbers a report keeps (the count is always exact).
_FIRST_N = 5

# Sentinels for Python-json's non-standard tokens. Values this close to the float maximum never
# occur in training metrics, and each parses back to exactly the same double.
_NAN_SENTINEL = 1.7976931348623155e308
_POS_INF_SENTINEL = 1.7976931348623157e308
_NEG_INF_SENTINEL = -1.7976931348623157e308
_NONSTANDARD_WORD = re.compile(rb"NaN|Infinity")

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

    @property
    def nonfinite_total(self) -> int:
        """All NaN/Inf values in metric records."""
        return sum(self.nonfinite.values())

    def merge(self, other: ParseIssues) -> None:
        """Add ``other``'s counts to this one (used when several files or chunks are joined)."""
        self.lines += other.lines
        self.malformed += other.malformed
        self.malformed_lines = (self.malformed_lines + other.malformed_lines)[:_FIRST_N]
        self.torn_tail = self.torn_tail + other.torn_tail
        self.coerced += other.coerced
        self.nonnumeric += other.nonnumeric
        self.nonnumeric_lines = (self.nonnumeric_lines + other.nonnumeric_lines)[:_FIRST_N]
        self.without_step += other.without_step
        for name, count in other.nonfinite.items():
            self.nonfinite[name] = self.nonfinite.get(name, 0) + count


@dataclass
class LogEvent:
    """One non-metric record (``run_start``, ``eval``, ``checkpoint``, ``nonfinite``, ``stop``, ...).

    Attributes:
        kind: the record's ``event`` value.
        source: index of the file it came from.
        seq: position of the record among all records of its source (metric records included).
        step: its ``step`` (for ``run_start``: ``resumed_from.step``), or None.
        fields: the declared fields it carries, JSON objects decoded (``schedule``, ``config``...).
    """

    kind: str
    source: int
    seq: int
    step: int | None
    fields: dict[str, Any]


@dataclass
class ParsedLog:
    """A parsed log: metric records as a frame, events as a list, and what went wrong.

    Attributes:
        metrics: one row per metric record in file order, columns ``source`` (file index),
            ``seq`` (record position in its source), ``run`` (index into :attr:`run_starts` of the
            header governing the record, -1 before any), ``script`` (that header's ``script``),
            ``step`` (Int64) and the metric fields of :data:`dflash_diag.schema.METRIC_NUMBERS`
            and :data:`~dflash_diag.schema.METRIC_LISTS` (Float64 / List(Float64)).
        events: the event records in file order.
        issues: the parse account.
        consumed_bytes: bytes up to and including the last complete line of the (last) buffer; a
            watch loop keeps ``data[consumed_bytes:]`` and prepends it to the next read.
        sources: the names of the inputs, by ``source`` index.
    """

    metrics: pl.DataFrame
    events: list[LogEvent]
    issues: ParseIssues
    consumed_bytes: int = 0
    sources: list[str] = field(default_factory=list)

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

        Records of ``later`` written before its first header belong to this log's last header, and
        its ``run`` indices and ``seq`` positions are shifted to follow this log's. For watch loops.
        """
        n_runs = len(self.run_starts)
        last_run = n_runs - 1
        last_script = self.run_starts[-1].fields.get("script") if n_runs else None
        seq_offset = _next_seq(self)
        metrics = later.metrics.with_columns(
            pl.col("seq") + seq_offset,
            pl.when(pl.col("run") < 0).then(last_run).otherwise(pl.col("run") + n_runs)
            .cast(pl.Int32).alias("run"),
            pl.when(pl.col("run") < 0).then(pl.lit(last_script, pl.String))
            .otherwise(pl.col("script")).alias("script"),
        )
        events = self.events + [
            LogEvent(e.kind, e.source, e.seq + seq_offset, e.step, e.fields) for e in later.events
        ]
        issues = ParseIssues()
        issues.merge(self.issues)
        issues.merge(later.issues)
        return ParsedLog(
            metrics=pl.concat([self.metrics, metrics], how="vertical"),
            events=events,
            issues=issues,
            consumed_bytes=self.consumed_bytes + later.consumed_bytes,
            sources=self.sources or later.sources,
        )


def _next_seq(log: ParsedLog) -> int:
    last_metric = log.metrics["seq"].max() if log.metrics.height else -1
    last_event = max((e.seq for e in log.events), default=-1)
    return int(max(last_metric if last_metric is not None else -1, last_event)) + 1


# --------------------------------------------------------------------------------------------
# parsing one buffer


def parse_records(
    data: bytes,
    *,
    first_line_no: int = 1,
    strict: bool = False,
    final: bool = True,
    source: int = 0,
    fields: Mapping[str, str] | None = None,
    extra: Mapping[str, pl.DataType] | None = None,
) -> ParsedLog:
    """Parse JSONL bytes into metric records, events and a parse account.

    Args:
        data: the log's bytes (one JSON object per line).
        first_line_no: line number of ``data``'s first line, for messages about later chunks.
        strict: raise :class:`DiagError` on the first malformed line instead of counting it.
        final: ``data`` ends the stream. If False, an unterminated last line is left unconsumed
            (see :attr:`ParsedLog.consumed_bytes`) even when it happens to be valid JSON.
        source: the ``source`` index to stamp on the records.
        fields: canonical name -> log name (``{"acc": "train/acc"}``).
        extra: more fields to read, canonical name -> polars dtype (become extra frame columns).

    Returns:
        The :class:`ParsedLog`. A torn last line (no trailing newline, not a JSON object) is
        dropped quietly and noted in ``issues.torn_tail``.

    Raises:
        DiagError: ``strict`` and a malformed line.

    Example:
        >>> log = parse_records(b'{"step": 1, "acc": 0.5}\\n{"step": 2, "ac')
        >>> log.metrics["acc"].to_list(), log.issues.torn_tail
        ([0.5], [0])
    """
    schema, rename = read_schema(fields, extra)
    issues = ParseIssues()
    body_end = _complete_end(data, final=final)
    tail = data[body_end:]
    if tail.strip():
        issues.lines += 1
        issues.torn_tail.append(source)
    body = data if body_end == len(data) else data[:body_end]
    # memoryview slicing in the bisection below never copies; polars needs bytes per call.
    body, substituted = _replace_nonfinite_tokens(body)
    parser = _ChunkParser(body, schema, strict=strict, source=source, issues=issues)
    frame = parser.parse(first_line_no)
    issues.lines += parser.lines
    frame = _canonicalise(frame, schema, rename, extra, substituted)
    return _split_records(frame, issues, body_end, source)


def _complete_end(data: bytes, *, final: bool) -> int:
    """End offset of the last complete line: an unterminated tail counts only if it is whole JSON."""
    if not data or data.endswith(b"\n"):
        return len(data)
    last_newline = data.rfind(b"\n")
    start = last_newline + 1
    if final:
        try:
            if isinstance(json.loads(data[start:]), dict):
                return len(data)  # a complete record whose writer omitted the final newline
        except ValueError:
            pass
    return start


def _replace_nonfinite_tokens(body: bytes) -> tuple[bytes, bool]:
    """Rewrite lines holding bare NaN/Infinity tokens with sentinel numbers polars accepts.

    Only lines containing the words are touched, each decoded by :func:`json.loads` (which knows
    the tokens) and re-encoded, so a path like ``"runs/NaN"`` is never altered. Lines that do not
    decode are left as they are: the parse will count them as malformed.
    """
    if b"NaN" not in body and b"Infinity" not in body:
        return body, False
    pieces: list[bytes] = []
    copied = 0  # body[:copied] is already in pieces
    changed = False
    for match in _NONSTANDARD_WORD.finditer(body):
        if match.start() < copied:
            continue  # another word on a line already handled
        line_start = body.rfind(b"\n", 0, match.start()) + 1
        line_end = body.find(b"\n", match.end())
        line_end = len(body) if line_end < 0 else line_end
        rewritten = _sentinel_line(body[line_start:line_end])
        if rewritten is not None:
            pieces.append(body[copied:line_start])
            pieces.append(rewritten)
            copied = line_end
            changed = True
        else:
            pieces.append(body[copied:line_end])
            copied = line_end
    if not changed:
        return body, False
    pieces.append(body[copied:])
    return b"".join(pieces), True


def _sentinel_line(line: bytes) -> bytes | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    found = False

    def swap(value: Any) -> Any:
        nonlocal found
        if isinstance(value, float) and not math.isfinite(value):
            found = True
            if math.isnan(value):
                return _NAN_SENTINEL
            return _POS_INF_SENTINEL if value > 0 else _NEG_INF_SENTINEL
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    record = swap(record)
    return json.dumps(record).encode() if found else None


class _ChunkParser:
    """Bisects a buffer until polars accepts every chunk; tiny failing chunks go line by line."""

    def __init__(
        self, body: bytes, schema: dict[str, pl.DataType], *, strict: bool, source: int,
        issues: ParseIssues,
    ) -> None:
        self.body = body
        self.view = memoryview(body)
        self.schema = schema
        self.strict = strict
        self.source = source
        self.issues = issues
        self.frames: list[pl.DataFrame] = []
        self.lines = 0

    def parse(self, first_line_no: int) -> pl.DataFrame:
        self._chunk(0, len(self.body), first_line_no)
        if not self.frames:
            return pl.DataFrame(schema=self.schema)
        if len(self.frames) == 1:
            return self.frames[0]
        return pl.concat(self.frames, how="vertical")

    def _chunk(self, start: int, end: int, line_no: int) -> None:
        chunk = self.body if (start == 0 and end == len(self.body)) else self.view[start:end].tobytes()
        try:
            frame = pl.read_ndjson(chunk, schema=self.schema)
        # polars reports a bad line with several exception types (ComputeError, SchemaError, a
        # Rust panic); any of them only means "bisect further", never a crash.
        except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
            frame = None
        if frame is not None:
            self.frames.append(frame)
            self.lines += frame.height
            return
        n_lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        if n_lines <= _LEAF_LINES:
            self._lines_one_by_one(chunk, line_no)
            return
        middle = self.body.find(b"\n", start + (end - start) // 2, end)
        if middle < 0 or middle + 1 >= end:
            middle = self.body.rfind(b"\n", start, start + (end - start) // 2)
        if middle < 0:
            self._lines_one_by_one(chunk, line_no)
            return
        split = middle + 1
        self._chunk(start, split, line_no)
        self._chunk(split, end, line_no + self.body.count(b"\n", start, split))

    def _lines_one_by_one(self, chunk: bytes, line_no: int) -> None:
        columns: dict[str, list[Any]] = {name: [] for name in self.schema}
        for offset, raw in enumerate(chunk.split(b"\n")):
            if not raw.strip():
                continue
            self.lines += 1
            where = (self.source, line_no + offset)
            try:
                record = json.loads(raw)
            except ValueError:  # includes UnicodeDecodeError
                record = None
            if not isinstance(record, dict):
                if self.strict:
                    raise DiagError(f"malformed line {where[1]} (not a JSON object); --strict is set")
                self.issues.malformed += 1
                if len(self.issues.malformed_lines) < _FIRST_N:
                    self.issues.malformed_lines.append(where)
                continue
            bad_before = self.issues.nonnumeric
            for name, dtype in self.schema.items():
                columns[name].append(self._coerce(record.get(name), dtype))
            if self.issues.nonnumeric > bad_before and len(self.issues.nonnumeric_lines) < _FIRST_N:
                self.issues.nonnumeric_lines.append(where)
        if columns and next(iter(columns.values())):
            self.frames.append(pl.DataFrame(columns, schema=self.schema))

    def _coerce(self, value: Any, dtype: pl.DataType) -> Any:
        if value is None:
            return None
        if dtype == pl.String:
            return value if isinstance(value, str) else json.dumps(value)
        if isinstance(dtype, pl.List):
            if not isinstance(value, list):
                self.issues.nonnumeric += 1
                return None
            return [self._number(item) for item in value]
        if dtype.is_numeric():
            return self._number(value)
        return None  # an extra field of a dtype this lenient path does not handle

    def _number(self, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool):
            self.issues.nonnumeric += 1
            return None
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                self.issues.nonnumeric += 1
                return None
            self.issues.coerced += 1
            return number
        self.issues.nonnumeric += 1
        return None


def _canonicalise(
    frame: pl.DataFrame,
    schema: Mapping[str, pl.DataType],
    rename: Mapping[str, str],
    extra: Mapping[str, pl.DataType] | None,
    substituted: bool,
) -> pl.DataFrame:
    """Canonical names, every declared column present, sentinels back to NaN/inf."""
    if rename:
        frame = frame.rename(dict(rename))
    wanted, _ = read_schema(None, extra)
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in wanted.items()
               if name not in frame.columns]
    if missing:
        frame = frame.with_columns(missing)
    if substituted:
        floats = [name for name, dtype in frame.schema.items() if dtype == pl.Float64]
        lists = [name for name, dtype in frame.schema.items() if dtype == pl.List(pl.Float64)]
        frame = frame.with_columns(
            [_unsentinel(pl.col(name)).alias(name) for name in floats]
            + [pl.col(name).list.eval(_unsentinel(pl.element())).alias(name) for name in lists]
        )
    return frame


def _unsentinel(expr: pl.Expr) -> pl.Expr:
    return (
        pl.when(expr == _NAN_SENTINEL).then(float("nan"))
        .when(expr == _POS_INF_SENTINEL).then(float("inf"))
        .when(expr == _NEG_INF_SENTINEL).then(float("-inf"))
        .otherwise(expr)
    )


def _split_records(frame: pl.DataFrame, issues: ParseIssues, consumed: int, source: int) -> ParsedLog:
    """Separate metric records from events and stamp bookkeeping columns."""
    is_event = pl.col("event").is_not_null() & (pl.col("event") != "metrics")
    is_header = (pl.col("event") == "run_start").fill_null(False)
    frame = frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("seq"),
        (is_header.cast(pl.Int32).cum_sum() - 1).alias("run"),
        # The governing header's script, carried forward; "" marks a header without one.
        pl.when(is_header).then(pl.col("script").fill_null("")).otherwise(None)
        .forward_fill().replace("", None).alias("_header_script"),
        is_event.fill_null(False).alias("_is_event"),
    )
    metric_columns = [name for name in frame.columns
                      if name not in EVENT_TEXTS and not name.startswith("_")
                      and name not in ("seq", "run") and name not in _EVENT_ONLY]
    metrics = (
        frame.filter(~pl.col("_is_event") & pl.col("step").is_not_null())
        .select(
            pl.lit(source, pl.Int32).alias("source"),
            "seq",
            "run",
            pl.col("_header_script").alias("script"),
            pl.col("step").cast(pl.Int64, strict=False),
            *[c for c in metric_columns if c != "step"],
        )
        .filter(pl.col("step").is_not_null())
    )
    issues.without_step += int(
        frame.select((~pl.col("_is_event") & pl.col("step").is_null()).sum()).item()
    )
    _count_nonfinite(metrics, issues)
    event_rows = frame.filter(pl.col("_is_event")).drop("_is_event", "_header_script")
    events = [_event_from_row(row, source) for row in event_rows.iter_rows(named=True)]
    return ParsedLog(metrics=metrics, events=events, issues=issues, consumed_bytes=consumed)


_EVENT_ONLY = frozenset(("tau", "n_prompts", "new_tokens", "temperature", "block_size",
                         "steps_per_epoch", "world_size"))


def _count_nonfinite(metrics: pl.DataFrame, issues: ParseIssues) -> None:
    exprs = []
    for name, dtype in metrics.schema.items():
        if name in ("step", "seq", "run", "source"):
            continue
        if dtype == pl.Float64:
            exprs.append((~pl.col(name).is_finite()).sum().alias(name))
        elif dtype == pl.List(pl.Float64):
            exprs.append((~pl.col(name).explode().is_finite()).sum().alias(name))
    if not exprs or metrics.height == 0:
        return
    for name, count in metrics.select(exprs).row(0, named=True).items():
        if count:
            issues.nonfinite[name] = issues.nonfinite.get(name, 0) + int(count)


def _event_from_row(row: dict[str, Any], source: int) -> LogEvent:
    kind = str(row.pop("event"))
    seq = int(row.pop("seq"))
    row.pop("run", None)
    fields: dict[str, Any] = {}
    for name, value in row.items():
        if value is None or (isinstance(value, list) and not value):
            continue
        if name in EVENT_JSON_FIELDS and isinstance(value, str):
            try:
                # polars re-serialises nested values without escaping control characters.
                value = json.loads(value, strict=False)
            except ValueError:
                pass  # keep the text: a header with a plain-string schedule is still shown
        fields[name] = value
    step = fields.get("step")
    if step is None and isinstance(fields.get("resumed_from"), dict):
        step = fields["resumed_from"].get("step")
    step_int = int(step) if isinstance(step, (int, float)) and math.isfinite(step) else None
    return LogEvent(kind=kind, source=source, seq=seq, step=step_int, fields=fields)


# --------------------------------------------------------------------------------------------
# files


def read_input(path: str) -> bytes:
    """The bytes of a log: a file, a ``.gz`` file, or ``-`` for standard input.

    Raises:
        DiagError: the file is missing, unreadable, or a corrupt ``.gz``.
    """
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            return data
        file = Path(path)
        if not file.exists():
            raise DiagError(f"no such file: {path}")
        if file.is_dir():
            raise DiagError(f"is a directory, not a log: {path}")
        with file.open("rb") as handle:
            magic = handle.read(2)
        if magic == b"\x1f\x8b":
            with gzip.open(file, "rb") as handle:
                return handle.read()
        return file.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None


def load_log(
    paths: str | Path | Sequence[str | Path],
    *,
    strict: bool = False,
    fields: Mapping[str, str] | None = None,
    extra: Mapping[str, pl.DataType] | None = None,
) -> ParsedLog:
    """Read one or more logs (paths, ``.gz``, ``-`` for stdin) into one :class:`ParsedLog`.

    Files are parsed separately (``source`` = position in ``paths``) and concatenated; restarts are
    resolved per source and the records merged in step order by
    :func:`dflash_diag.restarts.resolve_restarts`.

    Raises:
        DiagError: a missing or unreadable file, a log with no records at all, or records none of
            which has a ``step`` (suggesting ``--field step=NAME``).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    names = [str(p) for p in paths]
    if not names:
        raise DiagError("no log given")
    if names.count("-") > 1:
        raise DiagError("standard input ('-') can be read only once")
    parts = []
    for index, name in enumerate(names):
        parts.append(parse_records(read_input(name), strict=strict, source=index, fields=fields,
                                   extra=extra))
    issues = ParseIssues()
    events: list[LogEvent] = []
    frames = []
    for part in parts:
        # Header indices become global: offset by the headers of the files before.
        frames.append(part.metrics.with_columns(
            pl.when(pl.col("run") >= 0).then(pl.col("run") + len([e for e in events
                                                                   if e.kind == "run_start"]))
            .otherwise(-1).cast(pl.Int32).alias("run")))
        events.extend(part.events)
        issues.merge(part.issues)
    metrics = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")
    log = ParsedLog(metrics=metrics, events=events, issues=issues,
                    consumed_bytes=sum(p.consumed_bytes for p in parts), sources=names)
    shown = ", ".join(names)
    if issues.lines == 0:
        raise DiagError(f"empty log: {shown}")
    if metrics.height == 0:
        if issues.without_step:
            raise DiagError(
                f"no record has a 'step' field in {shown} (map one with --field step=NAME)")
        raise DiagError(f"no metric records in {shown}")
    return log

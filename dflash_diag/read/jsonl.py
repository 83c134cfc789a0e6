"""Reading JSONL training logs into polars frames, robustly and fast.

Layers (each usable alone, so a watch loop can feed new bytes as they arrive):

1. :func:`parse_records` turns bytes into a :class:`ParsedLog`: a frame of metric records with a
   declared schema, the event records (``run_start``, ``eval``, ``checkpoint``, ...) and a
   :class:`ParseIssues` account of torn, malformed and non-numeric lines and of NaN/Inf values.
2. :func:`parse_stream` streams a file, a ``.gz`` file or ``-`` (standard input) through
   :func:`parse_records` in chunks of a few MiB
   (:func:`dflash_diag.read.formats.load.load_log` reads and merges the inputs of any format).
3. :func:`dflash_diag.analysis.restarts.resolve_restarts` and :func:`dflash_diag.analysis.phase.select_phase`
   work on the resulting frame.

How the parse stays fast on clean logs and robust on dirty ones: a whole chunk goes to polars'
NDJSON reader with an explicit schema of the metric fields (only those are materialised; every
declared column costs time on every line, so event-only fields are not in it). polars rejects a
chunk as a whole when any line is bad, so on failure the chunk is bisected on line boundaries until
the bad lines sit in small pieces, which are parsed line by line with :func:`json.loads` and coerced
leniently (numeric strings become numbers and are counted). One bad line in a million therefore
costs a few extra polars passes over small pieces, not a Python pass.

Event lines are rare: polars' ``event`` column says which lines hold one, and :func:`json.loads`
decodes those lines whole, so headers keep every field (``config``, ``schedule``...).

Python's ``json`` writes NaN and infinities as bare ``NaN``/``Infinity`` tokens, which polars
rejects; the lines holding them are re-encoded with sentinel numbers before parsing, and the
sentinels turned back into NaN/inf after (only those lines pay a Python pass).
"""

from __future__ import annotations

import bisect
import importlib
import io
import json
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.bounded_json import decode_line, to_float
from dflash_diag.read.files import (
    CHUNK_BYTES,
    OVERLONG_LINE,
    LineStats,
    line_chunks,
    open_input,
    read_input,
)
from dflash_diag.read.files import count_newlines as _count_newlines
from dflash_diag.read.nonfinite_tokens import (
    replace_nonfinite_tokens,
    restore_nonfinite,
    undo_sentinels,
)
from dflash_diag.read.records import (  # re-exported: the reader's public types live in records.py
    BOOKKEEPING_COLUMNS,
    FIRST_N,
    MAX_LIST_ELEMENTS,
    STEP_LIMIT,
    LogEvent,
    ParsedLog,
    ParseIssues,
    join_sequential,
)
from dflash_diag.read.schema import METRIC_LISTS, read_schema

__all__ = [
    "BOOKKEEPING_COLUMNS",
    "CHUNK_BYTES",
    "LogEvent",
    "ParseIssues",
    "ParsedLog",
    "fetch_lists",
    "join_sequential",
    "open_input",
    "parse_clean_records",
    "parse_records",
    "parse_stream",
    "read_input",
]

#: Lines per piece below which a failing piece is parsed line by line in Python.
_LEAF_LINES = 64
#: Chunks read and handed to polars before the oldest one's Python work is done (raw text held:
#: this many chunks plus one).
_CHUNKS_AHEAD = 1
#: Rows per slice when counting NaN/Inf inside list columns (see _count_issues).
_LIST_COUNT_ROWS = 2**16

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
    lists: bool = True,
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
        lists: read ``acc_pos``/``accept_pos`` (else those columns are null).

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
    piece = _parse_piece(
        data,
        first_line_no=first_line_no,
        strict=strict,
        final=final,
        source=source,
        fields=fields,
        extra=extra,
        lists=lists,
        only=True,
    )
    return _assemble([piece], source=source, fields=fields, extra=extra, lists=lists)


def parse_clean_records(
    data: bytes,
    *,
    first_line_no: int = 1,
    fields: Mapping[str, str] | None = None,
    lists: bool = True,
) -> ParsedLog | None:
    """:func:`parse_records` of ``data`` when polars reads all of it at once, else None.

    None says some line needed a closer look (a malformed line, a bare ``NaN``, a value polars
    rejects, a torn last line): the caller then parses ``data`` with :func:`parse_records`.
    ``watch`` reads a large backlog without the lists this way only where no line of it can
    have needed Python's decoding, whose coercions differ with the schema.
    """
    schema, _ = read_schema(fields, None, lists)
    body_end = _complete_end(data, final=True)
    if body_end != len(data):
        return None
    frame = _read(data, schema)
    if frame is None:
        return None
    parsed: Future[pl.DataFrame | None] = Future()
    parsed.set_result(frame)
    piece = _parse_piece(
        data,
        first_line_no=first_line_no,
        strict=False,
        final=True,
        source=0,
        fields=fields,
        extra=None,
        lists=lists,
        body_end=body_end,
        parsed=parsed,
        only=True,
    )
    return _assemble([piece], source=0, fields=fields, extra=None, lists=lists)


@dataclass
class _Piece:
    """One parsed buffer before assembly (raw log field names, a ``_line`` column)."""

    frame: pl.DataFrame
    events: list[LogEvent]
    issues: ParseIssues
    consumed: int
    first_line_no: int
    next_line_no: int
    #: the frame's rows, once its columns are taken into :class:`_NumberColumns`
    rows: int = -1

    @property
    def height(self) -> int:
        return self.frame.height if self.rows < 0 else self.rows


class _NumberColumns:
    """The pieces' number columns (Float64, Int64), taken out of each piece as it is parsed and
    joined in numpy buffers: what :func:`_concat_pieces` makes of them (one chunk per column,
    nulls where a piece lacks the column), handed to polars without a copy.

    Kept in the pieces until assembly, the columns were held beside their joined copies; and
    polars' allocator keeps a piece's freed pages in the arena of the thread that parsed it,
    where the main thread's copies do not reuse them (mixed shape at 1M: +56 MiB). Taken out
    as they come, each piece's pages are reused by the next piece's parse.
    """

    def __init__(self, schema: Mapping[str, pl.DataType], size_hint: int) -> None:
        import numpy as np

        self._np = np
        self.kinds = {
            name: "float64" if dtype == pl.Float64 else "int64"
            for name, dtype in schema.items()
            if dtype in (pl.Float64, pl.Int64)
        }
        self.schema = dict(schema)
        self.size_hint = size_hint  # the input's bytes (0: unknown)
        self.rows = 0
        self.capacity = 0
        self.values: dict[str, Any] = {}
        self.valid: dict[str, Any] = {}

    def take(self, piece: _Piece, piece_bytes: int) -> None:
        """Move the piece's number columns into the buffers (the piece keeps its row count)."""
        np = self._np
        frame = piece.frame
        height = frame.height
        types = frame.schema
        names = [n for n in types if n in self.kinds]
        for name in names:
            if types[name] != self.schema[name]:
                # the pieces are read with the schema's types (concat refused any other)
                raise pl.exceptions.SchemaError(f"{name}: {types[name]}")
        if self.rows + height > self.capacity:
            if not self.capacity and self.size_hint and piece_bytes:
                # rows in the whole input, as this piece suggests, and a margin
                estimate = height * (self.size_hint // piece_bytes + 1) * 11 // 10
            else:
                estimate = self.capacity * 3 // 2
            # (realloc: untouched capacity costs no memory, the grown part is zeroed)
            self.capacity = max(self.rows + height, estimate, 1024)
            for array in (*self.values.values(), *self.valid.values()):
                array.resize(self.capacity, refcheck=False)
        end = self.rows + height
        for name in names:
            column = frame.get_column(name)
            if name not in self.values:
                self.values[name] = np.empty(self.capacity, dtype=self.kinds[name])
                if self.rows:
                    self.valid[name] = np.zeros(self.capacity, dtype=bool)
            nulls = column.null_count()
            if nulls and name not in self.valid:
                self.valid[name] = np.ones(self.capacity, dtype=bool)
            self.values[name][self.rows : end] = (
                column.fill_null(0) if nulls else column
            ).to_numpy()
            if name in self.valid:
                self.valid[name][self.rows : end] = column.is_not_null().to_numpy()
        for name in self.values:
            if name not in names and name in self.valid:
                self.valid[name][self.rows : end] = False
            elif name not in names:
                self.valid[name] = np.ones(self.capacity, dtype=bool)
                self.valid[name][self.rows : end] = False
        self.rows = end
        piece.rows = height
        piece.frame = frame.drop(names)

    def pop(self, name: str) -> pl.Series | None:
        """The joined column (None: no piece held it); its buffers are handed over."""
        values = self.values.pop(name, None)
        if values is None:
            return None
        values.resize(self.rows, refcheck=False)
        series = pl.Series(name, values, dtype=self.schema[name])
        del values
        valid = self.valid.pop(name, None)
        if valid is None:
            return series
        valid.resize(self.rows, refcheck=False)
        # the nulls (the values under them are none): one column's copy at a time
        return (
            series.to_frame()
            .select(pl.when(pl.lit(pl.Series(valid))).then(pl.col(name)).alias(name))
            .to_series()
        )


def _parse_piece(
    data: bytes,
    *,
    first_line_no: int,
    strict: bool,
    final: bool,
    source: int,
    fields: Mapping[str, str] | None,
    extra: Mapping[str, pl.DataType] | None,
    lists: bool,
    body_end: int | None = None,
    parsed: Future[pl.DataFrame | None] | None = None,
    only: bool = False,
) -> _Piece:
    """Parse one buffer: polars (with bisection), sentinels undone, events.

    ``body_end`` and ``parsed`` (polars' whole-buffer parse of ``data[:body_end]``, possibly still
    running in a worker thread) come from :func:`parse_stream`, which parses the next chunk while
    this one's Python work runs. ``only``: the piece is its source's only one (its columns with
    no value are left to :func:`_concat_pieces`' one select).
    """
    schema, _ = read_schema(fields, extra, lists)
    event_column = (fields or {}).get("event", "event")
    issues = ParseIssues()
    if body_end is None:
        body_end = _complete_end(data, final=final)
    if data[body_end:].strip():
        issues.lines += 1
        issues.torn_tail.append(source)
    body = data if body_end == len(data) else data[:body_end]
    is_event = (pl.col(event_column).is_not_null() & (pl.col(event_column) != "metrics")).fill_null(
        False
    )
    parser = _ChunkParser(
        body, schema, strict=strict, source=source, issues=issues, is_event=is_event
    )
    frame = parser.parse(
        first_line_no, parsed.result() if parsed is not None else _read(body, schema)
    )
    issues.lines += parser.lines
    if parser.substituted:
        frame = undo_sentinels(frame)
    frame = _bound_lists(frame, schema)
    if not parser.has_events:
        events = []
    else:
        if parser.line_index is not None:
            events = _events_from_lines(
                parser.line_index, parser.event_lines, first_line_no, source, fields or {}
            )
        else:
            events = _scan_events(parser.body, first_line_no, source, fields or {})
        # The event rows go here, piece by piece (their lines are decoded whole above): the copy
        # is one piece's columns, whose memory the next piece reuses, instead of a filtered copy
        # of the whole assembled frame.
        frame = frame.filter(~is_event)
    # Columns with no value are not held while the rest of the file is parsed (see
    # _concat_pieces): in a log of another layout most of the schema's fields are.
    if not only:
        frame = frame.select(
            c for c in frame.columns if c == "_line" or frame[c].null_count() < frame.height
        )
    return _Piece(frame, events, issues, body_end, first_line_no, first_line_no + parser.newlines)


def _bound_lists(frame: pl.DataFrame, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """List columns cut to :data:`MAX_LIST_ELEMENTS` (only when some list is longer: no copy
    of the usual frame)."""
    names = [
        n
        for n, dtype in schema.items()
        if isinstance(dtype, pl.List)
        and n in frame.columns
        and frame[n].null_count() < frame.height  # an empty column has no list to cut: no query
    ]
    if not names or frame.height == 0:
        return frame
    longest = frame.select(pl.max_horizontal(pl.col(n).list.len().max() for n in names)).item()
    if longest is None or longest <= MAX_LIST_ELEMENTS:
        return frame
    return frame.with_columns(pl.col(n).list.head(MAX_LIST_ELEMENTS) for n in names)


def _assemble(
    pieces: Sequence[_Piece],
    *,
    source: int,
    fields: Mapping[str, str] | None,
    extra: Mapping[str, pl.DataType] | None,
    lists: bool,
    numbers: _NumberColumns | None = None,
) -> ParsedLog:
    """Join consecutive pieces of one source into a :class:`ParsedLog` (one pass of polars ops);
    ``numbers``: their number columns, taken out of them as they were parsed."""
    schema, rename = read_schema(fields, extra, lists)
    frame = _concat_pieces(pieces, {**schema, "_line": pl.Int64()}, numbers)
    if rename:
        frame = frame.rename(dict(rename))
    issues = ParseIssues()
    events: list[LogEvent] = []
    for piece in pieces:
        issues.merge(piece.issues)
        events.extend(piece.events)
    wanted, _ = read_schema(None, extra)
    log = _split_records(frame, events, issues, source, wanted)
    log.consumed_bytes = sum(p.consumed for p in pieces)
    log.first_line_no = pieces[0].first_line_no
    log.next_line_no = pieces[-1].next_line_no
    log.fields = dict(fields or {})
    if not lists:
        log.lists_pending = [source]
    return log


def _concat_pieces(
    pieces: Sequence[_Piece],
    schema: Mapping[str, pl.DataType],
    numbers: _NumberColumns | None = None,
) -> pl.DataFrame:
    """The pieces' frames as one with every column of ``schema``, in its order, one chunk per
    column: the first analysis query that needs aligned columns (a with_columns, a group-by)
    would otherwise copy the whole frame again on every call.

    Column by column, each freed from the pieces once copied. A column no piece holds (a piece
    keeps only the columns with a value: most of the schema's fields in another layout's log)
    is a null literal, which polars does not materialise; a piece without a column that others
    hold gets nulls for it.
    """
    if len(pieces) == 1 and numbers is None:
        # one piece (every small file): its columns as they are, the absent ones null literals,
        # in one select instead of a drop per column
        frame = pieces[0].frame
        # (a column with no value becomes the same null literal here as in a piece of many)
        present = {c for c in frame.columns if c == "_line" or frame[c].null_count() < frame.height}
        if len(present) == len(schema) and frame.columns == list(schema):
            return frame
        return frame.select(
            pl.col(name) if name in present else pl.lit(None, dtype).alias(name)
            for name, dtype in schema.items()
        )
    height = sum(p.height for p in pieces)
    columns: list[pl.Series] = []
    empty: list[str] = []
    for name, dtype in schema.items():
        taken = numbers.pop(name) if numbers is not None else None
        if taken is not None:
            columns.append(taken)
            continue
        if not any(name in p.frame.columns for p in pieces):
            empty.append(name)
            continue
        parts = [
            p.frame.get_column(name)
            if name in p.frame.columns
            else pl.repeat(None, p.height, dtype=dtype, eager=True).alias(name)
            for p in pieces
        ]
        columns.append(parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=True))
        del parts
        for piece in pieces:  # copied into the one chunk: free the pieces' column now
            if name in piece.frame.columns:
                piece.frame = piece.frame.drop(name)
    frame = pl.DataFrame(columns, height=height) if columns else pl.DataFrame(height=height)
    if empty:
        frame = frame.with_columns(pl.lit(None, schema[name]).alias(name) for name in empty)
    return frame.select(list(schema))


def _complete_end(data: bytes, *, final: bool) -> int:
    """End offset of the last complete line: an unterminated tail counts only if it is whole JSON."""
    if not data or data.endswith(b"\n"):
        return len(data)
    last_newline = data.rfind(b"\n")
    start = last_newline + 1
    if final:
        try:
            if isinstance(decode_line(data[start:]), dict):
                return len(data)  # a complete record whose writer omitted the final newline
        except ValueError:
            pass
    return start


class _ChunkParser:
    """Bisects a buffer until polars accepts every chunk; tiny failing chunks go line by line."""

    def __init__(
        self,
        body: bytes,
        schema: dict[str, pl.DataType],
        *,
        strict: bool,
        source: int,
        issues: ParseIssues,
        is_event: pl.Expr,
    ) -> None:
        self.body = body
        self.is_event = is_event
        #: where the lines of a clean buffer holding events are (to decode those)
        self.line_index: _LineIndex | None = None
        self.newlines = 0
        self.view = memoryview(body)
        self.schema = schema
        self.strict = strict
        self.source = source
        self.issues = issues
        self.frames: list[pl.DataFrame] = []
        self.lines = 0
        self.substituted = False
        #: whether any row of the buffer is an event record (only those buffers are searched)
        self.has_events = False
        #: line numbers of the event rows
        self.event_lines: list[int] = []

    def parse(self, first_line_no: int, frame: pl.DataFrame | None) -> pl.DataFrame:
        """The records of the buffer, with their line numbers in a ``_line`` column.

        ``frame`` is polars' parse of the whole buffer, or None when polars rejected it.
        """
        if frame is not None:
            # Clean buffer, the common case: one polars pass, one Python pass over the text
            # (the line count). It is a split when there are events to decode (it finds their
            # lines too), else a cheaper count.
            self.lines += frame.height
            event_rows = (
                frame.select(pl.arg_where(self.is_event)).to_series() if frame.height else None
            )
            self.has_events = event_rows is not None and event_rows.len() > 0
            index = _LineIndex(self.body) if self.has_events else None
            self.newlines = index.newlines if index is not None else _count_newlines(self.body)
            n_lines = self.newlines + (0 if self.body.endswith(b"\n") or not self.body else 1)
            if frame.height == n_lines:  # no blank lines: rows are consecutive lines
                lines = pl.int_range(
                    first_line_no, first_line_no + n_lines, dtype=pl.Int64, eager=True
                ).alias("_line")
            else:
                lines = _line_numbers(self.body, first_line_no, frame.height)
            if self.has_events:
                self.event_lines = lines.gather(event_rows).to_list()
                self.line_index = index
            return frame.hstack([lines])  # eager: no query for a column that is already built
        self.newlines = self.body.count(b"\n")  # the rewrite below keeps every line on its line
        self.body, self.substituted = replace_nonfinite_tokens(self.body)
        self.view = memoryview(self.body)
        self._chunk(0, len(self.body), first_line_no)
        if not self.frames:
            return pl.DataFrame(schema={**self.schema, "_line": pl.Int64})
        frame = (
            self.frames[0]
            if len(self.frames) == 1
            else pl.concat(self.frames, how="vertical", rechunk=False)
        )
        self.has_events = bool(frame.height) and bool(frame.select(self.is_event.any()).item())
        if self.has_events:
            self.event_lines = frame.filter(self.is_event)["_line"].to_list()
        return frame

    def _chunk(self, start: int, end: int, line_no: int) -> None:
        chunk = (
            self.body if (start == 0 and end == len(self.body)) else self.view[start:end].tobytes()
        )
        frame = _read(chunk, self.schema)
        if frame is not None:
            self.frames.append(frame.with_columns(_line_numbers(chunk, line_no, frame.height)))
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
        line_numbers: list[int] = []
        for offset, raw in enumerate(chunk.split(b"\n")):
            if not raw.strip():
                continue
            self.lines += 1
            where = (self.source, line_no + offset)
            try:
                record = decode_line(raw)
            except ValueError:  # includes UnicodeDecodeError, too deep
                record = None
            if not isinstance(record, dict):
                if self.strict:
                    if raw == OVERLONG_LINE:
                        raise DiagError(
                            f"line {where[1]} is longer than the reader's line limit "
                            "(docs/reliability.md); --strict is set"
                        )
                    raise DiagError(
                        f"malformed line {where[1]} (not a JSON object); --strict is set"
                    )
                self.issues.malformed += 1
                if len(self.issues.malformed_lines) < FIRST_N:
                    self.issues.malformed_lines.append(where)
                continue
            bad_before = self.issues.nonnumeric
            line_numbers.append(where[1])
            for name, dtype in self.schema.items():
                columns[name].append(self._coerce(record.get(name), dtype))
            if self.issues.nonnumeric > bad_before and len(self.issues.nonnumeric_lines) < FIRST_N:
                self.issues.nonnumeric_lines.append(where)
        if line_numbers:
            frame = pl.DataFrame(columns, schema=self.schema)
            self.frames.append(frame.with_columns(pl.Series("_line", line_numbers, dtype=pl.Int64)))

    def _coerce(self, value: Any, dtype: pl.DataType) -> Any:
        if value is None:
            return None
        if dtype == pl.String:
            return value if isinstance(value, str) else json.dumps(value)
        if isinstance(dtype, pl.List):
            if not isinstance(value, list):
                self.issues.nonnumeric += 1
                return None
            return [self._number(item) for item in value[:MAX_LIST_ELEMENTS]]
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
            return to_float(value)  # an integer beyond the float range is ±inf, counted as such
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


def _read(chunk: bytes, schema: dict[str, pl.DataType]) -> pl.DataFrame | None:
    """polars' parse of a whole chunk, or None when any line of it is bad."""
    try:
        return pl.read_ndjson(chunk, schema=schema)
    # polars reports a bad line with several exception types (ComputeError, SchemaError, a
    # Rust panic); any of them only means "look closer", never a crash.
    except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
        return None


class _LineIndex:
    """Newline counts of a buffer per block: its line count, and any line's bytes without
    splitting the whole buffer into a million ``bytes`` objects (which costs more than the
    count itself). Used for the rare event lines of a clean buffer."""

    BLOCK = 2**16

    def __init__(self, body: bytes) -> None:
        self.body = body
        #: newlines up to the end of each block
        self.cumulative: list[int] = []
        total = 0
        for start in range(0, len(body), self.BLOCK):
            total += _count_newlines(body[start : start + self.BLOCK])
            self.cumulative.append(total)
        self.newlines = total

    def start(self, index: int) -> int:
        """Byte offset where line ``index`` (0-based) begins; the buffer's length past its end."""
        if index <= 0:
            return 0
        if index > self.newlines:
            return len(self.body)
        block = bisect.bisect_left(self.cumulative, index)  # holds the index-th newline
        position = block * self.BLOCK
        for _ in range(index - (self.cumulative[block - 1] if block else 0)):
            position = self.body.find(b"\n", position) + 1
        return position

    def line(self, index: int) -> bytes:
        """Line ``index`` (0-based) of the buffer, without its newline."""
        return self._line_at(self.start(index))

    def lines(self, indices: Iterable[int]) -> Iterator[bytes]:
        """The lines at ``indices`` (ascending), each found from the one before when it is near:
        a log with an eval every few steps has thousands of event lines per chunk, and finding
        each from its block's start walked half a block's newlines per line (100k evals: 20 s)."""
        position, at = 0, 0  # ``position`` is where line ``at`` begins
        for index in indices:
            if index < at or index - at > self.NEAR or index > self.newlines:
                position, at = self.start(index), index
            else:
                for _ in range(index - at):
                    position = self.body.find(b"\n", position) + 1
                at = index
            yield self._line_at(position)

    #: Lines walked forward newline by newline before the block index is used instead.
    NEAR = 64

    def _line_at(self, position: int) -> bytes:
        end = self.body.find(b"\n", position)
        return self.body[position : end if end >= 0 else len(self.body)]


def _line_numbers(chunk: bytes, first: int, rows: int) -> pl.Series:
    """Line numbers of the ``rows`` records polars read from ``chunk`` (it skips blank lines)."""
    n_lines = _count_newlines(chunk) + (0 if chunk.endswith(b"\n") or not chunk else 1)
    if n_lines == rows:
        return pl.int_range(first, first + rows, dtype=pl.Int64, eager=True).alias("_line")
    numbers = [first + i for i, line in enumerate(chunk.split(b"\n")) if line.strip()]
    assert len(numbers) == rows, "polars and the line split disagree on blank lines"
    return pl.Series("_line", numbers, dtype=pl.Int64)


def _split_records(
    frame: pl.DataFrame,
    events: list[LogEvent],
    issues: ParseIssues,
    source: int,
    wanted: Mapping[str, pl.DataType],
) -> ParsedLog:
    """Keep the metric records and stamp the bookkeeping columns from the event list.

    Counts the non-event rows without a ``step`` and the NaN/Inf values into ``issues`` (one
    query), then selects the records (eager selects: filter, casts, the header lookup and the
    null columns of ``wanted`` fields that were not read, e.g. lists left for later).
    """
    is_event = (pl.col("event").is_not_null() & (pl.col("event") != "metrics")).fill_null(False)
    headers = [e for e in events if e.kind == "run_start"]
    scripts = {
        i: e.fields["script"]
        for i, e in enumerate(headers)
        if isinstance(e.fields.get("script"), str)
    }
    metric_columns = [c for c in frame.columns if c not in ("event", "_line", "step")]
    missing = [name for name in wanted if name not in frame.columns]
    keep = (~is_event & _step_in_range()).fill_null(False)
    # whether every row is kept: asked in the counting query (one query fewer per input)
    keep_all = _count_issues(frame, is_event, issues, source, keep.all())
    if headers:
        # the header governing a record: the last run_start line before it
        header_lines = pl.Series([e.seq for e in headers], dtype=pl.Int64)
        run = pl.lit(header_lines).search_sorted(pl.col("_line"), side="right").cast(pl.Int32) - 1
    else:
        run = pl.lit(-1, pl.Int32)
    # the script of each record's header (a record before any header, or under one without a
    # script, has none)
    script = (
        run.replace_strict(scripts, default=None, return_dtype=pl.String)
        if scripts
        else pl.lit(None, pl.String)
    )
    step = pl.col("step").cast(pl.Int64, strict=False)
    # The usual frame keeps every row (events left with their pieces): no filter, no copy of
    # the columns that pass through.
    kept = frame if keep_all else frame.filter(keep)
    # One eager select, not a lazy query: a lazy collect hands its columns back in morsels of
    # rows, and joining them (below) copied every column of the log; the eager select keeps
    # the columns that pass through as they are (no copy).
    metrics = kept.select(
        pl.lit(source, pl.Int32).alias("source"),
        pl.col("_line").alias("seq"),
        run.alias("run"),
        script.alias("script"),
        step,
        *metric_columns,
        *(pl.lit(None, wanted[name]).alias(name) for name in missing),
    )
    if metrics.n_chunks("all") != [1] * metrics.width:  # a filter may leave a chunk per piece
        metrics = metrics.rechunk()
    return ParsedLog(metrics=metrics, events=events, issues=issues)


def _step_in_range() -> pl.Expr:
    """A usable step: finite and below :data:`STEP_LIMIT` in magnitude (see records.py)."""
    step = pl.col("step").cast(pl.Float64)
    return step.is_finite() & (step.abs() < STEP_LIMIT)


def _count_issues(
    frame: pl.DataFrame,
    is_event: pl.Expr,
    issues: ParseIssues,
    source: int,
    also: pl.Expr | None = None,
) -> bool:
    """Count the non-event rows without a ``step`` and the NaN/Inf values per metric field
    (canonical names) over the non-event rows, into ``issues``.

    Scalar columns: one polars query over the assembled frame (not one per chunk: a query costs
    about as much on 4 MiB as on 600). List columns are flattened to be counted, so they go in
    slices of :data:`_LIST_COUNT_ROWS` rows: flattening a million 15-element lists at once costs
    about 1 s and 600 MiB of peak memory, slices 0.15 s and nothing.

    ``also``, a boolean aggregate over the frame, is asked in the same query; its value is
    returned (True for an empty frame).
    """
    if frame.height == 0:
        return True
    # The record mask is computed once (as a column), not once per counted field.
    record = pl.col("_record")
    exprs = [(record & pl.col("step").is_null()).sum().alias("_without_step")]
    list_exprs = []
    for name, dtype in frame.schema.items():
        if name in ("step", "_line", "event") or frame[name].null_count() == frame.height:
            continue  # (a column with no value has nothing to count: a smaller query)
        if dtype == pl.Float64:
            exprs.append((~pl.col(name).is_finite() & record).sum().alias(name))
        elif dtype == pl.List(pl.Float64):
            list_exprs.append(
                (~pl.col(name).filter(~is_event).explode().is_finite()).sum().alias(name)
            )
    exprs.append(
        (record & pl.col("step").is_not_null() & ~_step_in_range()).sum().alias("_bad_step")
    )
    if also is not None:
        exprs.append(also.alias("_also"))
    counts = (
        frame.lazy()
        .with_columns((~is_event).alias("_record"))
        .select(exprs)
        .collect()
        .row(0, named=True)
    )
    answer = bool(counts.pop("_also", True))
    issues.without_step += int(counts.pop("_without_step"))
    bad_step = int(counts.pop("_bad_step"))
    if bad_step:
        issues.bad_step += bad_step
        lines = frame.filter(~is_event & pl.col("step").is_not_null() & ~_step_in_range())["_line"]
        issues.bad_step_lines += [(source, int(n)) for n in lines.head(FIRST_N)]
        del issues.bad_step_lines[FIRST_N:]
    if list_exprs:
        for start in range(0, frame.height, _LIST_COUNT_ROWS):
            part = frame.slice(start, _LIST_COUNT_ROWS).select(list_exprs).row(0, named=True)
            for name, count in part.items():
                counts[name] = counts.get(name, 0) + (count or 0)
    for name, count in counts.items():
        if count:
            issues.nonfinite[name] = issues.nonfinite.get(name, 0) + int(count)
    return answer


def _event_key_offsets(body: bytes, event_key: str) -> Iterator[int]:
    """Offsets of ``"<event_key>"`` in ``body``: a plain substring search (a regex is ~10x slower);
    whether it is a top-level key of an event record is decided by decoding the line."""
    key = json.dumps(event_key).encode()
    position = body.find(key)
    while position >= 0:
        yield position
        position = body.find(key, position + len(key))


def _events_from_lines(
    lines: _LineIndex,
    event_lines: list[int],
    first_line_no: int,
    source: int,
    fields: Mapping[str, str],
) -> list[LogEvent]:
    """Decode the event rows of a clean buffer, found by their line numbers."""
    to_canonical = {log: canonical for canonical, log in fields.items()}
    events = []
    raws = lines.lines(line_no - first_line_no for line_no in event_lines)
    for line_no, raw in zip(event_lines, raws, strict=True):
        event = _decode_event(raw, to_canonical, source, line_no)
        if event is not None:
            events.append(event)
    return events


def _decode_event(
    raw: bytes, to_canonical: Mapping[str, str], source: int, line_no: int
) -> LogEvent | None:
    try:
        record = decode_line(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    record = {to_canonical.get(k, k): restore_nonfinite(v) for k, v in record.items()}
    kind = record.pop("event", None)
    if kind is None or kind == "metrics":
        return None
    return _make_event(kind if isinstance(kind, str) else json.dumps(kind), record, source, line_no)


def _scan_events(
    body: bytes, first_line_no: int, source: int, fields: Mapping[str, str]
) -> list[LogEvent]:
    """Events of a buffer that needed bisection: found by a byte search for the event key (whether
    it is a top-level key is decided by decoding the line), line numbers by counting."""
    event_key = fields.get("event", "event")
    to_canonical = {log: canonical for canonical, log in fields.items()}
    key_length = len(json.dumps(event_key).encode())
    events: list[LogEvent] = []
    next_start, line_no, counted_to = 0, first_line_no, 0
    for offset in _event_key_offsets(body, event_key):
        if offset < next_start:
            continue  # a second match on a line already decoded
        if (
            body[offset + key_length : offset + key_length + 24]
            .lstrip(b" \t:")
            .startswith(b'"metrics"')
        ):
            continue  # a metric record that names itself: not worth decoding
        start = body.rfind(b"\n", 0, offset) + 1
        end = body.find(b"\n", offset)
        end = len(body) if end < 0 else end
        next_start = end
        line_no += body.count(b"\n", counted_to, start)
        counted_to = start
        event = _decode_event(body[start:end], to_canonical, source, line_no)
        if event is not None:
            events.append(event)
    return events


def _make_event(kind: str, record: dict[str, Any], source: int, line_no: int) -> LogEvent:
    step = record.get("step")
    if step is None and isinstance(record.get("resumed_from"), dict):
        step = record["resumed_from"].get("step")
    usable = (
        isinstance(step, (int, float))
        and not isinstance(step, bool)
        and abs(to_float(step)) < STEP_LIMIT
    )  # NaN compares False: not usable
    return LogEvent(
        kind=kind, source=source, seq=line_no, step=int(step) if usable else None, fields=record
    )


def parse_stream(
    handle: IO[bytes],
    *,
    source: int = 0,
    strict: bool = False,
    fields: Mapping[str, str] | None = None,
    extra: Mapping[str, pl.DataType] | None = None,
    lists: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
) -> ParsedLog:
    """Parse a whole stream in chunks of about ``chunk_bytes``, cut at line ends.

    Only one chunk of raw text is held at a time, so memory is the parsed columns plus a chunk.
    """
    schema, _ = read_schema(fields, extra, lists)
    pieces: list[_Piece] = []
    line_no = 1
    starts: list[tuple[int, int]] = []
    # Byte offsets in the input (not in the text handed over: an overlong line is replaced by a
    # short marker), so fetch_lists can seek to a chunk's start.
    stats = LineStats()
    # polars' parse of a chunk runs in a worker thread (it releases the GIL) while this thread
    # reads the next chunk and does the Python part of the previous one (line count, events):
    # on a machine with a spare core the Python work then costs no wall time.
    queued: deque[tuple[bytes, bool, int, Future[pl.DataFrame | None], int]] = deque()
    numbers = _NumberColumns({**schema, "_line": pl.Int64()}, _size_hint(handle))
    first_bytes = 0
    # The worker thread is started with the second chunk: a file of one chunk (every small log)
    # is parsed here, without a thread's start and hand-over.
    pool: ThreadPoolExecutor | None = None

    def finish_one() -> None:
        nonlocal line_no, first_bytes
        text, final, body_end, parsed, start = queued.popleft()
        starts.append((start, line_no))
        piece = _parse_piece(
            text,
            first_line_no=line_no,
            strict=strict,
            final=final,
            source=source,
            fields=fields,
            extra=extra,
            lists=lists,
            body_end=body_end,
            parsed=parsed,
            only=final and not pieces,
        )
        pieces.append(piece)
        line_no = piece.next_line_no
        # a lone piece is the frame as it is; from the second on, the number columns are
        # taken out as the pieces come (see _NumberColumns)
        if len(pieces) == 1:
            first_bytes = len(text)
            return
        if len(pieces) == 2:
            numbers.take(pieces[0], first_bytes)
        numbers.take(piece, len(text))

    try:
        start = stats.consumed
        for text, final in line_chunks(handle, chunk_bytes, stats=stats):
            body_end = _complete_end(text, final=final)
            body = text if body_end == len(text) else text[:body_end]
            if final and not queued and pool is None:
                parsed: Future[pl.DataFrame | None] = Future()
                parsed.set_result(_read(body, schema))
            else:
                if pool is None:
                    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dflash-diag-parse")
                parsed = pool.submit(_read, body, schema)
            queued.append((text, final, body_end, parsed, start))
            start = stats.consumed
            if len(queued) > _CHUNKS_AHEAD:
                finish_one()
        while queued:
            finish_one()
    finally:
        for *_, waiting, _start in queued:
            waiting.cancel()
        if pool is not None:
            pool.shutdown(wait=True)
    log = _assemble(
        pieces,
        source=source,
        fields=fields,
        extra=extra,
        lists=lists,
        numbers=numbers if len(pieces) > 1 else None,
    )
    log.chunk_starts = {source: starts}
    return log


def _size_hint(handle: IO[bytes]) -> int:
    """The bytes left in a plain file (0: unknown, a pipe or a compressed stream's)."""
    import os
    import stat

    try:
        if getattr(handle, "raw", None) is None and not hasattr(handle, "fileno"):
            return 0
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return 0
        return max(info.st_size - handle.tell(), 0)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return 0


def fetch_lists(log: ParsedLog, rows: pl.DataFrame, chunk_bytes: int = CHUNK_BYTES) -> pl.DataFrame:
    """``rows`` of ``log.metrics`` with ``acc_pos``/``accept_pos`` read from the files if pending.

    A log loaded with ``lists=False`` skips the per-position lists (most of a pipeline log's
    parse time and memory); a report needs them for its last window only. This reads the files
    again from the recorded chunk starts, parsing only the requested range of lines.
    """
    pending = [s for s in log.lists_pending if s < len(log.sources) and log.sources[s] != "-"]
    wanted = rows.filter(pl.col("source").is_in(pending)) if pending else rows.clear()
    if wanted.height == 0:
        return rows
    found = []
    # Read the list columns alone where that gives what the whole parse would (see _list_rows).
    projected = log.issues.nonnumeric == 0 and log.issues.coerced == 0
    for source in sorted(set(wanted["source"].to_list())):
        seqs = wanted.filter(pl.col("source") == source)["seq"]
        first, last = int(seqs.min()), int(seqs.max())
        # Start at the last recorded chunk beginning at or before the first wanted line.
        starts = log.chunk_starts.setdefault(source, [])
        offset, line_no = max(((o, n) for o, n in starts if n <= first), default=(0, 1))
        stats = LineStats(consumed=offset)
        with open_input(log.sources[source]) as handle:
            handle.seek(offset)
            for text, final in line_chunks(handle, chunk_bytes, stats=stats):
                text_offset = stats.consumed - len(text)  # where the chunk began in the input
                index = _LineIndex(text)
                newlines = index.newlines
                if line_no + newlines >= first:
                    # Parse only the wanted lines of the chunk (a window is a few hundred lines
                    # of a chunk of tens of thousands), lists included.
                    begin = index.start(first - line_no)
                    end = index.start(last - line_no + 1)
                    part = _list_rows(
                        text[begin:end],
                        first_line_no=line_no + max(0, first - line_no),
                        final=final and end == len(text),
                        source=source,
                        fields=log.fields,
                        projected=projected,
                    )
                    found.append(part.filter(pl.col("seq").is_in(seqs.implode())))
                    if stats.overlong == 0 and line_no + newlines > last:
                        # Remember where the next line begins: a list series asks for the
                        # records batch after batch, each starting where the one before ended,
                        # and would otherwise read again from the chunk start before it.
                        start = (text_offset + end, last + 1)
                        if start not in starts:
                            bisect.insort(starts, start)
                line_no += newlines
                if line_no > last:
                    break
    if not found:
        return rows
    lists = pl.concat(found)
    return (
        rows.drop(*METRIC_LISTS)
        .join(lists, on=["source", "seq"], how="left", maintain_order="left")
        .select(rows.columns)
    )


def _list_rows(
    data: bytes,
    *,
    first_line_no: int,
    final: bool,
    source: int,
    fields: Mapping[str, str],
    projected: bool,
) -> pl.DataFrame:
    """``source``, ``seq`` and the :data:`METRIC_LISTS` of the lines of ``data`` (a superset of
    its metric records: event rows too), as :func:`parse_records` reads them.

    With ``projected``, polars reads the list columns alone (for 64-element lists about 60% of
    the whole schema's parse, and no account of issues or events to build). That gives the whole
    parse's values whenever polars accepts the lines: polars rejects a line over its syntax
    whatever the schema (``NaN``, ``1e400``, a torn line), so a line it accepts with the lists
    alone but not with every field holds a value of the wrong type in a number field, which the
    first pass counted (``nonnumeric`` or ``coerced``); ``projected`` is False then. Lines polars
    rejects go through :func:`parse_records` as before.
    """
    if projected:
        schema, rename = read_schema(fields or None, None, lists=True)
        names = {
            log: rename.get(log, log) for log in schema if rename.get(log, log) in METRIC_LISTS
        }
        body_end = _complete_end(data, final=final)
        body = data if body_end == len(data) else data[:body_end]
        frame = _read(body, {log: schema[log] for log in names}) if names else None
        if frame is not None:
            frame = _bound_lists(frame, schema).rename(names)
            return frame.select(
                pl.lit(source, pl.Int32).alias("source"),
                _line_numbers(body, first_line_no, frame.height).alias("seq"),
                *(
                    pl.col(name)
                    if name in frame.columns
                    else pl.lit(None, pl.List(pl.Float64)).alias(name)
                    for name in METRIC_LISTS
                ),
            )
    part = parse_records(
        data,
        first_line_no=first_line_no,
        final=final,
        source=source,
        fields=fields,
        lists=True,
    )
    return part.metrics.select("source", "seq", *METRIC_LISTS)


#: What moved to :mod:`dflash_diag.read.formats.load` (reading inputs of any format is not the
#: JSONL parser's job); importable from here still, for scripts that do.
_MOVED = ("load_log", "drop_duplicate_writers", "DUPLICATE_WRITERS_SHARE")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        # by name: load.py imports this module, and this old path must not make it a cycle
        return getattr(importlib.import_module("dflash_diag.read.formats.load"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Hugging Face Trainer / TRL ``trainer_state.json``: one JSON object with a ``log_history`` list.

``Trainer`` writes it into every ``checkpoint-N/`` folder (and into the output folder at the end
of ``train()`` when asked to save its state). Each entry of ``log_history`` is one logging call:
training entries (``loss``, ``learning_rate``, ``grad_norm``, ``epoch``, TRL's
``mean_token_accuracy``, ``step``), evaluation entries (``eval_loss``, ``eval_*``, same
``step``) and a final summary (``train_runtime``, ``train_loss``...). The history is cumulative,
so the latest checkpoint's file holds all of it: given an output folder, the file with the
largest ``global_step`` wins (ties: the newest).
"""

from __future__ import annotations

import codecs
import functools
import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars, empty_scalars
from dflash_diag.read.formats.checks import OUT_OF_RANGE
from dflash_diag.read.presets import normalise_key
from dflash_diag.read.records import STEP_LIMIT, ParseIssues

FORMAT = "HF trainer_state.json"
FILENAME = "trainer_state.json"
#: Larger files are not a trainer state (it holds one entry per logging call: KBs to a few MBs).
_MAX_BYTES = 512 * 2**20


def looks_like_trainer_state(head: bytes) -> bool:
    """Whether a file's first bytes open a JSON object that names the trainer state's keys."""
    text = head.lstrip()
    return text.startswith(b"{") and (b'"log_history"' in head or b'"global_step"' in head)


def find_state_files(folder: Path) -> list[Path]:
    """``trainer_state.json`` files of an output folder and its ``checkpoint-N`` folders."""
    found = []
    top = folder / FILENAME
    if top.is_file():
        found.append(top)
    for child in folder.iterdir() if folder.is_dir() else ():
        if child.is_dir() and re.fullmatch(r"checkpoint-\d+", child.name):
            candidate = child / FILENAME
            if candidate.is_file():
                found.append(candidate)
    return found


def _load(path: Path) -> dict[str, Any]:
    """The state's top-level fields, its ``log_history`` as a :class:`_History`: decoded in
    pieces of about a MiB, each made a polars frame at once (the list of dicts of a 300 MB state
    cost gigabytes held whole, and a Python object per value 40 CPU seconds)."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise DiagError(f"{path}: too large for a trainer_state.json")
        with path.open("rb") as handle:
            scanner = _Scanner(handle)
            state: dict[str, Any] = {}
            for key in scanner.object_keys():
                if key == "log_history" and scanner.peek() == "[":
                    history = _History(path, scanner.offset())
                    pieces = _SizedPieces(
                        scanner.array_pieces(fast=_PolarsPieces()),
                        path.stat().st_size // _Scanner.CHUNK + 1,
                    )
                    history.wide = _wide_history(pieces, history.issues)
                    del pieces
                    state[key] = history
                else:
                    state[key] = scanner.value()
            scanner.end()
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise DiagError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(state.get("log_history"), _History):
        raise DiagError(f"{path}: not a trainer_state.json (no log_history list)")
    return state


class _History:
    """A state file's ``log_history``, its entries decoded one at a time when iterated."""

    def __init__(self, path: Path, start: int) -> None:
        self.path = path
        self.start = start  # character offset of its "["
        #: the entries as one wide frame, read in the first pass (None: the collector's rules
        #: are needed, the entries are read again one by one)
        self.wide: pl.DataFrame | None = None
        self.issues = ParseIssues()

    def __iter__(self):
        try:
            with self.path.open("rb") as handle:
                scanner = _Scanner(handle)
                scanner.skip_to(self.start)
                yield from scanner.array_items(decode=True)
        except OSError as exc:
            raise DiagError(f"cannot read {self.path}: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise DiagError(f"{self.path}: not valid JSON ({exc})") from None


class _Scanner:
    """Reads one JSON document piece by piece: the top-level object's keys, and each element
    of an array, with :meth:`json.JSONDecoder.raw_decode` over a buffer refilled in chunks
    (memory: a chunk and the largest single value, not the document).

    Raises ``ValueError`` on invalid JSON, as :func:`json.load` does.
    """

    CHUNK = 2**20

    def __init__(self, handle) -> None:
        self.handle = handle
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()
        self.text = ""
        self.pos = 0
        self.consumed = 0  # characters dropped before ``text``
        self.eof = False
        self.json = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(self.CHUNK)
        self.text = self.text[self.pos :] + self.decoder.decode(chunk, final=not chunk)
        self.consumed += self.pos
        self.pos = 0
        self.eof = not chunk
        return True

    def offset(self) -> int:
        return self.consumed + self.pos

    def skip_to(self, offset: int) -> None:
        while self.consumed + len(self.text) <= offset and self._fill():
            pass
        self.pos = offset - self.consumed

    def peek(self) -> str:
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.text) or not self._fill():
                return self.text[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise ValueError(f"expected {char!r} at character {self.offset()}")
        self.pos += 1

    def value(self, decode: bool = True) -> Any:
        self.peek()
        while True:
            try:
                value, end = self.json.raw_decode(self.text, self.pos)
            except ValueError:
                # perhaps only cut by the buffer's end: read on (bounded by the file cap)
                if self._fill():
                    continue
                raise
            if end == len(self.text) and not self.eof and self.text[self.pos] not in '{["':
                self._fill()  # a number may go on in the next chunk
                continue
            self.pos = end
            return value if decode else None

    def object_keys(self):
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            if self.peek() != '"':
                raise ValueError(f"expected a key at character {self.offset()}")
            key = self.value()
            self.expect(":")
            yield key
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return

    def array_items(self, decode: bool = False):
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return

    def array_pieces(self, fast: Callable[[str, int, int], pl.DataFrame | None] | None = None):
        """The items of the array at the cursor, in lists of about :attr:`CHUNK` characters:
        each piece is cut after an item's closing ``}`` and decoded by one :func:`json.loads`
        (a cut inside a string or a nested value makes no valid array, so a piece that decodes
        is whole items). Where the cut does not decode, the items up to it are read one by one
        (at most twice the work, never a retry per item).

        ``fast`` may read a piece first (``fast(text, start, end)``: the items are
        ``text[start:end]``, given in place, not copied out): what it returns (a frame, one row
        per item) stands for the piece's list of items; None: :func:`json.loads`. The piece's
        text comes with a list of items only (a frame's consumer has no use for it)."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            while len(self.text) - self.pos < self.CHUNK and self._fill():
                pass
            # the window is self.text[start:limit], searched in place (a copy of a MiB each)
            start, limit = self.pos, min(len(self.text), self.pos + self.CHUNK)
            end = _last_item_end(self.text, start, limit)
            cut = end - start if end >= 0 else -1
            items = None
            if cut > 0:
                items = fast(self.text, start, end + 1) if fast is not None else None
                if items is None:
                    text = "[" + self.text[start : end + 1] + "]"
                    try:
                        items = json.loads(text)
                    except (ValueError, RecursionError):
                        items = None
                    del text
            if items is not None:
                self.pos += cut + 1
                yield items, None if isinstance(items, pl.DataFrame) else self.text[start : end + 1]
                if not self._next_item():
                    return
                continue
            target = self.offset() + max(cut, 0)
            while True:
                yield [self.value()], None
                if not self._next_item():
                    return
                if self.offset() > target:
                    break

    def _next_item(self) -> bool:
        """Past the comma before the next item (True), or past the array's end (False)."""
        if self.peek() == ",":
            self.pos += 1
            return True
        self.expect("]")
        return False

    def end(self) -> None:
        if self.peek():
            raise ValueError(f"extra data at character {self.offset()}")


def _last_item_end(text: str, start: int = 0, limit: int | None = None) -> int:
    """Where the last ``}`` followed by ``,``, ``]`` or a newline within ``text[start:limit]``
    (both characters in it) is, as an index of ``text`` (-1: none).

    From the end, ``}`` by ``}``: an item's end is near the window's end, where a search for
    each of the three pairs walked the whole window back for the two that are not there."""
    limit = len(text) if limit is None else limit
    end = text.rfind("}", start, limit)
    for _ in range(64):
        if end < 0 or (end + 1 < limit and text[end + 1] in ",]\n"):
            return end
        end = text.rfind("}", start, end)
    # many closing braces inside values: the three searches bound the work
    return max(text.rfind(pair, start, limit) for pair in ("},", "}]", "}\n"))


def read_trainer_state(path: str | Path) -> Scalars:
    """Read a ``trainer_state.json``, or the latest one of an HF output folder.

    Raises:
        DiagError: no such file in the folder, invalid JSON, or no ``log_history`` list.
    """
    path = Path(path)
    notes = []
    if path.is_dir():
        files = find_state_files(path)
        if not files:
            raise DiagError(f"{path}: no trainer_state.json in it or in its checkpoint-N folders")
        states = [(_load(f), f) for f in files]
        state, chosen = max(
            states, key=lambda sf: (_number(sf[0].get("global_step")), os.stat(sf[1]).st_mtime)
        )
        if len(files) > 1:
            notes.append(f"latest of {len(files)} trainer states: {chosen}")
    else:
        state = _load(path)
    history = state["log_history"]
    if history.wide is not None:
        return Scalars(
            frame=empty_scalars(),
            format=FORMAT,
            issues=history.issues,
            meta=_meta(state),
            notes=notes,
            wide=[history.wide] if history.wide.height else [],
        )
    collector = RowCollector()
    issues = ParseIssues()
    for entry in history:
        issues.lines += 1
        if not isinstance(entry, dict):
            issues.malformed += 1
            continue
        if "train_runtime" in entry:
            # the run's closing summary (train_loss = the mean over the run): no logging call
            entry = {f"summary/{k}": v for k, v in entry.items() if k != "step"} | {
                "step": entry.get("step")
            }
        collector.add({k: v for k, v in entry.items() if k != "step"}, step=entry.get("step"))
    return Scalars(
        frame=collector.frame(), format=FORMAT, issues=issues, meta=_meta(state), notes=notes
    )


def _meta(state: dict[str, Any]) -> dict[str, Any]:
    return {
        k: state.get(k)
        for k in (
            "max_steps",
            "num_train_epochs",
            "logging_steps",
            "eval_steps",
            "train_batch_size",
        )
        if k in state
    }


class _PolarsPieces:
    """Reads a piece of ``log_history`` (a JSON array's text) with polars' JSON reader where
    that gives :func:`json.loads` and :func:`polars.from_dicts`'s frame exactly: entries that
    are flat objects of numbers (about 6x faster than decoding them into Python objects).

    Every key is declared Float64 (the keys of the pieces before, which is half the cost of
    inferring them); the piece's bytes must then be exactly such entries, which
    :func:`_plain_entries` checks, and hold exactly the values polars read. Anything else (a
    key first seen in this piece, a string, a nested object, a list, a bool, a non-finite
    token, a name holding ``:`` or ``,``, the run's closing summary) reads the piece again with
    inference, and failing that returns None: the entries are decoded by :func:`json.loads` and
    the collector's rules apply where they must.
    """

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, text: str, start: int, end: int) -> pl.DataFrame | None:
        """The items ``text[start:end]`` as a frame, or None."""
        data = ("[" + text[start:end] + "]").encode()
        counts = _plain_entries(data)
        if counts is None:
            return None  # bools, strings, objects, lists, other tokens: the dict path's rules
        # (an integer beyond int64 is Int128 to the inference, refused; declared Float64 it is
        # float(int), as the collector reads it; beyond a float, polars refuses the piece)
        entries, values = counts
        for schema in ([*self.names], None) if self.names else (None,):
            try:
                frame = pl.read_json(
                    io.BytesIO(data),
                    schema=dict.fromkeys(schema, pl.Float64) if schema is not None else None,
                    infer_schema_length=None,
                )
            except (Exception, pl.exceptions.PanicException):  # noqa: BLE001, S112
                continue  # a value polars does not take (a huge number): infer, or give up
            if (
                frame.height == entries
                and all(t in _PLAIN_TYPES for t in frame.schema.values())
                and frame.width
                and sum(frame.height - s.null_count() for s in frame.iter_columns()) == values
            ):
                if _SUMMARY_KEY in frame.columns:
                    return None  # the run's closing summary: its keys are renamed
                self.names += [c for c in frame.columns if c not in self.names]
                return frame
        return None


#: Column types of a piece whose values are all numbers (or nulls). An integer beyond any float
#: makes polars refuse the piece (the collector drops it): the collector reads such a history.
_PLAIN_TYPES = (pl.Int64, pl.Float64, pl.Null)

#: The key of the run's closing summary entry (``train_runtime``, ``train_loss``...), whose
#: keys the collector renames: a piece that holds it takes the dict path.
_SUMMARY_KEY = "train_runtime"

#: Bytes that may open a value of a flat entry of numbers: a JSON number or ``null``.
_VALUE_START = b"-0123456789n"


@functools.cache
def _value_start_table() -> Any:
    """A 256-entry table: whether a byte may open a value (:data:`_VALUE_START`)."""
    import numpy as np

    table = np.zeros(256, dtype=bool)
    table[list(_VALUE_START)] = True
    return table


def _plain_entries(data: bytes) -> tuple[int, int] | None:
    """How many entries and non-null values a JSON array's bytes hold, where every item is an
    object of numbers and nulls and every value's colon is the one that opens it; None for
    anything else (a bool, a string, an object or a list as a value, an item that is no object,
    an empty object, ``:`` or ``,`` inside a name, two blanks after a colon).

    The checks are byte counts and one look at the byte after each colon, vectorised by numpy
    (a fifth of a search of the text per byte: polars' six searches of each piece cost as much
    as its parse). In such an array each value is one ``:``, and each ``,`` parts two values of
    an entry or two entries: ``,`` = ``:`` - 1, the only way a piece of numbers adds up; and the
    values' first bytes (past one blank) are a number's or ``null``'s.
    """
    import numpy as np

    raw = np.frombuffer(data, dtype=np.uint8)
    entries = int(np.count_nonzero(raw == ord("{")))
    colon = np.flatnonzero(raw == ord(":"))
    if not entries or int(np.count_nonzero(raw == ord(","))) != len(colon) - 1:
        return None
    last = len(raw) - 1
    first = raw[np.minimum(colon + 1, last)]
    blank = first == ord(" ")
    at = np.where(blank, np.minimum(colon + 2, last), np.minimum(colon + 1, last))
    first = raw[at]
    if not _value_start_table()[first].all():
        return None
    null = at[first == ord("n")]
    if len(null):
        ends = np.minimum(null[:, None] + np.arange(4), last)
        if not (raw[ends] == np.frombuffer(b"null", dtype=np.uint8)).all():
            return None  # a token that starts as null does and is none
    return entries, len(colon) - len(null)


#: Entries of polars' pieces made wide at once (a few MiB of columns): 1M entries, load_log
#: CPU 0.91x of piece by piece, +5 MiB peak; 2**16 saved about 1% more CPU for twice the
#: memory, 2**14 half the CPU.
_WIDE_BATCH_ROWS = 2**15


class _SizedPieces:
    """The pieces of ``log_history``, with about how many there are (sizes the buffers)."""

    def __init__(self, pieces, hint: int) -> None:
        self.pieces = pieces
        self.hint = hint

    def __iter__(self):
        return iter(self.pieces)


def _wide_history(pieces, issues: ParseIssues) -> pl.DataFrame | None:
    """The entries of ``log_history`` as one wide frame (columns ``row``, ``step``, ``time``, one
    Float64 column per key; a record's values share its row), built by polars from each
    decoded piece; None where some entry needs :class:`RowCollector`'s rules (strings, bools,
    nested objects, lists, a step that is no plain number, no step at all).

    Every piece is consumed either way: the whole array is checked as JSON in this pass.
    """
    frames = _WideColumns(getattr(pieces, "hint", 1))
    plain = True
    n_records = 0
    batch: list[pl.DataFrame] = []  # polars' pieces not yet made wide, from row batch_row
    batch_row = batch_rows = 0

    def flush() -> bool:
        """Makes the batch wide into ``frames``; False where it holds no plain numbers."""
        nonlocal batch, batch_rows
        if not batch:
            return True
        joined = batch[0] if len(batch) == 1 else pl.concat(batch, how="diagonal_relaxed")
        batch, batch_rows = [], 0
        frame = _wide_frame(joined, batch_row)
        del joined
        if frame is not None and frame.height:
            frames.append(frame)
        return frame is not None

    for items, text in pieces:
        if isinstance(items, pl.DataFrame):  # read by polars: plain numbers, one row per entry
            issues.lines += items.height
            if plain:
                # (one _wide_frame per batch, not per piece: its dozen polars calls cost
                # as much as a small piece's parse)
                if not batch:
                    batch_row = n_records
                batch.append(items)
                batch_rows += items.height
                if batch_rows >= _WIDE_BATCH_ROWS:
                    plain = flush()
            n_records += items.height
            continue
        issues.lines += len(items)
        records = [entry for entry in items if isinstance(entry, dict)]
        issues.malformed += len(items) - len(records)
        if not plain or not records:
            continue
        plain = flush()  # (the rows in order: polars' pieces before this one)
        if not plain:
            continue
        # a bool is no metric to the collector; polars reads one among numbers as 0 or 1 (a
        # lone entry's bool makes a Boolean column, refused below)
        plain = text is None or ("true" not in text and "false" not in text)
        frame = _wide_piece(records, n_records) if plain else None
        plain = frame is not None
        n_records += len(records)
        if frame is not None and frame.height:
            frames.append(frame)
    plain = plain and flush()
    if not plain:
        return None
    if not frames.count:
        return pl.DataFrame(schema={"row": pl.Int64, "step": pl.Int64, "time": pl.Float64})
    wide = frames.frame()
    if wide["step"].null_count() == wide.height:
        return None  # no step anywhere: the epoch may stand in (on the long frame)
    return wide


class _WideColumns:
    """The wide frames of the pieces, joined as they come: what ``pl.concat(frames,
    how="diagonal_relaxed")`` and one chunk per column give, without holding the pieces.

    The pieces' columns go into numpy buffers (values, and a validity byte per row where a
    column has nulls), handed to polars without a copy at the end. Kept as polars frames, the
    pieces and the joined copy were held at once, beside the pages polars' allocator keeps
    from each piece's parse (trainer_state at 1M entries: +93 MiB over the columns).
    """

    def __init__(self, pieces_hint: int) -> None:
        import numpy as np

        self._np = np
        self.pieces_hint = max(pieces_hint, 1)
        self.count = 0  # pieces added
        self.rows = 0
        self.capacity = 0
        self.first: pl.DataFrame | None = None  # a lone piece is returned as it is
        self.dtypes: dict[str, pl.DataType] = {}  # in the order columns first appear
        self.values: dict[str, Any] = {}
        self.valid: dict[str, Any] = {}
        self.batch: list[pl.DataFrame] = []  # pieces not yet in the buffers

    #: Rows of pieces joined by polars before they go into the buffers (a few MiB): each move
    #: costs some polars-to-numpy calls per column, 0.1 s of CPU for 1M entries piece by piece.
    BATCH_ROWS = 2**16

    def append(self, frame: pl.DataFrame) -> None:
        self.count += 1
        if self.count == 1:
            self.first = frame
            return
        if self.first is not None:
            first, self.first = self.first, None
            # rows in the whole array, as the first piece suggests, and a margin
            self.capacity = max(first.height * self.pieces_hint * 11 // 10, 1024)
            self.batch.append(first)
            del first
        self.batch.append(frame)
        if sum(f.height for f in self.batch) >= self.BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        batch, self.batch = self.batch, []
        if batch:
            self._add(batch[0] if len(batch) == 1 else pl.concat(batch, how="diagonal_relaxed"))

    def _add(self, frame: pl.DataFrame) -> None:
        np = self._np
        height = frame.height
        if self.rows + height > self.capacity:
            # (realloc: untouched capacity costs no memory, the grown part is zeroed)
            self.capacity = max(self.rows + height, self.capacity * 3 // 2)
            for array in (*self.values.values(), *self.valid.values()):
                array.resize(self.capacity, refcheck=False)
        for name, dtype in frame.schema.items():
            if name not in self.dtypes:
                if self.dtypes and self.rows:
                    # a key first seen in this piece: null in the rows before
                    self.valid[name] = np.zeros(self.capacity, dtype=bool)
                self.dtypes[name] = dtype
                # (the wide frames' types: Int64 row and step, Float64 time and values)
                self.values[name] = np.empty(
                    self.capacity, dtype="int64" if dtype == pl.Int64 else "float64"
                )
        end = self.rows + height
        for name in self.dtypes:
            column = frame[name] if name in frame.schema else None
            nulls = height if column is None else column.null_count()
            if nulls and name not in self.valid:
                self.valid[name] = np.ones(self.capacity, dtype=bool)
            if column is not None and nulls < height:  # (an all-null piece's values: none)
                self.values[name][self.rows : end] = (
                    column.fill_null(0) if nulls else column
                ).to_numpy()
            if name in self.valid:
                self.valid[name][self.rows : end] = (
                    False if column is None else column.is_not_null().to_numpy()
                )
        self.rows = end

    def frame(self) -> pl.DataFrame:
        """The pieces joined (one chunk per column); the buffers are handed over."""
        if self.first is not None:
            first, self.first = self.first, None
            return first
        self._flush()
        columns: list[pl.Series | pl.Expr] = []
        for name, dtype in self.dtypes.items():
            values = self.values.pop(name)
            values.resize(self.rows, refcheck=False)
            series = pl.Series(name, values, dtype=dtype)
            del values
            valid = self.valid.pop(name, None)
            if valid is not None:
                valid.resize(self.rows, refcheck=False)
                if not valid.any():
                    columns.append(pl.lit(None, dtype).alias(name))
                    continue
                # the nulls (the values under them are no value): one column's copy at a time
                series = (
                    series.to_frame()
                    .select(pl.when(pl.lit(pl.Series(valid))).then(pl.col(name)).alias(name))
                    .to_series()
                )
                del valid
            columns.append(series)
        frame = pl.DataFrame([c for c in columns if isinstance(c, pl.Series)])
        return frame.select(pl.col(c.name) if isinstance(c, pl.Series) else c for c in columns)


def _wide_piece(records: list[dict], first_row: int) -> pl.DataFrame | None:
    """One piece's records as a wide frame, without the records that hold no number; None
    where a column is no number (or is named like a fixed column)."""
    for i, entry in enumerate(records):
        if "train_runtime" in entry:
            # the run's closing summary (train_loss = the mean over the run): no logging call
            records[i] = {(k if k == "step" else f"summary/{k}"): v for k, v in entry.items()}
    try:
        values = pl.from_dicts(records, infer_schema_length=None)
    except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
        return None
    if values.height != len(records):
        return None
    return _wide_frame(values, first_row)


def _wide_frame(values: pl.DataFrame, first_row: int) -> pl.DataFrame | None:
    """Entries as a frame of their keys (one row each) made the wide frame; None where a
    column is no number (or is named like a fixed column)."""
    if any(t not in _PLAIN_TYPES for t in values.schema.values()):
        return None
    n_entries = values.height
    # a key with no value in these entries is none of theirs (polars' JSON reader gives a
    # declared key Float64 nulls, from_dicts the Null type)
    names = [
        c
        for c, t in values.schema.items()
        if t != pl.Null and c != "step" and values[c].null_count() < n_entries
    ]
    if {"row", "time"} & set(names) or len({normalise_key(c) for c in names}) < len(names):
        return None
    if not names:
        return pl.DataFrame(schema={"row": pl.Int64, "step": pl.Int64, "time": pl.Float64})
    if values.schema.get("step") == pl.Float64:
        # step_value's rule for a float: truncated; NaN, Inf or beyond 2^53 out of range
        number = pl.col("step")
        rule = (
            pl.when(number.is_finite() & (number.abs() < STEP_LIMIT))
            .then(number.cast(pl.Int64, strict=False))
            .otherwise(pl.when(number.is_not_null()).then(pl.lit(OUT_OF_RANGE)))
        )
    else:
        number = pl.col("step").cast(pl.Int64)
        rule = (
            pl.when((number > -STEP_LIMIT) & (number < STEP_LIMIT))
            .then(number)
            .otherwise(pl.when(number.is_not_null()).then(pl.lit(OUT_OF_RANGE)))
        )
    frame = values.select(
        pl.int_range(first_row, first_row + n_entries, dtype=pl.Int64).alias("row"),
        (rule if "step" in values.columns else pl.lit(None, pl.Int64)).alias("step"),
        pl.lit(None, pl.Float64).alias("time"),
        *(pl.col(c).cast(pl.Float64) for c in names),
    )
    return frame.filter(pl.any_horizontal(pl.col(names).is_not_null()))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else -1.0

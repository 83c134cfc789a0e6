"""Other trainers' JSONL at the cost of one polars scan, when the file allows it.

:func:`~dflash_diag.read.formats.foreign_jsonl.read_foreign_jsonl` reads a foreign JSONL line by line
with :mod:`json` (nested objects flattened, numeric strings kept, bad lines counted): about 60x
polars' NDJSON reader on an HF log. Most such logs are clean and regular, so this module reads
them with polars instead, into the wide records :class:`~dflash_diag.read.formats.canonical.Scalars`
accepts, and gives up (None: the line reader runs) whenever the result could differ from it:

* the schema declared to polars is the head's keys (nested objects as structs), since polars
  reads declared fields only;
* a key outside that schema anywhere in the file would be lost silently, so the file's colons
  (one per key) are counted and must equal the values polars found plus the ``null`` tokens;
  on a difference (keys first written after the head: an ``eval_loss``, a final
  ``train_runtime``) polars infers the schema of the pieces that hold them and the file is
  read again, the count checked again;
* the line reader's rules that depend on a key being held, a null one too (the step is the
  first step key a record holds; an end-of-epoch summary holds ``epoch`` and a validation
  key), are applied here (:func:`_summary_rows`) where polars' reading of a null as no key
  cannot change them, and left to the line reader where it could;
* lists of numbers (per-position accuracies) are no value of either reader (the line reader
  keeps numbers only): their keys are counted by their bytes (:class:`_Skipping`), or where
  that count falls short, the lists are read as ``List(Float64)`` to account for them;
* any remaining difference, a line polars rejects (malformed, torn, NaN tokens, a type that
  changes, a list of anything but numbers), or a string that might be a number sends the file
  to the line reader. The clock is the numeric ``time`` where the file writes ``time``, else
  ``_timestamp``, as the line reader's canonical log has it; a ``time`` written null in every
  record (no key to polars) beside ``_timestamp`` is the line reader's too.

Objects (speculators' ``{"train": {...}}``): polars reads an object's fields several times
slower than top-level keys (1M such records: 2.0 s against 0.9 s), so where the objects' fields
are plain and named apart from every other key, each piece is read with the objects opened up
(:func:`_opened`: each ``"train": {`` and its closing brace made blanks, the same bytes
otherwise) and the fields named ``train/loss`` as :func:`_flatten` names them; a piece whose
opened read does not account for every colon is read again as it is.

Memory: the file is read in pieces of a few MiB cut at a newline (never memory-mapped: a
mapped file's pages count in the process's resident set), each piece parsed, counted and
dropped; what is held is the parsed columns, kept as the pieces' chunks (no joined copy).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dflash_diag.logschema import METRIC_MAPS
from dflash_diag.read.formats.canonical import Scalars, empty_scalars
from dflash_diag.read.formats.detect import HEAD_BYTES
from dflash_diag.read.records import ParseIssues

#: Bytes per piece read and parsed at a time: polars' parse of a piece takes about 3x it, and
#: its allocator keeps those pages after the parse (seconds), and the piece before is still
#: held while the next one is read: the reader's own transient is a few times this whatever the
#: file's size. At 1M HF records, load_log's peak and CPU: 8 MiB pieces 193 MiB, 0.51 s;
#: 4 MiB 182 MiB, 0.52 s; 2 MiB 180 MiB, 0.56 s (each piece's checks cost their Python calls).
PIECE_BYTES = 4 * 2**20
#: Bytes of a piece whose colons are counted at a time (numpy's compare makes a byte per byte).
_COUNT_BYTES = 256 * 2**10
#: The end of a piece read first to find where its last line ends (see :func:`_piece_size`).
_PROBE_BYTES = 64 * 2**10
#: Text that Python's float() might read (the line reader keeps numeric strings as numbers);
#: looser than float() (underscores anywhere among digits), so a doubt goes to the line reader.
_NUMERIC_TEXT = (
    r"(?i)^\s*[+-]?(?:(?:[\d_]+\.?[\d_]*|\.[\d_]+)(?:e[+-]?[\d_]+)?"
    r"|inf|infinity|nan)\s*$"
)


#: Reads that stop at the first piece with a key the schema lacks (see
#: :func:`read_foreign_jsonl_scan`).
_STOPPING_READS = 3


def read_foreign_jsonl_scan(
    path: str | Path, fmt: str, step_keys: tuple[str, ...]
) -> Scalars | None:
    """The file's records as wide scalars, or None where only the line reader is exact.

    Args:
        path: a JSONL file (not compressed).
        fmt: the format's display name for the result.
        step_keys: top-level keys holding the step, first present wins.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    tree = _head_tree(head)
    if tree is None:
        return None
    # keys the head does not show (an eval_loss first written after the head, a final
    # train_runtime): the schema of a piece that holds them names them, beside the keys known
    # (a piece whose colons those account for holds no other key), and the file is read
    # again. A read stops at its first such piece (an eval row's keys recur from there on) a
    # few times; then one reads on and the schema of every such piece is taken at once.
    scanned: _Scanned | None = None
    for attempt in range(_STOPPING_READS + 2):
        scanned = _scan(path, tree, head, step_keys, first_short=attempt < _STOPPING_READS)
        if scanned is None or scanned.all_keys_read:
            break
        if attempt == _STOPPING_READS + 1 or not scanned.short:
            return None
        short, scanned = scanned.short, None  # freed before the next read
        inferred = _inferred_schema(path, tree, short)
        known = _tree_of(inferred) if inferred is not None else None
        if known is None or known == tree:
            return None  # no key more: what the piece holds is no key polars reads
        tree = known
    summary = _summary_rows(scanned, step_keys) if scanned is not None else None
    if scanned is None or summary is None:
        return None
    return _wide(scanned, fmt, step_keys, summary)


def _summary_rows(scanned: _Scanned, step_keys: tuple[str, ...]) -> pl.Series | None:
    """The end-of-epoch rows whose values the line reader renames ``epoch_summary/<name>``, or
    None where only the line reader can tell them.

    A summary row repeats the step of the record before it and holds ``epoch`` and a
    validation key (LLaMA-Factory's eval row at the train row's step, with its
    ``total_steps``); where a key may be written ``null`` (which polars reads as no key), a
    row that may be one (its step the record before's, a value the rule would rename) is
    the line reader's; so is a log with no step key (the epoch stands in for the step).
    """
    from dflash_diag.read.aliases import is_validation

    top, flat = scanned.top, scanned.flat
    steps = [k for k in step_keys if k in top]
    if not steps or any(top[k] != pl.Float64 for k in steps):
        return None  # no step, or a step that is no number: the line reader decides
    none = pl.repeat(False, flat.height, dtype=pl.Boolean, eager=True).alias("summary")
    validation = [c for c in top if is_validation(c)]
    if not scanned.maybe_null and ("epoch" not in top or not validation):
        return none
    # the line reader's step: the first step key a record holds (a null one is declined)
    repeats = flat.select(pl.coalesce(steps).diff() == 0).to_series().fill_null(False)
    if scanned.maybe_null:
        renamed = _renamed(scanned, step_keys)
        if renamed and bool(
            (repeats & flat.select(pl.any_horizontal(pl.col(renamed).is_not_null())).to_series())
            .fill_null(False)
            .any()
        ):
            return None
        return none
    summary = (
        repeats
        & scanned.present("epoch")
        & pl.DataFrame([scanned.present(c) for c in validation])
        .select(pl.any_horizontal(pl.all()))
        .to_series()
    )
    return summary.fill_null(False).alias("summary")


def _renamed(scanned: _Scanned, step_keys: tuple[str, ...]) -> list[str]:
    """The number columns a summary row's values move from: all but the step keys', the
    epoch's and the top-level validation keys' (an object's fields move with their object)."""
    from dflash_diag.read.aliases import is_validation

    return [
        c
        for c in scanned.flat.columns
        if c not in step_keys and c != "epoch" and not (c in scanned.top and is_validation(c))
    ]


@dataclass
class _Scanned:
    """A file read with one schema, kept as what the fast path uses of it.

    Attributes:
        top: the top-level keys' types.
        types: the types of the flattened keys (``a/b`` for field ``b`` of object ``a``).
        flat: the flattened keys that are numbers, one column each.
        presence: whether each row holds a top-level key that is no number (an epoch or a
            validation key written as a string or an object), by key.
        all_keys_read: whether the file's colons are exactly the keys read.
        maybe_null: whether a key may be written ``null`` (the colons were more than the
            values read): polars reads such a key as missing.
        short: the pieces (offset, length) whose colons the keys read do not account for.
        time_maybe_null: a piece with null tokens names ``"time"``, a key polars found no value
            of: a ``"time": null`` the canonical clock would read as no time, not as the
            record's ``_timestamp``.
    """

    top: dict[str, pl.DataType]
    types: dict[str, pl.DataType]
    flat: pl.DataFrame
    presence: dict[str, pl.Series]
    all_keys_read: bool
    maybe_null: bool
    short: list[tuple[int, int]]
    time_maybe_null: bool = False

    def present(self, key: str) -> pl.Series:
        """Whether each row holds the top-level ``key``."""
        if key in self.presence:
            return self.presence[key]
        return self.flat[key].is_not_null()


def _pieces(path: Path) -> Iterator[bytes]:
    """The file's bytes in pieces of about :data:`PIECE_BYTES`, each ending at a newline (the
    last one where the file ends; a line longer than a piece makes its piece longer).

    The bytes after a piece's last newline are read again with the next piece (a seek back),
    so a piece is copied at most once, not joined to the previous piece's tail.
    """
    with path.open("rb", buffering=0) as handle:
        while block := handle.read(_piece_size(handle)):
            while (cut := block.rfind(b"\n") + 1) == 0 and (more := handle.read(PIECE_BYTES)):
                block += more  # a line longer than a piece
            if 0 < cut < len(block):
                handle.seek(cut - len(block), os.SEEK_CUR)
                block = block[:cut]
            yield block


def _piece_size(handle: Any) -> int:
    """How many bytes the next piece reads: up to the last newline of its
    :data:`PIECE_BYTES`, found in a small read of their end, so that the piece is read as it
    is parsed and never sliced (a slice copies the piece: 5 ms of CPU per 8 MiB);
    :data:`PIECE_BYTES` where that end holds no newline (the caller cuts the piece then)."""
    size = min(_PROBE_BYTES, PIECE_BYTES)
    probe = os.pread(handle.fileno(), size, handle.tell() + PIECE_BYTES - size)
    cut = probe.rfind(b"\n") + 1
    return PIECE_BYTES - size + cut if len(probe) == size and cut else PIECE_BYTES


def _colons(piece: bytes) -> int:
    """The piece's ``:`` bytes (numpy's compare and count: a third of ``bytes.count``'s CPU),
    a block of :data:`_COUNT_BYTES` at a time (the compare's array of the whole piece was
    as large as the piece)."""
    import numpy as np

    data = np.frombuffer(piece, dtype=np.uint8)
    return sum(
        int(np.count_nonzero(data[i : i + _COUNT_BYTES] == ord(":")))
        for i in range(0, len(data), _COUNT_BYTES)
    )


def _flatten(series: pl.Series, name: str, out: list[pl.Series]) -> None:
    """A column with its objects' fields as columns ``name/field`` (nested: ``a/b/c``)."""
    if isinstance(series.dtype, pl.Struct):
        for field in series.struct.fields:
            _flatten(series.struct.field(field), f"{name}/{field}", out)
    else:
        out.append(series.alias(name))


class _Growing:
    """Columns appended piece by piece into numpy buffers, handed to polars without a copy.

    The buffers are large allocations of the C allocator: grown in place (``realloc`` moves
    pages, it does not copy them) and returned to the system when freed, where joining polars
    chunks at the end held the chunks and the joined copy at once (polars' allocator keeps
    freed pages a while, and the chunks' scattered holes do not fit a whole column).
    """

    def __init__(self, names: list[str], kinds: list[type], rows: int) -> None:
        import numpy as np

        self._np = np
        self.names = names
        self.rows = 0
        self.capacity = max(rows, 1024)
        self.arrays = [np.empty(self.capacity, dtype=kind) for kind in kinds]

    def append(self, columns: list[pl.Series]) -> None:
        height = columns[0].len() if columns else 0
        if self.rows + height > self.capacity:
            # untouched capacity costs no memory (its pages are never written)
            self.capacity = max(self.rows + height, self.capacity * 3 // 2)
            for array in self.arrays:
                array.resize(self.capacity, refcheck=False)
        for array, column in zip(self.arrays, columns, strict=True):
            array[self.rows : self.rows + height] = column.to_numpy()
        self.rows += height

    def series(self) -> list[pl.Series]:
        """The columns (a float column's NaN is a null: a JSON file holds no NaN value)."""
        out = []
        for name, array in zip(self.names, self.arrays, strict=True):
            array.resize(self.rows, refcheck=False)
            out.append(pl.Series(name, array, nan_to_null=array.dtype.kind == "f"))
        self.arrays = []
        return out


def _scan(
    path: Path,
    tree: dict[str, Any],
    head: bytes,
    step_keys: tuple[str, ...],
    first_short: bool = False,
) -> _Scanned | None:
    """The file read by polars with the tree's schema, piece by piece (objects opened where
    the head shows how they are written: :class:`_Opening`); each piece's numbers
    are kept and the rest dropped (None: a piece polars rejects, NaN values, a numeric string,
    a key the fast path does not take)."""
    if "event" in tree:
        # this project's events are skipped by the line reader, another trainer's mark its
        # metric records: the line reader's rules
        return None
    schema = {key: _dtype(node) for key, node in tree.items()}
    # top-level keys that are no number but whose presence the epoch-summary rule asks
    marks = [k for k, t in schema.items() if t != pl.Float64 and _marked(k)]
    numbers: _Growing | None = None
    presence: _Growing | None = None
    types: dict[str, pl.DataType] = {}
    colons = found = nulls = 0
    time_maybe_null = False
    earlier_steps = _earlier_steps(tree, step_keys)
    opening = _Opening.of(tree, marks, head)
    skipping = _Skipping.of(tree, marks, head) if opening is None else None
    short: list[tuple[int, int]] = []
    offset = 0
    try:
        size = path.stat().st_size
        for piece in _pieces(path):
            offset += len(piece)
            read = (
                opening.read(piece)
                if opening is not None
                else skipping.read(piece)
                if skipping is not None
                else None
            )
            if read is None:
                frame = pl.read_ndjson(piece, schema=schema)
                piece_colons = _colons(piece)
                piece_found = _found(frame)
                # where a piece's colons are its values, it holds no null token (every one
                # would be a colon more), so a clean piece pays no second count
                piece_nulls = piece.count(b"null") if piece_colons > piece_found else 0
                columns: list[pl.Series] = []
                for name in frame.columns:
                    _flatten(frame[name], name, columns)
            else:
                frame, columns, piece_colons, piece_found, piece_nulls = read
            if piece_nulls and not _no_null_among(piece, columns, earlier_steps):
                return None  # a record's step key null: its step is none, not a later key's
            if piece_colons != piece_found and piece_colons != piece_found + piece_nulls:
                short.append((offset - len(piece), len(piece)))  # a key the schema lacks
                if first_short:
                    # what is read is to be read again: the rest of the file is not worth it
                    return _Scanned(schema, {}, pl.DataFrame(), {}, False, True, short)
            colons += piece_colons
            found += piece_found
            nulls += piece_nulls
            if piece_nulls and "time" not in schema and not time_maybe_null:
                time_maybe_null = b'"time"' in piece
            if len({c.name for c in columns}) < len(columns):
                return None  # a key "a/b" beside an object "a" with a field "b"
            flat = pl.DataFrame(columns)
            for name, dtype in flat.schema.items():
                if dtype != pl.String:
                    continue
                if flat.select(pl.col(name).str.contains(_NUMERIC_TEXT).any()).item():
                    return None  # a numeric string: the line reader's coercion decides
            kept = [c for c in columns if c.dtype == pl.Float64]
            if kept and flat.select(pl.any_horizontal(pl.col(pl.Float64).is_nan().any())).item():
                return None  # NaN is no JSON value (and a kept NaN stands for a null below)
            if numbers is None:
                # the lists a skipping read leaves out are declared types still (a step key
                # that is a list is no step: the line reader's)
                types = {**flat.schema, **(skipping.types if skipping is not None else {})}
                # rows in the whole file, as the first piece suggests, and a margin
                rows = len(piece) and frame.height * (size // len(piece) + 1) * 11 // 10
                numbers = _Growing([c.name for c in kept], [float] * len(kept), rows)
                presence = _Growing(marks, [bool] * len(marks), rows)
            numbers.append(kept)
            assert presence is not None
            presence.append([frame[k].is_not_null() for k in marks])
    except OSError:
        return None
    except Exception:  # noqa: BLE001  any line polars rejects: the line reader decides
        return None
    if numbers is None or presence is None:
        empty: list[pl.Series] = []
        for name, dtype in schema.items():
            _flatten(pl.Series(name, [], dtype=dtype), name, empty)
        types = {c.name: c.dtype for c in empty}
        flat_frame = pl.DataFrame([c for c in empty if c.dtype == pl.Float64])
        marked = {k: pl.Series(k, [], dtype=pl.Boolean) for k in marks}
    else:
        flat_frame = pl.DataFrame(numbers.series())
        marked = {c.name: c for c in presence.series()}
    return _Scanned(
        top=schema,
        types=types,
        flat=flat_frame,
        presence=marked,
        all_keys_read=colons == found or (colons > found and colons == found + nulls),
        maybe_null=colons != found,
        short=short,
        time_maybe_null=time_maybe_null,
    )


#: An object's key the opened read takes: plain ASCII, nothing JSON escapes or counts (the
#: key's colon is taken off the count; a ``null`` in it would be one more null token).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.\-/ ]+")


@dataclass(frozen=True)
class _Opening:
    """How a piece is read with its objects opened up: each object's fields as top-level keys.

    Attributes:
        patterns: the bytes that open each object (``"train": {``, or ``"train":{`` as the
            head writes it).
        schema: the top-level keys and the objects' fields, in :func:`_flatten`'s order.
        names: each field's column name (``train/loss``).
    """

    patterns: tuple[bytes, ...]
    schema: dict[str, pl.DataType]
    names: dict[str, str]

    @classmethod
    def of(cls, tree: dict[str, Any], marks: list[str], head: bytes) -> _Opening | None:
        """The opening of the tree's objects as the file's ``head`` writes them, or None where
        a piece is read as it is: no object, an object inside an object, a field named like
        another key, an object's key that is not plain or whose presence the epoch-summary
        rule asks."""
        objects = [key for key, node in tree.items() if isinstance(node, dict)]
        if not objects or any(
            node == "List" or (isinstance(node, dict) and "List" in node.values())
            for node in tree.values()
        ):
            return None  # no object, or lists beside them: read as it is
        schema: dict[str, pl.DataType] = {}
        names: dict[str, str] = {}
        for key, node in tree.items():
            if not isinstance(node, dict):
                schema[key] = _dtype(node)
                continue
            if (
                not node
                or key in marks
                or not _PLAIN_KEY.fullmatch(key)
                or "null" in key
                or any(isinstance(field, dict) for field in node.values())
            ):
                return None
            for field, kind in node.items():
                schema[field] = _dtype(kind)
                names[field] = f"{key}/{field}"
        if len(schema) != len(tree) - len(objects) + sum(len(tree[k]) for k in objects):
            return None  # a field named like a top-level key or another object's field
        # the ways the head writes each object's opening (json.dumps' "k": {, a compact "k":{)
        spaced = [f'"{key}": {{'.encode() for key in objects]
        patterns = tuple(
            p for p in (*spaced, *(p.replace(b": ", b":") for p in spaced)) if p in head
        )
        if not patterns:
            return None
        return cls(patterns, schema, names)

    def read(self, piece: bytes) -> tuple[pl.DataFrame, list[pl.Series], int, int, int] | None:
        """The piece read opened: its frame, columns, colons, values found and null tokens;
        None where the piece is to be read as it is (an object that :func:`_opened` does not
        open, a piece polars rejects opened, a colon the opened read does not account for).
        """
        opened = _opened(piece, self.patterns)
        if opened is None:
            return None
        data, colons = opened
        try:
            frame = pl.read_ndjson(data, schema=self.schema)
        except Exception:  # noqa: BLE001  read as it is: that read decides
            return None
        found = _found(frame)
        nulls = data.count(b"null") if colons > found else 0
        if colons != found + nulls:
            return None  # a key the opened read misses: read as it is, that count decides
        columns = [frame[c].alias(self.names.get(c, c)) for c in frame.columns]
        return frame, columns, colons, found, nulls


@dataclass(frozen=True)
class _Skipping:
    """How a piece is read without its lists of numbers: polars builds a list column at about
    the cost of all the numbers beside it (1M HF records with a 7-number list: 2.0 s, 0.9 s
    without it), and the line reader keeps no list, so only their keys are to be accounted for.

    A key is counted by its bytes instead: ``"acc_pos": [`` (or ``"acc_pos":[``) is a key
    whose value is a list wherever it is found, in a string too (a quote before the colon that
    is not escaped ends a string, and a string followed by a colon is a key); the line reader
    keeps no such value at any depth, so each match is one colon accounted for and no value
    lost. Every other colon (a key, a string's) only adds to the piece's count, so an exact
    count is sound; a piece with a colon left over (a list written ``"acc_pos" : [``, a null
    value, a key no read names, text in a list) is read with the lists declared, and that read
    decides.

    Attributes:
        patterns: the bytes of each skipped key with the opening of its list.
        schema: the declared keys without the skipped ones.
        types: the skipped keys' declared types.
    """

    patterns: tuple[bytes, ...]
    schema: dict[str, pl.DataType]
    types: dict[str, pl.DataType]

    @classmethod
    def of(cls, tree: dict[str, Any], marks: list[str], head: bytes) -> _Skipping | None:
        """The skipping read of the tree's top-level lists, or None where there is none: a
        list whose presence the epoch-summary rule asks, whose name is an object's field too,
        or a tree with a key that is not plain (a declared key whose bytes held a skipped
        key's would be counted twice)."""
        fields: set[str] = set()

        def walk(node: dict[str, Any]) -> bool:
            for field, child in node.items():
                fields.add(field)
                if not _PLAIN_KEY.fullmatch(field) or (isinstance(child, dict) and not walk(child)):
                    return False
            return True

        if not all(walk(node) for node in tree.values() if isinstance(node, dict)) or not all(
            _PLAIN_KEY.fullmatch(key) for key in tree
        ):
            return None
        skipped = [
            key
            for key, node in tree.items()
            if node == "List" and key not in marks and key not in fields and "null" not in key
        ]
        if not skipped:
            return None
        written = [f'"{key}"{colon}['.encode() for key in skipped for colon in (": ", ":")]
        # the ways the head writes them (each is a pass over every piece); where it writes
        # neither (a list first seen after the head), both
        patterns = tuple(p for p in written if p in head) or tuple(written)
        schema = {k: _dtype(n) for k, n in tree.items() if k not in skipped}
        return cls(patterns, schema, {key: _dtype(tree[key]) for key in skipped})

    def read(self, piece: bytes) -> tuple[pl.DataFrame, list[pl.Series], int, int, int] | None:
        """The piece read without the lists: its frame, columns, colons, values found and null
        tokens; None where the colons are not all accounted for (read it declared)."""
        frame = pl.read_ndjson(piece, schema=self.schema)
        colons = _colons(piece)
        found = _found(frame) + sum(piece.count(p) for p in self.patterns)
        if colons != found:
            # a colon left over: a key no read names, or a null value, whose null token the
            # count cannot tell from a list's null element or a "null" in a list's text
            return None
        columns: list[pl.Series] = []
        for name in frame.columns:
            _flatten(frame[name], name, columns)
        return frame, columns, colons, found, 0


def _opened(piece: bytes, patterns: tuple[bytes, ...]) -> tuple[bytes, int] | None:
    """The piece with each object that a pattern opens made its fields (the pattern's bytes and
    the object's closing brace turned to blanks: the same length, valid JSON where the object
    held no object), and its colons; None where an object holds one or its key follows a
    backslash.

    Where a pattern's match is no object of a record, what is left is no valid JSON or names
    keys the opened schema does not read, and the caller's colon count refuses the piece.
    """
    import numpy as np

    raw = np.frombuffer(piece, dtype=np.uint8)
    opens, closes, colons = _structure(raw)
    starts: list[Any] = []
    for pattern in patterns:
        size = len(pattern)
        candidates = opens[opens >= size]
        hit = np.ones(len(candidates), dtype=bool)
        for offset, byte in enumerate(pattern[:-1]):
            hit &= raw[candidates - (size - 1) + offset] == byte
        start = candidates[hit] - (size - 1)
        if np.count_nonzero(raw[start - 1] == ord("\\")):
            return None  # an escaped quote: the end of another key's name, or a string
        starts.append(start)
    count = sum(len(s) for s in starts)
    if not count:
        return piece, colons
    at = np.concatenate([s + len(p) - 1 for s, p in zip(starts, patterns, strict=True)])
    after = np.searchsorted(closes, at)
    if np.count_nonzero(after >= len(closes)):
        return None
    close = closes[after]
    following = np.searchsorted(opens, at, side="right")
    inner = opens[np.minimum(following, len(opens) - 1)]
    if np.count_nonzero((following < len(opens)) & (inner < close)):
        return None  # an object inside the object
    out = bytearray(piece)
    view = np.frombuffer(out, dtype=np.uint8)
    for start, pattern in zip(starts, patterns, strict=True):
        for offset in range(len(pattern)):
            view[start + offset] = ord(" ")
    view[close] = ord(" ")
    del view
    # each pattern held one colon (a plain key holds none)
    return bytes(out), colons - count


def _earlier_steps(tree: dict[str, Any], step_keys: tuple[str, ...]) -> tuple[str, ...]:
    """The step keys that rank before the last one the tree holds: where one of them is written
    ``null``, the line reader's step is none (the first step key a record holds, a null one
    too), where polars reads no key and the wide piece takes the later key's."""
    ranks = [i for i, key in enumerate(step_keys) if key in tree]
    return step_keys[: max(ranks)] if ranks else ()


def _no_null_among(piece: bytes, columns: list[pl.Series], keys: tuple[str, ...]) -> bool:
    """Whether none of the top-level ``keys`` is written ``null`` in the piece: each key's
    quoted name is found as often as polars found its values. A name found more often (a null
    value, the name as a string's text or an object's field) or not plain is a doubt."""
    values = {c.name: c.len() - c.null_count() for c in columns}
    return all(
        _PLAIN_KEY.fullmatch(key) and piece.count(f'"{key}"'.encode()) == values.get(key, 0)
        for key in keys
    )


def _structure(raw: Any) -> tuple[Any, Any, int]:
    """Where ``{`` and ``}`` are in ``raw``, and its ``:`` count: one pass, a block of
    :data:`_COUNT_BYTES` at a time (three compares of a block while it is in the cache cost
    less than three passes over a piece of MiBs)."""
    import numpy as np

    opens, closes, colons = [], [], 0
    for i in range(0, max(len(raw), 1), _COUNT_BYTES):
        block = raw[i : i + _COUNT_BYTES]
        opens.append(np.flatnonzero(block == ord("{")) + i)
        closes.append(np.flatnonzero(block == ord("}")) + i)
        colons += int(np.count_nonzero(block == ord(":")))
    return np.concatenate(opens), np.concatenate(closes), colons


def _inferred_schema(
    path: Path, tree: dict[str, Any], short: list[tuple[int, int]]
) -> dict[str, pl.DataType] | None:
    """The schema of the head's tree and of what polars infers from every record of the
    ``short`` pieces (offset, length), joined with polars' supertypes (an integer and a float:
    a float; a struct's fields: all of them): the inference of a whole file cost more than
    a scan of it (LLaMA-Factory's log of 1M records: 3.2 s)."""
    try:
        empties = [pl.DataFrame(schema={key: _dtype(node) for key, node in tree.items()})]
        with path.open("rb", buffering=0) as handle:
            for offset, length in short:
                piece = os.pread(handle.fileno(), length, offset)
                empties.append(
                    pl.DataFrame(schema=pl.read_ndjson(piece, infer_schema_length=None).schema)
                )
        return dict(pl.concat(empties, how="diagonal_relaxed").schema)
    except Exception:  # noqa: BLE001  a line polars rejects, types with no supertype
        return None


def _tree_of(schema: dict[str, pl.DataType]) -> dict[str, Any] | None:
    """The key tree of an inferred polars schema (None: a type the fast path does not take)."""
    tree: dict[str, Any] = {}
    for name, dtype in schema.items():
        if isinstance(dtype, pl.Struct):
            node = _tree_of({f.name: f.dtype for f in dtype.fields})
            if node is None:
                return None
            tree[name] = node
        elif dtype.is_numeric():
            tree[name] = "Float64"
        elif dtype in (pl.String, pl.Boolean):
            tree[name] = str(dtype)
        elif dtype == pl.Null and not _marked(name):
            continue  # null in every record: no value (as in :func:`_merge`)
        elif isinstance(dtype, pl.List) and (dtype.inner.is_numeric() or dtype.inner == pl.Null):
            tree[name] = "List"  # numbers, or only empty lists
        else:
            return None  # other lists, nulls: the line reader
    return tree


def _head_tree(head: bytes) -> dict[str, Any] | None:
    """Key tree of the head's complete records: a dtype name, or a dict for an object."""
    tree: dict[str, Any] = {}
    lines = head.split(b"\n")[:-1] if len(head) >= HEAD_BYTES else head.split(b"\n")
    for raw in lines:
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict) or not _merge(tree, record, 0):
            return None
    return tree or None


def _merge(tree: dict[str, Any], record: dict[str, Any], depth: int) -> bool:
    """Add a record's keys to the tree; False for anything the fast path does not take."""
    for key, value in record.items():
        if depth == 0 and key in METRIC_MAPS:
            return False  # this project's own stage maps: the native reader's business
        if isinstance(value, dict):
            node = tree.setdefault(key, {})
            if not isinstance(node, dict) or depth > 4 or not _merge(node, value, depth + 1):
                return False
            continue
        if value is None:
            # no type to declare (a later record's number gives one); where no record does,
            # the key is no value of the line reader's, its colons counted as null tokens; a
            # key whose presence the epoch-summary rule asks is the line reader's
            if depth == 0 and _marked(key):
                return False
            continue
        if isinstance(value, list):
            # a list of numbers, as per-position accuracies are logged: no value of the line
            # reader's (it keeps numbers only), read to account for its key; anything else in
            # a list (text, objects, lists) is polars' error below, and the line reader's
            if not all(_is_number(v) or v is None for v in value):
                return False
            if tree.setdefault(key, "List") != "List":
                return False
            continue
        kind = (
            "Boolean"
            if isinstance(value, bool)
            else "String"
            if isinstance(value, str)
            else "Float64"
        )
        if tree.setdefault(key, kind) != kind:
            return False
    return True


def _marked(key: str) -> bool:
    """Whether the epoch-summary rule asks for the key's presence (:func:`_scan`'s marks)."""
    from dflash_diag.read.aliases import is_validation

    return key == "epoch" or is_validation(key)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dtype(node: Any) -> pl.DataType:
    if isinstance(node, dict):
        return pl.Struct({k: _dtype(v) for k, v in node.items()})
    if node == "List":
        # polars rejects any element of a declared List(Float64) that is no number or null
        return pl.List(pl.Float64)
    return getattr(pl, node)()


def _found(frame: pl.DataFrame) -> int:
    """How many of the file's colons the frame's values account for.

    Every key is one colon; a ``null`` value is a key polars cannot tell from a missing one, so
    the caller adds the file's ``null`` tokens where the colons are more than the values;
    colons and ``null`` inside strings and key names are text, not keys, and are taken off.
    """
    exprs: list[pl.Expr] = []

    def walk(expr: pl.Expr, name: str, dtype: pl.DataType) -> None:
        present = expr.is_not_null().sum()
        # a key's colon, and the colons and "null"s of its name: off the file's counts
        exprs.append((present * (1 + name.count(":") - name.count("null"))).alias(str(len(exprs))))
        if isinstance(dtype, pl.List):
            # a list's null elements are "null" tokens that are no key's: off the null count
            exprs.append(
                (expr.list.drop_nulls().list.len().cast(pl.Int64) - expr.list.len().cast(pl.Int64))
                .sum()
                .alias(str(len(exprs)))
            )
        if dtype == pl.String:
            exprs.append(
                (
                    expr.str.count_matches(":", literal=True).sum()
                    - expr.str.count_matches("null", literal=True).sum()
                ).alias(str(len(exprs)))
            )
        if isinstance(dtype, pl.Struct):
            for field in dtype.fields:
                walk(expr.struct.field(field.name), field.name, field.dtype)

    for name, dtype in frame.schema.items():
        walk(pl.col(name), name, dtype)
    return int(sum(frame.select(exprs).row(0))) if exprs and frame.height else 0


def _wide(
    scanned: _Scanned, fmt: str, step_keys: tuple[str, ...], summary: pl.Series
) -> Scalars | None:
    """The numbers as the wide piece, without the records that hold none; a summary row's
    values under ``epoch_summary/<name>`` (its step's own values are the train rows')."""
    renamed = _renamed(scanned, step_keys) if summary.any() else []
    # taken from the scan: its columns are freed as the wide piece replaces them
    flat, scanned.flat = scanned.flat, pl.DataFrame()
    if renamed:
        if any(c.startswith("epoch_summary/") for c in flat.columns):
            return None  # a key named like a summary's value: the line reader's
        flat = flat.with_columns(
            *(pl.when(summary).then(None).otherwise(pl.col(c)).alias(c) for c in renamed),
            *(pl.when(summary).then(pl.col(c)).alias(f"epoch_summary/{c}") for c in renamed),
        )
    issues = ParseIssues()
    issues.lines = flat.height
    if "row" in scanned.types or any(
        scanned.types.get(k, pl.Float64) != pl.Float64 for k in step_keys
    ):
        return None  # a key named like a wide column, a step that is no number: line reader
    if "time" not in scanned.types and "_timestamp" in scanned.types and scanned.time_maybe_null:
        return None  # "time": null in every record: no clock, not "_timestamp" (line reader)
    keys = [name for name in flat.columns if flat[name].null_count() < flat.height]
    present = [k for k in step_keys if k in keys]
    step = pl.coalesce(*(pl.col(k) for k in present)) if present else pl.lit(None, pl.Float64)
    # the line reader's record time: a numeric "time" (a value too, as the step is), else
    # "_timestamp"; a "time" that is text is no number (numeric text declined above) and
    # none is read for it. Where a file writes "time" the canonical clock is that value
    # column, "_timestamp" or not: a record without one (or with a text one) has no time.
    time = (
        pl.col("time")
        if "time" in keys
        else pl.lit(None, pl.Float64)
        if "time" in scanned.types
        else pl.col("_timestamp")
        if "_timestamp" in keys
        else pl.lit(None, pl.Float64)
    )
    flat = flat.select(keys)
    # a record with no number is no record of the line reader's; a key in every record says
    # there is none such (the filter's mask and its kept copy of every column: +17 MiB at 1M)
    if keys and all(flat[k].null_count() for k in keys):
        flat = flat.filter(pl.any_horizontal(pl.col(k).is_not_null() for k in keys))
    if flat.height == 0 or not keys:
        return Scalars(frame=empty_scalars(), format=fmt, issues=issues)
    wide = flat.select(
        pl.int_range(0, pl.len() * len(keys), len(keys), dtype=pl.Int64).alias("row"),
        step.cast(pl.Int64, strict=False).alias("step"),
        time.cast(pl.Float64).alias("time"),
        # "step" and "time" are the wide piece's own columns (a key of either name is it)
        *(k for k in keys if k not in ("step", "time")),
    )
    del flat
    return Scalars(frame=empty_scalars(), format=fmt, issues=issues, wide=[wide])

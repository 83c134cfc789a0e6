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
  ``train_runtime``) polars infers the schema of the whole file and the count is checked again;
* any remaining difference, a line polars rejects (malformed, torn, NaN tokens, a type that
  changes), a list, or a string that might be a number sends the file to the line reader.

Memory: the file is read in pieces of a few MiB cut at a newline (never memory-mapped: a
mapped file's pages count in the process's resident set), each piece parsed, counted and
dropped; what is held is the parsed columns, kept as the pieces' chunks (no joined copy).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dflash_diag.logschema import METRIC_MAPS
from dflash_diag.read.formats.canonical import Scalars, contiguous, empty_scalars
from dflash_diag.read.formats.detect import HEAD_BYTES
from dflash_diag.read.records import ParseIssues

#: Bytes per piece read and parsed at a time: polars' parse of a piece takes about 3x it, so
#: the reader's own transient is tens of MiB whatever the file's size.
PIECE_BYTES = 8 * 2**20
#: Text that Python's float() might read (the line reader keeps numeric strings as numbers);
#: looser than float() (underscores anywhere among digits), so a doubt goes to the line reader.
_NUMERIC_TEXT = (
    r"(?i)^\s*[+-]?(?:(?:[\d_]+\.?[\d_]*|\.[\d_]+)(?:e[+-]?[\d_]+)?"
    r"|inf|infinity|nan)\s*$"
)


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
    scanned = _scan(path, tree)
    if scanned is not None and not scanned.all_keys_read:
        # keys the head does not show (an eval_loss first written after the head, a final
        # train_runtime): the schema of the whole file names them (a second pass)
        scanned = None  # freed before the next read
        inferred = _inferred_schema(path)
        tree = _tree_of(inferred) if inferred is not None else None
        scanned = _scan(path, tree) if tree is not None else None
        if scanned is not None and not scanned.all_keys_read:
            return None
    if scanned is None or _line_reader_semantics(scanned.frame, step_keys):
        return None
    return _wide(scanned.frame, fmt, step_keys)


def _line_reader_semantics(frame: pl.DataFrame, step_keys: tuple[str, ...]) -> bool:
    """Whether the records need a rule only the line reader applies: an ``event`` key (this
    project's events are skipped, another trainer's mark metric records), no step key at all
    (the epoch as the step), or end-of-epoch rows that carry validation values at the step of
    the epoch's last train row."""
    from dflash_diag.read.aliases import is_validation

    if "event" in frame.columns:
        return True
    if not any(k in frame.columns for k in step_keys):
        return True  # an epoch-only log: the epoch stands in for the step on the long records
    if "epoch" not in frame.columns or not any(is_validation(c) for c in frame.columns):
        return False
    step = next(k for k in step_keys if k in frame.columns)
    # a summary row repeats the step of the row before it, with an epoch, a validation value and
    # a train value the line reader renames (HF's eval row at the train row's step has none)
    validation = [c for c in frame.columns if is_validation(c)]
    train = [
        c
        for c in frame.columns
        if c not in validation
        and c not in step_keys
        and c != "epoch"
        and frame.schema[c].is_numeric()
    ]
    if not train:
        return False
    summary = (
        (frame[step].diff() == 0)
        & frame["epoch"].is_not_null()
        & frame.select(pl.any_horizontal(pl.col(validation).is_not_null())).to_series()
        & frame.select(pl.any_horizontal(pl.col(train).is_not_null())).to_series()
    )
    return bool(summary.any())


@dataclass
class _Scanned:
    """A file read with one schema: its frame, and whether its colons are all keys read."""

    frame: pl.DataFrame
    all_keys_read: bool


def _pieces(path: Path) -> Iterator[bytes]:
    """The file's bytes in pieces of about :data:`PIECE_BYTES`, each ending at a newline (the
    last one where the file ends; a line longer than a piece makes its piece longer)."""
    with path.open("rb", buffering=0) as handle:
        pending = b""
        while block := handle.read(PIECE_BYTES):
            cut = block.rfind(b"\n") + 1
            if not cut:
                pending += block
                continue
            yield pending + block[:cut]
            pending = block[cut:]
        if pending:
            yield pending


def _scan(path: Path, tree: dict[str, Any]) -> _Scanned | None:
    """The file read by polars with the tree's schema, piece by piece (None: a piece polars
    rejects, or a key the fast path does not take)."""
    if "time" in tree:
        return None  # a "time" key is both a value and the record's time: the line reader
    schema = {key: _dtype(node) for key, node in tree.items()}
    frames: list[pl.DataFrame] = []
    colons = found = nulls = 0
    try:
        for piece in _pieces(path):
            frame = pl.read_ndjson(piece, schema=schema)
            piece_colons = piece.count(b":")
            piece_found = _found(frame)
            colons += piece_colons
            found += piece_found
            # where a piece's colons are its values, it holds no null token (every one would
            # be a colon more), so a clean piece pays no second count
            if piece_colons > piece_found:
                nulls += piece.count(b"null")
            frames.append(frame)
    except OSError:
        return None
    except Exception:  # noqa: BLE001  any line polars rejects: the line reader decides
        return None
    if not frames:
        frame = pl.DataFrame(schema=schema)
    else:
        frame = pl.concat(frames, rechunk=False)
        frames.clear()
        frame = contiguous(frame)
    return _Scanned(frame, colons == found or (colons > found and colons == found + nulls))


def _inferred_schema(path: Path) -> dict[str, pl.DataType] | None:
    """The schema polars infers from every record of the file: each piece's own, joined with
    polars' supertypes (an integer and a float: a float; a struct's fields: all of them)."""
    try:
        empties = [
            pl.DataFrame(schema=pl.read_ndjson(piece, infer_schema_length=None).schema)
            for piece in _pieces(path)
        ]
        return dict(pl.concat(empties, how="diagonal_relaxed").schema) if empties else None
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
        else:
            return None  # lists, nulls: the line reader
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
        if value is None or isinstance(value, list):
            return False
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


def _dtype(node: Any) -> pl.DataType:
    if isinstance(node, dict):
        return pl.Struct({k: _dtype(v) for k, v in node.items()})
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


def _wide(frame: pl.DataFrame, fmt: str, step_keys: tuple[str, ...]) -> Scalars | None:
    """Flatten the structs, drop event records and non-numbers, build the wide piece."""
    issues = ParseIssues()
    issues.lines = frame.height
    columns: list[pl.Series] = []

    def flatten(series: pl.Series, name: str) -> None:
        if isinstance(series.dtype, pl.Struct):
            for field in series.struct.fields:
                flatten(series.struct.field(field), f"{name}/{field}")
        else:
            columns.append(series.alias(name))

    for name in frame.columns:
        flatten(frame[name], name)
    flat = pl.DataFrame(columns)
    if "event" in flat.columns:
        if flat["event"].dtype != pl.String:
            return None
        # this project's own events belong to the native reader (the line reader skips them)
        flat = flat.filter(pl.col("event").is_null() | (pl.col("event") == "metrics"))
    if "row" in flat.columns or any(
        flat.schema.get(k, pl.Float64) != pl.Float64 for k in step_keys
    ):
        return None  # a key named like a wide column, a step that is no number: line reader
    keys = []
    for name, dtype in flat.schema.items():
        if dtype == pl.String:
            if flat.select(pl.col(name).str.contains(_NUMERIC_TEXT).any()).item():
                return None  # a numeric string: the line reader's coercion decides
        elif dtype == pl.Float64 and flat[name].null_count() < flat.height:
            keys.append(name)
    present = [k for k in step_keys if k in keys]
    step = pl.coalesce(*(pl.col(k) for k in present)) if present else pl.lit(None, pl.Float64)
    time = pl.col("_timestamp") if "_timestamp" in keys else pl.lit(None, pl.Float64)
    flat = flat.select(keys)
    # a record with no number is no record of the line reader's
    if keys:
        flat = flat.filter(pl.any_horizontal(pl.col(k).is_not_null() for k in keys))
    if flat.height == 0 or not keys:
        return Scalars(frame=empty_scalars(), format=fmt, issues=issues)
    wide = flat.select(
        (pl.int_range(0, pl.len(), dtype=pl.Int64) * len(keys)).alias("row"),
        step.cast(pl.Int64, strict=False).alias("step"),
        time.cast(pl.Float64).alias("time"),
        # "step" is the wide piece's own column (a key of that name is the step itself)
        *(k for k in keys if k != "step"),
    )
    return Scalars(frame=empty_scalars(), format=fmt, issues=issues, wide=[wide])

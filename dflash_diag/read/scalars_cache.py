"""The parsed-log cache for another trainer's JSONL: a re-run on a grown log reads its new lines.

:mod:`dflash_diag.read.cache` keeps this project's own logs as parsed; a foreign JSONL (HF
Trainer, speculators, TorchSpec: names mapped, nested objects flattened) is kept one step
earlier, as the reader's :class:`~dflash_diag.read.formats.canonical.Scalars` (the values by
record, before any name is mapped): the mapping and merging by step
(:func:`~dflash_diag.read.formats.canonical.to_parsed_log`) run on the whole log every time, so
nothing they decide can depend on where one read ended. Same identity rules as the native
cache (same file, at least as long, the same hashed blocks; unchanged size: the same
modification and change times), same folder, bound and eviction.

When the file grew, the new bytes are read alone, by the reader that read the cached ones, and
joined after them (their rows after the cached rows, their line numbers after the cached lines):

* cached records of the line reader (the long frame): the new lines by the line reader. It
  carries one thing from line to line, the step of the record before, which decides whether a
  record repeating it is an end-of-epoch summary: new bytes that start with a record that could
  be one are read with the whole file again.
* cached records of polars' scan (one wide piece): the new lines by the scan, joined only when
  they give the same columns of the same types (the scan of the whole file would then give the
  cached piece followed by the new one); anything else (a key first seen, a line the scan
  rejects) reads the whole file again.

Only a file that ends with a newline is stored (a torn last line is read again whole, with the
lines that complete it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from dflash_diag.read.cache import (
    _MAX_SEGMENTS,
    CACHE_VERSION,
    _hashes,
    _package_version,
    cache_dir,
    evict,
    grown_since,
    max_bytes,
    read_segments,
    schema_text,
    write_segment,
)
from dflash_diag.read.formats.canonical import Scalars
from dflash_diag.read.records import ParseIssues

#: Bumped when the stored scalars change meaning or how they are stored (kept apart from the
#: native entries' version; 2: segments of the columns with a value, the scan's piece grown by
#: segments too).
SCALARS_VERSION = 2
_LINE_LISTS = ("malformed_lines", "nonnumeric_lines", "bad_step_lines")


def cached_scalars(
    name: str,
    *,
    options: Mapping[str, Any],
    parse_whole: Callable[[], Scalars],
    parse_tail: Callable[[Path, bool], Scalars | None],
    may_continue: Callable[[bytes], bool],
) -> Scalars:
    """``parse_whole()``'s scalars of the file ``name``, from the cache where still valid.

    Args:
        name: a path (anything but an uncompressed regular file is read normally).
        options: the reading options that change the scalars (part of the entry's key).
        parse_whole: reads the whole file (the uncached read).
        parse_tail: ``(file holding only the new bytes, wide) -> scalars``: the scan's (None
            where it gives up) when ``wide``, else the line reader's.
        may_continue: whether the new bytes may be read by the line reader after the cached
            ones with no state carried over (False: the whole file is read again).
    """
    try:
        entry = _ScalarsEntry.open(name, options)
    except Exception:  # noqa: BLE001  no cache: the normal read
        entry = None
    if entry is None:
        return parse_whole()
    try:
        scalars = entry.reuse(parse_tail, may_continue)
    except Exception:  # noqa: BLE001  a corrupt or unreadable entry: the normal read
        scalars = None
    if scalars is None:
        scalars = parse_whole()
        entry.reused = entry.reused_wide = None
    with contextlib.suppress(Exception):  # a read-only or full disk: nothing cached
        entry.store(scalars)
    return scalars


class _ScalarsEntry:
    """One cached foreign log: where it lives, and the file's identity now."""

    def __init__(self, path: Path, key: str, st: os.stat_result) -> None:
        self.path = path
        self.key = key
        self.st = st
        self.folder = cache_dir()
        self.meta_path = self.folder / f"{key}.json"
        self.stored_meta: dict[str, Any] | None = None
        #: the cached long-frame files and the rows they hold, when the scalars extend them
        self.reused: tuple[list[str], int] | None = None
        #: the same for the scan's one wide piece, when the new lines' piece was joined to it
        self.reused_wide: tuple[list[str], int] | None = None

    @classmethod
    def open(cls, name: str, options: Mapping[str, Any]) -> _ScalarsEntry | None:
        if name == "-":
            return None
        path = Path(os.path.realpath(name))
        st = os.stat(path)
        import stat

        if not stat.S_ISREG(st.st_mode):
            return None
        with path.open("rb") as handle:
            if handle.read(2) == b"\x1f\x8b":
                return None  # a .gz stream: its offsets are not the file's
        material = json.dumps(
            {
                "kind": "foreign-jsonl-scalars",
                "path": str(path),
                "options": sorted((str(k), str(v)) for k, v in options.items()),
                "version": [CACHE_VERSION, SCALARS_VERSION],
                "package": _package_version(),
            }
        )
        return cls(path, hashlib.sha256(material.encode()).hexdigest()[:32], st)

    def reuse(
        self,
        parse_tail: Callable[[Path, bool], Scalars | None],
        may_continue: Callable[[bytes], bool],
    ) -> Scalars | None:
        """The cached scalars brought up to date, or None (a miss)."""
        try:
            meta = json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            return None
        self.stored_meta = meta
        if meta.get("scalars_version") != SCALARS_VERSION:
            return None
        grown = grown_since(meta, self.path, self.st)
        if grown is None:
            return None
        cached = _thaw(meta, self.folder)
        if grown == 0:
            return cached
        with self.path.open("rb") as handle:
            handle.seek(meta["consumed"])
            data = handle.read(grown)
        wide = bool(cached.wide)
        if wide and (len(cached.wide) != 1 or cached.frame.height):
            return None  # not the scan's one piece
        if not wide and not may_continue(data):
            return None
        partial = self.folder / f".{self.key}.{secrets.token_hex(6)}.tail.tmp"
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            partial.write_bytes(data)
            tail = parse_tail(partial, wide)
        finally:
            partial.unlink(missing_ok=True)
        if tail is None or tail.meta or tail.notes or tail.format != cached.format:
            return None
        if wide:
            joined = _join_wide(cached, tail)
            if joined is not None:
                self.reused = (list(meta["long"]), cached.frame.height)
                self.reused_wide = (list(meta["wide"][0]), cached.wide[0].height)
            return joined
        if tail.wide:
            return None
        joined = _join(cached, tail, rows_before=meta["rows_end"], lines_before=meta["newlines"])
        self.reused = (list(meta["long"]), cached.frame.height)
        return joined

    def store(self, scalars: Scalars) -> None:
        """Write ``scalars`` as this entry, when the file read ends with a newline."""
        st = os.stat(self.path)
        if (st.st_dev, st.st_ino, st.st_size) != (self.st.st_dev, self.st.st_ino, self.st.st_size):
            return  # changed while it was read: cache nothing
        consumed = st.st_size
        if consumed == 0:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if os.pread(fd, 1, consumed - 1) != b"\n":
                return  # a torn last line: the next bytes may complete it
        finally:
            os.close(fd)
        old = self.stored_meta
        if (
            old is not None
            and old.get("consumed") == consumed
            and (old.get("mtime_ns"), old.get("ctime_ns")) == (st.st_mtime_ns, st.st_ctime_ns)
        ):
            os.utime(self.meta_path)  # a hit: most recently used
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        newlines = self._newlines(consumed, old)

        def write(frame: pl.DataFrame, part: str) -> str:
            name = f"{self.key}.{token}.{part}.arrow"
            partial = self.folder / f".{name}.tmp"
            write_segment(frame, partial)
            os.replace(partial, self.folder / name)
            return name

        def extended(
            reused: tuple[list[str], int] | None, frame: pl.DataFrame, schema: str | None, part: str
        ) -> list[str] | None:
            """The segments of ``frame`` when it extends the cached ``reused`` ones with the
            same columns of the same types (only its new rows are written), else None."""
            if reused is None or old is None or len(reused[0]) >= _MAX_SEGMENTS:
                return None
            if schema != schema_text(frame):
                return None
            new_rows = frame.slice(reused[1])
            return [*reused[0], write(new_rows, part)] if new_rows.height else list(reused[0])

        old_wide = (old or {}).get("wide_schemas") or [None]
        long = extended(self.reused, scalars.frame, (old or {}).get("long_schema"), "long")
        wide: list[list[str]] | None = [] if not scalars.wide else None
        if long is not None and len(scalars.wide) == 1 and self.reused_wide is not None:
            # the scan's one piece, grown by the new lines' piece (its long frame is empty)
            piece = extended(self.reused_wide, scalars.wide[0], old_wide[0], "wide0")
            wide = None if piece is None else [piece]
        if long is None or wide is None:
            long = [write(scalars.frame, "long")]
            wide = [[write(piece, f"wide{i}")] for i, piece in enumerate(scalars.wide)]
        files = [*long, *(name for piece in wide for name in piece)]
        meta = {
            "scalars_version": SCALARS_VERSION,
            "path": str(self.path),
            "dev": st.st_dev,
            "ino": st.st_ino,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "consumed": consumed,
            "hashes": _hashes(self.path, consumed),
            "newlines": newlines,
            "rows_end": _rows_end(scalars),
            "format": scalars.format,
            "issues": dataclasses.asdict(scalars.issues),
            "meta": scalars.meta,
            "notes": scalars.notes,
            "long": long,
            "long_schema": schema_text(scalars.frame),
            "wide": wide,  # each wide piece's segments
            "wide_schemas": [schema_text(piece) for piece in scalars.wide],
            # every file of the entry (what eviction removes)
            "frames": files,
        }
        partial_meta = self.folder / f".{self.key}.{token}.json.tmp"
        partial_meta.write_text(json.dumps(meta, allow_nan=True))
        os.replace(partial_meta, self.meta_path)
        kept = set(files)
        for name in (old or {}).get("frames", []):
            if name not in kept:
                (self.folder / name).unlink(missing_ok=True)
        evict(self.folder, max_bytes())

    def _newlines(self, consumed: int, old: dict[str, Any] | None) -> int:
        """Lines of the file's first ``consumed`` bytes (the cached count plus the new bytes')."""
        start, count = 0, 0
        if self.reused is not None and old is not None:
            start, count = old["consumed"], old["newlines"]
        with self.path.open("rb") as handle:
            handle.seek(start)
            while start < consumed:
                block = handle.read(min(2**24, consumed - start))
                if not block:
                    break
                count += block.count(b"\n")
                start += len(block)
        return count


def _rows_end(scalars: Scalars) -> int:
    """One past the largest record row of ``scalars`` (a wide piece's i-th key is row + i)."""
    end = scalars.frame.select(pl.col("row").max()).item() + 1 if scalars.frame.height else 0
    for piece in scalars.wide:
        if piece.height:
            keys = sum(1 for c in piece.columns if c not in ("row", "step", "time"))
            end = max(end, piece.select(pl.col("row").max()).item() + max(1, keys))
    return int(end)


def _join(cached: Scalars, tail: Scalars, *, rows_before: int, lines_before: int) -> Scalars:
    """``tail`` (read from the new bytes alone) after ``cached``: its rows after the cached
    rows, its line numbers after the cached lines."""
    issues = dataclasses.replace(cached.issues)
    moved = dataclasses.replace(tail.issues)
    for name in _LINE_LISTS:
        setattr(moved, name, [(s, n + lines_before) for s, n in getattr(moved, name)])
    for name in _LINE_LISTS:
        setattr(issues, name, list(getattr(issues, name)))
    issues.torn_tail = list(issues.torn_tail)
    issues.nonfinite = dict(issues.nonfinite)
    issues.merge(moved)
    frame = tail.frame.with_columns(pl.col("row") + rows_before)
    return Scalars(
        frame=pl.concat([cached.frame, frame]) if cached.frame.height else frame,
        format=cached.format,
        issues=issues,
        meta=dict(cached.meta),
        notes=list(cached.notes),
        wide=list(cached.wide),
    )


def _join_wide(cached: Scalars, tail: Scalars) -> Scalars | None:
    """The scan's piece of the new bytes after the cached one, when both hold the same columns
    of the same types (else None): then it is the piece the scan of the whole file gives."""
    (before,) = cached.wide
    if tail.frame.height or len(tail.wide) > 1:
        return None
    if not tail.wide:
        # no record with a number in the new lines: the whole file's piece is the cached one,
        # unless its keys were all-null here and have values now (then they would not be empty)
        return None
    (after,) = tail.wide
    if dict(before.schema) != dict(after.schema):
        return None  # a key first seen, or one that has no value any more: the whole file
    # the same keys in another order (a key null in the file's first record comes last in the
    # scan's schema, the new bytes' head shows it in place): the whole file's scan has the
    # cached order, the order of the same head
    after = after.select(before.columns)
    if before.height < 2 or after.height < 2:
        return None
    if int(after["row"][1]) - int(after["row"][0]) != int(before["row"][1]) - int(before["row"][0]):
        return None  # the step key read on one side only: the whole file's rows are spaced anew
    # the scan spaces its rows by the number of keys it read (the step key among them)
    spacing = int(before["row"][1]) - int(before["row"][0])
    after = after.with_columns(
        ((pl.int_range(0, pl.len(), dtype=pl.Int64) + before.height) * spacing).alias("row")
    )
    issues = dataclasses.replace(cached.issues)
    issues.lines += tail.issues.lines
    if tail.issues != ParseIssues(lines=tail.issues.lines):
        return None  # the scan counts records only: anything else is not its account
    return Scalars(
        frame=cached.frame,
        format=cached.format,
        issues=issues,
        meta=dict(cached.meta),
        notes=list(cached.notes),
        wide=[pl.concat([before, after])],
    )


def _thaw(meta: dict[str, Any], folder: Path) -> Scalars:
    issues = dict(meta["issues"])
    for name in _LINE_LISTS:
        issues[name] = [tuple(x) for x in issues[name]]
    return Scalars(
        frame=read_segments(folder, meta["long"], meta["long_schema"]),
        format=meta["format"],
        issues=ParseIssues(**issues),
        meta=dict(meta["meta"]),
        notes=list(meta["notes"]),
        wide=[
            read_segments(folder, names, schema)
            for names, schema in zip(meta["wide"], meta["wide_schemas"], strict=True)
        ],
    )

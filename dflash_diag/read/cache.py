"""A cache of parsed logs: a re-run on a log that only grew parses the new bytes alone.

Every ``converge`` or ``compare`` run used to parse the whole file again, though a training log
only grows between two runs. The parsed records of a plain JSONL file are kept here (an Arrow
IPC file of the metric columns and a JSON file of the rest: events, parse account, line and
chunk bookkeeping) under ``$XDG_CACHE_HOME/dflash-diag`` (else ``~/.cache/dflash-diag``), one
entry per path and reading options. On the next read of that path:

* the file is the same one (device and inode), at least as long as what was parsed, and its
  first block, the block before the parsed end and evenly spaced blocks between hash as they
  did: only the bytes after the parsed end are parsed (as ``watch`` reads a growing tail) and
  joined to the cached records, and the entry is updated;
* nothing after the parsed end, the same modification and change times (nanoseconds: any
  write, even one that puts the old mtime back, moves the change time) and the same block
  hashes: the cached log as it is;
* anything else (another inode: rotated; shorter: truncated; a block changed or the same size
  written again: rewritten in place) is a miss: the file is parsed whole and the entry replaced.

The one change this cannot see is a file rewritten in place AND grown whose rewritten bytes all
lie outside the hashed blocks (16 blocks of 4 KiB): a training log is appended to, not edited,
and hashing every byte would cost a re-run what parsing them does.

A torn last line is never part of what is cached as parsed: the entry ends at the last newline
and its account of the torn line is taken back before the new bytes (which hold that line,
complete now) are parsed. A cache failure of any kind (a read-only or full disk, a corrupt
entry, another version's entry) falls back to a normal read, silently: the cache can make a
run faster, never wrong and never fail.

The cache is bounded (:data:`DEFAULT_MAX_BYTES`, or ``DFLASH_DIAG_CACHE_MAX_BYTES``): after a
write the least recently used entries go until the rest fits. ``--no-cache`` bypasses it.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from dflash_diag.read.records import LogEvent, ParsedLog, ParseIssues, join_sequential

#: Bumped whenever what is cached changes meaning (a reader fix changes the parse) or how it is
#: stored (2: a segment holds only its columns with a value, in one record batch).
CACHE_VERSION = 2
#: The cache's size bound when ``DFLASH_DIAG_CACHE_MAX_BYTES`` does not set one (1 GiB).
DEFAULT_MAX_BYTES = 2**30
#: Bytes per hashed block, and how many blocks between the first and the last are hashed.
_BLOCK = 4096
_MIDDLE_BLOCKS = 14
#: A growth beyond this share of the parsed bytes is parsed as a whole file again (the new
#: bytes are read in one piece; the streaming reader is the bounded-memory way for a lot).
_MAX_GROWTH = 0.25
_ENV_MAX = "DFLASH_DIAG_CACHE_MAX_BYTES"
#: Frame files per entry before a grown entry is written again as one (reads stay one concat).
_MAX_SEGMENTS = 8


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dflash-diag``, else ``~/.cache/dflash-diag``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base if base else Path.home() / ".cache") / "dflash-diag"


def max_bytes() -> int:
    """The cache's size bound in bytes (``DFLASH_DIAG_CACHE_MAX_BYTES``, else the default)."""
    try:
        return max(0, int(os.environ.get(_ENV_MAX, DEFAULT_MAX_BYTES)))
    except ValueError:
        return DEFAULT_MAX_BYTES


def cached_parse(
    name: str,
    *,
    source: int,
    fields: Mapping[str, str],
    extra: Mapping[str, pl.DataType] | None,
    lists: bool,
    parse_whole: Callable[[], ParsedLog],
    parse_tail: Callable[[bytes, int], ParsedLog],
) -> ParsedLog:
    """``parse_whole()``'s log of the file ``name``, from the cache where it is still valid.

    Args:
        name: a path (anything but a plain, uncompressed regular file is read normally).
        source, fields, extra, lists: the reading options (part of the entry's key).
        parse_whole: parses the whole file (the uncached read).
        parse_tail: ``(bytes, first_line_no) -> log`` parses bytes that follow the cached ones.
    """
    try:
        entry = _Entry.open(name, source=source, fields=fields, extra=extra, lists=lists)
    except Exception:  # noqa: BLE001  no cache: the normal read
        entry = None
    if entry is None:
        return parse_whole()
    try:
        log = entry.reuse(source, parse_tail)
    except Exception:  # noqa: BLE001  a corrupt or unreadable entry: the normal read
        log = None
    if log is None:
        log = parse_whole()
    with contextlib.suppress(Exception):  # a read-only or full disk: nothing cached
        entry.store(log)
    return log


class _Entry:
    """One cached log: where it lives, and the file's identity now."""

    def __init__(self, path: Path, key: str, st: os.stat_result) -> None:
        self.path = path
        self.key = key
        self.folder = cache_dir()
        self.meta_path = self.folder / f"{key}.json"
        self.st = st
        self.stored_meta: dict[str, Any] | None = None
        #: (cached frame files, their rows) when the log read extends them
        self.reused: tuple[list[str], int] | None = None

    @classmethod
    def open(
        cls,
        name: str,
        *,
        source: int,
        fields: Mapping[str, str],
        extra: Mapping[str, pl.DataType] | None,
        lists: bool,
    ) -> _Entry | None:
        if name == "-":
            return None
        path = Path(os.path.realpath(name))
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        with path.open("rb") as handle:
            if handle.read(2) == b"\x1f\x8b":
                return None  # a .gz stream: its offsets are not the file's
        options = json.dumps(
            {
                "path": str(path),
                "source": source,
                "lists": lists,
                "fields": sorted(fields.items()),
                "extra": sorted((k, str(v)) for k, v in (extra or {}).items()),
                "version": CACHE_VERSION,
                "package": _package_version(),
            }
        )
        key = hashlib.sha256(options.encode()).hexdigest()[:32]
        return cls(path, key, st)

    # -- reading ------------------------------------------------------------------------

    def reuse(self, source: int, parse_tail: Callable[[bytes, int], ParsedLog]) -> ParsedLog | None:
        """The cached log brought up to date, or None (a miss)."""
        try:
            meta = json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            return None
        self.stored_meta = meta
        st = self.st
        if meta.get("cache_version") != CACHE_VERSION:
            return None
        grown = grown_since(meta, self.path, st)
        if grown is None:
            return None
        log = _thaw(meta, read_segments(self.folder, meta["frames"], meta["schema"]))
        if grown == 0:
            return log
        # the torn last line, if any, is read again with the new bytes (complete by now)
        log.issues.lines -= len(log.issues.torn_tail)
        log.issues.torn_tail = []
        with self.path.open("rb") as handle:
            handle.seek(meta["consumed"])
            data = handle.read(grown)
        if not data:
            return log
        tail = parse_tail(data, log.next_line_no)
        joined = join_sequential([log, tail])
        joined.metrics = one_chunk(joined.metrics)
        joined.chunk_starts = {
            source: [*log.chunk_starts.get(source, []), (meta["consumed"], log.next_line_no)]
        }
        joined.consumed_bytes = meta["consumed"] + tail.consumed_bytes
        # the joined frame starts with the cached rows unchanged: store() adds the rest only
        self.reused = (list(meta["frames"]), log.metrics.height)
        return joined

    # -- writing ------------------------------------------------------------------------

    def store(self, log: ParsedLog) -> None:
        """Write ``log`` as this entry (only what ends at a newline: see the module docstring)."""
        consumed = log.consumed_bytes
        st = os.stat(self.path)
        if (st.st_dev, st.st_ino) != (self.st.st_dev, self.st.st_ino) or st.st_size < consumed:
            return  # changed while it was read: cache nothing
        if consumed:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                last = os.pread(fd, 1, consumed - 1)
            finally:
                os.close(fd)
            if last != b"\n":
                return  # an unterminated last record: the next bytes may continue its line
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
        frame_name = f"{self.key}.{token}.arrow"
        partial = self.folder / f".{frame_name}.tmp"
        schema = schema_text(log.metrics)
        if (
            self.reused is not None
            and len(self.reused[0]) < _MAX_SEGMENTS
            and old is not None
            and old.get("schema") == schema
        ):
            # a grown log: only the new rows are written, as one more segment of the entry
            frames = [*self.reused[0], frame_name]
            write_segment(log.metrics.slice(self.reused[1]), partial)
        else:
            frames = [frame_name]
            write_segment(log.metrics, partial)
        os.replace(partial, self.folder / frame_name)
        meta = _freeze(log)
        meta.update(
            cache_version=CACHE_VERSION,
            path=str(self.path),
            dev=st.st_dev,
            ino=st.st_ino,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
            consumed=consumed,
            hashes=_hashes(self.path, consumed),
            frames=frames,
            schema=schema,
        )
        partial_meta = self.folder / f".{self.key}.{token}.json.tmp"
        partial_meta.write_text(json.dumps(meta, allow_nan=True))
        os.replace(partial_meta, self.meta_path)
        for name in (old or {}).get("frames", []):
            if name not in frames:
                (self.folder / name).unlink(missing_ok=True)
        evict(self.folder, max_bytes())


def write_segment(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame``'s columns that hold a value as one Arrow IPC record batch: a column of
    nulls only (most of a log's declared fields, in most logs) costs a re-run nothing to read,
    and one batch reads back as one chunk (no copy to join the batches)."""
    kept = [
        name
        for name, nulls in zip(frame.columns, frame.null_count().row(0), strict=True)
        if nulls < frame.height
    ]
    # one column at least: a frame of no columns has no height (its nulls would be one row)
    frame.select(kept or frame.columns[:1]).write_ipc(
        path, compression="uncompressed", record_batch_size=max(1, frame.height)
    )


def read_segments(folder: Path, names: list[str], schema: str) -> pl.DataFrame:
    """The frame of the segment files ``names`` (in order) whose columns and types are
    ``schema`` (:func:`schema_text`): a column a segment does not hold is null there."""
    types = _schema_of(schema)
    parts = []
    for name in names:
        part = pl.read_ipc(folder / name)
        missing = [column for column in types if column not in part.columns]
        if missing:
            part = part.with_columns(
                pl.lit(None, types[column]).alias(column) for column in missing
            )
        parts.append(part.select(list(types)))
    return one_chunk(parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical"))


def one_chunk(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` in one chunk per column, as the uncached reader gives it: polars sums a column
    chunk by chunk, and a mean over another chunking can differ in its last bit."""
    return frame.rechunk()  # a column in one chunk already is kept as it is


def schema_text(frame: pl.DataFrame) -> str:
    """``frame``'s column names and types as text (an empty Arrow IPC file, base64): the
    entry's record of every column, those no segment holds included."""
    buffer = io.BytesIO()
    frame.clear().write_ipc(buffer, compression="uncompressed")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _schema_of(text: str) -> dict[str, pl.DataType]:
    return dict(pl.read_ipc(io.BytesIO(base64.b64decode(text))).schema)


def evict(folder: Path, limit: int) -> None:
    """Remove the least recently used entries until the cache holds at most ``limit`` bytes."""
    entries = []
    total = 0
    for meta_path in folder.glob("*.json"):
        try:
            meta = json.loads(meta_path.read_text())
            frames = [folder / name for name in meta["frames"]]
            size = meta_path.stat().st_size + sum(f.stat().st_size for f in frames)
            used = meta_path.stat().st_mtime_ns
        except (OSError, ValueError, KeyError, TypeError):
            meta_path.unlink(missing_ok=True)  # a broken entry is no entry
            continue
        entries.append((used, size, meta_path, frames))
        total += size
    for _used, size, meta_path, frames in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        meta_path.unlink(missing_ok=True)
        for frame in frames:
            frame.unlink(missing_ok=True)
        total -= size
    live = {f.name for e in entries if e[2].exists() for f in e[3]}
    for orphan in folder.glob("*.arrow"):
        if orphan.name not in live:
            orphan.unlink(missing_ok=True)


def grown_since(meta: Mapping[str, Any], path: Path, st: os.stat_result) -> int | None:
    """The bytes ``path`` grew by since the cache entry ``meta`` was written, or None when the
    entry cannot be reused: another file at this path (rotated), truncated, rewritten (even to
    the same size, or in place with the same size), or grown by much more than a re-run's
    growth (the whole file is read then)."""
    if meta["dev"] != st.st_dev or meta["ino"] != st.st_ino or st.st_size < meta["consumed"]:
        return None
    if _hashes(path, meta["consumed"]) != meta["hashes"]:
        return None
    grown = st.st_size - meta["consumed"]
    if grown == 0 and (st.st_mtime_ns, st.st_ctime_ns) != (meta["mtime_ns"], meta["ctime_ns"]):
        return None
    if grown > _MAX_GROWTH * max(1, meta["consumed"]):
        return None
    return grown


def _hashes(path: Path, end: int) -> list[str]:
    """Hashes of the first block, evenly spaced blocks and the block ending at ``end``."""
    if end <= 0:
        return []
    starts = {0, max(0, end - _BLOCK)}
    starts.update(end * i // (_MIDDLE_BLOCKS + 1) for i in range(1, _MIDDLE_BLOCKS + 1))
    fd = os.open(path, os.O_RDONLY)
    try:
        return [
            hashlib.blake2b(os.pread(fd, min(_BLOCK, end - s), s), digest_size=16).hexdigest()
            for s in sorted(starts)
        ]
    finally:
        os.close(fd)


@functools.cache
def _package_version() -> str:
    # once a process: importlib.metadata walks the installed distributions (~10 ms each time)
    try:
        from importlib.metadata import version

        return version("dflash-diag")
    except Exception:  # noqa: BLE001
        return "unknown"


def _freeze(log: ParsedLog) -> dict[str, Any]:
    """The log but its frame, as JSON-ready data."""
    return {
        # by hand, not dataclasses.asdict: that deep-copies every event's fields first
        "events": [
            {"kind": e.kind, "source": e.source, "seq": e.seq, "step": e.step, "fields": e.fields}
            for e in log.events
        ],
        "issues": dataclasses.asdict(log.issues),
        "consumed_bytes": log.consumed_bytes,
        "first_line_no": log.first_line_no,
        "next_line_no": log.next_line_no,
        "lists_pending": log.lists_pending,
        "fields": log.fields,
        "chunk_starts": {str(k): v for k, v in log.chunk_starts.items()},
        "notes": log.notes,
        "sources": log.sources,
    }


_LINE_LISTS = ("malformed_lines", "nonnumeric_lines", "bad_step_lines")


def _thaw(meta: dict[str, Any], frame: pl.DataFrame) -> ParsedLog:
    issues = dict(meta["issues"])
    for name in _LINE_LISTS:
        issues[name] = [tuple(x) for x in issues[name]]
    return ParsedLog(
        metrics=frame,
        events=[LogEvent(**e) for e in meta["events"]],
        issues=ParseIssues(**issues),
        consumed_bytes=meta["consumed_bytes"],
        sources=list(meta["sources"]),
        first_line_no=meta["first_line_no"],
        next_line_no=meta["next_line_no"],
        lists_pending=list(meta["lists_pending"]),
        fields=dict(meta["fields"]),
        chunk_starts={int(k): [tuple(x) for x in v] for k, v in meta["chunk_starts"].items()},
        notes=list(meta["notes"]),
    )

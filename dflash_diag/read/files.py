"""File access for the reader: paths, ``.gz``, standard input, line-aligned chunks, rank logs.

Parsing is :mod:`dflash_diag.read.jsonl`'s; this module only yields bytes. No polars here, so the
command modules can use the rank-log discovery at import time and ``dflash-diag --help`` stays
fast.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import gzip
import io
import os
import re
import select
import stat
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from dflash_diag.errors import DiagError
from dflash_diag.text import visible

if TYPE_CHECKING:
    from dflash_diag.read.ranks import RankLog

#: Bytes per read when streaming a file: big enough for polars' threads, small enough that the
#: raw text never dominates memory (the parsed columns are what a report keeps). 8 MiB was
#: measured against 16 (converge, 1M records, paired): 11% more CPU on the two-list pipeline
#: shape (608 MiB) and 3% more on the mixed one, for 3-4% less peak memory.
CHUNK_BYTES = 16 * 2**20
#: Bytes read at the far end of a chunk to find its last line end (see _file_line_chunks).
_PROBE_BYTES = 64 * 2**10


#: The longest line the reader accepts. Nothing a trainer writes comes near (a metric record is
#: under 1 KiB, a ``run_start`` header with its whole config a few KiB); a longer line is counted
#: as malformed and skipped while streaming, so memory stays bounded whatever the input (a gzip bomb
#: of zeros is one endless line). When a caller reads in chunks larger than this, the chunk size is
#: the limit (a line always fits in one chunk).
MAX_LINE_BYTES = 16 * 2**20
#: What stands in for a skipped overlong line in the text handed to the parser: not JSON, so the
#: parser counts it as a malformed line at its own line number (``--strict`` names it).
OVERLONG_LINE = b"\x00dflash-diag: overlong line skipped\x00"
#: Seconds to wait for the first byte of a named pipe (FIFO) before saying that nothing writes it:
#: opening a FIFO that no process writes would otherwise block forever.
FIFO_WAIT_SECONDS = 10.0
#: Errors a compressed stream raises on damaged data (a truncated file: EOFError; corrupt deflate
#: data: zlib.error; a bad header: gzip.BadGzipFile, an OSError).
READ_ERRORS = (OSError, EOFError, zlib.error)


def _shown(name: object) -> str:
    """A path or log string as shown in a message: control characters made visible."""
    return visible(name)


def check_log_path(name: str) -> None:
    """Raise a one-line :class:`DiagError` when ``name`` cannot be a log to read.

    Distinguishes a missing file from a symlink loop, a directory and an unreadable path, which
    ``Path.exists`` would all call "no such file".

    Raises:
        DiagError: the path is missing, a symlink loop, a directory, or cannot be inspected.
    """
    try:
        st = os.stat(name)
    except FileNotFoundError:
        if os.path.islink(name):
            raise DiagError(f"broken symlink (its target does not exist): {_shown(name)}") from None
        raise DiagError(f"no such file: {_shown(name)}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DiagError(
                f"symlink loop (the link points back at itself): {_shown(name)}"
            ) from None
        raise DiagError(f"cannot read {_shown(name)}: {_shown(exc.strerror or exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise DiagError(f"is a directory, not a log: {_shown(name)}")


def can_reread(name: str) -> bool:
    """Whether a log can be read a second time: a regular file, not ``-``, a FIFO or a pipe
    (``<(ssh host cat log)``), whose bytes are gone once read."""
    try:
        return name != "-" and stat.S_ISREG(os.stat(name).st_mode)
    except OSError:
        return False


def _wait_for_fifo(fd: int, name: str, seconds: float) -> None:
    """Wait until a named pipe opened without blocking has data (or its writer closed it)."""
    poller = select.poll()  # not select.select: it fails on descriptors above 1023
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if poller.poll(left * 1000):
            return
    raise DiagError(
        f"{_shown(name)} is a named pipe that nothing wrote to within {seconds:g} s: "
        "start its writer first, or pipe the log in as -"
    )


def check_encoding(head: bytes, name: str) -> None:
    """Raise a one-line :class:`DiagError` when a log's first bytes say UTF-16 or UTF-32 (a
    Windows editor's "Unicode"), which would read as nothing but malformed lines."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        len(head) >= 4
        and head != bytes(4)
        and (head[1:4:2] == b"\x00\x00" or head[0:4:2] == b"\x00\x00")
    ):
        raise DiagError(
            f"{_shown(name)} looks UTF-16/UTF-32 encoded (as Windows PowerShell's > "
            "writes text); the log must be UTF-8 (convert it: iconv -f UTF-16 -t UTF-8)"
        )


class _CheckedStream(io.RawIOBase):
    """A compressed stream whose damage (truncation, corrupt data) is a one-line DiagError."""

    def __init__(self, inner: IO[bytes], name: str) -> None:
        super().__init__()
        self.inner = inner
        self.name_shown = _shown(name)

    def fail(self, exc: BaseException) -> DiagError:
        what = "truncated" if isinstance(exc, EOFError) else "damaged"
        return DiagError(f"cannot read {self.name_shown}: {what} compressed data ({_shown(exc)})")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self.inner.seekable()

    def readinto(self, buffer) -> int:  # type: ignore[override]
        try:
            return self.inner.readinto(buffer)  # type: ignore[attr-defined]
        except READ_ERRORS as exc:
            raise self.fail(exc) from None

    def read(self, size: int = -1) -> bytes:
        try:
            return self.inner.read(size)
        except READ_ERRORS as exc:
            raise self.fail(exc) from None

    def readline(self, size: int | None = -1) -> bytes:
        try:
            return self.inner.readline(-1 if size is None else size)
        except READ_ERRORS as exc:
            raise self.fail(exc) from None

    def seek(self, offset: int, whence: int = 0) -> int:
        try:
            return self.inner.seek(offset, whence)
        except READ_ERRORS as exc:
            raise self.fail(exc) from None

    def tell(self) -> int:
        return self.inner.tell()


def _gunzip(raw: IO[bytes], name: str) -> IO[bytes]:
    stream = _CheckedStream(cast(IO[bytes], gzip.GzipFile(fileobj=raw)), name)
    try:
        head = stream.inner.peek(4)[:4]  # type: ignore[attr-defined]
    except READ_ERRORS as exc:
        raise stream.fail(exc) from None
    check_encoding(head, name)
    return cast(IO[bytes], stream)  # a file-like wrapper: the IO methods the readers use


@contextlib.contextmanager
def open_input(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary stream of a log: a file, a ``.gz`` file (by its magic bytes), or ``-`` for stdin.

    A named pipe is waited on for :data:`FIFO_WAIT_SECONDS` at most. Damaged compressed data
    raises :class:`DiagError` when it is read.

    Raises:
        DiagError: the file is missing (or a symlink loop, a directory) or unreadable, a FIFO
            nothing writes to, or a UTF-16 log.
    """
    name = str(path)
    try:
        if name == "-":
            raw: IO[bytes] = sys.stdin.buffer
            if not hasattr(raw, "peek"):
                raw = io.BufferedReader(
                    cast(io.RawIOBase, raw)
                )  # e.g. a BytesIO standing in for stdin
            peek = raw.peek(4)[:4]
            if peek[:2] == b"\x1f\x8b":
                yield _gunzip(raw, "standard input")
            else:
                check_encoding(peek, "standard input")
                yield raw
            return
        check_log_path(name)
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without writer: no hang
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                _wait_for_fifo(fd, name, FIFO_WAIT_SECONDS)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        with open(fd, "rb") as handle:
            head = handle.peek(4)[:4]  # peeking does not move the position
            if head[:2] == b"\x1f\x8b":
                yield _gunzip(handle, name)
            else:
                check_encoding(head, name)
                yield handle
    except OSError as exc:
        raise DiagError(f"cannot read {_shown(name)}: {_shown(exc.strerror or exc)}") from None


def read_input(path: str | Path) -> bytes:
    """All bytes of a log (see :func:`open_input`); a corrupt ``.gz`` is a :class:`DiagError`.

    Unbounded by design (the caller asked for every byte); the streaming readers use
    :func:`line_chunks`.
    """
    with open_input(path) as handle:
        try:
            return handle.read()
        except READ_ERRORS as exc:
            raise DiagError(f"cannot read {_shown(path)}: {_shown(exc)}") from None


@dataclass
class LineStats:
    """What :func:`line_chunks` did besides yielding text, for callers that track byte offsets.

    Attributes:
        consumed: bytes of the input behind the chunks yielded so far (skipped lines included).
        overlong: lines longer than the limit, replaced by :data:`OVERLONG_LINE`.
    """

    consumed: int = 0
    overlong: int = 0


def line_chunks(
    handle: IO[bytes],
    chunk_bytes: int,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    stats: LineStats | None = None,
) -> Iterator[tuple[bytes, bool]]:
    """``(text, final)`` pieces of about ``chunk_bytes`` that end at a line end (except the last).

    A line longer than ``max(max_line_bytes, chunk_bytes)`` is dropped while it streams by (never
    held whole) and replaced by one :data:`OVERLONG_LINE` line, so line numbers stay right and the
    parser counts it as malformed. Memory: about two chunks, whatever the input.

    Raises:
        DiagError: the input cannot be read (damaged compressed data, an I/O error).
    """
    stats = stats if stats is not None else LineStats()
    limit = max(max_line_bytes, chunk_bytes)
    if isinstance(handle, io.BufferedReader) and handle.seekable() and _has_fd(handle):
        yield from _file_line_chunks(handle, chunk_bytes, limit, stats)
        return
    yield from _stream_line_chunks(handle, chunk_bytes, limit, stats)


def _read_block(handle: IO[bytes], size: int) -> bytes:
    try:
        return handle.read(size)
    except READ_ERRORS as exc:
        raise DiagError(f"cannot read input: {_shown(exc)}") from None


def _stream_line_chunks(
    handle: IO[bytes], chunk_bytes: int, limit: int, stats: LineStats
) -> Iterator[tuple[bytes, bool]]:
    """:func:`line_chunks` for any stream: read, cut at the last newline, carry the rest over."""
    pending = b""
    skipping = False  # inside an overlong line: drop bytes until its newline
    consumed = stats.consumed  # input bytes behind pending
    while True:
        block = _read_block(handle, chunk_bytes)
        if not block:
            if skipping:
                stats.overlong += 1
                pending = OVERLONG_LINE + b"\n"
            stats.consumed = consumed + (0 if skipping else len(pending))
            yield pending, True
            return
        if skipping:
            newline = block.find(b"\n")
            if newline < 0:
                consumed += len(block)
                continue
            skipping = False
            stats.overlong += 1
            consumed += newline + 1
            block = block[newline + 1 :]
            pending = OVERLONG_LINE + b"\n"
            consumed -= len(pending)  # the marker stands for bytes already counted
        elif pending:
            # Only the line continuing ``pending`` can outgrow the limit: any line that starts
            # inside ``block`` is at most a block long.
            newline = block.find(b"\n")
            head = len(pending) + (newline if newline >= 0 else len(block))
            if head > limit:
                consumed += len(pending)
                pending = b""
                if newline < 0:
                    skipping = True
                    consumed += len(block)
                    continue
                stats.overlong += 1
                consumed += newline + 1
                block = block[newline + 1 :]
                pending = OVERLONG_LINE + b"\n"
                consumed -= len(pending)
        buffer = pending + block if pending else block
        cut = buffer.rfind(b"\n") + 1
        if cut == 0:
            pending = buffer  # no complete line yet
            continue
        text = buffer if cut == len(buffer) else buffer[:cut]
        pending = buffer[cut:]
        consumed += len(text)
        stats.consumed = consumed
        yield text, False


def _has_fd(handle: IO[bytes]) -> bool:
    """Whether ``handle`` is backed by an OS file (``os.pread`` works on it), not an in-memory one."""
    try:
        handle.fileno()
    except (OSError, ValueError):
        return False
    return True


def _file_line_chunks(
    handle: io.BufferedReader, chunk_bytes: int, limit: int, stats: LineStats
) -> Iterator[tuple[bytes, bool]]:
    """Like :func:`line_chunks` for a plain file, with one copy of each byte: the end of a chunk
    is found in a small probe read at its far end, then the chunk is read (``os.pread``) exactly
    up to its last line end, so it is never sliced or joined. A chunk with no line end in its
    probe (a line longer than the probe) hands over to the streaming reader."""
    fd = handle.fileno()
    offset = handle.tell()
    probe_bytes = min(chunk_bytes, _PROBE_BYTES)
    try:
        while True:
            probe = os.pread(fd, probe_bytes, offset + chunk_bytes - probe_bytes)
            if len(probe) < probe_bytes:  # the file ends within this chunk
                block = os.pread(fd, chunk_bytes, offset)
                if len(block) < chunk_bytes:  # every line in it is shorter than a chunk
                    handle.seek(offset + len(block))
                    stats.consumed = offset + len(block)
                    yield block, True
                    return
                continue  # the file grew between the two reads: probe again
            newline = probe.rfind(b"\n")
            if newline < 0:
                handle.seek(offset)  # a long line: stream from here, bounded
                break
            block = os.pread(fd, chunk_bytes - probe_bytes + newline + 1, offset)
            offset += len(block)
            stats.consumed = offset
            yield block, False
    except OSError as exc:
        raise DiagError(f"cannot read input: {_shown(exc)}") from None
    stats.consumed = offset
    yield from _stream_line_chunks(handle, chunk_bytes, limit, stats)


#: Bytes per slice counted by :func:`count_newlines`: small enough to stay in the CPU cache.
_COUNT_BLOCK = 2**18


def count_newlines(data: bytes) -> int:
    """``data.count(b"\\n")``, 2-3x faster on a chunk of megabytes: ``bytes.replace`` finds a
    one-byte pattern with ``memchr`` (``bytes.count`` with a plain byte loop), on slices of
    :data:`_COUNT_BLOCK` bytes, so the copies it makes stay small and in the cache."""
    if len(data) <= _COUNT_BLOCK:
        return len(data) - len(data.replace(b"\n", b""))
    view = memoryview(data)
    total = 0
    for start in range(0, len(data), _COUNT_BLOCK):
        block = view[start : start + _COUNT_BLOCK].tobytes()
        total += len(block) - len(block.replace(b"\n", b""))
    return total


def iter_lines(handle: IO[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a stream, one by one, without their newline; an overlong line comes as
    :data:`OVERLONG_LINE` (see :func:`line_chunks`). Memory: one chunk."""
    for text, _ in line_chunks(
        handle, min(CHUNK_BYTES, max_line_bytes), max_line_bytes=max_line_bytes
    ):
        yield from text.splitlines()


def first_line(handle: IO[bytes], max_line_bytes: int = _PROBE_BYTES) -> bytes:
    """A stream's first line, read no further than ``max_line_bytes`` (a header is small; a gzip
    bomb's first line is endless)."""
    try:
        return handle.readline(max_line_bytes)
    except READ_ERRORS as exc:
        raise DiagError(f"cannot read input: {_shown(exc)}") from None


def _may_be_json_text(path: str) -> bool:
    """Whether a file may start with a JSON header line (gzip, or text opening with ``{``).

    Only such a file can be a rank log by its header; anything else is left to the format
    detection, since opening a binary log as text would call its zero bytes UTF-16.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(_PROBE_BYTES)
    except OSError:
        return True  # let open_input say what is wrong
    return head[:2] == b"\x1f\x8b" or head.lstrip(b"\xef\xbb\xbf \t\r\n\x00").startswith(b"{")


_GLOB_MAGIC = re.compile(r"[*?[]")


def _natural_key(path: str) -> list[object]:
    """``train.rank2`` before ``train.rank10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def expand_log_args(paths: list[str]) -> list[str]:
    """Paths as given, with quoted globs expanded by the tool itself (in natural order).

    A name that exists as a file is kept even if it holds glob characters; ``-`` is stdin.

    Raises:
        DiagError: a glob that matches no file.
    """
    out: list[str] = []
    for p in paths:
        if p == "-" or os.path.exists(p) or not _GLOB_MAGIC.search(p):
            out.append(p)
            continue
        matches = sorted(glob.glob(p), key=_natural_key)
        if not matches:
            raise DiagError(f"no file matches {_shown(p)}")
        out += matches
    return out


def split_rank_logs(paths: list[str]) -> tuple[list[str], list[RankLog], str | None]:
    """(logs to analyse, per-rank logs, a note): rank logs feed the throughput skew only.

    A rank log is recognised by its name (``*.rank{N}.jsonl``) or a ``rank`` in its ``run_start``
    header (see :mod:`dflash_diag.read.ranks`). When every input is a rank log, the lowest rank's is
    also the log analysed (that rank's own view of the run), and the note says so.

    Raises:
        DiagError: an unreadable file.
    """
    from dflash_diag.read.ranks import header_rank, parse_rank_records, rank_from_name

    main: list[str] = []
    ranks: list[RankLog] = []
    for p in paths:
        if p == "-" or not os.path.isfile(p):  # stdin, or a missing file the reader reports
            main.append(p)
            continue
        if rank_from_name(p) is None and not _may_be_json_text(p):
            main.append(p)  # a binary log (TensorBoard, W&B, SQLite): the reader detects it
            continue
        with open_input(p) as handle:
            if rank_from_name(p) is None and header_rank(first_line(handle)) is None:
                main.append(p)
                continue
        with open_input(p) as handle:
            log = parse_rank_records(p, iter_lines(handle))
        if log is not None:
            ranks.append(log)
    note = None
    if not main and ranks:
        lowest = min(ranks, key=lambda r: r.rank)
        main = [lowest.path]
        note = (
            f"only per-rank logs given: the analysis is rank {lowest.rank}'s own view "
            f"({_shown(lowest.path)}); the global log holds every rank's sums"
        )
    return main, ranks, note

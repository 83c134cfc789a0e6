"""File access for the reader: paths, ``.gz``, standard input, line-aligned chunks, rank logs.

Parsing is :mod:`dflash_diag.read.jsonl`'s; this module only yields bytes. No polars here, so the
command modules can use the rank-log discovery at import time and ``dflash-diag --help`` stays
fast.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from dflash_diag.errors import DiagError

if TYPE_CHECKING:
    from dflash_diag.read.ranks import RankLog

#: Bytes per read when streaming a file: big enough for polars' threads, small enough that the
#: raw text never dominates memory (the parsed columns are what a report keeps).
CHUNK_BYTES = 16 * 2**20
#: Bytes read at the far end of a chunk to find its last line end (see _file_line_chunks).
_PROBE_BYTES = 64 * 2**10


@contextlib.contextmanager
def open_input(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary stream of a log: a file, a ``.gz`` file (by its magic bytes), or ``-`` for stdin.

    Raises:
        DiagError: the file is missing or unreadable.
    """
    name = str(path)
    try:
        if name == "-":
            raw: IO[bytes] = sys.stdin.buffer
            if not hasattr(raw, "peek"):
                raw = io.BufferedReader(raw)  # e.g. a BytesIO standing in for stdin
            peek = raw.peek(2)[:2]
            if peek == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as handle:
                    yield handle
            else:
                yield raw
            return
        file = Path(name)
        if not file.exists():
            raise DiagError(f"no such file: {name}")
        if file.is_dir():
            raise DiagError(f"is a directory, not a log: {name}")
        with file.open("rb") as handle:
            if handle.read(2) == b"\x1f\x8b":
                handle.seek(0)
                with gzip.GzipFile(fileobj=handle) as unzipped:
                    yield unzipped
            else:
                handle.seek(0)
                yield handle
    except OSError as exc:
        raise DiagError(f"cannot read {name}: {exc}") from None


def read_input(path: str | Path) -> bytes:
    """All bytes of a log (see :func:`open_input`); a corrupt ``.gz`` is a :class:`DiagError`."""
    with open_input(path) as handle:
        try:
            return handle.read()
        except (OSError, EOFError) as exc:
            raise DiagError(f"cannot read {path}: {exc}") from None


def line_chunks(handle: IO[bytes], chunk_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """``(text, final)`` pieces of about ``chunk_bytes`` that end at a line end (except the last)."""
    if isinstance(handle, io.BufferedReader) and handle.seekable() and _has_fd(handle):
        yield from _file_line_chunks(handle, chunk_bytes)
        return
    pending = b""
    while True:
        try:
            block = handle.read(chunk_bytes)
        except (OSError, EOFError) as exc:
            raise DiagError(f"cannot read input: {exc}") from None
        if not block:
            yield pending, True
            return
        buffer = pending + block if pending else block
        cut = buffer.rfind(b"\n") + 1
        if cut == 0:
            pending = buffer  # no complete line yet
            continue
        pending = buffer[cut:]
        yield (buffer if cut == len(buffer) else buffer[:cut]), False


def _has_fd(handle: IO[bytes]) -> bool:
    """Whether ``handle`` is backed by an OS file (``os.pread`` works on it), not an in-memory one."""
    try:
        handle.fileno()
    except (OSError, ValueError):
        return False
    return True


def _file_line_chunks(handle: io.BufferedReader, chunk_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """Like :func:`line_chunks` for a plain file, with one copy of each byte: the end of a chunk
    is found in a small probe read at its far end, then the chunk is read (``os.pread``) exactly
    up to its last line end, so it is never sliced or joined."""
    fd = handle.fileno()
    offset = handle.tell()
    probe_bytes = min(chunk_bytes, _PROBE_BYTES)
    try:
        while True:
            probe = os.pread(fd, probe_bytes, offset + chunk_bytes - probe_bytes)
            if len(probe) < probe_bytes:  # the file ends within this chunk
                block = os.pread(fd, chunk_bytes, offset)
                if len(block) < chunk_bytes:
                    handle.seek(offset + len(block))
                    yield block, True
                    return
                continue  # the file grew between the two reads: probe again
            newline = probe.rfind(b"\n")
            if newline >= 0:
                block = os.pread(fd, chunk_bytes - probe_bytes + newline + 1, offset)
            else:  # a line longer than the probe: read on until it ends
                handle.seek(offset)
                block = handle.read(chunk_bytes) + handle.readline()
                if not block.endswith(b"\n"):
                    handle.seek(offset + len(block))
                    yield block, True
                    return
            offset += len(block)
            yield block, False
    except OSError as exc:
        raise DiagError(f"cannot read input: {exc}") from None


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
            raise DiagError(f"no file matches {p}")
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
        with open_input(p) as handle:
            if rank_from_name(p) is None and header_rank(handle.readline()) is None:
                main.append(p)
                continue
        with open_input(p) as handle:
            try:
                log = parse_rank_records(p, handle.read().splitlines())
            except (OSError, EOFError) as exc:
                raise DiagError(f"cannot read {p}: {exc}") from None
        if log is not None:
            ranks.append(log)
    note = None
    if not main and ranks:
        lowest = min(ranks, key=lambda r: r.rank)
        main = [lowest.path]
        note = (f"only per-rank logs given: the analysis is rank {lowest.rank}'s own view "
                f"({lowest.path}); the global log holds every rank's sums")
    return main, ranks, note

"""Incremental reading of a growing JSONL log: only the bytes appended since the last read.

`LogTail.read_new()` returns the complete lines appended since the previous call. It keeps a byte
offset into the file, so a refresh costs what the new lines cost, not what the file costs:

* a torn last line (the writer is mid-append) is held back until its newline arrives;
* truncation (the file is now shorter than what was read, or its first bytes changed) and rotation
  (the path now names a different file: another inode or device) are detected, and the next chunk
  is the whole new file, flagged ``reset`` so the caller rebuilds its state instead of appending;
* a missing file (rotated away and not yet re-created) reads as no new data, flagged ``missing``;
* a line longer than :data:`~dflash_diag.read.files.MAX_LINE_BYTES` is dropped while it arrives
  and handed out as one :data:`~dflash_diag.read.files.OVERLONG_LINE` line (the parser counts it
  as malformed), so the held-back bytes stay bounded;
* a path that is not a regular file (a FIFO, a device) is an error, never a blocking open.

The schema guarantees at most one torn line, the last one, because a writer emits each record with
one write call; a torn line in the middle can only come from a truncation, which is detected.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dflash_diag.errors import DiagError
from dflash_diag.read.files import MAX_LINE_BYTES, OVERLONG_LINE, count_newlines
from dflash_diag.text import visible

# How many leading bytes are remembered to notice a file rewritten in place to the same or a
# larger size (size alone cannot see that). Small, so the check costs one short pread.
_FINGERPRINT_BYTES = 256


@dataclass(frozen=True)
class TailChunk:
    """Complete lines read by one `LogTail.read_new` call.

    Attributes:
        data: whole lines (each ending in a newline); empty when nothing new is complete.
        first_line_no: the 1-based line number of the first line in ``data``.
        reset: True when the file was truncated or rotated: ``data`` starts at the file's first
            byte and anything derived from earlier chunks is stale.
        missing: True when the path does not exist right now.
        pending_bytes: bytes of an unfinished last line held back for the next call.
        newlines: the newlines in ``data``, counted once by `LogTail.read_new` (None: counted
            when asked).
        start: the file offset of ``data``'s first byte, where ``data`` is the file's bytes
            (None where an overlong line's marker stands for some of them), so its lines can be
            read again.
    """

    data: bytes
    first_line_no: int
    reset: bool = False
    missing: bool = False
    pending_bytes: int = 0
    newlines: int | None = None
    start: int | None = None

    @property
    def n_lines(self) -> int:
        """Number of complete lines in the chunk."""
        return self.newlines if self.newlines is not None else count_newlines(self.data)


class LogTail:
    """Follows one log file by byte offset; see the module docstring for the rules.

    Args:
        path: the log to follow. It may not exist yet.
        max_chunk_bytes: upper bound on bytes read per call (a huge backlog is consumed over several
            calls, so the first frame of a watch does not wait for a multi-GB file); None for no
            bound.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_chunk_bytes: int | None = None) -> None:
        if max_chunk_bytes is not None and max_chunk_bytes <= 0:
            raise ValueError(f"max_chunk_bytes must be positive, got {max_chunk_bytes}")
        self.path = Path(path)
        self.max_chunk_bytes = max_chunk_bytes
        self.offset = 0  # bytes of the current file consumed (complete lines + pending)
        self.line_no = 1  # line number of the next complete line to hand out
        self._pending = b""  # an unfinished last line, waiting for its newline
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self._fingerprint = b""  # the file's first bytes as read, to notice in-place rewrites
        self.resets = 0  # how many truncations/rotations were seen
        self._size_seen = 0  # the file's size at the last read
        self._skipping = False  # inside an overlong line: drop bytes until its newline

    @property
    def backlog_bytes(self) -> int:
        """Bytes that were in the file at the last read but not read yet (``max_chunk_bytes``)."""
        return max(0, self._size_seen - self.offset)

    @property
    def pending_bytes(self) -> int:
        """Bytes of a torn last line held back until its newline arrives."""
        return len(self._pending)

    def _restart(self) -> None:
        self.offset = 0
        self.line_no = 1
        self._pending = b""
        self._identity = None
        self._fingerprint = b""
        self._size_seen = 0
        self._skipping = False
        self.resets += 1

    def _was_replaced(self, fd: int, st: os.stat_result) -> bool:
        """True when the open file is not the continuation of what was read so far."""
        if self._identity is None:
            return False
        if (st.st_dev, st.st_ino) != self._identity:
            return True  # rotation: the path names another file now
        if st.st_size < self.offset:
            return True  # truncation
        if self._fingerprint:
            head = os.pread(fd, len(self._fingerprint), 0)
            if head != self._fingerprint:
                return True  # rewritten in place (truncated then regrown past our offset)
        return False

    def read_new(self) -> TailChunk:
        """Read the complete lines appended since the previous call.

        Returns:
            A `TailChunk`; its ``reset`` flag says the file was truncated or rotated and the chunk
            restarts from the file's beginning.

        Raises:
            DiagError: the path exists but cannot be read (permissions, a directory, a FIFO).
        """
        try:
            # O_NONBLOCK: opening a FIFO that nothing writes must not hang the view
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return TailChunk(b"", self.line_no, missing=True, pending_bytes=len(self._pending))
        except OSError as exc:
            raise DiagError(
                f"cannot read {visible(self.path)}: {visible(exc.strerror or exc)}"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise DiagError(
                    f"{visible(self.path)} is not a regular file (a pipe or a device): "
                    "watch follows a log file; pipe a stream into converge - instead"
                )
            reset = self._was_replaced(fd, st)
            if reset:
                self._restart()
            self._identity = (st.st_dev, st.st_ino)
            self._size_seen = st.st_size
            to_read = st.st_size - self.offset
            if self.max_chunk_bytes is not None:
                to_read = min(to_read, self.max_chunk_bytes)
            fresh = os.pread(fd, to_read, self.offset) if to_read > 0 else b""
            if len(self._fingerprint) < _FINGERPRINT_BYTES and fresh:
                need = _FINGERPRINT_BYTES - len(self._fingerprint)
                if self.offset == len(self._fingerprint):
                    self._fingerprint += fresh[:need]
        finally:
            os.close(fd)

        start: int | None = self.offset - len(self._pending)  # where ``buf`` begins in the file
        self.offset += len(fresh)
        marker = b""
        if self._skipping:
            newline = fresh.find(b"\n")
            if newline < 0:
                fresh = b""
            else:
                self._skipping, fresh = False, fresh[newline + 1 :]
                marker = OVERLONG_LINE + b"\n"
            start = None
        buf = self._pending + fresh if self._pending else fresh
        cut = buf.rfind(b"\n") + 1  # 0 when no newline: everything stays pending
        newline = buf.find(b"\n")
        if newline < 0 and len(buf) > MAX_LINE_BYTES:
            # an unfinished line already too long: drop it, and skip the rest as it arrives
            self._skipping, buf, cut = True, b"", 0
        elif newline > MAX_LINE_BYTES:  # a held-back line that ended too long
            buf = OVERLONG_LINE + buf[newline:]
            cut = buf.rfind(b"\n") + 1
            start = None
        data, self._pending = marker + buf[:cut], buf[cut:]
        first = self.line_no
        newlines = count_newlines(data)
        self.line_no += newlines
        return TailChunk(
            data,
            first,
            reset=reset,
            pending_bytes=len(self._pending),
            newlines=newlines,
            start=start if data else None,
        )

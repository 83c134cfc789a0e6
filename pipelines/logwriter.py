"""Append-only JSONL writer: one record = one ``os.write`` of one whole line.

Readers tail this file while the trainer writes it (``dflash-diag watch``), and several launches
(a lock-step run, then a resumed pipeline, then a restart after a crash) append to the same file.
So the file is opened ``O_APPEND`` (never truncated; every write lands at the current end, even if
another process appends too) and each record is encoded first and handed to the kernel in a single
``write`` call, which leaves a reader at most one torn line: the last, while it is being written.
There is no user-space buffer to flush; ``os.write`` hands the bytes to the kernel immediately.

A record never shares a line with another: when the file does not end with a newline (a writer
died mid-line, or a disk filled up under it) the next record starts on a fresh line, so the torn
fragment stays one malformed line that readers skip, and the record after it (a resumed run's
``run_start`` header) is intact. Failures to open or write raise :class:`LogWriteError`, one line
naming the file. :func:`rank_log_path` names a rank's own log (``--log-all-ranks``) beside the
main one.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Protocol

from typing_extensions import Self


class _Record(Protocol):
    def to_json(self) -> dict[str, Any]: ...


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one line of UTF-8 JSON, newline included.

    NaN and infinities are written as ``NaN``/``Infinity`` (see :mod:`pipelines.log_records`).
    """
    line = json.dumps(record, separators=(",", ":"), allow_nan=True, ensure_ascii=False)
    assert "\n" not in line  # json.dumps escapes newlines inside strings
    return (line + "\n").encode("utf-8")


class LogWriteError(OSError):
    """The log cannot be opened or written (one line naming the file and what to do)."""


def _explain(path: Path, e: OSError, doing: str) -> LogWriteError:
    reason = e.strerror or str(e)
    hint = {
        errno.ENOSPC: "free disk space or write the log elsewhere (--log)",
        errno.EFBIG: "the file is too large for this filesystem or limit: use another --log",
        errno.EISDIR: "give a file path, not a directory (--log)",
        errno.EACCES: "choose a writable path (--log)",
        errno.EROFS: "choose a writable filesystem (--log)",
    }.get(e.errno, "check the path (--log)")
    return LogWriteError(f"cannot {doing} log {path}: {reason}; {hint}")


def ends_without_newline(fd: int) -> bool:
    """Whether the regular file open at ``fd`` is non-empty and its last byte is not a newline
    (False when that cannot be known: a device, a pipe, an unreadable file)."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return False
        return os.pread(fd, 1, st.st_size - 1) != b"\n"
    except OSError:
        return False


class JsonlLog:
    """An append-only JSONL log file.

    Args:
        path: the log file; its parent directories are created.

    Use as a context manager, or call :meth:`close`.

    Raises:
        LogWriteError: the file cannot be created or opened for appending.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # O_RDWR (not O_WRONLY) so the last byte can be checked; a write-only file falls back.
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            except PermissionError:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise _explain(self.path, e, "open") from None
        self._fd: int | None = fd
        # A torn last line (its writer died mid-record): the next record starts a fresh line.
        self._torn = ends_without_newline(fd)

    def write(self, record: _Record | dict[str, Any]) -> None:
        """Append one record (a schema dataclass or a plain dict) as one line.

        Raises:
            LogWriteError: the write failed (disk full, I/O error); the next write, if any, starts
                on a fresh line.
        """
        if self._fd is None:
            raise ValueError(f"log {self.path} is closed")
        data = encode_record(record if isinstance(record, dict) else record.to_json())
        if self._torn:
            data = b"\n" + data
        try:
            n = os.write(self._fd, data)
            # A regular file takes the whole buffer in one call; a short write (disk full, a
            # signal) is finished rather than dropped, accepting that such a line could be
            # interleaved.
            while n < len(data):
                # Part of the line is in the file: if the rest fails, the next record must
                # start a fresh line. (A write that raises wrote nothing: the state stays.)
                self._torn = True
                data = data[n:]
                n = os.write(self._fd, data)
        except OSError as e:
            raise _explain(self.path, e, "write to") from None
        self._torn = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rank_log_path(log: str | Path, rank: int) -> Path:
    """``logs/train.jsonl`` -> ``logs/train.rank3.jsonl``: rank 3's log, beside the main one."""
    p = Path(log)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.jsonl'}")

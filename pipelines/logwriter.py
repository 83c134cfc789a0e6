"""Append-only JSONL writer: one record = one ``os.write`` of one whole line.

Readers tail this file while the trainer writes it (``dflash-diag watch``), and several launches
(a lock-step run, then a resumed pipeline, then a restart after a crash) append to the same file.
So the file is opened ``O_APPEND`` (never truncated; every write lands at the current end, even if
another process appends too) and each record is encoded first and handed to the kernel in a single
``write`` call, which leaves a reader at most one torn line: the last, while it is being written.
There is no user-space buffer to flush; ``os.write`` hands the bytes to the kernel immediately.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from typing_extensions import Self


class _Record(Protocol):
    def to_json(self) -> dict[str, Any]: ...


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one line of UTF-8 JSON, newline included.

    NaN and infinities are written as ``NaN``/``Infinity`` (see :mod:`pipelines.log_schema`).
    """
    line = json.dumps(record, separators=(",", ":"), allow_nan=True, ensure_ascii=False)
    assert "\n" not in line  # json.dumps escapes newlines inside strings
    return (line + "\n").encode("utf-8")


class JsonlLog:
    """An append-only JSONL log file.

    Args:
        path: the log file; its parent directories are created.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: _Record | dict[str, Any]) -> None:
        """Append one record (a schema dataclass or a plain dict) as one line."""
        if self._fd is None:
            raise ValueError(f"log {self.path} is closed")
        data = encode_record(record if isinstance(record, dict) else record.to_json())
        n = os.write(self._fd, data)
        # A regular file takes the whole buffer in one call; a short write (disk full, a signal)
        # is finished rather than dropped, accepting that such a line could be interleaved.
        while n < len(data):
            data = data[n:]
            n = os.write(self._fd, data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

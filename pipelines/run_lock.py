"""One launch per checkpoint directory and log: exclusive locks held for the whole run.

Two launches on one ``--ckpt-dir`` used to both run to the end, each replacing the other's
checkpoints (``step-000018`` from one seed, the rest from the other), and both appended to one
log. A launch now takes, before anything is loaded:

* an exclusive ``flock`` on ``<ckpt-dir>/.dflash-train.lock``, a file holding its pid;
* an exclusive ``flock`` on the log file itself.

A second launch finds either lock held and stops with one line naming the holder's pid. The
kernel drops a ``flock`` when its holder dies, however it dies, so a lock file left by a killed
run (its dead pid inside) is simply taken over: there is nothing stale to clean up by hand. The
lock file is removed at the end of the run; a run that takes a lock checks that the file it
locked is still the one at the path (another launch may have removed it in between), and tries
again when not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TrainingError

#: The lock file inside the checkpoint directory (hidden, like the temporary save directories).
LOCK_FILE = ".dflash-train.lock"


@dataclass
class RunLock:
    """Locks held by this launch; :meth:`release` (or leaving the ``with`` block) frees them."""

    fds: list[int] = field(default_factory=list)
    remove: list[Path] = field(default_factory=list)
    """Files to remove at release: the lock file, a log this launch created and left empty."""

    def release(self) -> None:
        for p in self.remove:
            with contextlib.suppress(OSError):
                if p.name == LOCK_FILE or p.stat().st_size == 0:
                    p.unlink()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds, self.remove = [], []

    def __enter__(self) -> RunLock:  # noqa: PYI034 - the project supports 3.10 (no Self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def flock_holder(path: Path) -> int | None:
    """The pid holding a ``flock`` on ``path`` (from ``/proc/locks``; None when unknown)."""
    try:
        inode = path.stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 00:2e:67890 0 EOF" (a waiting lock has "->" first)
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
            with contextlib.suppress(ValueError):
                return int(parts[4])
    return None


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or "x")
    except (OSError, ValueError):
        return None


def _lock(path: Path, flags: int, what: str, hint: str) -> int:
    """An exclusive flock on ``path`` (opened with ``flags``); its fd.

    Raises:
        TrainingError: another process holds it (its pid named when it can be found).
    """
    for _ in range(10):  # a holder removing the file between our open and our lock: again
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = flock_holder(path) or (_pid_in(path) if path.name == LOCK_FILE else None)
            holder = f"pid {pid}" if pid is not None else "another process"
            raise TrainingError(
                f"{what} {path.parent if path.name == LOCK_FILE else path} is in "
                f"use by another run ({holder}): wait for it to end, or {hint}"
            ) from None
        except OSError:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == path.stat().st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
    raise TrainingError(f"cannot lock {path}: it keeps being replaced")


def acquire_run_lock(ckpt_dir: str | Path, log: str | Path) -> RunLock:
    """Lock the checkpoint directory (which must exist) and the log for this launch.

    Raises:
        TrainingError: either is in use by another run, or cannot be locked (one line).
    """
    lock = RunLock()
    ck = Path(ckpt_dir) / LOCK_FILE
    try:
        fd = _lock(
            ck,
            os.O_RDWR | os.O_CREAT,
            "checkpoint directory",
            "choose another directory (--ckpt-dir)",
        )
        lock.fds.append(fd)
        lock.remove.append(ck)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        log_path = Path(log)
        created = not log_path.exists()
        lock.fds.append(
            _lock(
                log_path,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK,
                "log",
                "write the log elsewhere (--log)",
            )
        )
        if created:  # a run that stops before its header leaves no empty log behind
            lock.remove.append(log_path)
    except TrainingError:
        lock.release()
        raise
    except OSError as e:
        lock.release()
        raise TrainingError(f"cannot lock {e.filename or ck}: {e.strerror or e}") from None
    return lock

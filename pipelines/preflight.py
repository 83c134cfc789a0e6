"""Checks a training run makes against the machine before anything heavy is loaded.

The config validates values on their own (``pipelines.config``); these checks need the machine:
is the log path writable, is the checkpoint directory a directory, does the thread count exist,
and what did a killed predecessor leave in the checkpoint directory. Each failure is a
:class:`~pipelines.errors.TrainingError` of one line (the CLI exits 2), raised before the target is
loaded, the log is opened or torch is configured.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from pathlib import Path

from dflash.checkpoint import clean_checkpoint_leftovers

from .errors import TrainingError, shorten


def cpu_count() -> int:
    """Logical CPUs of this machine (what bounds a useful torch thread count)."""
    return os.cpu_count() or 1


def check_torch_threads(n: int, cpus: int | None = None) -> None:
    """``torch_threads`` must lie in [0, CPUs]: torch crashes (SIGSEGV) on absurd counts
    such as 100000, and any count above the CPUs only makes the threads contend.

    Raises:
        TrainingError: out of range for this machine.
    """
    cpus = cpus or cpu_count()
    if not 0 <= n <= cpus:
        raise TrainingError(
            f"torch_threads = {n}: this machine has {cpus} CPUs; use 0 (automatic) or 1..{cpus}"
        )


def check_writable_file(path: str | Path, what: str, flag: str) -> None:
    """Can ``path`` be opened for appending? Checked by really creating it (and its parent
    directories, as the log writer would), then removing the file if this check created it, so
    a run that fails to start leaves no empty log behind. Directories stay: several ranks of
    one launch check their logs in the same directory at the same time.

    Raises:
        TrainingError: a directory, an unwritable location, a missing or read-only filesystem.
    """
    p = Path(path)
    if p.is_dir():
        raise TrainingError(f"{what} {p} is a directory: give a file path ({flag})")
    created = False
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking the start.
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NONBLOCK, 0o644)
            created = True
        except FileExistsError:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        os.close(fd)
    except OSError as e:
        reason = e.strerror or str(e)
        if e.errno in (errno.ENOTDIR, errno.EEXIST):  # EEXIST: mkdir met a file on the way
            reason = "a parent is not a directory"
        raise TrainingError(
            f"cannot write {what} {p}: {reason}; choose another path ({flag})"
        ) from None
    finally:
        if created:
            with contextlib.suppress(OSError):
                p.unlink()


def check_checkpoint_dir(path: str | Path) -> None:
    """The checkpoint directory must be a directory this run can write checkpoints into,
    checked by creating it (as the first save would) and a probe directory inside it (a save
    writes a temporary directory there, then renames it): a read-only directory is found now,
    not after all the training.

    Raises:
        TrainingError: it is a file, or it cannot be created or written to.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise TrainingError(f"checkpoint directory {p} is a file: choose a directory (--ckpt-dir)")
    probe = p / f".probe-{os.getpid()}"
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        reason = e.strerror or str(e)
        if e.errno in (errno.ENOTDIR, errno.EEXIST) and not probe.parent.is_dir():
            reason = "a parent is not a directory"
        raise TrainingError(
            f"cannot write checkpoints to {p}: {reason}; choose another directory (--ckpt-dir)"
        ) from None


#: Longest file name (one path component) and whole path, in bytes, that Linux filesystems take
#: (NAME_MAX, PATH_MAX). A longer name fails deep inside a library with an OSError traceback.
NAME_MAX = 255
PATH_MAX = 4096


def check_path_name(path: str, flag: str) -> None:
    """``path`` (a file or directory name given by ``flag``) must be a name the filesystem can
    hold: no component over ``NAME_MAX`` bytes, at most ``PATH_MAX`` bytes in all, no NUL.

    Raises:
        TrainingError: one line with the name shortened.
    """
    raw = os.fsencode(path)
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    problem = None
    if b"\0" in raw:
        problem = "holds a NUL character"
    elif longest > NAME_MAX:
        problem = f"has a name of {longest} bytes (at most {NAME_MAX} a name)"
    elif len(raw) > PATH_MAX:
        problem = f"is {len(raw)} bytes long (at most {PATH_MAX})"
    if problem:
        raise TrainingError(f"{flag} {shorten(path)} {problem}: choose a shorter path")


def tidy_checkpoints(*roots: str | Path, announce: bool = True) -> None:
    """Remove temporary directories of interrupted saves (and put back a checkpoint whose
    overwrite was interrupted) in each directory; one stderr line per directory that had any."""
    seen: set[Path] = set()
    for root in roots:
        r = Path(root).resolve()
        if r in seen:
            continue
        seen.add(r)
        done = clean_checkpoint_leftovers(r)
        if done and announce:
            print(f"dflash-train: note: {done.summary(root)}", file=sys.stderr)

"""Which format a path holds, told by its content (a name is only a hint), and reading it.

The formats are the records of :data:`~dflash_diag.read.formats.registry.FORMATS` (the
``--input-format`` values). :func:`detect_format` looks at a file's first bytes (magic numbers, a
CRC-checked TFRecord header, JSON or CSV structure, progress lines) or at a folder's layout
(event files, ``checkpoint-N/trainer_state.json``, ``mlruns/<experiment>/<run>/metrics``,
``*.wandb``, ``version_N/metrics.csv``) through each record's sniffs, in their priority order.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dflash_diag.errors import DiagError
from dflash_diag.read.files import check_encoding
from dflash_diag.read.formats.registry import FORMATS, Format, by_priority, supported

if TYPE_CHECKING:
    from dflash_diag.read.formats.canonical import Scalars

__all__ = [
    "FORMATS",
    "HEAD_BYTES",
    "LFS_POINTER",
    "Format",
    "check_format",
    "detect_file_format",
    "detect_folder_format",
    "detect_format",
    "folder_formats",
    "head_bytes",
    "read_scalars",
    "supported",
]

#: Bytes of a file looked at to tell its format.
HEAD_BYTES = 64 * 2**10
#: The first line of a Git LFS pointer file (a repository's stand-in for a large file).
LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def check_format(name: str) -> str:
    """``name`` if it is a known format.

    Raises:
        DiagError: an unknown name (listing the supported ones).
    """
    if name not in FORMATS:
        raise DiagError(f"unknown input format {name!r} (supported: {supported()})")
    return name


def head_bytes(path: Path, size: int = HEAD_BYTES) -> bytes:
    """A file's first ``size`` bytes.

    Raises:
        DiagError: the file cannot be read.
    """
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None


#: Compressions other than gzip: named in the error instead of "cannot tell the format".
COMPRESSED = (
    (b"BZh", "bz2", "bunzip2 -k"),
    (b"\xfd7zXZ\x00", "xz", "unxz -k"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
    (b"PK\x03\x04", "zip", "unzip"),
)


def detect_file_format(path: Path, head: bytes | None = None) -> str | None:
    """The format of a file from its first bytes, or None."""
    head = head_bytes(path) if head is None else head
    if head[:2] == b"\x1f\x8b":
        return "jsonl"  # gzip: the JSONL reader unzips it
    for magic, kind, tool in COMPRESSED:
        if head.startswith(magic) and not (kind == "bz2" and head[3:4] not in b"123456789"):
            raise DiagError(
                f"{path} is {kind}-compressed: decompress it first ({tool} {path}) "
                "or give the plain log (gzip is read as it is)"
            )
    formats = by_priority()
    for fmt in formats:
        if fmt.binary and fmt.sniff_file is not None and fmt.sniff_file(path, head):
            return fmt.name
    # the text formats: a UTF-16/32 file is named as such (after the binary formats, whose
    # headers hold zero bytes too). A UTF-8 byte-order mark and a crash's zero-fill before the
    # text are no content.
    head = head.lstrip(b"\x00")
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    if head.startswith(LFS_POINTER):
        raise DiagError(
            f"{path}: a Git LFS pointer, not the log itself (fetch the file: git lfs pull)"
        )
    if not head.strip():
        return "jsonl"  # an empty (or zero-filled) file: the JSONL reader says "empty log"
    check_encoding(head, str(path))
    for fmt in formats:
        if not fmt.binary and fmt.sniff_file is not None and fmt.sniff_file(path, head):
            return fmt.name
    return None


def folder_formats(path: Path) -> list[str]:
    """Every format a folder's layout holds, the one most often richest first (an HF output
    folder holds ``trainer_state.json`` with its evals and a ``runs/`` TensorBoard tree; an
    MLflow run may hold TensorBoard logs among its artifacts)."""
    return [
        fmt.name for fmt in by_priority() if fmt.sniff_folder is not None and fmt.sniff_folder(path)
    ]


def detect_folder_format(path: Path) -> str | None:
    """The format of a folder from its layout (the first of :func:`folder_formats`), or None."""
    found = folder_formats(path)
    return found[0] if found else None


def detect_format(path: str | Path) -> str:
    """The ``--input-format`` value for ``path``.

    Raises:
        DiagError: a missing path, or content of no supported format.
    """
    p = Path(path)
    if not p.exists():
        raise DiagError(f"no such file: {path}")
    found = detect_folder_format(p) if p.is_dir() else detect_file_format(p)
    if found is None:
        kind = "directory" if p.is_dir() else "file"
        raise DiagError(
            f"cannot tell the format of {kind} {path} (supported: {supported()}; "
            "force one with --input-format)"
        )
    return found


def read_scalars(path: str | Path, input_format: str) -> Scalars:
    """Read ``path`` as ``input_format`` into scalars.

    Raises:
        DiagError: a reader's one-line error, prefixed with the path when it lacks it.
    """
    import polars as pl

    p = Path(path)
    if not p.exists():
        raise DiagError(f"no such file: {path}")
    fmt = FORMATS[check_format(input_format)]
    try:
        return fmt.read(p)
    except DiagError:
        raise
    except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001
        # Every reader checks what it reads, but input is arbitrary bytes: whatever a reader
        # (or polars, or sqlite3) still trips on must be one line naming the file, never a
        # traceback. (polars' PanicException derives from BaseException, hence named.)
        raise DiagError(
            f"{path}: cannot read as {fmt.display} "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        ) from None

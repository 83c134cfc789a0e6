"""Which format a path holds, told by its content (a name is only a hint), and reading it.

:data:`FORMATS` lists the ``--input-format`` values. :func:`detect_format` looks at a file's
first bytes (magic numbers, a CRC-checked TFRecord header, JSON or CSV structure, progress
lines) or at a folder's layout (event files, ``checkpoint-N/trainer_state.json``,
``mlruns/<experiment>/<run>/metrics``, ``*.wandb``, ``version_N/metrics.csv``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.files import check_encoding
from dflash_diag.read.formats import (
    console,
    csv_metrics,
    json_history,
    jsonl_rows,
    mlflow_store,
    numeric_table,
    tensorboard,
    trainer_state,
    wandb_offline,
)
from dflash_diag.read.formats.canonical import Scalars

#: ``--input-format`` value -> display name.
FORMATS: dict[str, str] = {
    "jsonl": "JSONL",
    "tensorboard": tensorboard.FORMAT,
    "hf-trainer-state": trainer_state.FORMAT,
    "csv": csv_metrics.FORMAT,
    "mlflow": mlflow_store.FORMAT_FILES,
    "mlflow-sqlite": mlflow_store.FORMAT_SQLITE,
    "wandb": wandb_offline.FORMAT,
    "console": console.FORMAT,
    "table": numeric_table.FORMAT,
    "json-history": json_history.FORMAT,
}
#: Bytes of a file looked at to tell its format.
HEAD_BYTES = 64 * 2**10


def supported() -> str:
    """The ``--input-format`` values, for messages."""
    return ", ".join(FORMATS)


def check_format(name: str) -> str:
    """``name`` if it is a known format.

    Raises:
        DiagError: an unknown name (listing the supported ones).
    """
    if name not in FORMATS:
        raise DiagError(f"unknown input format {name!r} (supported: {supported()})")
    return name


def _head(path: Path, size: int = HEAD_BYTES) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None


def detect_file_format(path: Path, head: bytes | None = None) -> str | None:
    """The format of a file from its first bytes, or None."""
    head = _head(path) if head is None else head
    if head[:2] == b"\x1f\x8b":
        return "jsonl"  # gzip: the JSONL reader unzips it
    if mlflow_store.looks_like_sqlite(head):
        return "mlflow-sqlite"
    if wandb_offline.looks_like_wandb(head):
        return "wandb"
    if tensorboard.looks_like_event_file(head):
        return "tensorboard"
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
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        if trainer_state.looks_like_trainer_state(head) and not _is_jsonl(stripped):
            return "hf-trainer-state"
        if stripped.split(b"\n", 1)[0].strip() == b"{":
            if json_history.load_history(path) is not None:
                return "json-history"
            # a pretty-printed JSON document: no log of JSON lines (each line would be malformed)
            raise DiagError(
                f"{path}: one JSON document, not a log of JSON lines, and no "
                "trainer_state.json (no log_history)"
            )
        if b"\n" not in stripped.rstrip() and json_history.load_history(path) is not None:
            return "json-history"  # the same history on one line
        return "jsonl"
    if csv_metrics.looks_like_metrics_csv(head):
        return "csv"
    if console.looks_like_console(head) or (
        len(head) >= HEAD_BYTES - 4
        and console.looks_like_console(_head(path, console.DETECT_BYTES))
    ):
        return "console"
    if numeric_table.looks_like_numeric_table(path, head):
        return "table"
    if not head.strip():
        return "jsonl"  # an empty file: the JSONL reader says "empty log"
    return None


def _is_jsonl(head: bytes) -> bool:
    """Whether the first line is a whole JSON object and another line follows."""
    import json

    first, sep, rest = head.partition(b"\n")
    if not sep or not rest.strip():
        return False
    try:
        return isinstance(json.loads(first), dict)
    except (ValueError, RecursionError):  # deep nesting is not JSONL worth reading
        return False


def folder_formats(path: Path) -> list[str]:
    """Every format a folder's layout holds, the one most often richest first (an HF output
    folder holds ``trainer_state.json`` with its evals and a ``runs/`` TensorBoard tree; an
    MLflow run may hold TensorBoard logs among its artifacts)."""
    found = []
    if trainer_state.find_state_files(path):
        found.append("hf-trainer-state")
    if mlflow_store.looks_like_file_store(path):
        found.append("mlflow")
    if (path / "mlflow.db").is_file():
        found.append("mlflow-sqlite")
    if wandb_offline.find_run_file(path) is not None:
        found.append("wandb")
    if tensorboard.event_files(path) or tensorboard_runs(path):
        found.append("tensorboard")
    if csv_metrics.find_metrics_csv(path) is not None:
        found.append("csv")
    if console.find_console_file(path) is not None:
        found.append("console")
    return found


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


def tensorboard_runs(path: Path) -> list[Path]:
    """Sub-folders of ``path`` (any depth up to 3) that hold event files: one run each."""
    runs = []
    base_depth = len(path.parts)
    for root, dirs, files in os.walk(path):
        depth = len(Path(root).parts) - base_depth
        if depth >= 3:
            dirs[:] = []
        if depth >= 1 and any("tfevents" in f for f in files):
            runs.append(Path(root))
    return sorted(runs)


#: The first line of a Git LFS pointer file (a repository's stand-in for a large file).
LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def _check_not_lfs(files: list[Path], where: Path) -> None:
    """A run whose event files are all Git LFS pointers: say so, not "bad record header"."""
    if files and all(_head(f, len(LFS_POINTER)) == LFS_POINTER for f in files):
        raise DiagError(
            f"{where}: its event files are Git LFS pointers, not the logs themselves "
            "(fetch the files: git lfs pull)"
        )


def _read_tensorboard(path: Path) -> Scalars:
    _check_not_lfs(tensorboard.event_files(path) if path.is_dir() else [path], path)
    if path.is_dir() and not tensorboard.event_files(path):
        runs = tensorboard_runs(path)
        if not runs:
            raise DiagError(f"{path}: no TensorBoard event files in it")
        latest = max(runs, key=tensorboard.newest_mtime)
        pair = _keras_pair(latest)
        if pair is not None:
            return _read_keras_pair(*pair)
        _check_not_lfs(tensorboard.event_files(latest), latest)
        scalars = tensorboard.read_tensorboard(latest)
        if len(runs) > 1:
            scalars.notes.append(
                f"latest of {len(runs)} TensorBoard runs: {latest} "
                "(give a run's folder to read another)"
            )
        return scalars
    return tensorboard.read_tensorboard(path)


#: Keras' ``TensorBoard`` callback writes a run as ``<log_dir>/train`` and
#: ``<log_dir>/validation``, with the same tags (``epoch_loss``) in both.
_KERAS_TRAIN, _KERAS_VALIDATION = "train", ("validation", "val", "eval")


def _keras_pair(run: Path) -> tuple[Path, Path] | None:
    """(train, validation) run folders when ``run`` is one of Keras' pair, else None."""
    parent = run.parent
    train = parent / _KERAS_TRAIN
    validation = next(
        (
            parent / n
            for n in _KERAS_VALIDATION
            if (parent / n).is_dir() and tensorboard.event_files(parent / n)
        ),
        None,
    )
    if validation is None or not train.is_dir() or not tensorboard.event_files(train):
        return None
    return (train, validation) if run in (train, validation) else None


def _read_keras_pair(train: Path, validation: Path) -> Scalars:
    """One run of Keras' pair: the validation folder's tags as ``val/<tag>`` (its epoch_loss is
    the validation loss, not a second training curve), records in step order."""
    _check_not_lfs(tensorboard.event_files(train), train)
    first = tensorboard.read_tensorboard(train)
    second = tensorboard.read_tensorboard(validation)
    frames = [
        first.long_frame(),
        second.long_frame().with_columns(("val/" + pl.col("key")).alias("key")),
    ]
    merged = (
        pl.concat(frames)
        .sort("step", maintain_order=True, nulls_last=True)
        .with_columns(pl.int_range(0, pl.len(), dtype=pl.Int64).alias("row"))
        .select(first.frame.columns)
    )
    first.issues.merge(second.issues)
    notes = [*first.notes, f"Keras' train and validation runs: {train} and {validation}"]
    return Scalars(
        frame=merged, format=first.format, issues=first.issues, meta=first.meta, notes=notes
    )


def _read_sqlite(path: Path) -> Scalars:
    return mlflow_store.read_sqlite_store(path / "mlflow.db" if path.is_dir() else path)


#: ``--input-format`` value -> reader of a path (``jsonl`` here is the record-by-record reader).
READERS: dict[str, Callable[[Path], Scalars]] = {
    "jsonl": jsonl_rows.read_jsonl_rows,
    "tensorboard": _read_tensorboard,
    "hf-trainer-state": trainer_state.read_trainer_state,
    "csv": csv_metrics.read_metrics_csv,
    "mlflow": mlflow_store.read_file_store,
    "mlflow-sqlite": _read_sqlite,
    "wandb": wandb_offline.read_wandb,
    "console": console.read_console,
    "table": numeric_table.read_numeric_table,
    "json-history": json_history.read_json_history,
}


def read_scalars(path: str | Path, input_format: str) -> Scalars:
    """Read ``path`` as ``input_format`` into scalars.

    Raises:
        DiagError: a reader's one-line error, prefixed with the path when it lacks it.
    """
    p = Path(path)
    if not p.exists():
        raise DiagError(f"no such file: {path}")
    reader = READERS[check_format(input_format)]
    try:
        return reader(p)
    except DiagError:
        raise
    except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001
        # Every reader checks what it reads, but input is arbitrary bytes: whatever a reader
        # (or polars, or sqlite3) still trips on must be one line naming the file, never a
        # traceback. (polars' PanicException derives from BaseException, hence named.)
        raise DiagError(
            f"{path}: cannot read as {FORMATS[input_format]} "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        ) from None

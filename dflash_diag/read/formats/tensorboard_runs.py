"""A TensorBoard path as a run: one event file, a run's folder, or a tree of runs (the latest is
read), with Keras' ``train``/``validation`` pair read as one run and Git LFS pointers named.

:mod:`.tensorboard` reads the event files of one run folder; this module decides which folder
that is.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.formats import tensorboard
from dflash_diag.read.formats.canonical import Scalars
from dflash_diag.read.formats.detect import LFS_POINTER, head_bytes


def runs(path: Path) -> list[Path]:
    """Sub-folders of ``path`` (any depth up to 3) that hold event files: one run each."""
    found = []
    base_depth = len(path.parts)
    for root, dirs, files in os.walk(path):
        depth = len(Path(root).parts) - base_depth
        if depth >= 3:
            dirs[:] = []
        if depth >= 1 and any("tfevents" in f for f in files):
            found.append(Path(root))
    return sorted(found)


def _check_not_lfs(files: list[Path], where: Path) -> None:
    """A run whose event files are all Git LFS pointers: say so, not "bad record header"."""
    if files and all(head_bytes(f, len(LFS_POINTER)) == LFS_POINTER for f in files):
        raise DiagError(
            f"{where}: its event files are Git LFS pointers, not the logs themselves "
            "(fetch the files: git lfs pull)"
        )


def read_tensorboard(path: Path) -> Scalars:
    """Read an event file, a run folder, or the latest run of a tree of runs (a note says so).

    Raises:
        DiagError: no event files, Git LFS pointers in their place, or the reader's error.
    """
    _check_not_lfs(tensorboard.event_files(path) if path.is_dir() else [path], path)
    if path.is_dir() and not tensorboard.event_files(path):
        found = runs(path)
        if not found:
            raise DiagError(f"{path}: no TensorBoard event files in it")
        latest = max(found, key=tensorboard.newest_mtime)
        pair = _keras_pair(latest)
        if pair is not None:
            return _read_keras_pair(*pair)
        _check_not_lfs(tensorboard.event_files(latest), latest)
        scalars = tensorboard.read_tensorboard(latest)
        if len(found) > 1:
            scalars.notes.append(
                f"latest of {len(found)} TensorBoard runs: {latest} "
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

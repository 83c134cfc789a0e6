"""The input formats, one :class:`Format` record each: adding a format is one entry in
:data:`FORMATS` (and its reader module).

A record holds the ``--input-format`` value, the name shown in notes and messages, how the
command line's help names it, how a file and a folder of the format are told (its sniffs), its
reader, and its place in the order formats are tried. :mod:`.detect` runs the sniffs,
:mod:`.load` the readers, and the command line builds its help lists from the records.

Kept free of polars (``dflash-diag --help`` imports it): the reader modules are imported when a
sniff or a reader is first called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dflash_diag.read.formats.canonical import Scalars


def _module(name: str) -> ModuleType:
    """A module of :mod:`dflash_diag.read.formats`, imported on first use."""
    return importlib.import_module(f"dflash_diag.read.formats.{name}")


@dataclass(frozen=True)
class Format:
    """One input format.

    Attributes:
        name: the ``--input-format`` value.
        display: its name in notes and messages ("read as TensorBoard").
        read: reads a path (a file or a folder) of the format into scalars.
        priority: formats are tried in increasing priority: a file is the first whose file
            sniff holds; a folder holding several formats is read as each, the lowest first
            breaking ties (a trainer_state.json before JSONL, an HF output folder's
            trainer_state.json before its TensorBoard runs).
        described: how the ``LOG`` argument's help names it ("TensorBoard run"); None: not
            named there.
        sniff_file: ``(path, head) -> bool``, whether a file is of the format, from its first
            bytes; None: a file is never told to be of it.
        binary: the file sniff sees the raw first bytes, before the text checks (encoding, Git
            LFS pointer); otherwise it sees the text head: zero-fill and a UTF-8 byte-order
            mark dropped.
        sniff_folder: ``path -> bool``, whether a folder holds the format; None: never.
    """

    name: str
    display: str
    read: Callable[[Path], Scalars]
    priority: int
    described: str | None = None
    sniff_file: Callable[[Path, bytes], bool] | None = None
    binary: bool = False
    sniff_folder: Callable[[Path], bool] | None = None


# -- the sniffs that take more than a reader module's own test


def _is_json_object(head: bytes) -> bool:
    return head.lstrip().startswith(b"{")


def _first_line_opens(head: bytes) -> bool:
    """A pretty-printed JSON document: its first line is a lone ``{``."""
    return head.lstrip().split(b"\n", 1)[0].strip() == b"{"


def _is_jsonl(head: bytes) -> bool:
    """Whether the first line is a whole JSON object and another line follows."""
    import json

    first, sep, rest = head.lstrip().partition(b"\n")
    if not sep or not rest.strip():
        return False
    try:
        return isinstance(json.loads(first), dict)
    except (ValueError, RecursionError):  # deep nesting is not JSONL worth reading
        return False


def _trainer_state_file(path: Path, head: bytes) -> bool:
    return (
        _is_json_object(head)
        and _module("trainer_state").looks_like_trainer_state(head)
        and not _is_jsonl(head)
    )


def _json_history_file(path: Path, head: bytes) -> bool:
    """A JSON document of metric lists: pretty-printed, or the same on one line."""
    one_line = b"\n" not in head.lstrip().rstrip()
    return (
        _is_json_object(head)
        and (_first_line_opens(head) or one_line)
        and _module("json_history").load_history(path) is not None
    )


def _jsonl_file(path: Path, head: bytes) -> bool:
    """Any other JSON object: JSON lines (tried after the JSON documents above)."""
    if not _is_json_object(head):
        return False
    if _first_line_opens(head):
        from dflash_diag.errors import DiagError

        # a pretty-printed JSON document: no log of JSON lines (each line would be malformed)
        raise DiagError(
            f"{path}: one JSON document, not a log of JSON lines, and no "
            "trainer_state.json (no log_history)"
        )
    return True


def _console_file(path: Path, head: bytes) -> bool:
    """Progress lines in the head, or (a long head) further into the file: a training script's
    start-up output can fill the first 64 KiB."""
    console = _module("console")
    if console.looks_like_console(head):
        return True
    detect = _module("detect")
    return len(head) >= detect.HEAD_BYTES - 4 and console.looks_like_console(
        detect.head_bytes(path, console.DETECT_BYTES)
    )


def _tensorboard_folder(path: Path) -> bool:
    return bool(_module("tensorboard").event_files(path) or _module("tensorboard_runs").runs(path))


def _call(module: str, function: str) -> Callable[..., Any]:
    """``module.function`` of the reader modules, imported when called."""
    return lambda *args: getattr(_module(module), function)(*args)


#: Every format, by ``--input-format`` value, in the order the help lists them.
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "jsonl",
            "JSONL",
            _call("foreign_jsonl", "read_foreign_jsonl"),  # the record-by-record reader
            priority=30,
            sniff_file=_jsonl_file,
        ),
        Format(
            "tensorboard",
            "TensorBoard",
            _call("tensorboard_runs", "read_tensorboard"),
            priority=70,
            described="TensorBoard run",
            sniff_file=lambda path, head: _module("tensorboard").looks_like_event_file(head),
            binary=True,
            sniff_folder=_tensorboard_folder,
        ),
        Format(
            "hf-trainer-state",
            "HF trainer_state.json",
            _call("trainer_state", "read_trainer_state"),
            priority=10,
            described="trainer_state.json",
            sniff_file=_trainer_state_file,
            sniff_folder=lambda path: bool(_module("trainer_state").find_state_files(path)),
        ),
        Format(
            "csv",
            "CSV metrics",
            _call("csv_metrics", "read_metrics_csv"),
            priority=80,
            described="metrics.csv",
            sniff_file=lambda path, head: _module("csv_metrics").looks_like_metrics_csv(head),
            sniff_folder=lambda path: _module("csv_metrics").find_metrics_csv(path) is not None,
        ),
        Format(
            "mlflow",
            "MLflow file store",
            _call("mlflow_store", "read_file_store"),
            priority=40,
            described="MLflow store",
            sniff_folder=_call("mlflow_store", "looks_like_file_store"),
        ),
        Format(
            "mlflow-sqlite",
            "MLflow SQLite store",
            lambda path: _module("mlflow_store").read_sqlite_store(
                path / "mlflow.db" if path.is_dir() else path
            ),
            priority=50,
            described="MLflow store",
            sniff_file=lambda path, head: _module("mlflow_store").looks_like_sqlite(head),
            binary=True,
            sniff_folder=lambda path: (path / "mlflow.db").is_file(),
        ),
        Format(
            "wandb",
            "W&B offline run",
            _call("wandb_offline", "read_wandb"),
            priority=60,
            described="W&B offline run",
            sniff_file=lambda path, head: _module("wandb_offline").looks_like_wandb(head),
            binary=True,
            sniff_folder=lambda path: _module("wandb_offline").find_run_file(path) is not None,
        ),
        Format(
            "console",
            "console text",
            _call("console", "read_console"),
            priority=90,
            described="console log",
            sniff_file=_console_file,
            sniff_folder=lambda path: _module("console").find_console_file(path) is not None,
        ),
        Format(
            "table",
            "numeric table",
            _call("numeric_table", "read_numeric_table"),
            priority=100,
            sniff_file=_call("numeric_table", "looks_like_numeric_table"),
        ),
        Format(
            "json-history",
            "JSON history",
            _call("json_history", "read_json_history"),
            priority=20,
            sniff_file=_json_history_file,
        ),
    )
}


def by_priority() -> list[Format]:
    """The formats in the order they are tried."""
    return sorted(FORMATS.values(), key=lambda f: f.priority)


def supported() -> str:
    """The ``--input-format`` values, for messages and help."""
    return ", ".join(FORMATS)


def described() -> str:
    """The formats the ``LOG`` help names: "TensorBoard run, trainer_state.json, ... or
    console log" (each phrase once)."""
    phrases = list(dict.fromkeys(f.described for f in FORMATS.values() if f.described))
    return ", ".join(phrases[:-1]) + " or " + phrases[-1]

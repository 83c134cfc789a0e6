"""A history as one JSON document of per-epoch lists, as Keras' ``History.history`` is saved
(``json.dump(model.fit(...).history, f)``): ``{"loss": [...], "accuracy": [...],
"val_loss": [...]}``, one value per epoch in every list (a nested ``{"history": {...}}`` too).

The epoch (0-based, as Keras' ``CSVLogger`` counts it) is the step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.records import ParseIssues

FORMAT = "JSON history"
#: Larger files are not such a history (a value per epoch).
_MAX_BYTES = 64 * 2**20


def _series(document: Any) -> dict[str, list[Any]] | None:
    """The per-epoch lists of a history document, or None when it is none."""
    if isinstance(document, dict) and isinstance(document.get("history"), dict):
        document = document["history"]
    if not isinstance(document, dict):
        return None
    lists = {
        str(k): v
        for k, v in document.items()
        if isinstance(v, list)
        and v
        and all((isinstance(x, (int, float)) and not isinstance(x, bool)) or x is None for x in v)
    }
    if not lists or len({len(v) for v in lists.values()}) != 1:
        return None
    return lists


def load_history(path: Path) -> dict[str, list[Any]] | None:
    """The per-epoch lists of a JSON file, or None when it holds no such history."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        with path.open("rb") as handle:
            document = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    return _series(document)


def read_json_history(path: str | Path) -> Scalars:
    """Read a history document (see the module docstring).

    Raises:
        DiagError: an unreadable file, or JSON that holds no per-epoch lists.
    """
    path = Path(path)
    lists = load_history(path)
    if lists is None:
        raise DiagError(
            f"{path}: not a history of per-epoch lists (e.g. Keras' History.history saved as JSON)"
        )
    collector = RowCollector()
    issues = ParseIssues()
    length = len(next(iter(lists.values())))
    for epoch in range(length):
        issues.lines += 1
        collector.add({k: v[epoch] for k, v in lists.items()}, step=epoch)
    return Scalars(
        frame=collector.frame(),
        format=FORMAT,
        issues=issues,
        notes=["one value per epoch: the epoch is the step"],
    )

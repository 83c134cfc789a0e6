"""Bare numeric tables: one or two whitespace-separated numbers a line, as ``np.savetxt`` or a
``print(loss, step)`` loop writes them, with at most a comment or header line naming them.

Which column is the step: of two columns, the one of whole numbers that never goes down (the
other is the value); one column is a value a line, numbered from 1. The value's name comes from
the header line when it names a loss or an accuracy (``% mean class accuracy (train set)``),
else from the file's name (``loss.log``); a table naming neither is not read as one (nothing
would say what its numbers are).
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.records import ParseIssues

FORMAT = "numeric table"
#: Largest file read as a table (a longer one is not a hand-written loss file).
_MAX_BYTES = 64 * 2**20
_NUMBER = re.compile(
    r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^(?:nan|inf|-inf)$", re.IGNORECASE
)
#: Fewest number lines for a table.
_MIN_LINES = 3


def _metric_name(text: str) -> str | None:
    text = text.lower()
    if "acc" in text:
        return "acc"
    if "loss" in text:
        return "loss"
    return None


def _rows(text: str) -> tuple[str | None, list[list[float]]] | None:
    """(header line, number rows) when the text is such a table, else None."""
    header = None
    rows: list[list[float]] = []
    width = None
    for i, line in enumerate(text.splitlines()):
        parts = line.split()
        if not parts:
            continue
        if not all(_NUMBER.match(p) for p in parts):
            if rows or header is not None or i > 2:
                return None
            header = line.strip()
            continue
        if len(parts) > 2 or (width is not None and len(parts) != width):
            return None
        width = len(parts)
        rows.append([float(p) for p in parts])
    return (header, rows) if len(rows) >= _MIN_LINES else None


def _layout(path: Path, head: str) -> tuple[str, int | None] | None:
    """(value name, index of the step column or None) for a table, else None."""
    parsed = _rows(head)
    if parsed is None:
        return None
    header, rows = parsed
    name = _metric_name(header or "") or _metric_name(path.stem)
    if name is None:
        return None
    if len(rows[0]) == 1:
        return name, None
    for index in (1, 0):
        column = [r[index] for r in rows]
        if all(math.isfinite(v) and v == int(v) for v in column) and all(
            b >= a for a, b in itertools.pairwise(column)
        ):
            return name, index
    return None


def looks_like_numeric_table(path: Path, head: bytes) -> bool:
    """Whether the first bytes are a numeric table whose value has a name (see the module)."""
    text = head.decode("utf-8", "replace")
    if len(head) >= 64 * 2**10:
        text = text.rsplit("\n", 1)[0]  # a torn last line of the sample
    return _layout(path, text) is not None


def read_numeric_table(path: str | Path) -> Scalars:
    """Read a numeric table (see the module docstring).

    Raises:
        DiagError: an unreadable file, or text that is no such table.
    """
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise DiagError(f"{path}: too large for a numeric table")
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    layout = _layout(path, text)
    parsed = _rows(text)
    if layout is None or parsed is None:
        raise DiagError(
            f"{path}: not a numeric table (one or two numbers a line, named by a "
            "header or the file name)"
        )
    name, step_index = layout
    collector = RowCollector()
    issues = ParseIssues()
    for i, row in enumerate(parsed[1], start=1):
        issues.lines += 1
        step = i if step_index is None else int(row[step_index])
        value = row[0] if step_index is None else row[1 - step_index]
        collector.add({name: value}, step=step)
    notes = [f"a numeric table: {name} by {'line' if step_index is None else 'step'}"]
    return Scalars(frame=collector.frame(), format=FORMAT, issues=issues, notes=notes)

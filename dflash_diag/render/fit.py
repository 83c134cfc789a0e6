"""Fitting output to the terminal: columns dropped in a stated order, lines wrapped at spaces.

A number is never cut: a table that is too wide loses whole columns (the order is
:data:`DROP_ORDER`, and a note under the table names them), and a line that is too long wraps
between words, so every number stays whole on one line.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

#: Columns left out, in this order, when a table is wider than the terminal (the first column,
#: which names the row, always stays; a number is never cut).
DROP_ORDER = {
    "regimes": ("tok/s", "tokens/step", "loss trend", "acc trend", "n", "steps"),
    "diagnosis": ("ETA", "target", "estimator"),
    "alignment": ("n A", "n B", "Δloss", "Δacc"),
    "windows": ("Δloss", "n", "NaN/Inf", "Δacc"),
}


def _natural_width(head: Sequence[str], rows: Sequence[Sequence[str]], plain: bool) -> int:
    """Width of a table with these cells: plain text joins columns with two spaces; a rich
    SIMPLE_HEAD table pads each column by one space either side, separates columns by one and has
    an edge of one either side."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]
    if plain:
        return sum(widths) + 2 * (len(widths) - 1)
    return sum(widths) + 3 * len(widths) + 1


def fit_columns(kind: str, head: Sequence[str], rows: Sequence[Sequence[str]],
                width: int | None, *, plain: bool = False) -> tuple[list[str], list[list[str]], list[str]]:
    """``head`` and ``rows`` with columns dropped in :data:`DROP_ORDER` until the table fits
    ``width`` (``plain``: the text renderer's layout, else rich's); also returns the names
    dropped (for a note under the table)."""
    head, rows = list(head), [list(r) for r in rows]
    dropped: list[str] = []
    for name in DROP_ORDER.get(kind, ()):
        if width is None or _natural_width(head, rows, plain) <= width:
            break
        if name in head[1:]:
            i = head.index(name)
            head.pop(i)
            for r in rows:
                r.pop(i)
            dropped.append(name)
    return head, rows, dropped


def dropped_note(dropped: Sequence[str], width: int | None) -> str | None:
    """The note saying which columns were left out to fit the terminal."""
    if not dropped:
        return None
    return f"(left out to fit {width} columns: {', '.join(dropped)})"


def wrap(text: str, width: int | None, indent: int = 0) -> list[str]:
    """``text`` wrapped at spaces to ``width`` columns, continuation lines indented by ``indent``
    (the first line is not); a word longer than a line stays whole (never cut)."""
    if width is None or len(text) + indent <= width:
        return [text]
    lines = textwrap.wrap(text, width=max(20, width - indent), break_long_words=False,
                          break_on_hyphens=False, subsequent_indent="  ")
    return lines or [text]

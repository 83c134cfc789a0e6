"""Fitting output to the terminal: columns dropped in a stated order, lines wrapped at spaces.

A number is never cut: a table that is too wide loses whole columns (the order is
:data:`DROP_ORDER`, and a note under the table names them), and a line that is too long wraps
between words, so every number stays whole on one line.
"""

from __future__ import annotations

import re
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


def fit_columns(
    kind: str,
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None,
    *,
    plain: bool = False,
) -> tuple[list[str], list[list[str]], list[str]]:
    """``head`` and ``rows`` with columns dropped in :data:`DROP_ORDER` until the table fits
    ``width`` (``plain``: the text renderer's layout, else rich's); also returns the names
    dropped (for a note under the table)."""
    cols: list[str] = list(head)
    table: list[list[str]] = [list(r) for r in rows]
    dropped: list[str] = []
    for name in DROP_ORDER.get(kind, ()):
        if width is None or _natural_width(cols, table, plain) <= width:
            break
        if name in cols[1:]:
            i = cols.index(name)
            cols.pop(i)
            for r in table:
                r.pop(i)
            dropped.append(name)
    return cols, table, dropped


def dropped_note(dropped: Sequence[str], width: int | None) -> str | None:
    """The note saying which columns were left out to fit the terminal."""
    if not dropped:
        return None
    return f"(left out to fit {width} columns: {', '.join(dropped)})"


#: A comparison operator standing alone between spaces before a number (``p = 0.0242``), or
#: opening a bracket (``(< 0.05)``): the spaces around it are not places to break a line (the
#: space before the bracket is).
_OPERATOR = r"(?:<=|>=|!=|==|->|<|>|=|≤|≥|≠|≈|→)"
#: What a comparison is glued to: a number (``0.0242``, ``-0.65``, ``x1.02``, ``10%``); a chain of
#: words (``measured > walk > harmonic``) may still break.
_NUMBER = r"[-+]?x?[0-9.]"
_BEFORE_OPERATOR = re.compile(rf"(?<=\S) (?={_OPERATOR} {_NUMBER})")
_OPERATOR_SPACE = re.compile(rf"((?:^|(?<=[ \ue000]))\(?{_OPERATOR}) (?={_NUMBER})")
#: Stands for a space that must not break while textwrap runs (a private-use character, so that
#: no log text can contain it by accident after ``visible``; textwrap only breaks at ASCII space).
_GLUE = "\ue000"


def glue_units(text: str) -> str:
    """``text`` with the spaces around a lone comparison operator replaced by :data:`_GLUE`, so
    that ``p = 0.0242`` and ``(< 0.05)`` each stay on one line."""
    text = _BEFORE_OPERATOR.sub(_GLUE, text)
    return _OPERATOR_SPACE.sub(lambda m: m.group(1) + _GLUE, text)


def wrap(text: str, width: int | None, indent: int = 0, hang: str = "  ") -> list[str]:
    """``text`` wrapped at spaces to ``width`` columns less ``indent`` (the columns the caller
    puts before every line), continuation lines starting with ``hang``; a word longer than a line
    stays whole (never cut), and so does a comparison such as ``p = 0.0242``, ``(< 0.05)`` or
    ``2.68 -> 2.40``."""
    if width is None or len(text) + indent <= width:
        return [text]
    lines = textwrap.wrap(
        glue_units(text),
        width=max(20, width - indent),
        break_long_words=False,
        break_on_hyphens=False,
        subsequent_indent=hang,
    )
    return [line.replace(_GLUE, " ") for line in lines] or [text]

"""The training programs' domain error: bad input the user can fix, reported as one line; and the
shortening that keeps that line readable whatever the input holds."""

from __future__ import annotations

import re


class TrainingError(RuntimeError):
    """A run that cannot start or continue for a reason the user can fix (one line)."""


#: Longest run of non-blank characters an error line shows whole. Longer runs (a 300-byte file
#: name, a 100 MB string from a TOML file) are cut to their ends with the length in between, so
#: the line stays one readable line and names what it is about.
LONGEST_WORD = 120

_LONG_WORD = re.compile(rf"\S{{{LONGEST_WORD + 1},}}")


def shorten(value: str, limit: int = LONGEST_WORD) -> str:
    """``value`` itself when at most ``limit`` characters, else its head and tail around the
    number of characters left out: ``aaaa…(1,000 chars)…aaaa``."""
    if len(value) <= limit:
        return value
    head, tail = limit * 2 // 3, limit // 6
    return f"{value[:head]}…({len(value):,} chars)…{value[len(value) - tail :]}"


def shorten_words(line: str) -> str:
    """Every overlong run of non-blank characters in ``line`` shortened (see :func:`shorten`)."""
    return _LONG_WORD.sub(lambda m: shorten(m.group(0)), line)

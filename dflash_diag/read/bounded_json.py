"""Decoding one untrusted JSON line, within bounds.

:func:`json.loads` raises :class:`RecursionError` (not :class:`ValueError`) on a line of a
thousand nested brackets, and a value nested a few hundred deep decodes but then overflows the
stack of any recursive code that walks it (restoring NaN sentinels, re-encoding, rendering). No
training log nests anywhere near :data:`MAX_DEPTH`, so deeper lines are simply malformed.
Integers of any size decode (Python's ints are unbounded); :func:`to_float` turns them into
floats without :class:`OverflowError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

#: Deepest nesting of arrays and objects a log line may have (a ``run_start`` header nests 3).
MAX_DEPTH = 64


def decode_line(raw: bytes | str) -> Any:
    """The JSON value of one line.

    Raises:
        ValueError: not JSON (including bad UTF-8, an integer of more digits than Python
            converts), or nested deeper than :data:`MAX_DEPTH`.
    """
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    if isinstance(raw, bytes):
        brackets = raw.count(b"[") + raw.count(b"{")
    else:
        brackets = raw.count("[") + raw.count("{")
    if brackets > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def to_float(value: float) -> float:
    """``float(value)``, with integers beyond the float range as ±inf (not OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf

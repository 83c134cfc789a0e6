"""Python's ``json`` writes NaN and infinities as bare ``NaN``/``Infinity`` tokens; polars rejects them.

Lines holding them are re-encoded with sentinel numbers before polars parses a chunk, and the
sentinels are turned back into NaN/inf afterwards, so such values are counted, never lost or
turned into nulls. Only lines containing the words pay a Python pass.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import polars as pl

from dflash_diag.read.bounded_json import decode_line, to_float

# Sentinels for Python-json's non-standard tokens. Values this close to the float maximum never
# occur in training metrics, and each parses back to exactly the same double.
NAN_SENTINEL = 1.7976931348623155e308
POS_INF_SENTINEL = 1.7976931348623157e308
NEG_INF_SENTINEL = -1.7976931348623157e308
_SENTINELS = {NAN_SENTINEL: math.nan, POS_INF_SENTINEL: math.inf, NEG_INF_SENTINEL: -math.inf}
_NONSTANDARD_WORD = re.compile(rb"NaN|Infinity")


def replace_nonfinite_tokens(body: bytes) -> tuple[bytes, bool]:
    """Rewrite lines holding bare NaN/Infinity tokens with sentinel numbers polars accepts.

    Only lines containing the words are touched, each decoded by :func:`json.loads` (which knows
    the tokens) and re-encoded, so a path like ``"runs/NaN"`` is never altered. Lines that do not
    decode are left as they are: the parse will count them as malformed.
    """
    if b"NaN" not in body and b"Infinity" not in body:
        return body, False
    pieces: list[bytes] = []
    copied = 0  # body[:copied] is already in pieces
    changed = False
    for match in _NONSTANDARD_WORD.finditer(body):
        if match.start() < copied:
            continue  # another word on a line already handled
        line_start = body.rfind(b"\n", 0, match.start()) + 1
        line_end = body.find(b"\n", match.end())
        line_end = len(body) if line_end < 0 else line_end
        rewritten = _sentinel_line(body[line_start:line_end])
        if rewritten is not None:
            pieces.append(body[copied:line_start])
            pieces.append(rewritten)
            copied = line_end
            changed = True
        else:
            pieces.append(body[copied:line_end])
            copied = line_end
    if not changed:
        return body, False
    pieces.append(body[copied:])
    return b"".join(pieces), True


def _sentinel_line(line: bytes) -> bytes | None:
    try:
        record = decode_line(line)
    except ValueError:
        return None
    found = False

    def swap(value: Any) -> Any:
        nonlocal found
        if isinstance(value, float) and not math.isfinite(value):
            found = True
            if math.isnan(value):
                return NAN_SENTINEL
            return POS_INF_SENTINEL if value > 0 else NEG_INF_SENTINEL
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    record = swap(record)
    return json.dumps(record).encode() if found else None


def undo_sentinels(frame: pl.DataFrame) -> pl.DataFrame:
    """Sentinel numbers (see :func:`replace_nonfinite_tokens`) back to NaN/inf."""
    floats = [name for name, dtype in frame.schema.items() if dtype == pl.Float64]
    lists = [name for name, dtype in frame.schema.items() if dtype == pl.List(pl.Float64)]
    return frame.with_columns(
        [_unsentinel(pl.col(name)).alias(name) for name in floats]
        + [pl.col(name).list.eval(_unsentinel(pl.element())).alias(name) for name in lists]
    )


def _unsentinel(expr: pl.Expr) -> pl.Expr:
    return (
        pl.when(expr == NAN_SENTINEL)
        .then(float("nan"))
        .when(expr == POS_INF_SENTINEL)
        .then(float("inf"))
        .when(expr == NEG_INF_SENTINEL)
        .then(float("-inf"))
        .otherwise(expr)
    )


#: Integers of event records at least this large in magnitude become floats (see below).
_BIG_INT = 2**53


def restore_nonfinite(value: Any) -> Any:
    """Sentinels back to NaN/inf inside a decoded JSON value (for event records).

    Integers of 2^53 or more in magnitude become floats too (±inf beyond the float range), so an
    absurd header value (``"warmup_steps": 1e400`` written as an integer) reads as the non-finite
    number it is, not as an integer that overflows whatever float arithmetic uses it.
    """
    if isinstance(value, float):
        return _SENTINELS.get(value, value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _BIG_INT:
        return to_float(value)
    if isinstance(value, list):
        return [restore_nonfinite(v) for v in value]
    if isinstance(value, dict):
        return {k: restore_nonfinite(v) for k, v in value.items()}
    return value

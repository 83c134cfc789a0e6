"""JSON text of many rows at once, a column at a time: the bytes :mod:`json` writes for each.

A million-step log has tens of thousands of windows. Building a dict per window and handing it
to the encoder costs a few microseconds per window in Python calls; here each field's column is
turned into its JSON texts in one pass (a polars cast for numbers, one encoding per distinct
string) and the rows are assembled by one polars string concatenation, so the cost per window
is a few hundred nanoseconds.

The text is the encoder's, byte for byte. The encoder writes a float as ``float.__repr__``
(Python's shortest round-trip form), an int as ``int.__repr__``, None as ``null``; the JSON
output writes NaN and infinities as ``null`` too (strict JSON). Polars writes the same shortest
digits, positionally for magnitudes in ``[1e-4, 1e16)`` and zero (checked once per process
against ``float.__repr__``: a polars that writes otherwise is not used); every other value is
written by Python, and so is a column of anything but plain floats, ints or strings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

#: The magnitudes where polars' text of a float is Python's (below 1e-4 Python writes ``1e-05``,
#: polars ``0.00001`` or ``1e-5``); zero is written alike too.
_PLAIN_FROM, _PLAIN_BELOW = 1e-4, 1e16
#: The largest int polars holds as Int64 (a bigger Python int is written by Python).
_INT64 = 2**63 - 1
#: Rows per piece of :func:`row_pieces`: the text of a piece is about 0.6 MB for windows.
ROWS_PER_PIECE = 4096


def number_column(values: Sequence[Any], *, csv: bool = False) -> pl.Series:
    """The JSON text of each number as the JSON output writes it: a finite number as the float
    it is (``3`` as ``3.0``), None, NaN and infinities as ``null``. ``csv``: as the CSV output
    writes it instead: None as an empty field, NaN and infinities as ``repr`` writes them."""
    import polars as pl

    text_of = _csv_text if csv else _number_text
    if set(map(type, values)) <= {float, type(None)} and _polars_agrees():
        series = pl.Series(values, dtype=pl.Float64)
        size = series.abs()  # NaN compares above every number in polars: not plain either
        plain = (((size >= _PLAIN_FROM) & (size < _PLAIN_BELOW)) | (series == 0)).fill_null(False)
        text = series.cast(pl.String)
        odd = (~plain & series.is_not_null()).arg_true()
        if odd.len():
            text = text.scatter(odd, [text_of(values[i]) for i in odd.to_list()])
        return text.fill_null(text_of(None))
    return pl.Series([text_of(v) for v in values], dtype=pl.String)


def _number_text(value: Any) -> str:
    # json_number's rule (non-finite: null), then the encoder's text of a float
    if value is None or not math.isfinite(value):
        return "null"
    return float.__repr__(float(value))


def _csv_text(value: Any) -> str:
    return "" if value is None else float.__repr__(float(value))


def row_column(rows: Sequence[Any], name: str, *, trend: bool = False) -> list[Any]:
    """The field ``name`` of every row of a window table (``row.window.<name>``, or
    ``row.trend.<name>`` with ``trend``) as Python values: read from the columns when the rows
    keep them (a diagnosis' :class:`~dflash_diag.analysis.window_rows.WindowRows`), so no row
    object is built, else from each row."""
    column = getattr(rows, "column", None)
    if column is not None:
        return list(column(name))
    return [getattr(row.trend if trend else row.window, name) for row in rows]


def row_pieces(rows: Sequence[Any], size: int | None = None) -> Iterator[Sequence[Any]]:
    """``rows`` in consecutive pieces of at most ``size`` rows (default
    :data:`ROWS_PER_PIECE`; one piece when it has no more,
    none when it is empty), so that an output is written a piece at a time: the text of 20,000
    windows and the columns it is made from (Python lists, polars strings) are never held at
    once. A diagnosis' :class:`~dflash_diag.analysis.window_rows.WindowRows` is cut into pieces
    of its columns (no row object is built); any other sequence is sliced."""
    size = ROWS_PER_PIECE if size is None else size
    if len(rows) <= size:
        if len(rows):
            yield rows
        return
    from dflash_diag.analysis.window_rows import WindowRows

    for low in range(0, len(rows), size):
        high = min(low + size, len(rows))
        if isinstance(rows, WindowRows):
            yield WindowRows(rows.table.slice(low, high), rows.trends.slice(low, high))
        else:
            yield rows[low:high]


def integer_column(values: Sequence[Any], encode: Callable[[Any], str]) -> pl.Series:
    """The JSON text of each value of a column of ints (anything else: as ``encode`` writes it)."""
    import polars as pl

    in_range = not values or (min(values) >= -_INT64 - 1 and max(values) <= _INT64)
    if set(map(type, values)) <= {int} and in_range:
        return pl.Series(values, dtype=pl.Int64).cast(pl.String)
    return pl.Series(list(map(encode, values)), dtype=pl.String)


def string_column(values: Sequence[Any], encode: Callable[[Any], str]) -> pl.Series:
    """The JSON text of each value of a column of a few distinct strings or None (each distinct
    value encoded once; anything else: as ``encode`` writes it)."""
    import polars as pl

    if set(map(type, values)) <= {str, type(None)}:
        table = {value: encode(value) for value in set(values)}
        return pl.Series(list(map(table.__getitem__, values)), dtype=pl.String)
    return pl.Series(list(map(encode, values)), dtype=pl.String)


def joined_objects(
    columns: Sequence[tuple[str, pl.Series]],
    encode: Callable[[Any], str],
    separator: str,
    prefix: str = "",
) -> str:
    """One compact JSON object per row (``{"key": value, ...}``, the encoder's separators) from
    ``(key, JSON texts of the column)`` pairs in key order, each row after ``prefix``, the rows
    joined by ``separator`` (a prefix here, not added to the text: no copy of a text of many
    MB)."""
    import polars as pl

    parts: list[pl.Expr] = []
    for i, (key, _) in enumerate(columns):
        opening = prefix + "{" if i == 0 else ", "
        parts += [pl.lit(opening + encode(key) + ": "), pl.col(f"_{i}")]
    parts.append(pl.lit("}"))
    frame = pl.DataFrame({f"_{i}": column for i, (_, column) in enumerate(columns)})
    rows = frame.select(pl.concat_str(parts).str.join(separator)).item()
    return rows if frame.height else ""


def joined_rows(columns: Sequence[pl.Series], separator: str, line_end: str) -> str:
    """The texts of each row joined by ``separator``, each row ended by ``line_end``."""
    import polars as pl

    frame = pl.DataFrame({f"_{i}": column for i, column in enumerate(columns)})
    if not frame.height:
        return ""
    row = pl.concat_str([pl.col(name) for name in frame.columns], separator=separator)
    return frame.select(row.str.join(line_end)).item() + line_end


def _polars_agrees() -> bool:
    """Whether polars writes ``float.__repr__``'s text for floats of the plain magnitudes: every
    power of ten and power of two of the range, its edges, rounded and long fractions (a polars
    that writes any otherwise is not used: the output stays Python's)."""
    global _AGREES
    if _AGREES is None:
        import polars as pl

        probe = [0.0, -0.0, _PLAIN_FROM, -_PLAIN_FROM, 9999999999999998.0, 0.1 + 0.2, 1 / 3]
        probe += [10.0**k for k in range(-4, 16)] + [-(2.0**k) for k in range(-13, 53)]
        probe += [i / 7 + i * 1e-3 for i in range(1, 400)] + [
            round(i * 0.0137, 4) for i in range(400)
        ]
        texts = pl.Series(probe, dtype=pl.Float64).cast(pl.String).to_list()
        _AGREES = texts == list(map(float.__repr__, probe))
    return _AGREES


#: None until the first column of floats, then whether polars writes Python's text for them.
_AGREES: bool | None = None

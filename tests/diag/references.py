"""Reference views shared by the tests that compare a fast path with the plain one, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl


def frame_bits(frame: pl.DataFrame) -> list[tuple[str, str, list[bool], object]]:
    """Each column's name, type, null mask and the bits of its non-null values (numbers), or
    its values (strings, lists)."""
    out: list[tuple[str, str, list[bool], object]] = []
    for column in frame.iter_columns():
        valid = column.is_not_null().to_list()
        kept = column.filter(column.is_not_null())
        if column.dtype.is_numeric():
            values: object = np.ascontiguousarray(kept.to_numpy()).tobytes()
        else:
            values = repr(kept.to_list())  # repr: NaN in a list compares equal as text
        out.append((column.name, str(column.dtype), valid, values))
    return out


def csv_module_text(report: Any) -> str:
    """The CSV the csv module writes for ``report.windows`` (the writer behind the column
    path's back)."""
    from dflash_diag.render import csv as csv_render

    fast = csv_render._columns_text
    try:
        csv_render._columns_text = lambda report: None
        return csv_render.render_csv(report)
    finally:
        csv_render._columns_text = fast

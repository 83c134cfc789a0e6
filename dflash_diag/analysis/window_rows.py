"""A diagnosis' windows with their trends: columns, with objects built only for what is read alone.

A million-step log has tens of thousands of windows. The analysis computes them as columns
(:class:`~dflash_diag.analysis.windows.WindowTable`, :class:`~dflash_diag.analysis.trend.TrendColumns`)
and the JSON and CSV outputs write them a column at a time, so a :class:`Window`, a :class:`Trend`
and a :class:`WindowRow` per window would be memory and time spent for nothing. :class:`WindowRows`
is the sequence of rows the reports expose: indexing or slicing builds the rows asked for,
iterating builds them all (once).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from dflash_diag.analysis.trend import Trend, TrendColumns
from dflash_diag.analysis.windows import WINDOW_SCHEMA, Window, WindowTable

#: The fields :meth:`WindowRows.column` reads from the trends (the rest are the windows').
TREND_FIELDS = ("acc_delta", "acc_trend", "loss_delta", "loss_trend")


@dataclass(frozen=True)
class WindowRow:
    """A window with its trend against the previous one."""

    window: Window
    trend: Trend


class WindowRows(Sequence[WindowRow]):
    """The windows and their trends of one diagnosis, in step order, as a sequence of
    :class:`WindowRow`; the columns stay the source (:meth:`column`).

    Equal to any sequence of the same rows (a list of :class:`WindowRow` included).
    """

    def __init__(self, table: WindowTable, trends: TrendColumns) -> None:
        assert len(table) == len(trends), (len(table), len(trends))
        self.table = table
        self.trends = trends
        self._rows: list[WindowRow] | None = None

    def __len__(self) -> int:
        return len(self.table)

    @overload
    def __getitem__(self, i: int) -> WindowRow: ...

    @overload
    def __getitem__(self, i: slice) -> list[WindowRow]: ...

    def __getitem__(self, i: int | slice) -> WindowRow | list[WindowRow]:
        """Row ``i``, or a list of the rows of a slice (only those are built)."""
        if self._rows is not None:
            return self._rows[i]
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return list(self)[i]
            part = WindowRows(
                self.table.slice(start, stop), self.trends.slice(start, max(start, stop))
            )
            return list(part)
        return WindowRow(self.table.window(i), self.trends.trend(i))

    def __iter__(self) -> Iterator[WindowRow]:
        if self._rows is None:
            self._rows = [
                WindowRow(w, t)
                for w, t in zip(self.table.windows(), self.trends.trends(), strict=True)
            ]
        return iter(self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WindowRows | list | tuple):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, as the list it stands for

    def __repr__(self) -> str:
        return f"WindowRows({list(self)!r})"

    def column(self, name: str) -> list[object]:
        """A window field (:class:`Window`'s) or trend field (:class:`Trend`'s) of every row as
        Python values: what ``[row.window.<name> for row in rows]`` (or ``row.trend``) gives."""
        if name in TREND_FIELDS:
            return list(getattr(self.trends, name))
        assert name in WINDOW_SCHEMA, name
        return self.table.column(name)

"""Rich output (colour, tables, panels) of every command that has one: converge and compare.

watch draws its live view in :mod:`dflash_diag.watch.render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dflash_diag.analysis.rank_skew import RankSkew
from dflash_diag.analysis.verdict import BROKEN, CONVERGING, DIVERGING, OVERFITTING, PLATEAU
from dflash_diag.render.compare_rows import (
    alignment_rows,
    axis_unit,
    boundary_lines,
    diagnosis_rows,
    forecast_lines,
    legend,
    merged,
    regime_rows,
    short_count,
)
from dflash_diag.render.converge_rows import DEFAULT_ROWS, shown_rows, summary_lines, window_table
from dflash_diag.render.fit import dropped_note, fit_columns, wrap
from dflash_diag.render.rank_rows import skew_lines
from dflash_diag.text import visible

if TYPE_CHECKING:  # polars: imported only by the commands that build these
    from dflash_diag.compare.report import RegimeComparison, RunAlignment
    from dflash_diag.converge.report import ConvergeReport

_STATUS_STYLE = {
    CONVERGING: "bold green",
    PLATEAU: "bold yellow",
    DIVERGING: "bold red",
    OVERFITTING: "bold red",
    BROKEN: "bold red",
}
_TREND_STYLE = {"up": "green", "down": "red", "flat": "dim"}


def render_rich(
    report: ConvergeReport, console: Console, max_rows: int | None = DEFAULT_ROWS
) -> None:
    """Print a rich table of windows and a summary panel."""
    rows, hidden = shown_rows(report, max_rows)
    table = Table(
        title=Text("dflash-diag converge: " + ", ".join(visible(s) for s in report.sources)),
        caption=(
            "trend: ↑ better (acc up, loss down), ↓ worse, → within threshold"
            + (f" · {hidden} earlier windows not shown" if hidden else "")
        ),
        box=box.SIMPLE_HEAD,
    )
    headers, cell_rows = window_table(report, rows)
    headers, cell_rows, dropped = fit_columns("windows", headers, cell_rows, console.width)
    if dropped:
        table.caption = f"{table.caption} · {dropped_note(dropped, console.width)}"
    # arrow columns are the unnamed ones after Δloss/loss and Δacc/acc: style them by position
    arrow_cols = [i for i, h in enumerate(headers) if h == ""]
    for name in headers:
        table.add_column(
            name, justify="left" if name == "steps" else "right", overflow="fold", no_wrap=True
        )
    for row, line in zip(rows, cell_rows, strict=True):
        cells = [Text(c) for c in line]
        for i, trend in zip(arrow_cols, (row.trend.loss_trend, row.trend.acc_trend), strict=False):
            cells[i].stylize(_TREND_STYLE.get(trend or "", ""))
        if headers[-1] == "NaN/Inf":
            cells[-1].stylize("bold red")
        table.add_row(*cells)
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    lines = summary_lines(report)
    # Wrapped here, not by rich: rich breaks at any space (inside "p = 0.0242" too) and starts a
    # continuation at the cell's edge; fit.wrap keeps such units whole and indents continuations
    # two columns in, as the plain text does (under the estimator names of the acceptance list).
    # The panel's border and padding take 4 columns, the grid's gap 2.
    label_width = max((len(label) for label, _ in lines), default=0)
    value_width = max(20, console.width - 4 - label_width - 2)
    for label, text in lines:
        value = Text("\n".join(wrap(text, value_width)), no_wrap=True, overflow="fold")
        if label == "verdict":
            value.stylize(
                _STATUS_STYLE.get(report.verdict.status, "bold"), 0, len(report.verdict.status)
            )
        if label == "WARNING":
            value.stylize("bold red")
        summary.add_row(Text(label), value)
    console.print(table)
    console.print(Panel(Group(summary), title="summary", expand=False))


@dataclass(frozen=True)
class _TableSpec:
    """A compare table before rich lays it out (the plain renderer may draw its rows itself)."""

    title: str
    head: Sequence[str]
    rows: Sequence[Sequence[str]]
    kind: str
    width: int | None


def _table(
    title: str, head: Sequence[str], rows: Sequence[Sequence[str]], caption: str | None
) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        caption=caption,
        caption_justify="left",
    )
    for i, name in enumerate(head):
        # A cell too wide for what is left folds onto the next line; it is never cut short.
        table.add_column(
            name, justify="left" if i == 0 else "right", no_wrap=i != 0, overflow="fold"
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: log text is never markup
    return table


def _rich_table(spec: _TableSpec) -> Table:
    head, rows, dropped = fit_columns(spec.kind, spec.head, spec.rows, spec.width)
    return _table(spec.title, head, rows, dropped_note(dropped, spec.width))


def render_compare_rich(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
    width: int | None = None,
) -> RenderableType:
    """Rich tables of the regimes, each regime's diagnosis, the boundary explanations and the
    aligned windows (and the per-rank throughput skew when per-rank logs were given), fitted to
    ``width`` columns (see :data:`DROP_ORDER`)."""
    parts = _compare_parts(comparisons, alignment, ranks, width)
    return Group(*(_rich_table(p) if isinstance(p, _TableSpec) else p for p in parts))


def _compare_parts(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None,
    ranks: RankSkew | None,
    width: int | None,
) -> list[RenderableType | _TableSpec]:
    """The compare report's parts in order: tables as specs, the rest as rich renderables."""
    parts: list[RenderableType | _TableSpec] = []
    for comparison in [merged(comparisons)]:
        head, rows = regime_rows(comparison)
        split = f" (split on {comparison.split_on})" if comparison.split_on else ""
        parts.append(_TableSpec(f"regimes{split}", head, rows, "regimes", width))
        head, rows = diagnosis_rows(comparison)
        if rows:
            parts.append(
                _TableSpec(
                    "diagnosis per regime (as converge computes it)", head, rows, "diagnosis", width
                )
            )
        for line in forecast_lines(comparison):
            parts.append(Text("\n".join(wrap(line, width)), overflow="fold"))
        for line in boundary_lines(comparison):
            # wrapped by fit.wrap (comparisons and "a -> b" stay whole); the explanation's
            # wrapped lines keep its indent
            if line.startswith("  "):
                text = "\n".join(wrap(line.strip(), width, 2, hang=""))
                parts.append(Padding(Text(text, overflow="fold"), (0, 0, 0, 2)))
            else:
                parts.append(
                    Text("\n".join(wrap(line, width, hang="")), style="bold", overflow="fold")
                )
        for note in comparison.notes:
            parts.append(Text(note, style="dim"))
    if alignment is not None:
        head, rows = alignment_rows(alignment)
        parts.append(
            _TableSpec(
                f"two runs, windows of {short_count(alignment.width)} {_unit(alignment)}",
                head,
                rows,
                "alignment",
                width,
            )
        )
        parts.append(Text(legend(alignment), style="dim"))
    if ranks is not None:
        for label, text in skew_lines(ranks):
            parts.append(Text(f"{label}: {text}" if label else text, style="bold" if label else ""))
    return parts


def _unit(alignment: RunAlignment) -> str:
    """The axis unit of a window of this width: "1 step", "50 steps"."""
    unit = axis_unit(alignment)
    return unit[:-1] if alignment.width == 1 else unit


def render_compare_plain(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
    width: int = 80,
) -> str:
    """The compare report as plain text (no colour or escapes) fitted to ``width`` columns: the
    rich layout rendered without styles, each line without the padding rich puts after it."""
    console = plain_console(width)
    lines: list[str] = []
    for part in _compare_parts(comparisons, alignment, ranks, width):
        lines += (
            _plain_table(console, part) if isinstance(part, _TableSpec) else _drawn(console, part)
        )
    return "".join(line + "\n" for line in lines)


def plain_console(width: int) -> Console:
    """A console that draws ``width`` columns of plain text: no colour, escapes or wrapping."""
    return Console(
        color_system=None,
        force_terminal=False,
        highlight=False,
        width=width,
        soft_wrap=False,
        emoji=False,
    )


def _drawn(console: Console, renderable: RenderableType) -> list[str]:
    """``renderable`` as rich draws it on ``console``, each line without its trailing padding."""
    with console.capture() as capture:
        console.print(renderable)
    return [line.rstrip() for line in capture.get().splitlines()]


#: A plain table with more rows than this has its rows drawn from a probe of its widest ones
#: (:func:`_plain_table`): rich lays out about 1,000 rows a second, and a two-run comparison of
#: 1M-step logs has 14,000 windows (12 s of the 22 s the command took).
PROBE_ROWS = 64


def _plain_table(console: Console, spec: _TableSpec) -> list[str]:
    """The lines of ``spec``'s table as rich draws it without styles, each without its trailing
    padding; a long table's rows are drawn here, exactly as rich draws them.

    Rich sizes each column to its widest cell when the table fits (it always does after
    :func:`fit_columns`, unless one name is wider than the terminal), so a table of the widest
    row of every column and the header has the full table's layout. When rich's drawing of
    that probe is one unwrapped line per row, as drawn here, every row is drawn here; otherwise
    (a column shrunk, a cell folded) rich draws the whole table.
    """
    head, rows, dropped = fit_columns(spec.kind, spec.head, spec.rows, spec.width)
    caption = dropped_note(dropped, spec.width)
    if len(rows) <= PROBE_ROWS or not all(
        cell.isprintable() and cell == cell.strip() for row in rows for cell in row
    ):
        return _drawn(console, _table(spec.title, head, rows, caption))
    probe = sorted(
        {max(range(len(rows)), key=lambda r: cell_len(rows[r][c])) for c in range(len(head))}
    )
    widths = [max(cell_len(cell) for cell in column) for column in zip(head, *rows, strict=True)]
    drawn = [_plain_row(cells, widths) for cells in (head, *(rows[r] for r in probe))]
    lines = _drawn(console, _table(spec.title, head, [rows[r] for r in probe], caption))
    for at in range(len(lines) - len(drawn)):
        # the header, rich's rule under it, then the probe's rows
        if lines[at] == drawn[0] and lines[at + 2 : at + 1 + len(drawn)] == drawn[1:]:
            body = [_plain_row(cells, widths) for cells in rows]
            return [*lines[: at + 2], *body, *lines[at + 1 + len(drawn) :]]
    return _drawn(console, _table(spec.title, head, rows, caption))


def _plain_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    """One SIMPLE_HEAD row: an edge space, each cell padded one space either side (the first
    left-justified, the others right), one space between columns, no trailing spaces."""
    parts = [
        cell + " " * (w - cell_len(cell)) if i == 0 else " " * (w - cell_len(cell)) + cell
        for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
    ]
    return (" " + " ".join(f" {part} " for part in parts)).rstrip()

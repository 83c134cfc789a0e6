"""Rich output (colour, tables, panels) of every command that has one: converge and compare.

watch draws its live view in :mod:`dflash_diag.watch.render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dflash_diag.analysis.verdict import CONVERGING, DIVERGING, PLATEAU
from dflash_diag.read.ranks import RankSkew, skew_lines
from dflash_diag.render.compare_rows import (
    alignment_rows,
    axis_unit,
    boundary_lines,
    legend,
    merged,
    regime_rows,
    short_count,
)
from dflash_diag.render.converge_rows import DEFAULT_ROWS, shown_rows, summary_lines, window_table
from dflash_diag.render.safe_text import visible

if TYPE_CHECKING:  # polars: imported only by the commands that build these
    from dflash_diag.compare.report import RegimeComparison, RunAlignment
    from dflash_diag.converge.report import ConvergeReport

_STATUS_STYLE = {CONVERGING: "bold green", PLATEAU: "bold yellow", DIVERGING: "bold red"}
_TREND_STYLE = {"up": "green", "down": "red", "flat": "dim"}


def render_rich(report: ConvergeReport, console: Console, max_rows: int | None = DEFAULT_ROWS) -> None:
    """Print a rich table of windows and a summary panel."""
    rows, hidden = shown_rows(report, max_rows)
    table = Table(
        title=Text("dflash-diag converge: " + ", ".join(visible(s) for s in report.sources)),
        caption=("trend: ↑ better (acc up, loss down), ↓ worse, → within threshold"
                 + (f" · {hidden} earlier windows not shown" if hidden else "")),
        box=box.SIMPLE_HEAD,
    )
    headers, cell_rows = window_table(report, rows)
    for name in headers:
        table.add_column(name, justify="left" if name == "steps" else "right")
    for row, line in zip(rows, cell_rows):
        cells = [Text(c) for c in line]
        cells[4].stylize(_TREND_STYLE.get(row.trend.loss_trend or "", ""))
        cells[7].stylize(_TREND_STYLE.get(row.trend.acc_trend or "", ""))
        if len(cells) > 8:
            cells[8].stylize("bold red")
        table.add_row(*cells)
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    for label, text in summary_lines(report):
        value = Text(text)
        if label == "verdict":
            value.stylize(_STATUS_STYLE.get(report.verdict.status, "bold"), 0, len(report.verdict.status))
        if label == "WARNING":
            value.stylize("bold red")
        summary.add_row(Text(label), value)
    console.print(table)
    console.print(Panel(Group(summary), title="summary", expand=False))


def _rich_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for i, name in enumerate(head):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: log text is never markup
    return table


def render_compare_rich(
    comparisons: Sequence[RegimeComparison], alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> RenderableType:
    """Rich tables of the regimes, the boundary explanations and the aligned windows (and the
    per-rank throughput skew when per-rank logs were given)."""
    parts: list[RenderableType] = []
    for comparison in [merged(comparisons)]:
        head, rows = regime_rows(comparison)
        split = f" (split on {comparison.split_on})" if comparison.split_on else ""
        parts.append(_rich_table(f"regimes{split}", head, rows))
        for line in boundary_lines(comparison):
            style = "bold" if not line.startswith("  ") else ""
            parts.append(Text(line, style=style))
        for note in comparison.notes:
            parts.append(Text(note, style="dim"))
    if alignment is not None:
        head, rows = alignment_rows(alignment)
        parts.append(
            _rich_table(
                f"two runs, windows of {short_count(alignment.width)} {axis_unit(alignment)}", head, rows
            )
        )
        parts.append(Text(legend(alignment), style="dim"))
    if ranks is not None:
        for label, text in skew_lines(ranks):
            parts.append(Text(f"{label}: {text}" if label else text, style="bold" if label else ""))
    return Group(*parts)

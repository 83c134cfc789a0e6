"""Rich output (colour, tables, panels) of every command that has one: converge and compare.

watch draws its live view in :mod:`dflash_diag.watch.render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
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


def _rich_table(
    title: str,
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    kind: str = "",
    width: int | None = None,
) -> Table:
    head, rows, dropped = fit_columns(kind, head, rows, width)
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        caption=dropped_note(dropped, width),
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


def render_compare_rich(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
    width: int | None = None,
) -> RenderableType:
    """Rich tables of the regimes, each regime's diagnosis, the boundary explanations and the
    aligned windows (and the per-rank throughput skew when per-rank logs were given), fitted to
    ``width`` columns (see :data:`DROP_ORDER`)."""
    parts: list[RenderableType] = []
    for comparison in [merged(comparisons)]:
        head, rows = regime_rows(comparison)
        split = f" (split on {comparison.split_on})" if comparison.split_on else ""
        parts.append(_rich_table(f"regimes{split}", head, rows, kind="regimes", width=width))
        head, rows = diagnosis_rows(comparison)
        if rows:
            parts.append(
                _rich_table(
                    "diagnosis per regime (as converge computes it)",
                    head,
                    rows,
                    kind="diagnosis",
                    width=width,
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
            _rich_table(
                f"two runs, windows of {short_count(alignment.width)} {_unit(alignment)}",
                head,
                rows,
                kind="alignment",
                width=width,
            )
        )
        parts.append(Text(legend(alignment), style="dim"))
    if ranks is not None:
        for label, text in skew_lines(ranks):
            parts.append(Text(f"{label}: {text}" if label else text, style="bold" if label else ""))
    return Group(*parts)


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
    console = Console(
        color_system=None,
        force_terminal=False,
        highlight=False,
        width=width,
        soft_wrap=False,
        emoji=False,
    )
    with console.capture() as capture:
        console.print(render_compare_rich(comparisons, alignment, ranks, width=width))
    return "".join(line.rstrip() + "\n" for line in capture.get().splitlines())

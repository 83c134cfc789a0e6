"""Markdown output of every command that has one, with the one escaper of table cells."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dflash_diag.analysis.rank_skew import RankSkew
from dflash_diag.render.compare_rows import (
    alignment_rows,
    boundary_lines,
    diagnosis_rows,
    forecast_lines,
    legend,
    merged,
    regime_rows,
)
from dflash_diag.render.converge_rows import shown_rows, summary_lines, window_table
from dflash_diag.render.rank_rows import skew_lines
from dflash_diag.text import visible

if TYPE_CHECKING:  # polars: imported only by the commands that build these
    from dflash_diag.compare.report import RegimeComparison, RunAlignment
    from dflash_diag.converge.report import ConvergeReport


def markdown_cell(text: str) -> str:
    """``text`` safe inside a markdown table cell or list item: backslashes, pipes and backticks
    escaped; an empty cell becomes one space so the row keeps its columns."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`") or " "


def render_markdown(report: ConvergeReport, max_rows: int | None = None) -> str:
    """A markdown section: the windows as a table and the summary as a list."""
    rows, hidden = shown_rows(report, max_rows)
    headers, cells = window_table(report, rows)
    headers[4], headers[7] = "loss trend", "acc trend"
    out = [
        "## dflash-diag converge: " + markdown_cell(", ".join(visible(s) for s in report.sources)),
        "",
    ]
    if hidden:
        out += [f"_{hidden} earlier windows not shown_", ""]
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|")
    for line in cells:
        out.append("| " + " | ".join(markdown_cell(c) for c in line) + " |")
    out += ["", "Trend: ↑ better (acc up, loss down), ↓ worse, → within threshold.", ""]
    for label, text in summary_lines(report):
        cell = markdown_cell(text.strip())
        if label:
            out.append(f"- **{markdown_cell(label)}**: {cell}")
        else:  # a continuation (an estimate, a reason): a sub-item of the labelled line above
            out.append("  - " + ("\\" + cell if cell.startswith(("*", "-", "+")) else cell))
    return "\n".join(out) + "\n"


def render_compare_markdown(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> str:
    """The same content as markdown tables and paragraphs."""

    def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        cell = markdown_cell
        out = [
            "| " + " | ".join(cell(h) for h in head) + " |",
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|",
        ]
        out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
        return out

    lines: list[str] = []
    for comparison in [merged(comparisons)]:
        lines += ["## Regimes", "", *table(*regime_rows(comparison)), ""]
        head, rows = diagnosis_rows(comparison)
        if rows:
            lines += ["## Diagnosis per regime", "", *table(head, rows), ""]
        lines += [f"- {line}" for line in forecast_lines(comparison)]
        lines += [""] if forecast_lines(comparison) else []
        lines += ["## Boundaries", ""]
        lines += [f"- {line.strip()}" for line in boundary_lines(comparison)] + [""]
        lines += [f"_{note}_" for note in comparison.notes]
    if alignment is not None:
        lines += ["## Two runs", "", legend(alignment), "", *table(*alignment_rows(alignment))]
    if ranks is not None:
        lines += ["", "## Ranks", ""] + [f"- {text.strip()}" for _, text in skew_lines(ranks)]
    return "\n".join(lines).rstrip() + "\n"

"""Plain text output (no colour, no box drawing) for pipes, files and ``NO_COLOR``."""

from __future__ import annotations

from collections.abc import Sequence

from dflash_diag.converge.report import ConvergeReport
from dflash_diag.render.converge_rows import DEFAULT_ROWS, shown_rows, summary_lines, window_table
from dflash_diag.render.safe_text import visible


def _aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = []
    for cells in [list(headers), *rows]:
        parts = [c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells)]
        out.append("  ".join(parts).rstrip())
    return out


def render_text(report: ConvergeReport, max_rows: int | None = DEFAULT_ROWS) -> str:
    """Plain text (no colour, no box drawing) for pipes, files and ``NO_COLOR``."""
    rows, hidden = shown_rows(report, max_rows)
    out = ["dflash-diag converge: " + ", ".join(visible(s) for s in report.sources), ""]
    if hidden:
        out.append(f"({hidden} earlier windows not shown)")
    out += _aligned(*window_table(report, rows))
    out.append("trend: ↑ better (acc up, loss down), ↓ worse, → within threshold")
    out.append("")
    width = max(len(label) for label, _ in summary_lines(report))
    for label, text in summary_lines(report):
        out.append(f"{label.ljust(width)}  {text}".rstrip())
    return "\n".join(out) + "\n"

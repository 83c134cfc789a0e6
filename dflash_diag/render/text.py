"""Plain text output (no colour, no box drawing) for pipes, files and ``NO_COLOR``."""

from __future__ import annotations

from collections.abc import Sequence

from dflash_diag.analysis.numbers import plural
from dflash_diag.converge.report import ConvergeReport
from dflash_diag.render.converge_rows import DEFAULT_ROWS, shown_rows, summary_lines, window_table
from dflash_diag.render.fit import dropped_note, fit_columns, wrap
from dflash_diag.text import visible


def _aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    out = []
    for cells in [list(headers), *rows]:
        parts = [c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells)]
        out.append("  ".join(parts).rstrip())
    return out


def render_text(
    report: ConvergeReport, max_rows: int | None = DEFAULT_ROWS, width: int | None = None
) -> str:
    """Plain text (no colour, no box drawing) for pipes, files and ``NO_COLOR``, fitted to
    ``width`` columns when given: table columns dropped in a stated order, summary lines wrapped
    at spaces (a number is never cut)."""
    rows, hidden = shown_rows(report, max_rows)
    out = [
        *wrap("dflash-diag converge: " + ", ".join(visible(s) for s in report.sources), width),
        "",
    ]
    if hidden:
        out.append(f"({plural(hidden, 'earlier window')} not shown)")
    head, cells, dropped = fit_columns("windows", *window_table(report, rows), width, plain=True)
    out += _aligned(head, cells)
    if (note := dropped_note(dropped, width)) is not None:
        out.append(note)
    out += wrap("trend: ↑ better (acc up, loss down), ↓ worse, → within threshold", width)
    out.append("")
    lines = summary_lines(report)
    label_width = max(len(label) for label, _ in lines)
    for label, text in lines:
        # continuation lines start under the text, two spaces further in
        for i, part in enumerate(wrap(text, width, label_width + 2)):
            lead = label.ljust(label_width) if i == 0 else " " * label_width
            out.append(f"{lead}  {part}".rstrip())
    return "\n".join(out) + "\n"

"""Rendering a :class:`~dflash_diag.report.ConvergeReport`: rich, plain text, markdown, CSV, JSON.

Analysis never happens here. Text taken from the log (paths, script names) goes through
:func:`dflash_diag.safe_text.visible` and into rich as :class:`rich.text.Text`, never as markup.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dflash_diag.number_format import format_lr, format_number, format_percent
from dflash_diag.ranks import skew_lines
from dflash_diag.report import ConvergeReport, WindowRow
from dflash_diag.safe_text import visible
from dflash_diag.trend import ARROWS
from dflash_diag.verdict import CONVERGING, DIVERGING, PLATEAU

#: Window rows shown by the table renderers unless told otherwise (the newest ones).
DEFAULT_ROWS = 40

_STATUS_STYLE = {CONVERGING: "bold green", PLATEAU: "bold yellow", DIVERGING: "bold red"}
_TREND_STYLE = {"up": "green", "down": "red", "flat": "dim"}


# ------------------------------------------------------------------------------------------
# number formats


def _f(value: float | None, digits: int = 4) -> str:
    return format_number(value, f".{digits}f")


def _signed(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:+.{digits}f}"


def _steps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


# ------------------------------------------------------------------------------------------
# content shared by every format


WINDOW_HEADERS = ("steps", "n", "loss", "Δloss", "", "acc", "Δacc", "")


def window_cells(row: WindowRow) -> list[str]:
    """The table cells of one window (the trend cells hold arrows)."""
    w, t = row.window, row.trend
    return [
        f"{w.start}-{w.end}",
        str(w.n),
        _f(w.loss),
        _signed(t.loss_delta),
        ARROWS[t.loss_trend],
        _f(w.acc),
        _signed(t.acc_delta),
        ARROWS[t.acc_trend],
    ]


def _with_nonfinite(report: ConvergeReport) -> bool:
    """Whether the tables get a NaN/Inf column (only when some window has such values)."""
    return any(row.window.nonfinite for row in report.windows)


def _table(report: ConvergeReport, rows: Sequence[WindowRow]) -> tuple[list[str], list[list[str]]]:
    headers = list(WINDOW_HEADERS)
    cells = [window_cells(r) for r in rows]
    if _with_nonfinite(report):
        headers.append("NaN/Inf")
        for row, line in zip(rows, cells):
            line.append(str(row.window.nonfinite) if row.window.nonfinite else "")
    return headers, cells


def _shown_rows(report: ConvergeReport, max_rows: int | None) -> tuple[list[WindowRow], int]:
    rows = report.windows
    if max_rows and len(rows) > max_rows:
        return rows[-max_rows:], len(rows) - max_rows
    return rows, 0


def summary_lines(report: ConvergeReport) -> list[tuple[str, str]]:
    """``(label, text)`` lines of the summary, log-derived text already made visible."""
    lines: list[tuple[str, str]] = []
    header = report.header
    if header is not None:
        script = header.fields.get("script")
        run = f"script {visible(script)}" if script is not None else "run_start header"
        resumed = header.fields.get("resumed_from")
        if isinstance(resumed, dict):
            run += f", resumed from {visible(resumed.get('path', '?'))} at step {visible(resumed.get('step', '?'))}"
        lines.append(("run", run))
    sel = report.selection
    first = report.windows[0].window if report.windows else None
    last = report.windows[-1].window if report.windows else None
    span = f" · steps {first.first_step}-{last.last_step}" if first and last else ""
    size = (first.end - first.start + 1) if first else 0
    lines.append(("selected", f"{sel.reason}{span} · {len(report.windows)} windows of {size} steps"))

    s = report.schedule
    sched = f"lr {format_lr(s.current)}"
    if s.peak is not None:
        sched += f" = {format_percent(s.fraction_of_peak)} of peak {format_lr(s.peak)} ({s.peak_source})"
    if s.phase:
        sched += f" · {s.phase} ({s.phase_source})"
    if s.warmup_fraction is not None and s.phase == "warmup":
        sched += f" · {format_percent(s.warmup_fraction)} of warmup"
    if s.run_fraction is not None:
        sched += f" · {format_percent(s.run_fraction)} of the run"
    if s.epoch is not None:
        sched += f" · epoch {s.epoch:.2f}"
        if s.total_epochs:
            sched += f" of {s.total_epochs:.2f}"
    lines.append(("schedule", sched))

    a = report.acceptance
    acc = f"acc {_f(a.acc)} ({a.acc_basis})"
    lines.append(("accuracy", acc))
    if a.tau is not None:
        tau = (f"tau {a.tau:.2f} by {a.estimator} (B={a.block_size}, {a.block_size_source}) · "
               f"target {a.target_tau:.2f} (acc {a.target_acc:.3g}) · progress {format_percent(a.progress)} · "
               f"baseline {a.baseline_tau:.2f} ({_signed(a.vs_baseline, 2)})")
        lines.append(("acceptance", tau))
    for e in a.estimates:
        err = f", error {_signed(e.error, 2)}" if e.error is not None else ""
        lines.append(("", f"  {e.name:<8} {e.tau:.2f}  ({visible(e.basis)}{err})"))

    v = report.verdict
    verdict = v.status.upper()
    if v.slope_per_1k_steps is not None:
        verdict += f" · {v.metric} slope {v.slope_per_1k_steps:+.4f} per 1k steps · p = {v.p_value:.3g}"
    if v.eta_steps is not None:
        verdict += f" · ETA to target {_steps(v.eta_steps)} steps"
        if v.eta_hours is not None:
            verdict += f" ({v.eta_hours:.1f} h)"
    lines.append(("verdict", verdict))
    lines.append(("", f"  {v.reason}"))

    if report.restarts:
        shown = ", ".join(f"{r.step} (after {r.previous_step})" for r in report.restarts[:8])
        more = f" and {len(report.restarts) - 8} more" if len(report.restarts) > 8 else ""
        lines.append(("restarts", f"{len(report.restarts)}: at step {shown}{more}"))
    issues = report.issues
    if issues.malformed:
        where = _line_list(report, issues.malformed_lines, issues.malformed)
        lines.append(("skipped", f"{issues.malformed} malformed line(s) skipped: {where}"))
    if issues.nonfinite:
        parts = ", ".join(f"{k} {n}" for k, n in sorted(issues.nonfinite.items()))
        lines.append(("nonfinite", f"{issues.nonfinite_total} NaN/Inf value(s): {parts}"))
    if issues.coerced or issues.nonnumeric:
        text = f"{issues.coerced} number(s) given as strings, converted"
        if issues.nonnumeric:
            where = _line_list(report, issues.nonnumeric_lines, len(issues.nonnumeric_lines))
            text += f"; {issues.nonnumeric} non-numeric value(s) ignored ({where})"
        lines.append(("types", text))
    if issues.without_step:
        lines.append(("no step", f"{issues.without_step} record(s) without a step ignored"))
    if report.ranks is not None:
        lines += skew_lines(report.ranks)
    for note in report.notes:
        lines.append(("note", visible(note)))
    for warning in a.warnings:
        lines.append(("WARNING", visible(warning)))
    return lines


def _line_list(report: ConvergeReport, where: list[tuple[int, int]], total: int) -> str:
    """``line 3, 7`` (with file names when there are several inputs), ``...`` when truncated."""
    several = len(report.sources) > 1
    parts = [f"{visible(report.sources[s])}:{n}" if several and s < len(report.sources) else str(n)
             for s, n in where]
    more = ", ..." if total > len(where) else ""
    return ("line " if len(parts) == 1 and not more else "lines ") + ", ".join(parts) + more


# ------------------------------------------------------------------------------------------
# formats


def render_rich(report: ConvergeReport, console: Console, max_rows: int | None = DEFAULT_ROWS) -> None:
    """Print a rich table of windows and a summary panel."""
    rows, hidden = _shown_rows(report, max_rows)
    table = Table(
        title=Text("dflash-diag converge: " + ", ".join(visible(s) for s in report.sources)),
        caption=("trend: ↑ better (acc up, loss down), ↓ worse, → within threshold"
                 + (f" · {hidden} earlier windows not shown" if hidden else "")),
        box=box.SIMPLE_HEAD,
    )
    headers, cell_rows = _table(report, rows)
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


def _aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = []
    for cells in [list(headers), *rows]:
        parts = [c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells)]
        out.append("  ".join(parts).rstrip())
    return out


def render_text(report: ConvergeReport, max_rows: int | None = DEFAULT_ROWS) -> str:
    """Plain text (no colour, no box drawing) for pipes, files and ``NO_COLOR``."""
    rows, hidden = _shown_rows(report, max_rows)
    out = ["dflash-diag converge: " + ", ".join(visible(s) for s in report.sources), ""]
    if hidden:
        out.append(f"({hidden} earlier windows not shown)")
    out += _aligned(*_table(report, rows))
    out.append("trend: ↑ better (acc up, loss down), ↓ worse, → within threshold")
    out.append("")
    width = max(len(label) for label, _ in summary_lines(report))
    for label, text in summary_lines(report):
        out.append(f"{label.ljust(width)}  {text}".rstrip())
    return "\n".join(out) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`") or " "


def render_markdown(report: ConvergeReport, max_rows: int | None = None) -> str:
    """A markdown section: the windows as a table and the summary as a list."""
    rows, hidden = _shown_rows(report, max_rows)
    headers, cells = _table(report, rows)
    headers[4], headers[7] = "loss trend", "acc trend"
    out = ["## dflash-diag converge: " + _md_cell(", ".join(visible(s) for s in report.sources)), ""]
    if hidden:
        out += [f"_{hidden} earlier windows not shown_", ""]
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|")
    for line in cells:
        out.append("| " + " | ".join(_md_cell(c) for c in line) + " |")
    out += ["", "Trend: ↑ better (acc up, loss down), ↓ worse, → within threshold.", ""]
    for label, text in summary_lines(report):
        prefix = f"**{_md_cell(label)}**: " if label else "  "
        out.append(f"- {prefix}{_md_cell(text.strip())}")
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("start", "end", "n", "first_step", "last_step", "loss", "loss_delta", "loss_trend",
               "acc", "acc_delta", "trend", "weighted", "nonfinite", "tau_train")


def render_csv(report: ConvergeReport) -> str:
    """The windows as CSV, one row per window (the summary is in the JSON output)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.windows:
        w, t = row.window, row.trend
        writer.writerow([w.start, w.end, w.n, w.first_step, w.last_step, _csv(w.loss),
                         _csv(t.loss_delta), t.loss_trend or "", _csv(w.acc), _csv(t.acc_delta),
                         t.acc_trend or "", int(w.weighted), w.nonfinite, _csv(w.tau_train)])
    return buffer.getvalue()


def _csv(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def render_json(report: ConvergeReport) -> str:
    """The JSON contract (:meth:`ConvergeReport.to_json_dict`): one top-level key per line and
    one window per line, so it reads well and a million-step log's windows still encode fast
    (``json.dumps(indent=...)`` falls back to the pure-Python encoder)."""
    data = report.to_json_dict()
    # One encoder for every line: json.dumps with options builds a new one per call, which is
    # most of the cost over tens of thousands of windows.
    dump = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode

    lines = ["{"]
    for i, (key, value) in enumerate(data.items()):
        comma = "," if i < len(data) - 1 else ""
        if key == "windows" and value:
            lines.append(f"  {dump(key)}: [")
            lines += [f"    {dump(w)}," for w in value[:-1]] + [f"    {dump(value[-1])}"]
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"

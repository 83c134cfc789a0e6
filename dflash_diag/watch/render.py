"""Drawing one frame of `dflash-diag watch` (a `WatchView`) with rich, and plotext with --plot.

Text taken from the log or the command line (the path) goes through
`dflash_diag.render.safe_text.visible` and into rich as `rich.text.Text`, never as markup.
"""

from __future__ import annotations

import math

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dflash_diag.analysis.alerts import format_duration
from dflash_diag.analysis.trend import ARROWS
from dflash_diag.analysis.verdict import Verdict
from dflash_diag.render.number_format import format_lr, format_number, format_percent
from dflash_diag.render.safe_text import visible
from dflash_diag.render.sparkline import sparkline
from dflash_diag.watch.view import WatchView


def _literal(text: str) -> Text:
    """Text from a log or a path, shown as is: no markup, control characters made visible."""
    return Text(visible(text))


_ARROW_STYLE = {"up": "green", "down": "red", "flat": "yellow", None: ""}


def _plot(view: WatchView, width: int) -> Text:
    """plotext line charts of the loss and acc windows, side by side."""
    import plotext as plt  # only with --plot: it is the slowest import of the view

    loss = next(s for s in view.series if s.name == "loss")
    acc = next(s for s in view.series if s.name == "acc")
    steps = [w.start for w in view.windows]
    # The series span the history; the table only the latest rows: rebuild x from the history.
    n = len(loss.values)
    last_start = steps[-1] if steps else 0
    size = (view.windows[-1].end - view.windows[-1].start + 1) if view.windows else 1
    xs = [last_start - (n - 1 - i) * size for i in range(n)]
    plt.clear_figure()
    plt.subplots(1, 2)
    plt.plotsize(max(40, width), 14)
    for col, series in ((1, loss), (2, acc)):
        plt.subplot(1, col)
        pts = [(x, v) for x, v in zip(xs, series.values) if v is not None and math.isfinite(v)]
        if pts:
            plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="braille")
        plt.title(series.name)
    return Text.from_ansi(plt.build())


_VERDICT_STYLE = {"converging": "bold green", "plateau": "bold yellow", "diverging": "bold red"}


def _verdict_text(verdict: Verdict) -> Text:
    text = Text("verdict: ")
    text.append(verdict.status, style=_VERDICT_STYLE.get(verdict.status, "bold"))
    if verdict.slope_per_1k_steps is not None:
        text.append(f"  {verdict.metric} {verdict.slope_per_1k_steps:+.4g}/1k steps")
    if verdict.p_value is not None:
        text.append(f", p={verdict.p_value:.2g}")
    if verdict.eta_steps is not None:
        text.append(f", target in {verdict.eta_steps:,.0f} steps")
        if verdict.eta_hours is not None:
            text.append(f" (~{verdict.eta_hours:.1f} h)")
    if verdict.status not in _VERDICT_STYLE:
        text.append(f" ({verdict.reason})", style="dim")
    return text


def render_view(view: WatchView, *, plot: bool = False, width: int = 100) -> RenderableType:
    """Draw one frame with rich: header line, alerts, sparklines, latest windows, schedule,
    verdict. ``plot`` adds plotext charts of loss and acc ``width`` columns wide."""
    head = Text.assemble(("dflash-diag watch ", "bold"), _literal(view.path))
    facts = []
    if view.last_step is not None:
        facts.append(f"step {view.last_step}")
    facts.append(f"{view.total_records:,} records")
    if view.since_last_record is not None:
        facts.append(f"last record {format_duration(view.since_last_record)} ago")
    if view.skipped_lines:
        facts.append(f"{view.skipped_lines} malformed lines skipped")
    if view.nonfinite:
        facts.append(f"{view.nonfinite} NaN/Inf values")
    if view.restarts:
        facts.append("restarts at " + ", ".join(map(str, view.restarts[-3:])))
    parts: list[RenderableType] = [head, Text("  ·  ".join(facts), style="dim")]
    for alert in view.alerts:
        parts.append(Text(f"! {alert.message}", style="bold red"))
    if view.waiting:
        parts.append(Text(view.waiting, style="yellow"))
        return Group(*parts)
    parts.append(Text(view.selection, style="dim"))

    sparks = Table(box=None, show_header=False, pad_edge=False)
    sparks.add_column(style="bold")
    sparks.add_column()
    sparks.add_column(justify="right")
    for s in view.series:
        sparks.add_row(s.name, sparkline(s.values), format_number(s.latest, s.fmt))
    parts.append(sparks)

    table = Table(title="latest windows", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (
        ("steps", "left"),
        ("n", "right"),
        ("loss", "right"),
        ("", "left"),
        ("acc", "right"),
        ("Δacc", "right"),
        (" ", "left"),
    ):
        table.add_column(name, justify=justify)
    for w, t in zip(view.windows, view.trends):
        table.add_row(
            f"{w.start}-{w.end}",
            str(w.n),
            format_number(w.loss, ".4f"),
            Text(ARROWS[t.loss_trend], style=_ARROW_STYLE[t.loss_trend]),
            format_number(w.acc, ".4f"),
            format_number(t.acc_delta, "+.4f") if t.acc_delta is not None else "",
            Text(ARROWS[t.acc_trend], style=_ARROW_STYLE[t.acc_trend]),
        )
    parts.append(table)

    sched = view.schedule
    if sched is not None and sched.current is not None:
        line = f"lr {format_lr(sched.current)}"
        if sched.peak is not None and sched.fraction_of_peak is not None:
            line += (
                f", {format_percent(sched.fraction_of_peak)} of peak {format_lr(sched.peak)}"
                f" ({sched.peak_source})"
            )
        if sched.phase:
            line += f", {sched.phase}"
            if sched.phase == "warmup" and sched.warmup_fraction is not None:
                line += f" {format_percent(sched.warmup_fraction)} done"
        if sched.run_fraction is not None:
            line += f", {format_percent(sched.run_fraction)} of the run"
        if sched.epoch is not None:
            line += f", epoch {sched.epoch:.2f}"
        parts.append(Text("schedule: " + line))
    acc = view.acceptance
    if acc is not None and acc.tau is not None:
        line = f"tau {acc.tau:.2f} ({acc.estimator})"
        if acc.progress is not None:
            line += f", {acc.progress:.0%} of the way to tau {acc.target_tau:.2f}"
        if acc.vs_baseline is not None:
            line += f", {acc.vs_baseline:+.2f} vs baseline {acc.baseline_tau:g}"
        parts.append(Text("acceptance: " + line))
        for warning in acc.warnings:
            parts.append(Text(f"! {warning}", style="bold red"))
    if view.verdict is not None:
        parts.append(_verdict_text(view.verdict))
    if plot and view.series:
        parts.append(_plot(view, width))
    return Group(*parts)

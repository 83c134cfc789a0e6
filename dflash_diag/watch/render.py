"""Drawing one frame of `dflash-diag watch` (a `WatchView`) with rich, and plotext with --plot.

Text taken from the log or the command line (the path) goes through
`dflash_diag.text.visible` and into rich as `rich.text.Text`, never as markup.
"""

from __future__ import annotations

import math

from rich import box
from rich.console import Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from dflash_diag.analysis.alerts import format_duration
from dflash_diag.analysis.diagnosis import Diagnosis
from dflash_diag.analysis.numbers import plural
from dflash_diag.analysis.spans import window_label
from dflash_diag.analysis.trend import ARROWS
from dflash_diag.render.converge_rows import (
    alert_messages,
    eta_text,
    schedule_text,
    target_text,
    tau_text,
)
from dflash_diag.render.fit import wrap
from dflash_diag.render.forecast_rows import forecast_line
from dflash_diag.render.number_format import format_number
from dflash_diag.render.sparkline import sparkline
from dflash_diag.text import visible
from dflash_diag.watch.view import WatchView


def _literal(text: str) -> Text:
    """Text from a log or a path, shown as is: no markup, control characters made visible."""
    return Text(visible(text))


_ARROW_STYLE = {"up": "green", "down": "red", "flat": "yellow", None: ""}


def _plot(view: WatchView, width: int) -> Text:
    """plotext line charts of the loss, acc and tau windows, side by side (tau: the primary
    estimator's per-window series, the same tau the frame prints)."""
    import plotext as plt  # only with --plot: it is the slowest import of the view

    panels = [
        next(s for s in view.series if s.name == "loss"),
        next(s for s in view.series if s.name == "acc"),
        next(s for s in view.series if s.name.startswith("tau")),
    ]
    # The series span the history; the table only the latest rows: rebuild x from the history.
    n = len(panels[0].values)
    last_start = view.windows[-1].start if view.windows else 0
    size = (view.windows[-1].end - view.windows[-1].start + 1) if view.windows else 1
    xs = [last_start - (n - 1 - i) * size for i in range(n)]
    # plotext keeps the last subplot active: back to the whole figure first, or the next frame
    # (a live refresh) would clear only that subplot and nest its panels inside it.
    plt.main()
    plt.clear_figure()
    plt.subplots(1, len(panels))
    plt.plotsize(max(60, width), 14)
    for col, series in enumerate(panels, start=1):
        plt.subplot(1, col)
        # every series is per window of the history; a shorter one is plotted as far as it goes
        pairs = zip(xs, series.values, strict=False)
        pts = [(x, v) for x, v in pairs if v is not None and math.isfinite(v)]
        if pts:
            plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="braille")
            ticks: set[float] = {pts[0][0], pts[len(pts) // 2][0], pts[-1][0]}
            band = _forecast_path(view, series.name)
            if band:
                # The forecast after the data: its median and the 80% band to the planned end.
                steps = [p[0] for p in band]
                plt.plot(steps, [p[1] for p in band], marker="braille", color="cyan")
                plt.plot(steps, [p[2] for p in band], marker="dot", color="gray")
                plt.plot(steps, [p[3] for p in band], marker="dot", color="gray")
                ticks.add(steps[-1])
            # Steps are integers: label them so (plotext's own ticks read "15002.0").
            positions = sorted(ticks)
            plt.xticks(positions, [str(int(t)) for t in positions])
        plt.title(series.name)
    return Text.from_ansi(plt.build())


def _forecast_path(view: WatchView, name: str) -> tuple[tuple[float, float, float, float], ...]:
    """The forecast path of the panel's metric (``tau (measured)`` is tau), or empty."""
    d = view.diagnosis
    if d is None or d.forecast is None:
        return ()
    m = d.forecast.metrics.get(name.split(" ")[0])
    return m.path if m is not None and m.available and len(m.path) > 1 else ()


_VERDICT_STYLE = {"converging": "bold green", "plateau": "bold yellow", "diverging": "bold red"}


def _verdict_text(d: Diagnosis) -> Text:
    verdict = d.verdict
    text = Text("verdict: ")
    text.append(verdict.status, style=_VERDICT_STYLE.get(verdict.status, "bold"))
    if verdict.slope_per_1k_steps is not None:
        text.append(f"  {verdict.metric} {verdict.slope_per_1k_steps:+.4g}/1k steps")
    if verdict.p_value is not None:
        text.append(f", p={verdict.p_value:.2g}")
    eta = eta_text(d)
    if eta is not None:
        text.append(f", {eta}")
    if verdict.status not in _VERDICT_STYLE:
        text.append(f" ({verdict.reason})", style="dim")
    elif verdict.n_points:
        # The span judged: every window selected, as converge (not only those on screen).
        text.append(
            f" · over {plural(verdict.n_points, 'window')} (all of them, as converge)", style="dim"
        )
    return text


def _hung(text: Text, width: int, hang: str = "  ") -> Text:
    """``text`` wrapped at spaces to ``width`` columns, its continuation lines indented by
    ``hang`` as the forecast line's are (rich would start them at column 0, under the label);
    each style stays on its characters."""
    plain = text.plain
    lines = wrap(plain, width, hang=hang)
    if len(lines) == 1:
        return text
    out, pos = Text(overflow="fold"), 0
    for i, line in enumerate(lines):
        body = line[len(hang) :] if i else line
        start = plain.index(body, pos)  # the words of the line, past the break's space
        if i:
            out.append("\n" + hang)
        out.append_text(text[start : start + len(body)])
        pos = start + len(body)
    return out


def render_view(view: WatchView, *, plot: bool = False, width: int = 100) -> RenderableType:
    """Draw one frame with rich: header line, alerts, sparklines, latest windows, schedule,
    verdict. ``plot`` adds plotext charts of loss and acc ``width`` columns wide."""
    head = Text.assemble(("dflash-diag watch ", "bold"), _literal(view.path))
    facts = []
    if view.last_step is not None:
        facts.append(f"step {view.last_step}")
    facts.append(plural(view.total_records, "record"))
    if view.since_last_record is not None:
        what = "last record" if view.total_records else "last write"  # no record: the file's time
        facts.append(f"{what} {format_duration(view.since_last_record)} ago")
    if view.skipped_lines:
        facts.append(f"{plural(view.skipped_lines, 'malformed line')} skipped")
    if view.nonfinite:
        facts.append(plural(view.nonfinite, "NaN/Inf value"))
    if view.restarts:
        count = len(view.restarts)
        # the latest three in file order; the count says when there are more (k-fold runs)
        word = (
            "restart at "
            if count == 1
            else "restarts at "
            if count <= 3
            else f"{count} restarts, the latest at "
        )
        facts.append(word + ", ".join(map(str, view.restarts[-3:])))
    parts: list[RenderableType] = [head, Text("  ·  ".join(facts), style="dim")]
    for message in alert_messages(view.alerts, diverging=True):
        parts.append(Text(f"! {message}", style="bold red"))
    for event in view.schedule_events[-2:]:
        parts.append(Text(visible(event.text()), style="yellow"))
    if view.waiting:
        parts.append(Text(view.waiting, style="yellow"))
        return Group(*parts)
    parts.append(Text(view.selection, style="dim"))

    sparks = Table(box=None, show_header=False, pad_edge=False)
    sparks.add_column(style="bold")
    sparks.add_column()
    sparks.add_column(justify="right", overflow="fold", no_wrap=True)
    for s in view.series:
        sparks.add_row(s.name, sparkline(s.values), format_number(s.latest, s.fmt))
    parts.append(sparks)

    table = Table(title="latest windows", title_justify="left", box=box.SIMPLE_HEAD)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("steps", "left"),
        ("n", "right"),
        ("loss", "right"),
        ("", "left"),
        ("acc", "right"),
        ("Δacc", "right"),
        (" ", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")  # never an ellipsis in a number
    for row in view.rows:
        w, t = row.window, row.trend
        table.add_row(
            window_label(w, view.last_step),
            str(w.n),
            format_number(w.loss, ".4f"),
            Text(ARROWS[t.loss_trend], style=_ARROW_STYLE[t.loss_trend]),
            format_number(w.acc, ".4f"),
            format_number(t.acc_delta, "+.4f") if t.acc_delta is not None else "",
            Text(ARROWS[t.acc_trend], style=_ARROW_STYLE[t.acc_trend]),
        )
    parts.append(table)

    d = view.diagnosis
    if d is not None:
        if d.schedule.current is not None:
            parts.append(_hung(Text("schedule: " + schedule_text(d.schedule)), width))
        if d.acceptance.tau is not None:
            parts.append(_hung(Text("acceptance: " + tau_text(d)), width))
            others = " · ".join(
                f"{e.name} {e.tau:.2f}" + (" (upper view)" if e.upper_view else "")
                for e in d.acceptance.estimates
                if e.name != d.acceptance.estimator
            )
            if others:
                parts.append(
                    _hung(Text("  other estimates: " + others, style="dim"), width, "    ")
                )
        if d.drafter.is_drafter:
            parts.append(_hung(Text("target: " + target_text(d)), width))
        for warning in d.acceptance.warnings:
            parts.append(_hung(Text(f"! {visible(warning)}", style="bold red"), width))
        parts.append(_hung(_verdict_text(d), width))
        if (line := forecast_line(d.forecast)) is not None:
            parts.append(Text("\n".join(wrap("forecast: " + line, width)), overflow="fold"))
    for note in view.notes:  # converge's notes: why a value is missing, what the verdict skips
        parts.append(_hung(Text("note: " + visible(note), style="dim"), width))
    if plot and view.series:
        parts.append(_plot(view, width))
    return Group(*parts)

"""The content of a converge report shared by every output kind: window cells and summary lines.

Analysis never happens here, nor in the renderers (:mod:`dflash_diag.render.text`, ``.rich``,
``.markdown``, ``.csv``, ``.json``). Text taken from the log (paths, script names) goes through
:func:`dflash_diag.text.visible` and into rich as :class:`rich.text.Text`, never as
markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from dflash_diag.analysis import defaults
from dflash_diag.analysis.alerts import Alert, format_duration
from dflash_diag.analysis.diagnosis import Diagnosis, WindowRow
from dflash_diag.analysis.estimators import PREFIX, estimator_label, ranking_text
from dflash_diag.analysis.numbers import plural
from dflash_diag.analysis.spans import window_label
from dflash_diag.analysis.trend import ARROWS
from dflash_diag.converge.report import ConvergeReport
from dflash_diag.render.forecast_rows import forecast_line, target_phrase
from dflash_diag.render.json_columns import row_column
from dflash_diag.render.number_format import format_lr, format_number, format_percent
from dflash_diag.render.rank_rows import skew_lines
from dflash_diag.text import visible

#: Window rows shown by the table renderers unless told otherwise (the newest ones).
DEFAULT_ROWS = 40

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


def window_cells(row: WindowRow, last_step: int | None = None) -> list[str]:
    """The table cells of one window (the trend cells hold arrows); the label ends at the data."""
    w, t = row.window, row.trend
    return [
        window_label(w, last_step),
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
    return any(row_column(report.windows, "nonfinite"))


def window_table(
    report: ConvergeReport, rows: Sequence[WindowRow]
) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the window table (a NaN/Inf column only when some window has some)."""
    headers = list(WINDOW_HEADERS)
    cells = [window_cells(r, report.last_step) for r in rows]
    if _with_nonfinite(report):
        headers.append("NaN/Inf")
        for row, line in zip(rows, cells, strict=True):
            line.append(str(row.window.nonfinite) if row.window.nonfinite else "")
    return headers, cells


def shown_rows(report: ConvergeReport, max_rows: int | None) -> tuple[Sequence[WindowRow], int]:
    """The newest ``max_rows`` windows and how many earlier ones are hidden."""
    rows = report.windows
    if max_rows and len(rows) > max_rows:
        return rows[-max_rows:], len(rows) - max_rows
    return rows, 0


def summary_lines(report: ConvergeReport) -> list[tuple[str, str]]:
    """``(label, text)`` lines of the summary, log-derived text already made visible."""
    lines: list[tuple[str, str]] = []
    header = report.header
    # A header a reader made up for another trainer's log (no schema, no script) is no run line.
    if header is not None and (
        header.fields.get("script") is not None or header.fields.get("schema") is not None
    ):
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
    # The auto rule's account, where it chose other than the every-step 50.
    chosen = report.window
    basis = f" ({chosen.basis})" if chosen is not None and chosen.interval not in (None, 1) else ""
    lines.append(
        (
            "selected",
            (
                f"{sel.reason}{span} · {plural(len(report.windows), 'window')} of "
                f"{plural(size, 'step')}{basis}"
            ),
        )
    )

    sched = schedule_text(report.schedule)
    lines.append(("schedule", sched))

    lines += diagnosis_lines(report)
    if report.restarts:
        shown = ", ".join(f"{r.step} (after {r.previous_step})" for r in report.restarts[:8])
        more = f" and {len(report.restarts) - 8} more" if len(report.restarts) > 8 else ""
        at = "at step" if len(report.restarts) == 1 else "at steps"
        lines.append(("restarts", f"{plural(len(report.restarts), 'restart')}: {at} {shown}{more}"))
    for event in report.schedule_events:
        lines.append(("event", visible(event.text())))
    issues = report.issues
    if issues.malformed:
        where = _line_list(report, issues.malformed_lines, issues.malformed)
        lines.append(("skipped", f"{plural(issues.malformed, 'malformed line')} skipped: {where}"))
    if issues.nonfinite:
        parts = ", ".join(f"{k} {n}" for k, n in sorted(issues.nonfinite.items()))
        lines.append(("nonfinite", f"{plural(issues.nonfinite_total, 'NaN/Inf value')}: {parts}"))
    if issues.coerced or issues.nonnumeric:
        text = f"{issues.coerced} number(s) given as strings, converted"
        if issues.nonnumeric:
            where = _line_list(report, issues.nonnumeric_lines, len(issues.nonnumeric_lines))
            text += f"; {issues.nonnumeric} non-numeric value(s) ignored ({where})"
        lines.append(("types", text))
    if issues.without_step:
        lines.append(("no step", f"{plural(issues.without_step, 'record')} without a step ignored"))
    if report.ranks is not None:
        lines += skew_lines(report.ranks)
    for note in report.notes:
        lines.append(("note", visible(note)))
    for warning in report.acceptance.warnings:
        lines.append(("WARNING", visible(warning)))
    return lines


def schedule_text(s) -> str:
    """The schedule sentence: lr, fraction of peak with its source, phase, warmup, run, epoch."""
    sched = f"lr {format_lr(s.current)}"
    if s.peak is not None:
        sched += (
            f" = {format_percent(s.fraction_of_peak)} of peak {format_lr(s.peak)} ({s.peak_source})"
        )
    if s.phase:
        sched += f" · {s.phase} ({s.phase_source})"
    if s.warmup_fraction is not None and s.phase == "warmup":
        sched += f" · {format_percent(s.warmup_fraction)} of warmup"
    if (
        s.run_fraction is not None and s.run_fraction > 1
    ):  # a resume that continued an ended schedule
        sched += f" · past the schedule's end (step {round(s.step / s.run_fraction)})"
    elif s.run_fraction is not None:
        sched += f" · {format_percent(s.run_fraction)} of the run"
    if s.epoch is not None:
        sched += f" · epoch {s.epoch:.2f}"
        if s.total_epochs:
            sched += f" of {s.total_epochs:.2f}"
    return sched


def tau_text(d: Diagnosis) -> str:
    """``tau 2.02 (measured: eval at step 400, 8 prompts, 10 steps old)``: the one tau, with its
    source."""
    a = d.acceptance
    primary = a.primary
    if primary is None:
        return "tau -"
    age = ""
    if a.estimator == "measured" and a.measured_age:
        age = f", {plural(a.measured_age, 'step')} old"
    return f"tau {a.tau:.2f} ({a.estimator}: {visible(primary.basis)}{age})"


def target_text(d: Diagnosis) -> str:
    """Progress in the target's own units (``acc 0.1766 = 65% of target acc 0.27``)."""
    a = d.acceptance
    if a.target_kind == "tau":
        if a.tau is None:
            return f"target tau {a.target_tau:.2f}: no tau estimate"
        return (
            f"tau {a.tau:.2f} ({a.estimator}) = {format_percent(a.progress)} of the way from 1 "
            f"to target tau {a.target_tau:.2f}"
        )
    if a.acc is None:
        return f"target acc {a.target_acc:.3g}: no accuracy in the log"
    text = f"acc {_f(a.acc)} = {format_percent(a.progress)} of target acc {a.target_acc:.3g}"
    if a.target_tau is not None:  # only under the linear estimator, where they are one scale
        text += f" (tau {a.target_tau:.2f} by the linear formula)"
    return text


def eta_text(d: Diagnosis) -> str | None:
    """The ETA sentence, or None when the verdict supports none (no "no ETA" sentence either,
    except for a converging verdict, where its absence needs a reason)."""
    v = d.verdict
    target = d.forecast.target if d.forecast is not None else None
    if (
        v.eta_steps is not None
        and d.forecast is not None
        and target is not None
        and target.eta_step is not None
    ):
        # the forecast's ETA, with its interval: the step where it crosses the target
        if v.eta_steps == 0:
            return "target reached"
        return "ETA " + target_phrase(target, d.forecast.last_step)
    if v.eta_steps is not None:
        if v.eta_steps == 0:
            return "target reached"
        text = f"ETA to target {_steps(v.eta_steps)} steps"
        if v.eta_hours is not None:
            text += f" (~{format_duration(v.eta_hours * 3600.0)})"
        return text
    return None


def diagnosis_lines(d: Diagnosis) -> list[tuple[str, str]]:
    """``(label, text)`` lines of the diagnosis proper: accuracy, tau and its estimators, target,
    verdict, alerts. Shared by converge's renderers and compare's per-regime lines."""
    a = d.acceptance
    lines: list[tuple[str, str]] = [("accuracy", f"acc {_f(a.acc)} ({a.acc_basis})")]
    if d.drafter.is_drafter:
        lines += acceptance_lines(d)
    lines += verdict_lines(d)
    lines += [("alert", message) for message in alert_messages(d.alerts)]
    return lines


#: Loss-spike alerts shown one a line; older ones are counted in one line (JSON lists every one).
SHOWN_SPIKES = 2


def alert_messages(alerts: Sequence[Alert], *, diverging: bool = False) -> list[str]:
    """The alerts' messages as converge and watch show them, terminal-safe: every alert but the
    diverging one (the verdict says it; ``diverging`` keeps it), with loss spikes past the newest
    :data:`SHOWN_SPIKES` told in one line, so a noisy curve does not fill the screen."""
    spikes = [a for a in alerts if a.kind == "loss_spike"]
    older = spikes[: max(0, len(spikes) - SHOWN_SPIKES)] if len(spikes) > SHOWN_SPIKES + 1 else []
    out = []
    for alert in alerts:
        if alert.kind == "diverging" and not diverging:
            continue
        if older and alert is older[0]:
            steps = [a.step for a in older if a.step is not None]
            span = f", steps {steps[0]} to {steps[-1]}" if len(steps) > 1 else ""
            out.append(f"{len(older)} earlier loss spikes{span} (-f json lists every one)")
        if any(alert is a for a in older):
            continue
        out.append(visible(alert.message))
    return out


def acceptance_lines(d: Diagnosis) -> list[tuple[str, str]]:
    """The acceptance section (a drafter's log only): tau and its estimators, calibration, target."""
    a = d.acceptance
    lines: list[tuple[str, str]] = []
    if a.tau is not None:
        lines.append(
            (
                "acceptance",
                (
                    f"{tau_text(d)} · B={a.block_size} ({a.block_size_source}) · "
                    f"baseline {a.baseline_tau:.2f} ({a.baseline_source}): {_signed(a.vs_baseline, 2)}"
                ),
            )
        )
    for e in a.estimates:
        err = f" · error {_signed(e.error, 2)}" if e.error is not None else ""
        mark = "*" if e.name == a.estimator else " "
        se = f" ± {e.se:.2f}" if e.se is not None else ""
        lines.append(("", f"{mark} {e.name:<8} {e.tau:5.2f}{se}  {visible(e.basis)}{err}"))
    if a.estimates:
        lines.append(
            (
                "",
                (
                    f"  (* primary; ranked {ranking_text()}, the walk "
                    f"leading on {defaults.WALK_MIN_RECORDS}+ records within ±{defaults.WALK_MAX_REL_SE:.0%}; "
                    f"prefix is {estimator_label(PREFIX)})"
                ),
            )
        )
    if a.calibration is not None:
        c = a.calibration
        lines.append(
            (
                "calibration",
                (
                    f"measured/{c.estimator} at the last eval (step {c.step}): "
                    f"{c.measured:.2f} / {c.estimate:.2f} = x{c.ratio:.2f}"
                ),
            )
        )
    lines.append(("target", target_text(d)))
    return lines


def verdict_lines(d: Diagnosis) -> list[tuple[str, str]]:
    """The verdict, its reason, the ETA's account and one line per validation series."""
    lines: list[tuple[str, str]] = []
    v = d.verdict
    verdict = v.status.upper()
    if v.slope_per_1k_steps is not None:
        verdict += (
            f" · {v.metric} slope {v.slope_per_1k_steps:+.4f} per 1k steps · p = {v.p_value:.3g}"
        )
    eta = eta_text(d)
    if eta is not None:
        verdict += f" · {eta}"
    lines.append(("verdict", verdict))
    lines.append(("", f"  {v.reason}"))
    if v.status == "converging" and v.eta_steps != 0 and d.forecast is None:
        lines.append(("", f"  {v.eta_reason}"))  # how the ETA was fitted, or why there is none
    for t in v.validation:
        lines.append(("validation", f"{t.status} · {t.reason}"))
    if (forecast := forecast_line(d.forecast)) is not None:
        lines.append(("forecast", forecast))
    return lines


def _line_list(report: ConvergeReport, where: list[tuple[int, int]], total: int) -> str:
    """``line 3, 7`` (with file names when there are several inputs), ``...`` when truncated."""
    several = len(report.sources) > 1
    parts = [
        f"{visible(report.sources[s])}:{n}" if several and s < len(report.sources) else str(n)
        for s, n in where
    ]
    more = ", ..." if total > len(where) else ""
    return ("line " if len(parts) == 1 and not more else "lines ") + ", ".join(parts) + more

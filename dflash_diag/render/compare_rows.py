"""The content of a compare report shared by its output kinds: regime and alignment cells, boundary
lines. The renderers are in :mod:`dflash_diag.render.rich`, ``.markdown`` and ``.json``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dflash_diag.analysis.spans import step_span
from dflash_diag.render.forecast_rows import forecast_line
from dflash_diag.render.number_format import format_number, format_percent
from dflash_diag.text import visible

if TYPE_CHECKING:  # the library (polars) is imported inside the functions: --help stays fast
    from dflash_diag.compare.report import RegimeComparison, RunAlignment


def slope(value: float | None) -> str:
    """A trend slope per 1k steps, ``-`` when there is none."""
    return "-" if value is None else f"{value:+.3g}/1k"


def regime_rows(comparison: RegimeComparison) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the regime table."""
    head = [
        "regime",
        "steps",
        "n",
        "tokens/step",
        "tok/s",
        "loss",
        "loss trend",
        "acc",
        "acc trend",
    ]
    rows = [
        [
            visible(r.name),
            step_span(r.start_step, r.end_step),
            str(r.n),
            format_number(r.tokens_per_step, ",.0f"),
            format_number(r.tok_per_sec, ",.0f"),
            format_number(r.loss),
            slope(r.loss_trend),
            format_number(r.acc),
            slope(r.acc_trend),
        ]
        for r in comparison.regimes
    ]
    return head, rows


def boundary_lines(comparison: RegimeComparison) -> list[str]:
    """One line per boundary (the jump) and an indented line with its explanation."""
    lines = []
    for b in comparison.boundaries:
        line = (
            f"{visible(b.run) + ': ' if b.run else ''}boundary at step {b.step} (last/first {comparison.k} steps, "
            f"{b.n_before}/{b.n_after} entries): loss {format_number(b.loss_before)} -> "
            f"{format_number(b.loss_after)} (x{format_number(b.loss_ratio, '.2f')}), acc {format_number(b.acc_before)} -> "
            f"{format_number(b.acc_after)} ({format_number(b.acc_delta, '+.4f')})"
        )
        if b.per_token_loss_ratio is not None:
            line += f", per-token loss x{b.per_token_loss_ratio:.2f}"
        lines.append(line)
        lines.append(f"  {b.explanation}")
    if not comparison.boundaries:
        lines.append("no regime boundary: nothing to explain")
    return lines


def short_count(value: float) -> str:
    """A token count in short form: 950, 65.5k, 1.31M, 2.1G."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.0f}"


def axis_unit(alignment: RunAlignment) -> str:
    """What the aligned windows count: steps or tokens."""
    return "steps" if alignment.x == "step" else "tokens"


def alignment_rows(alignment: RunAlignment) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the two-run table, one row per aligned window."""
    head = [
        axis_unit(alignment),
        "n A",
        "n B",
        "loss A",
        "loss B",
        "Δloss",
        "acc A",
        "acc B",
        "Δacc",
    ]
    rows = []
    for w in alignment.windows:
        end = w.end if alignment.last_x is None else min(w.end, max(alignment.last_x, w.start))
        if alignment.x == "step":  # the last window ends at the data, as converge's labels do
            span = step_span(round(w.start), round(min(w.end - 1, end)))
        else:
            span = f"{short_count(w.start)}-{short_count(end)}"
        rows.append(
            [
                span,
                str(w.n_a),
                str(w.n_b),
                format_number(w.loss_a),
                format_number(w.loss_b),
                format_number(w.loss_diff, "+.4f"),
                format_number(w.acc_a),
                format_number(w.acc_b),
                format_number(w.acc_diff, "+.4f"),
            ]
        )
    return head, rows


def legend(alignment: RunAlignment) -> str:
    """Which run is A and which B, and what they are aligned on."""
    a, b = (visible(n) for n in alignment.names)
    how = "tokens seen since each run's start" if alignment.x == "tokens" else "step"
    return f"A = {a}, B = {b}; aligned on {how}; Δ = B - A"


def merged(comparisons: Sequence[RegimeComparison]) -> RegimeComparison:
    """All runs' regimes in one table (boundaries stay per run)."""
    from dflash_diag.compare.report import RegimeComparison  # polars: not at import time

    first = comparisons[0]
    return RegimeComparison(
        regimes=[r for c in comparisons for r in c.regimes],
        boundaries=[b for c in comparisons for b in c.boundaries],
        split_on=first.split_on if len(comparisons) == 1 else None,
        k=first.k,
        notes=[n for c in comparisons for n in c.notes],
        diagnoses=[d for c in comparisons for d in (c.diagnoses or [None] * len(c.regimes))],
    )


def diagnosis_rows(comparison: RegimeComparison) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the per-regime diagnosis table: the numbers converge shows for the
    same records (acc of the last window, the primary tau, target progress, verdict)."""
    head = ["regime", "acc", "tau", "estimator", "target", "progress", "verdict", "ETA"]
    rows = []
    for regime, d in zip(comparison.regimes, comparison.diagnoses, strict=True):
        if d is None:
            continue
        a, v = d.acceptance, d.verdict
        target = (
            f"tau {a.target_tau:.2f}"
            if a.target_kind == "tau" and a.target_tau is not None
            else f"acc {a.target_acc:.3g}"
            if a.target_acc is not None
            else "-"
        )
        eta = (
            "-"
            if v.eta_steps is None
            else ("reached" if v.eta_steps == 0 else f"{v.eta_steps:,.0f} steps")
        )
        rows.append(
            [
                visible(regime.name),
                format_number(a.acc),
                format_number(a.tau, ".2f"),
                a.estimator or "-",
                target,
                format_percent(a.progress),
                v.status,
                eta,
            ]
        )
    return head, rows


def forecast_lines(comparison: RegimeComparison) -> list[str]:
    """One forecast line per regime (as converge prints it for the same records)."""
    lines = []
    for regime, d in zip(comparison.regimes, comparison.diagnoses or (), strict=False):
        if d is not None and (line := forecast_line(d.forecast)) is not None:
            lines.append(f"forecast {visible(regime.name)}: {line}")
    return lines

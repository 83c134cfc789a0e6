"""`dflash-diag compare LOG [LOG_B]`: training regimes in one log, or two runs side by side.

Thin over dflash_diag.compare: load, resolve restarts, analyse, then draw the result as rich
tables (a terminal), plain text (a pipe, ``NO_COLOR`` or ``--format plain``), JSON or markdown.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from dflash_diag.cli.common import (
    FieldOption,
    FormatOption,
    OutputFormat,
    PhaseChoice,
    PhaseOption,
    StrictOption,
    expand_log_args,
    fail,
    make_console,
    split_rank_logs,
    use_rich,
    user_errors,
)
from dflash_diag.errors import DiagError
from dflash_diag.number_format import format_number
from dflash_diag.ranks import RankSkew, skew_lines
from dflash_diag.safe_text import visible

if TYPE_CHECKING:  # the library (polars) is imported inside the functions: --help stays fast
    from dflash_diag.compare import CompareConfig, RegimeComparison, RunAlignment


class XAxis(str, enum.Enum):
    """What two runs are aligned on."""

    STEP = "step"
    TOKENS = "tokens"


# --------------------------------------------------------------------------------------------
# analysis entry points (library-level, used by the command and by tests)


def compare_log(
    path: str,
    config: CompareConfig,
    *,
    keep_all: bool = False,
    strict: bool = False,
    fields: dict[str, str] | None = None,
) -> RegimeComparison:
    """Load one log and compare its regimes (every record: regimes are what is compared).

    Raises:
        DiagError: a missing, unreadable or empty log.
    """
    from dflash_diag.compare import compare_regimes
    from dflash_diag.reader import load_log
    from dflash_diag.restarts import resolve_restarts

    log = load_log([path], strict=strict, fields=fields)
    frame, restarts = resolve_restarts(log.metrics, keep_all=keep_all)
    comparison = compare_regimes(frame, [e.fields for e in log.run_starts], config)
    if restarts:
        comparison.notes.append("restarts at steps " + ", ".join(str(r.step) for r in restarts))
    if log.issues.malformed:
        comparison.notes.append(f"{log.issues.malformed} malformed lines skipped")
    if log.issues.nonfinite_total:
        comparison.notes.append(f"{log.issues.nonfinite_total} NaN/Inf values left out of means")
    return comparison


def compare_two_runs(
    path_a: str,
    path_b: str,
    config: CompareConfig,
    *,
    x: str = "step",
    phase: str = "auto",
    keep_all: bool = False,
    strict: bool = False,
    fields: dict[str, str] | None = None,
) -> tuple[RunAlignment, list[RegimeComparison]]:
    """Load two runs, align them on ``x`` and compare each one's own regimes.

    Returns:
        The side-by-side windows and, per run, its `RegimeComparison` (names prefixed by run).

    Raises:
        DiagError: unreadable logs, nothing selected, or tokens that cannot be counted.
    """
    from dflash_diag.compare import align_runs, compare_regimes
    from dflash_diag.phase import select_phase
    from dflash_diag.reader import load_log
    from dflash_diag.restarts import resolve_restarts

    names = _run_names(path_a, path_b)
    frames, comparisons = [], []
    for path, name in zip((path_a, path_b), names):
        log = load_log([path], strict=strict, fields=fields)
        frame, _ = resolve_restarts(log.metrics, keep_all=keep_all)
        comparisons.append(
            _prefixed(compare_regimes(frame, [e.fields for e in log.run_starts], config), name)
        )
        selected, selection = select_phase(frame, phase)
        if selected.height == 0:
            raise DiagError(f"{path}: no records selected ({selection.reason})")
        frames.append(selected)
    tokens = tuple(c.regimes[-1].tokens_per_step if c.regimes else None for c in comparisons)
    try:
        alignment = align_runs(
            frames[0], frames[1], x=x, window=config.window, names=names, tokens_per_step=tokens
        )
    except ValueError as exc:
        raise DiagError(str(exc)) from None
    return alignment, comparisons


def _run_names(path_a: str, path_b: str) -> tuple[str, str]:
    a, b = Path(path_a).name, Path(path_b).name
    return (path_a, path_b) if a == b else (a, b)


def _prefixed(comparison: RegimeComparison, run: str) -> RegimeComparison:
    from dataclasses import replace

    regimes = [replace(r, name=f"{run}: {r.name}") for r in comparison.regimes]
    return replace(comparison, regimes=regimes)


# --------------------------------------------------------------------------------------------
# rendering


def _slope(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3g}/1k"


def _regime_rows(comparison: RegimeComparison) -> tuple[list[str], list[list[str]]]:
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
            f"{r.start_step}-{r.end_step}",
            str(r.n),
            format_number(r.tokens_per_step, ",.0f"),
            format_number(r.tok_per_sec, ",.0f"),
            format_number(r.loss),
            _slope(r.loss_trend),
            format_number(r.acc),
            _slope(r.acc_trend),
        ]
        for r in comparison.regimes
    ]
    return head, rows


def _boundary_lines(comparison: RegimeComparison) -> list[str]:
    lines = []
    for b in comparison.boundaries:
        line = (
            f"boundary at step {b.step} (last/first {comparison.k} steps, "
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


def _si(value: float) -> str:
    """A token count in short form: 950, 65.5k, 1.31M, 2.1G."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.0f}"


def _unit(alignment: RunAlignment) -> str:
    return "steps" if alignment.x == "step" else "tokens"


def _alignment_rows(alignment: RunAlignment) -> tuple[list[str], list[list[str]]]:
    head = [_unit(alignment), "n A", "n B", "loss A", "loss B", "Δloss", "acc A", "acc B", "Δacc"]
    rows = []
    for w in alignment.windows:
        if alignment.x == "step":
            span = f"{w.start:.0f}-{w.end - 1:.0f}"
        else:
            span = f"{_si(w.start)}-{_si(w.end)}"
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


def _legend(alignment: RunAlignment) -> str:
    a, b = (visible(n) for n in alignment.names)
    how = "tokens seen since each run's start" if alignment.x == "tokens" else "step"
    return f"A = {a}, B = {b}; aligned on {how}; Δ = B - A"


def _merged(comparisons: Sequence[RegimeComparison]) -> RegimeComparison:
    """All runs' regimes in one table (boundaries stay per run)."""
    from dflash_diag.compare import RegimeComparison

    first = comparisons[0]
    return RegimeComparison(
        regimes=[r for c in comparisons for r in c.regimes],
        boundaries=[b for c in comparisons for b in c.boundaries],
        split_on=first.split_on if len(comparisons) == 1 else None,
        k=first.k,
        notes=[n for c in comparisons for n in c.notes],
    )


def _rich_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for i, name in enumerate(head):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: log text is never markup
    return table


def render_rich(
    comparisons: Sequence[RegimeComparison], alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> RenderableType:
    """Rich tables of the regimes, the boundary explanations and the aligned windows (and the
    per-rank throughput skew when per-rank logs were given)."""
    parts: list[RenderableType] = []
    for comparison in [_merged(comparisons)]:
        head, rows = _regime_rows(comparison)
        split = f" (split on {comparison.split_on})" if comparison.split_on else ""
        parts.append(_rich_table(f"regimes{split}", head, rows))
        for line in _boundary_lines(comparison):
            style = "bold" if not line.startswith("  ") else ""
            parts.append(Text(line, style=style))
        for note in comparison.notes:
            parts.append(Text(note, style="dim"))
    if alignment is not None:
        head, rows = _alignment_rows(alignment)
        parts.append(
            _rich_table(
                f"two runs, windows of {_si(alignment.width)} {_unit(alignment)}", head, rows
            )
        )
        parts.append(Text(_legend(alignment), style="dim"))
    if ranks is not None:
        for label, text in skew_lines(ranks):
            parts.append(Text(f"{label}: {text}" if label else text, style="bold" if label else ""))
    return Group(*parts)


def render_markdown(
    comparisons: Sequence[RegimeComparison], alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> str:
    """The same content as markdown tables and paragraphs."""

    def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        out = [
            "| " + " | ".join(cell(h) for h in head) + " |",
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|",
        ]
        out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
        return out

    lines: list[str] = []
    for comparison in [_merged(comparisons)]:
        lines += ["## Regimes", ""] + table(*_regime_rows(comparison)) + [""]
        lines += ["## Boundaries", ""]
        lines += [f"- {line.strip()}" for line in _boundary_lines(comparison)] + [""]
        lines += [f"_{note}_" for note in comparison.notes]
    if alignment is not None:
        lines += ["## Two runs", "", _legend(alignment), ""] + table(*_alignment_rows(alignment))
    if ranks is not None:
        lines += ["", "## Ranks", ""] + [f"- {text.strip()}" for _, text in skew_lines(ranks)]
    return "\n".join(lines).rstrip() + "\n"


def to_json(
    comparisons: Sequence[RegimeComparison], alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> dict[str, Any]:
    """The JSON contract: ``regimes`` and ``boundaries`` (all runs), plus ``alignment``, plus
    ``ranks`` when per-rank logs were given."""
    out: dict[str, Any] = {"regimes": [], "boundaries": [], "notes": []}
    for comparison in comparisons:
        d = comparison.to_dict()
        out["regimes"] += d["regimes"]
        out["boundaries"] += d["boundaries"]
        out["notes"] += d["notes"]
        out.setdefault("k", d["k"])
        out.setdefault("split_on", d["split_on"])
    if alignment is not None:
        out["alignment"] = alignment.to_dict()
    if ranks is not None:
        out["ranks"] = ranks.to_json_dict()
    return out


def _json_default(value: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dump_json(data: dict[str, Any]) -> str:
    """JSON text with NaN/Inf written as null (strict JSON for scripts)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(data), indent=2, default=_json_default, allow_nan=False)


# --------------------------------------------------------------------------------------------
# the command


def compare(
    logs: Annotated[
        list[str],
        typer.Argument(
            help="One log (its regimes) or two logs (two runs); - for standard input. A quoted "
            "glob is expanded here; per-rank logs (*.rank{N}.jsonl) add the throughput skew.",
            metavar="LOG [LOG_B]",
        ),
    ],
    k: Annotated[int, typer.Option("--k", help="Steps on each side of a boundary.")] = 50,
    x: Annotated[XAxis, typer.Option("--x", help="Align two runs on step or tokens seen.")] = (
        XAxis.STEP
    ),
    window: Annotated[
        int, typer.Option("--window", "-w", help="Steps per window (trends, alignment).")
    ] = 50,
    phase: PhaseOption = PhaseChoice.AUTO,
    keep_all: Annotated[
        bool, typer.Option("--keep-all", help="Keep entries orphaned by restarts.")
    ] = False,
    fields: FieldOption = None,
    strict: StrictOption = False,
    fmt: FormatOption = OutputFormat.AUTO,
) -> None:
    """Compare training regimes in one log (old script vs new pipeline), or two runs.

    The jump at each regime boundary is measured over --k steps on each side and explained when
    it matches a loss-normalisation factor of the configs (data-parallel size, gradient
    accumulation, token budget). Two runs are aligned on --x (step or tokens seen) and shown
    window by window with their difference; --phase selects their records.
    """
    with user_errors():
        from dflash_diag.compare import CompareConfig
        from dflash_diag.ranks import rank_skew
        from dflash_diag.schema import parse_field_map

        logs, rank_logs, _ = split_rank_logs(expand_log_args(logs))
        if len(logs) not in (1, 2):
            fail(f"compare takes one log or two (plus per-rank logs), got {len(logs)}")
        ranks = rank_skew(rank_logs) if rank_logs else None
        if fmt is OutputFormat.CSV:
            fail("compare has no csv output (use json, markdown, text or rich)")
        try:
            config = CompareConfig(k=k, window=window)
        except ValueError as exc:
            raise DiagError(str(exc)) from None
        field_map = parse_field_map(fields or [])
        if len(logs) == 1:
            comparisons = [
                compare_log(logs[0], config, keep_all=keep_all, strict=strict, fields=field_map)
            ]
            alignment = None
        else:
            alignment, comparisons = compare_two_runs(
                logs[0],
                logs[1],
                config,
                x=x.value,
                phase=phase.value,
                keep_all=keep_all,
                strict=strict,
                fields=field_map,
            )
        if fmt is OutputFormat.JSON:
            typer.echo(dump_json(to_json(comparisons, alignment, ranks)))
            return
        if fmt is OutputFormat.MARKDOWN:
            typer.echo(render_markdown(comparisons, alignment, ranks), nl=False)
            return
        console = make_console()
        if not use_rich(fmt, console):
            # plain text: no colour, and no terminal width to fit, so wide enough for the tables
            console = Console(color_system=None, force_terminal=False, highlight=False, width=140)
        console.print(render_rich(comparisons, alignment, ranks))

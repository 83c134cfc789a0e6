"""`dflash-diag compare LOG [LOG_B]`: training regimes in one log, or two runs side by side.

Thin over :mod:`dflash_diag.compare` (load, resolve restarts, analyse) and :mod:`dflash_diag.render`
(rich tables on a terminal, plain text on a pipe, ``NO_COLOR`` or ``--format text``, JSON,
markdown or CSV).
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from dflash_diag.analysis import defaults
from dflash_diag.cli.common import (
    FormatOption,
    OutputFormat,
    fail,
    make_console,
    use_rich,
    user_errors,
)
from dflash_diag.cli.options import READING, TUNING, Given, Group, command
from dflash_diag.errors import DiagError
from dflash_diag.read.files import expand_log_args, split_rank_logs


class XAxis(str, enum.Enum):
    """What two runs are aligned on."""

    STEP = "step"
    TOKENS = "tokens"


# --------------------------------------------------------------------------------------------
# the command


@command(
    "logs",
    "k",
    "x",
    "window",
    "phase",
    "from_step",
    "to_step",
    "keep_all",
    Group(TUNING),
    Group(READING),
    "fmt",
)
def compare(
    logs: Annotated[
        list[str],
        typer.Argument(
            help="One log (its regimes) or two logs (two runs); - for standard input. A quoted "
            "glob is expanded here; per-rank logs (*.rank{N}.jsonl) add the throughput skew.",
            metavar="LOG [LOG_B]",
        ),
    ],
    k: Annotated[
        int, typer.Option("--k", help="Steps on each side of a boundary.")
    ] = defaults.BOUNDARY_K,
    x: Annotated[XAxis, typer.Option("--x", help="Align two runs on step or tokens seen.")] = (
        XAxis.STEP
    ),
    *,
    options: Given,
    fmt: FormatOption = OutputFormat.AUTO,
) -> None:
    """Compare training regimes in one log (old script vs new pipeline), or two runs.

    The jump at each regime boundary is measured over --k steps on each side and explained when
    it matches a loss-normalisation factor of the configs (data-parallel size, gradient
    accumulation, token budget). Two runs are aligned on --x (step or tokens seen) and shown
    window by window with their difference; --phase selects their records. --from-step and
    --to-step keep the records of those steps only (one log: the regimes found within them; two
    runs: both runs).
    """
    with user_errors():
        # each renderer where it is used (see converge)
        from dflash_diag.analysis.rank_skew import rank_skew
        from dflash_diag.compare.report import CompareConfig
        from dflash_diag.compare.runs import compare_log, compare_two_runs

        diagnosis = options.diagnosis()
        logs, rank_logs, _ = split_rank_logs(expand_log_args(logs))
        if len(logs) not in (1, 2):
            fail(f"compare takes one log or two (plus per-rank logs), got {len(logs)}")
        ranks = rank_skew(rank_logs) if rank_logs else None
        try:
            config = CompareConfig(k=k, window=diagnosis.window)
        except ValueError as exc:
            raise DiagError(str(exc)) from None
        read = options.read()
        read.load_kwargs(len(logs))  # a bad --preset/--field count fails before any reading
        if len(logs) == 1:
            comparisons = [
                compare_log(
                    logs[0],
                    config,
                    keep_all=diagnosis.keep_all,
                    strict=options["strict"],
                    read=read,
                    diagnosis=diagnosis,
                )
            ]
            alignment = None
        else:
            alignment, comparisons = compare_two_runs(
                logs[0],
                logs[1],
                config,
                x=x.value,
                phase=diagnosis.phase,
                keep_all=diagnosis.keep_all,
                strict=options["strict"],
                read=read,
                diagnosis=diagnosis,
            )
        if fmt is OutputFormat.JSON:
            from dflash_diag.render.json import render_compare_json

            typer.echo(render_compare_json(comparisons, alignment, ranks))
            return
        if fmt is OutputFormat.MARKDOWN:
            from dflash_diag.render.markdown import render_compare_markdown

            typer.echo(render_compare_markdown(comparisons, alignment, ranks), nl=False)
            return
        if fmt is OutputFormat.CSV:
            from dflash_diag.render.csv import render_compare_csv

            typer.echo(render_compare_csv(comparisons, alignment), nl=False)
            return
        console = make_console()
        from dflash_diag.render.rich import render_compare_plain, render_compare_rich

        if not use_rich(fmt, console):
            # plain text: no colour, at the terminal's width (COLUMNS when not a terminal)
            typer.echo(
                render_compare_plain(comparisons, alignment, ranks, width=console.width), nl=False
            )
            return
        console.print(render_compare_rich(comparisons, alignment, ranks, width=console.width))

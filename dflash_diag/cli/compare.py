"""`dflash-diag compare LOG [LOG_B]`: training regimes in one log, or two runs side by side.

Thin over :mod:`dflash_diag.compare` (load, resolve restarts, analyse) and :mod:`dflash_diag.render`
(rich tables on a terminal, plain text on a pipe, ``NO_COLOR`` or ``--format plain``, JSON or
markdown).
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.console import Console

from dflash_diag.cli.common import (
    FieldOption,
    FormatOption,
    InputFormatOption,
    OutputFormat,
    PhaseChoice,
    PhaseOption,
    PresetOption,
    StrictOption,
    fail,
    make_console,
    use_rich,
    user_errors,
)
from dflash_diag.cli.validate import check_numbers
from dflash_diag.errors import DiagError
from dflash_diag.read.files import expand_log_args, split_rank_logs


class XAxis(str, enum.Enum):
    """What two runs are aligned on."""

    STEP = "step"
    TOKENS = "tokens"


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
    input_format: InputFormatOption = None,
    preset: PresetOption = None,
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
        from dflash_diag.compare.report import CompareConfig
        from dflash_diag.compare.runs import compare_log, compare_two_runs
        from dflash_diag.read.formats.load import ReadOptions
        from dflash_diag.read.ranks import rank_skew
        from dflash_diag.render.json import compare_json, dump_json
        from dflash_diag.render.markdown import render_compare_markdown
        from dflash_diag.render.rich import render_compare_rich

        check_numbers({"--k": k, "--window": window})
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
        read = ReadOptions(input_format, tuple(preset or ()), tuple(fields or ()))
        read.load_kwargs(len(logs))  # a bad --preset/--field count fails before any reading
        if len(logs) == 1:
            comparisons = [
                compare_log(logs[0], config, keep_all=keep_all, strict=strict, read=read)
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
                read=read,
            )
        if fmt is OutputFormat.JSON:
            typer.echo(dump_json(compare_json(comparisons, alignment, ranks)))
            return
        if fmt is OutputFormat.MARKDOWN:
            typer.echo(render_compare_markdown(comparisons, alignment, ranks), nl=False)
            return
        console = make_console()
        if not use_rich(fmt, console):
            # plain text: no colour, and no terminal width to fit, so wide enough for the tables
            console = Console(color_system=None, force_terminal=False, highlight=False, width=140)
        console.print(render_compare_rich(comparisons, alignment, ranks))

"""``dflash-diag converge LOG...``: is this DFlash training run converging? (thin over the library)"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dflash_diag.cli.common import (
    EXIT_FAIL_ON,
    FailOn,
    FormatOption,
    LogsArgument,
    OutputFormat,
    fails_on,
    make_console,
    print_notes,
    use_rich,
    user_errors,
)
from dflash_diag.cli.options import READING, TUNING, Given, Group, command
from dflash_diag.read.files import expand_log_args, split_rank_logs


@command(
    "logs",
    "phase",
    "from_step",
    "to_step",
    "window",
    Group(TUNING),
    "keep_all",
    Group(READING),
    "fmt",
    "rows",
    "fail_on",
)
def converge(
    logs: LogsArgument,
    *,
    options: Given,
    fmt: FormatOption = OutputFormat.AUTO,
    rows: Annotated[
        int,
        typer.Option("--rows", min=0, help="Newest windows shown in rich/text tables (0: all)."),
    ] = 40,
    fail_on: Annotated[
        list[FailOn] | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when the verdict is this, or the forecast does not reach the "
            "target by the planned end (target-unreachable); repeatable, for cron or CI watchdogs.",
        ),
    ] = None,
) -> None:
    """Windows with trend arrows, lr schedule position, acceptance estimate and a verdict."""
    with user_errors():
        # Imported here so that `dflash-diag --help` does not pay for polars; each renderer (and
        # the rank skew) where it is used: the others cost a JSON run about 0.05 s of CPU.
        from dflash_diag.converge.report import build_converge_report
        from dflash_diag.read.formats.load import load_log

        config = options.diagnosis()
        # Per-position lists are read for the last window only (fetch_lists): most of the parse.
        main, rank_logs, rank_note = split_rank_logs(expand_log_args(logs))
        read = options.read()
        log = load_log(main, strict=options["strict"], lists=False, **read.load_kwargs(len(main)))
        print_notes(log.notes)
        report = build_converge_report(log, config)
        if rank_logs:
            from dflash_diag.analysis.rank_skew import rank_skew

            report.ranks = rank_skew(rank_logs, config.from_step, config.to_step)
            report.sources += [r.path for r in rank_logs if r.path not in report.sources]
        if rank_note:
            report.notes.append(rank_note)

        # JSON and CSV are written a piece at a time: the text of 20,000 windows, its columns
        # and its encoded bytes are never held at once (about 15 MiB at a million records).
        if fmt is OutputFormat.JSON:
            from dflash_diag.render.json import json_pieces

            sys.stdout.writelines(json_pieces(report))
        elif fmt is OutputFormat.MARKDOWN:
            from dflash_diag.render.markdown import render_markdown

            sys.stdout.write(render_markdown(report))
        elif fmt is OutputFormat.CSV:
            from dflash_diag.render.csv import csv_pieces

            sys.stdout.writelines(csv_pieces(report))
        elif use_rich(fmt, console := make_console()):
            from dflash_diag.render.rich import render_rich

            render_rich(report, console, max_rows=rows or None)
        else:
            from dflash_diag.render.text import render_text

            sys.stdout.write(render_text(report, max_rows=rows or None, width=console.width))
        sys.stdout.flush()
    if fails_on(fail_on, report):
        raise typer.Exit(EXIT_FAIL_ON)

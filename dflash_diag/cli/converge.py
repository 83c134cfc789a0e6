"""``dflash-diag converge LOG...``: is this DFlash training run converging? (thin over the library)"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dflash_diag.analysis import defaults
from dflash_diag.cli.common import (
    EXIT_FAIL_ON,
    AlphaOption,
    BaselineTauOption,
    BlockSizeOption,
    EndStepOption,
    FailOn,
    FieldOption,
    FormatOption,
    FromStepOption,
    InputFormatOption,
    KeepAllOption,
    LogsArgument,
    LossThresholdOption,
    NoCacheOption,
    NoiseAwareOption,
    OutputFormat,
    PeakLrOption,
    PhaseChoice,
    PhaseOption,
    PresetOption,
    ScheduleOption,
    StrictOption,
    TargetAccOption,
    TargetLossOption,
    TargetTauOption,
    ThresholdOption,
    ToStepOption,
    WindowOption,
    diagnosis_config,
    fails_on,
    make_console,
    parse_window,
    print_notes,
    use_rich,
    user_errors,
)
from dflash_diag.cli.validate import check_numbers
from dflash_diag.read.files import expand_log_args, split_rank_logs


def converge(
    logs: LogsArgument,
    phase: PhaseOption = PhaseChoice.AUTO,
    from_step: FromStepOption = None,
    to_step: ToStepOption = None,
    window: WindowOption = "auto",
    threshold: ThresholdOption = defaults.ACC_THRESHOLD,
    loss_threshold: LossThresholdOption = defaults.LOSS_THRESHOLD,
    noise_aware: NoiseAwareOption = False,
    peak_lr: PeakLrOption = None,
    block_size: BlockSizeOption = None,
    target_acc: TargetAccOption = defaults.TARGET_ACC,
    target_tau: TargetTauOption = None,
    baseline_tau: BaselineTauOption = None,
    target_loss: TargetLossOption = None,
    end_step: EndStepOption = None,
    schedule: ScheduleOption = None,
    alpha: AlphaOption = defaults.ALPHA,
    keep_all: KeepAllOption = False,
    fields: FieldOption = None,
    input_format: InputFormatOption = None,
    preset: PresetOption = None,
    strict: StrictOption = False,
    no_cache: NoCacheOption = False,
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
        # Imported here so that `dflash-diag --help` does not pay for polars.
        from dflash_diag.analysis.rank_skew import rank_skew
        from dflash_diag.converge.report import build_converge_report
        from dflash_diag.read.formats.load import ReadOptions
        from dflash_diag.read.jsonl import load_log
        from dflash_diag.render.csv import render_csv
        from dflash_diag.render.json import render_json
        from dflash_diag.render.markdown import render_markdown
        from dflash_diag.render.rich import render_rich
        from dflash_diag.render.text import render_text

        window_size = parse_window(window)
        check_numbers(
            {
                "--from-step": from_step,
                "--to-step": to_step,
                "--threshold": threshold,
                "--loss-threshold": loss_threshold,
                "--peak-lr": peak_lr,
                "--block-size": block_size,
                "--target-acc": target_acc,
                "--target-tau": target_tau,
                "--baseline-tau": baseline_tau,
                "--alpha": alpha,
                "--rows": rows,
                "--target-loss": target_loss,
                "--end-step": end_step,
            }
        )
        config = diagnosis_config(
            phase=phase.value,
            from_step=from_step,
            to_step=to_step,
            window=window_size,
            keep_all=keep_all,
            peak_lr=peak_lr,
            threshold=threshold,
            loss_threshold=loss_threshold,
            noise_aware=noise_aware,
            block_size=block_size,
            target_acc=target_acc,
            target_tau=target_tau,
            baseline_tau=baseline_tau,
            alpha=alpha,
            end_step=end_step,
            schedule=schedule,
            target_loss=target_loss,
        )
        # Per-position lists are read for the last window only (fetch_lists): most of the parse.
        main, rank_logs, rank_note = split_rank_logs(expand_log_args(logs))
        read = ReadOptions(
            input_format, tuple(preset or ()), tuple(fields or ()), cache=not no_cache
        )
        log = load_log(main, strict=strict, lists=False, **read.load_kwargs(len(main)))
        print_notes(log.notes)
        report = build_converge_report(log, config)
        if rank_logs:
            report.ranks = rank_skew(rank_logs, from_step, to_step)
            report.sources += [r.path for r in rank_logs if r.path not in report.sources]
        if rank_note:
            report.notes.append(rank_note)

        console = make_console()
        if fmt is OutputFormat.JSON:
            sys.stdout.write(render_json(report))
        elif fmt is OutputFormat.MARKDOWN:
            sys.stdout.write(render_markdown(report))
        elif fmt is OutputFormat.CSV:
            sys.stdout.write(render_csv(report))
        elif use_rich(fmt, console):
            render_rich(report, console, max_rows=rows or None)
        else:
            sys.stdout.write(render_text(report, max_rows=rows or None, width=console.width))
        sys.stdout.flush()
    if fails_on(fail_on, report):
        raise typer.Exit(EXIT_FAIL_ON)

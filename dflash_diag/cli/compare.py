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
    AlphaOption,
    BaselineTauOption,
    BlockSizeOption,
    EndStepOption,
    FieldOption,
    FormatOption,
    FromStepOption,
    InputFormatOption,
    KeepAllOption,
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
    fail,
    make_console,
    parse_window,
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
    k: Annotated[
        int, typer.Option("--k", help="Steps on each side of a boundary.")
    ] = defaults.BOUNDARY_K,
    x: Annotated[XAxis, typer.Option("--x", help="Align two runs on step or tokens seen.")] = (
        XAxis.STEP
    ),
    window: WindowOption = "auto",
    phase: PhaseOption = PhaseChoice.AUTO,
    from_step: FromStepOption = None,
    to_step: ToStepOption = None,
    keep_all: KeepAllOption = False,
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
    fields: FieldOption = None,
    input_format: InputFormatOption = None,
    preset: PresetOption = None,
    strict: StrictOption = False,
    no_cache: NoCacheOption = False,
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
        from dflash_diag.analysis.rank_skew import rank_skew
        from dflash_diag.compare.report import CompareConfig
        from dflash_diag.compare.runs import compare_log, compare_two_runs
        from dflash_diag.read.formats.load import ReadOptions
        from dflash_diag.render.json import compare_json, dump_json
        from dflash_diag.render.markdown import render_compare_markdown
        from dflash_diag.render.rich import render_compare_plain, render_compare_rich

        window_size = parse_window(window)
        check_numbers(
            {
                "--k": k,
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
                "--target-loss": target_loss,
                "--end-step": end_step,
            }
        )
        logs, rank_logs, _ = split_rank_logs(expand_log_args(logs))
        if len(logs) not in (1, 2):
            fail(f"compare takes one log or two (plus per-rank logs), got {len(logs)}")
        ranks = rank_skew(rank_logs) if rank_logs else None
        diagnosis = diagnosis_config(
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
        try:
            config = CompareConfig(k=k, window=window_size)
        except ValueError as exc:
            raise DiagError(str(exc)) from None
        read = ReadOptions(
            input_format, tuple(preset or ()), tuple(fields or ()), cache=not no_cache
        )
        read.load_kwargs(len(logs))  # a bad --preset/--field count fails before any reading
        if len(logs) == 1:
            comparisons = [
                compare_log(
                    logs[0],
                    config,
                    keep_all=keep_all,
                    strict=strict,
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
                phase=phase.value,
                keep_all=keep_all,
                strict=strict,
                read=read,
                diagnosis=diagnosis,
            )
        if fmt is OutputFormat.JSON:
            typer.echo(dump_json(compare_json(comparisons, alignment, ranks)))
            return
        if fmt is OutputFormat.MARKDOWN:
            typer.echo(render_compare_markdown(comparisons, alignment, ranks), nl=False)
            return
        if fmt is OutputFormat.CSV:
            from dflash_diag.render.csv import render_compare_csv

            typer.echo(render_compare_csv(comparisons, alignment), nl=False)
            return
        console = make_console()
        if not use_rich(fmt, console):
            # plain text: no colour, at the terminal's width (COLUMNS when not a terminal)
            typer.echo(
                render_compare_plain(comparisons, alignment, ranks, width=console.width), nl=False
            )
            return
        console.print(render_compare_rich(comparisons, alignment, ranks, width=console.width))

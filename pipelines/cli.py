"""``dflash-train``: the training programs' command line (thin: parse, build a config, call).

    dflash-train sync      the lock-step trainer (legacy log records)
    dflash-train pipeline  the CSP pipeline (schema v1 records with throughput and stage stats)
    dflash-train eval      real acceptance length of a checkpoint

Bad flags or config values are reported as one ``dflash-train: error: ...`` line on stderr with
exit code 2, before any model is loaded; a run that fails exits 1 with the error on one line;
a run stopped by SIGINT/SIGTERM checkpoints and exits 128 + the signal number.
"""

from __future__ import annotations

import inspect
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from dflash_diag.cli.typer_parts import FlagHelp, version_option

from .config import (
    RESUME_SCHEDULE_MODES,
    SCHEDULE_KINDS,
    PipelineConfig,
    TrainConfig,
    default_of,
)
from .errors import shorten_words

PROG = "dflash-train"


class _Group(FlagHelp, TyperGroup):
    pass


class _Command(FlagHelp, TyperCommand):
    pass


app = typer.Typer(
    name=PROG,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train a DFlash drafter: lock-step (sync) or CSP pipeline; measure a checkpoint (eval).",
    cls=_Group,
)


VersionOption = version_option(PROG)


@app.callback()
def _root(
    show_version: VersionOption = False,
) -> None:
    """Train a DFlash drafter: lock-step (sync) or CSP pipeline; measure a checkpoint (eval)."""


class UsageFailure(Exception):
    """Bad user input: one line, exit code 2."""


# -- options --------------------------------------------------------------------------------------
# One table declares the training options of both programs; each option's default is the config
# dataclass's (``default_of``), the one place defaults are defined, so the help cannot disagree
# with the config. Only options given on the command line override the file (click tells which:
# ``ParameterSource``), so the file still wins over the dataclass defaults.


@dataclass(frozen=True)
class Flag:
    """One training option: its parameter name, the config field it sets, its declarations."""

    name: str
    field: str
    decls: tuple[str, ...]
    type: Any
    help: str
    metavar: str | None = None
    pipeline_only: bool = False


#: What a None default means, for the help (a None default is never shown as "None").
NONE_MEANS = {
    "resume": "none",
    "warmup_steps": "warmup_ratio of the schedule",
    "epochs": "none: --max-steps ends the run",
    "target_devices": "the drafter's device",
    "progress": "a bar on a terminal, lines elsewhere",
}

FLAGS: tuple[Flag, ...] = (
    Flag(
        "target",
        "target",
        ("--target",),
        str,
        "Target model: local HF directory, hub id, or bundled (the tiny target).",
    ),
    Flag(
        "data",
        "data",
        ("--data",),
        str,
        "Training data directory (bundled: the tiny target's dataset).",
    ),
    Flag("device", "device", ("--device",), str, "Drafter device: cpu, cuda, cuda:N."),
    Flag(
        "max_steps",
        "max_steps",
        ("--max-steps",),
        int,
        "Train until this optimizer step (absolute; resumed runs continue).",
    ),
    Flag(
        "epochs",
        "epochs",
        ("--epochs",),
        float,
        "Train until this many data epochs instead (absolute, like --max-steps).",
    ),
    Flag(
        "log",
        "log",
        ("--log", "--log-file"),
        str,
        "JSONL log to append to. Under torchrun "
        "write --log-file: torchrun takes --log for its own options.",
    ),
    Flag("ckpt_dir", "ckpt_dir", ("--ckpt-dir",), str, "Where step-NNNNNN/ checkpoints go."),
    Flag(
        "ckpt_every",
        "ckpt_every",
        ("--ckpt-every",),
        int,
        "Checkpoint every N steps (0: only at the end).",
    ),
    Flag(
        "resume",
        "resume",
        ("--resume",),
        str,
        "Checkpoint directory to continue from (written by either program).",
    ),
    Flag(
        "resume_schedule",
        "resume_schedule",
        ("--resume-schedule",),
        str,
        "With --resume: "
        "continue the checkpoint's lr schedule where it stopped, or restart this run's schedule "
        "(warmup included) from the resumed step. AdamW moments are kept either way.",
        metavar="|".join(RESUME_SCHEDULE_MODES),
    ),
    Flag("seed", "seed", ("--seed",), int, "Seed for data order, anchors and initialisation."),
    Flag(
        "token_budget",
        "token_budget",
        ("--token-budget",),
        int,
        "Tokens (padding included) per micro-batch.",
    ),
    Flag(
        "lr",
        "peak_lr",
        ("--lr",),
        float,
        "Peak learning rate (AdamW), reached at the end of the warmup (config key peak_lr).",
    ),
    Flag(
        "min_lr",
        "min_lr",
        ("--min-lr",),
        float,
        "Floor the decay reaches at the end of the schedule.",
    ),
    Flag("warmup_steps", "warmup_steps", ("--warmup-steps",), int, "Warmup length in steps."),
    Flag(
        "schedule",
        "schedule",
        ("--schedule",),
        str,
        "Shape of the lr decay after the warmup.",
        metavar="|".join(SCHEDULE_KINDS),
    ),
    Flag(
        "block_size",
        "drafter.block_size",
        ("--block-size",),
        int,
        "Drafter block size (drafter table: block_size; a resumed run keeps its checkpoint's).",
    ),
    Flag(
        "draft_layers",
        "drafter.num_draft_layers",
        ("--draft-layers",),
        int,
        "Drafter decoder "
        "layers (drafter table: num_draft_layers; a resumed run keeps its checkpoint's).",
    ),
    Flag(
        "log_all_ranks",
        "log_all_ranks",
        ("--log-all-ranks/--no-log-all-ranks",),
        bool,
        "Every rank also writes <log stem>.rank{N}.jsonl beside the log, with its own "
        "throughput (torchrun runs).",
    ),
    Flag(
        "progress",
        "progress",
        ("--progress/--no-progress",),
        bool,
        "Force the progress bar, or silence progress (the closing summary stays).",
    ),
    Flag(
        "progress_every",
        "progress_every",
        ("--progress-every",),
        int,
        "Off a terminal: a progress line every N steps (0: by time only)...",
    ),
    Flag(
        "progress_seconds",
        "progress_seconds",
        ("--progress-seconds",),
        float,
        "... or every T seconds, whichever comes first (0: by steps only).",
    ),
    Flag(
        "grad_accum",
        "grad_accum",
        ("--grad-accum",),
        int,
        "Micro-batches per optimizer step.",
        pipeline_only=True,
    ),
    Flag(
        "target_devices",
        "target_devices",
        ("--target-devices",),
        str,
        "Comma-separated devices, one target worker each.",
        pipeline_only=True,
    ),
    Flag(
        "eval_every",
        "eval_every",
        ("--eval-every",),
        int,
        "Measure real tau every N steps (0: never).",
        pipeline_only=True,
    ),
)


def flags_of(program: str) -> list[Flag]:
    """The training options of ``sync`` or ``pipeline``, in help order."""
    return [f for f in FLAGS if program == "pipeline" or not f.pipeline_only]


def _parameter(cls: type, flag: Flag) -> inspect.Parameter:
    default = default_of(cls, flag.field)
    show: bool | str = True if default is not None else NONE_MEANS[flag.field]
    if isinstance(default, list):  # target_devices given in the file: shown as on the command line
        default = ",".join(default)
    metavar = (
        "" if flag.type is bool and flag.metavar is None else flag.metavar
    )  # a flag: no <bool>
    option = typer.Option(default, *flag.decls, help=flag.help, show_default=show, metavar=metavar)
    return inspect.Parameter(
        flag.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=flag.type | None
    )


def given_flags(ctx: typer.Context, program: str, params: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line, as config overrides (``--lr`` is ``peak_lr``)."""
    out = {}
    for flag in flags_of(program):
        # By name: typer may carry its own copy of click's ParameterSource enum.
        source = ctx.get_parameter_source(flag.name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out[flag.field] = params[flag.name]
    return out


def _training_command(program: str, cls: type, doc: str) -> Callable[..., None]:
    def command(ctx: typer.Context, config: Path | None = None, **params: Any) -> None:
        _run(program, _build(cls, config, given_flags(ctx, program, params)))

    config = inspect.Parameter(
        "config",
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Path | None,
        default=typer.Option(
            None, "--config", help="TOML file of config values (flags override it)."
        ),
    )
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
            ),
            config,
            *(_parameter(cls, f) for f in flags_of(program)),
        ]
    )
    command.__doc__ = doc
    command.__name__ = program
    return command


def _build(cls: type, config: Path | None, flags: dict[str, Any]):
    from .config import build_config, requested_drafter

    try:
        cfg = build_config(cls, config, flags)
        if cfg.resume is not None:  # the checkpoint's drafter is trained: refuse other shapes now
            from .checkpoints import checkpoint_config
            from .errors import TrainingError
            from .preflight import check_path_name
            from .resume import check_resume_drafter

            try:
                check_path_name(cfg.resume, "--resume")
                check_resume_drafter(
                    cfg.resume, checkpoint_config(cfg.resume), requested_drafter(cls, config, flags)
                )
            except TrainingError as e:
                raise UsageFailure(str(e)) from None
        return cfg
    except ValueError as e:
        raise UsageFailure(str(e)) from None


def _run(program: str, cfg: Any) -> None:
    from transformers.utils import logging as hf_logging

    from .csp import StopRequest, install_stop_handlers
    from .errors import TrainingError

    hf_logging.disable_progress_bar()  # stderr is for our own progress bar and errors
    stop = StopRequest()
    restore = install_stop_handlers(stop)
    try:
        if program == "sync":
            from .sync_trainer import run_sync

            result = run_sync(cfg, stop)
        else:
            from .async_pipeline import run_pipeline

            result = run_pipeline(cfg, stop)
    except TrainingError as e:
        raise UsageFailure(str(e)) from None
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted twice: stopped without a final checkpoint", file=sys.stderr)
        raise typer.Exit(128 + (stop.signum or signal.SIGINT)) from None
    finally:
        restore()
    summary = result.summary
    if summary is not None:
        for line in summary.lines():
            print(line, file=sys.stderr)
    # The last line says how it ended and where to resume from.
    where = ""
    if summary is not None and result.reason != "max_steps":
        where = (
            f"; last good checkpoint: {summary.checkpoint}"
            if summary.checkpoint
            else "; no checkpoint to resume from"
        )
    if result.error:
        print(shorten_words(f"{PROG}: error: {result.error}{where}"), file=sys.stderr)
    elif result.reason != "max_steps":
        print(f"{PROG}: stopped at step {result.step} ({result.reason}){where}", file=sys.stderr)
    raise typer.Exit(result.exit_code)


app.command("sync", cls=_Command)(
    _training_command(
        "sync",
        TrainConfig,
        "Lock-step trainer: batch, target forward, drafter forward/backward, step; one at a time.",
    )
)
app.command("pipeline", cls=_Command)(
    _training_command(
        "pipeline",
        PipelineConfig,
        "CSP pipeline: loader -> target workers -> drafter, overlapped through bounded channels.",
    )
)


@app.command("eval", cls=_Command)
def eval_(
    drafter: Annotated[str, typer.Option("--drafter", help="Checkpoint directory to measure.")],
    target: Annotated[
        str | None,
        typer.Option("--target", help="Target model (default: the bundled tiny target)."),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data", help="Directory with eval_prompts.jsonl (default: the bundled dataset)."
        ),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="Device of drafter and target.")] = "cpu",
    prompts: Annotated[
        int, typer.Option("--prompts", help="Prompts decoded from each prompt file (the first N).")
    ] = default_of(TrainConfig, "eval_prompts"),
    new_tokens: Annotated[
        int | None,
        typer.Option(
            "--new-tokens",
            help="Horizon: tokens generated per prompt at most.",
            show_default="the longest training response of --data",
        ),
    ] = default_of(TrainConfig, "eval_new_tokens"),
    prompts_file: Annotated[
        list[str] | None,
        typer.Option(
            "--prompts-file",
            help='JSONL prompt set ({"input_ids": [...], "benchmark": ...} per '
            "line; repeatable: tau is also split by benchmark). Default: the data's eval prompts.",
            metavar="FILE",
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("-f", "--format", help="text, or json for scripts.", metavar="text|json")
    ] = "text",
    log: Annotated[
        str | None, typer.Option("--log", help="Also append an eval record to this JSONL log.")
    ] = None,
) -> None:
    """Real acceptance length (tau) of a checkpoint, by speculative decoding on held-out prompts."""
    from transformers.utils import logging as hf_logging

    from .errors import TrainingError
    from .eval_report import render_json, render_text
    from .evaluate import EvalRequest, eval_record, evaluate_checkpoint

    if fmt not in ("text", "json"):
        raise UsageFailure(f"--format must be text or json, got {fmt!r}")
    hf_logging.disable_progress_bar()
    try:
        req = EvalRequest(
            drafter=drafter,
            target=target,
            data=data,
            device=device,
            prompts=prompts,
            new_tokens=new_tokens,
            prompt_files=list(prompts_file or []),
        )
        report = evaluate_checkpoint(req)
    except (TrainingError, ValueError) as e:
        raise UsageFailure(str(e)) from None
    if fmt == "json":
        print(render_json(report))
    else:
        print("\n".join(render_text(report)))
    if log is not None:
        from .logwriter import JsonlLog

        try:
            with JsonlLog(log) as f:
                f.write(eval_record(report))
        except OSError as e:  # LogWriteError: one line naming the file
            raise UsageFailure(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns (and, as a script, exits with) the process exit code."""
    try:
        code = app(args=argv, prog_name=PROG, standalone_mode=False)
    except UsageFailure as e:
        print(shorten_words(f"{PROG}: error: {e}"), file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print(f"{PROG}: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as e:  # typer's own usage errors (bad option, bad value)
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare `dflash-train`: the help is printed
            return 0
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        ctx = getattr(e, "ctx", None)  # the subcommand whose options were wrong, when known
        where = ctx.command_path if ctx is not None and ctx.command_path else PROG
        hint = f" (see {where} --help)" if "--help" not in message else ""
        print(shorten_words(f"{PROG}: error: {' '.join(message.split())}{hint}"), file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())

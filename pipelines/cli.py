"""``dflash-train``: the training programs' command line (thin: parse, build a config, call).

    dflash-train sync      the lock-step trainer (legacy log records)
    dflash-train pipeline  the CSP pipeline (schema v1 records with throughput and stage stats)
    dflash-train eval      real acceptance length of a checkpoint

Bad flags or config values are reported as one ``dflash-train: error: ...`` line on stderr with
exit code 2, before any model is loaded; a run that fails exits 1 with the error on one line;
a run stopped by SIGINT/SIGTERM checkpoints and exits 128 + the signal number.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

PROG = "dflash-train"

app = typer.Typer(
    name=PROG, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Train a DFlash drafter: lock-step (sync) or CSP pipeline; measure a checkpoint (eval).",
)


class UsageFailure(Exception):
    """Bad user input: one line, exit code 2."""


# -- common options (the signature is the interface) ---------------------------------------------
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML file of config values "
                                                 "(flags override it).")]
TargetOpt = Annotated[str | None, typer.Option("--target", help="Target model: local HF directory "
                                               "or hub id (default: the bundled tiny target).")]
MaxStepsOpt = Annotated[int | None, typer.Option("--max-steps", help="Train until this optimizer "
                                                 "step (absolute; resumed runs continue).")]
LogOpt = Annotated[str | None, typer.Option("--log", "--log-file", help="JSONL log to append "
                                            "to (default logs/train.jsonl). Under torchrun write "
                                            "--log-file: torchrun takes --log for its own options.")]
CkptDirOpt = Annotated[str | None, typer.Option("--ckpt-dir", help="Where step-NNNNNN/ "
                                                "checkpoints go (default checkpoints).")]
CkptEveryOpt = Annotated[int | None, typer.Option("--ckpt-every", help="Checkpoint every N steps "
                                                  "(0: only at the end).")]
ResumeOpt = Annotated[str | None, typer.Option("--resume", help="Checkpoint directory to continue "
                                               "from (written by either program).")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed for data order, anchors and "
                                             "initialisation.")]
BudgetOpt = Annotated[int | None, typer.Option("--token-budget", help="Tokens (padding included) "
                                               "per micro-batch.")]
DeviceOpt = Annotated[str | None, typer.Option("--device", help="Drafter device: cpu, cuda, "
                                               "cuda:N.")]
DataOpt = Annotated[str | None, typer.Option("--data", help="Training data directory "
                                             "(default: the bundled dataset).")]
LogAllRanksOpt = Annotated[bool | None, typer.Option(
    "--log-all-ranks/--no-log-all-ranks", help="Every rank also writes <log stem>.rank{N}.jsonl beside the log, with "
    "its own throughput (torchrun runs).")]


def _build(cls: type, config: Path | None, flags: dict[str, Any]):
    from .config import build_config

    try:
        return build_config(cls, config, flags)
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
    if result.error:
        print(f"{PROG}: error: {result.error}", file=sys.stderr)
    elif result.reason != "max_steps":
        print(f"{PROG}: stopped at step {result.step} ({result.reason})", file=sys.stderr)
    raise typer.Exit(result.exit_code)


@app.command()
def sync(
    config: ConfigOpt = None, target: TargetOpt = None, max_steps: MaxStepsOpt = None,
    log: LogOpt = None, ckpt_dir: CkptDirOpt = None, ckpt_every: CkptEveryOpt = None,
    resume: ResumeOpt = None, seed: SeedOpt = None, token_budget: BudgetOpt = None,
    device: DeviceOpt = None, data: DataOpt = None, log_all_ranks: LogAllRanksOpt = None,
) -> None:
    """Lock-step trainer: batch, target forward, drafter forward/backward, step; one at a time."""
    from .config import TrainConfig

    flags = {"target": target, "max_steps": max_steps, "log": log, "ckpt_dir": ckpt_dir,
                 "ckpt_every": ckpt_every, "resume": resume, "seed": seed, "token_budget": token_budget,
                 "device": device, "data": data, "log_all_ranks": log_all_ranks}
    _run("sync", _build(TrainConfig, config, flags))


@app.command()
def pipeline(
    config: ConfigOpt = None, target: TargetOpt = None, max_steps: MaxStepsOpt = None,
    log: LogOpt = None, ckpt_dir: CkptDirOpt = None, ckpt_every: CkptEveryOpt = None,
    resume: ResumeOpt = None, seed: SeedOpt = None, token_budget: BudgetOpt = None,
    device: DeviceOpt = None, data: DataOpt = None, log_all_ranks: LogAllRanksOpt = None,
    grad_accum: Annotated[int | None, typer.Option(
        "--grad-accum", help="Micro-batches per optimizer step (default 4).")] = None,
    target_devices: Annotated[str | None, typer.Option(
        "--target-devices", help="Comma-separated devices, one target worker each "
        "(default: the drafter's device).")] = None,
    eval_every: Annotated[int | None, typer.Option(
        "--eval-every", help="Measure real tau every N steps (0: never; default 50).")] = None,
) -> None:
    """CSP pipeline: loader -> target workers -> drafter, overlapped through bounded channels."""
    from .config import PipelineConfig

    flags = {"target": target, "max_steps": max_steps, "log": log, "ckpt_dir": ckpt_dir,
                 "ckpt_every": ckpt_every, "resume": resume, "seed": seed, "token_budget": token_budget,
                 "device": device, "data": data, "grad_accum": grad_accum, "target_devices": target_devices,
                 "eval_every": eval_every, "log_all_ranks": log_all_ranks}
    _run("pipeline", _build(PipelineConfig, config, flags))


@app.command("eval")
def eval_(
    drafter: Annotated[str, typer.Option("--drafter", help="Checkpoint directory to measure.")],
    target: TargetOpt = None, data: DataOpt = None, device: DeviceOpt = None,
    prompts: Annotated[int, typer.Option("--prompts", help="Held-out prompts to decode.")] = 8,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="Tokens generated per prompt.")]
    = 32,
    log: Annotated[str | None, typer.Option("--log", help="Also append an eval record to this "
                                            "JSONL log.")] = None,
) -> None:
    """Real acceptance length (tau) of a checkpoint, by speculative decoding on held-out prompts."""
    from transformers.utils import logging as hf_logging

    from .errors import TrainingError
    from .evaluate import EvalRequest, evaluate_checkpoint, render_eval

    hf_logging.disable_progress_bar()
    try:
        req = EvalRequest(drafter=drafter, target=target, data=data, device=device or "cpu",
                          prompts=prompts, new_tokens=new_tokens)
        record = evaluate_checkpoint(req)
    except (TrainingError, ValueError) as e:
        raise UsageFailure(str(e)) from None
    render_eval(record)
    if log is not None:
        from .logwriter import JsonlLog

        try:
            with JsonlLog(log) as f:
                f.write(record)
        except OSError as e:  # LogWriteError: one line naming the file
            raise UsageFailure(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns (and, as a script, exits with) the process exit code."""
    try:
        code = app(args=argv, prog_name=PROG, standalone_mode=False)
    except UsageFailure as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print(f"{PROG}: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as e:  # typer's own usage errors (bad option, bad value)
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        hint = f" (see {PROG} --help)" if "--help" not in message else ""
        print(f"{PROG}: error: {' '.join(message.split())}{hint}", file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())

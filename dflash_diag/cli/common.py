"""What every ``dflash-diag`` command shares: option types, output choice, error policy.

Kept free of polars and of the analysis modules so that ``dflash-diag --help`` starts fast; the
commands import the library inside their functions.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
from collections.abc import Iterator
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from dflash_diag.analysis import defaults
from dflash_diag.errors import DiagError
from dflash_diag.read.presets import PRESETS
from dflash_diag.text import visible

#: Exit codes: 0 success, 1 a --fail-on condition matched, 2 usage or input error.
EXIT_OK, EXIT_FAIL_ON, EXIT_USAGE = 0, 1, 2


class OutputFormat(str, enum.Enum):
    """How a report is printed."""

    AUTO = "auto"  #: rich on a terminal, plain text otherwise or with NO_COLOR set
    RICH = "rich"
    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
    CSV = "csv"


class PhaseChoice(str, enum.Enum):
    """``--phase`` values (mirrors :class:`dflash_diag.analysis.phase.Phase` without importing polars)."""

    AUTO = "auto"
    PIPELINE = "pipeline"
    ALL = "all"


class FailOn(str, enum.Enum):
    """Verdicts that ``--fail-on`` turns into exit code 1."""

    DIVERGING = "diverging"
    PLATEAU = "plateau"
    OVERFITTING = "overfitting"
    BROKEN = "broken"
    NOT_ENOUGH = "not enough data"
    TARGET_UNREACHABLE = (
        "target-unreachable"  #: the forecast does not reach the target by the planned end
    )


class ScheduleChoice(str, enum.Enum):
    """``--schedule`` values (the lr shape after warmup where the log records none)."""

    COSINE = "cosine"
    LINEAR = "linear"
    CONSTANT = "constant"


# Reusable option declarations (the signature is the interface).
LogsArgument = Annotated[
    list[str],
    typer.Argument(
        help="Log(s): JSONL files, .gz files, - for standard input, or another "
        "trainer's TensorBoard run, trainer_state.json, MLflow store, W&B offline run, "
        "metrics.csv or console log (file or folder; a folder holding several of "
        "these is read as the richest, and a note says which). Several files are merged in step "
        "order. A quoted glob is expanded here (e.g. "
        "'logs/train.rank*.jsonl'); per-rank logs (*.rank{N}.jsonl, from "
        "--log-all-ranks) give the per-rank throughput skew.",
        metavar="LOG...",
    ),
]
PhaseOption = Annotated[
    PhaseChoice,
    typer.Option(
        "--phase",
        help="auto: the pipeline entries (tok_per_sec, or a run_start with "
        "script pipeline) when there are any, else all.",
    ),
]
FromStepOption = Annotated[
    int | None, typer.Option("--from-step", help="First step analysed; windows align to it.")
]
ToStepOption = Annotated[
    int | None, typer.Option("--to-step", help="Last step analysed (inclusive).")
]
FieldOption = Annotated[
    list[str] | None,
    typer.Option(
        "--field",
        help="Map a log field onto a canonical one, NEW=OLD (e.g. acc=train/acc; "
        "acc_pos=train/acc_{i} assembles numbered keys). N:NEW=OLD maps it for the N-th "
        "input only. Repeatable. When nothing maps, the error names the series found "
        "and the --field line to give.",
        metavar="NEW=OLD",
    ),
]
InputFormatOption = Annotated[
    str | None,
    typer.Option(
        "--input-format",
        help="Read every input as this format instead of telling it "
        "by content: jsonl, tensorboard, hf-trainer-state, csv, mlflow, mlflow-sqlite, "
        "wandb, console, table, json-history.",
        metavar="FORMAT",
    ),
]
PresetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--preset",
        help="Another trainer's metric names and conventions: "
        f"{', '.join(PRESETS)}, or auto (detect; the default). Names no preset "
        "covers are looked up in one alias table (loss, train_loss, train_loss_step, "
        "val_loss, lr-Adam...: docs/formats.md). Once for all inputs, or once per "
        "input in order.",
        metavar="NAME",
    ),
]
StrictOption = Annotated[
    bool,
    typer.Option(
        "--strict/--no-strict", metavar="", help="Malformed lines are an error, not skipped."
    ),
]
NoCacheOption = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        metavar="",
        help="Parse every log whole: the parsed-log cache is neither read nor written.",
    ),
]

# The analysis options every command shares (one diagnosis, one set of knobs, defaults defined once
# in dflash_diag.analysis.defaults).
WindowOption = Annotated[
    str,
    typer.Option(
        "--window",
        "-w",
        metavar="STEPS|auto",
        help="Steps per window; auto (the default): 5 records of the logging interval, fewer when "
        "the log would give under 10 windows, never below 50 steps.",
    ),
]


def parse_window(value: str | int | None) -> int | None:
    """``--window``: a positive step count, or None for ``auto``; anything else is a usage
    error (one line, exit 2)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        size = int(value)
    except ValueError:
        fail(f"--window must be a number of steps or auto, got {value!r}")
    if not 1 <= size < 2**53:
        fail(f"--window must be at least 1 (and below 2^53), got {size}")
    return size


ThresholdOption = Annotated[
    float,
    typer.Option(
        "--threshold", min=0.0, help="Accuracy change (absolute) within which the arrow is flat."
    ),
]
LossThresholdOption = Annotated[
    float,
    typer.Option(
        "--loss-threshold",
        min=0.0,
        help="Loss change (fraction of the previous loss) within which the arrow is flat.",
    ),
]
NoiseAwareOption = Annotated[
    bool,
    typer.Option(
        "--noise-aware/--no-noise-aware",
        metavar="",
        help="Flat within the standard error of the difference instead of the thresholds.",
    ),
]
PeakLrOption = Annotated[
    float | None,
    typer.Option(
        "--peak-lr", help="Peak lr when the run_start header gives none (else the largest lr seen)."
    ),
]
BlockSizeOption = Annotated[
    int | None,
    typer.Option(
        "--block-size", help=f"Block size B (default: the header's, else {defaults.BLOCK_SIZE})."
    ),
]
TargetAccOption = Annotated[
    float, typer.Option("--target-acc", help="Target accuracy: progress is acc / target acc.")
]
TargetTauOption = Annotated[
    float | None,
    typer.Option(
        "--target-tau",
        help="Target acceptance length instead: progress is (tau-1)/(target-1) of the primary estimate.",
    ),
]
BaselineTauOption = Annotated[
    float | None,
    typer.Option(
        "--baseline-tau",
        help=f"Reference drafter's acceptance length (default {defaults.BASELINE_TAU:g}, the original analysis').",
    ),
]
AlphaOption = Annotated[
    float, typer.Option("--alpha", help="Significance level of the verdict's trend test.")
]
EndStepOption = Annotated[
    int | None,
    typer.Option(
        "--end-step",
        help="Planned last step of the run, for the forecast (default: the header's total "
        "steps or HF's max_steps; without one the forecast looks ahead as far as the log goes).",
    ),
]
ScheduleOption = Annotated[
    ScheduleChoice | None,
    typer.Option(
        "--schedule",
        help="lr shape after warmup where the log records none, for the forecast "
        "(default: the header's, else matched to the logged lr).",
    ),
]
TargetLossOption = Annotated[
    float | None,
    typer.Option(
        "--target-loss",
        help="Target training loss: the ETA is to this loss instead of the acc/tau target.",
    ),
]
KeepAllOption = Annotated[
    bool,
    typer.Option(
        "--keep-all/--no-keep-all",
        metavar="",
        help="Keep entries orphaned by restarts (default: later entries replace them).",
    ),
]


def diagnosis_config(
    *,
    phase: str,
    from_step: int | None,
    to_step: int | None,
    window: int,
    keep_all: bool,
    peak_lr: float | None,
    threshold: float,
    loss_threshold: float,
    noise_aware: bool,
    block_size: int | None,
    target_acc: float,
    target_tau: float | None,
    baseline_tau: float | None,
    alpha: float,
    end_step: int | None = None,
    schedule: ScheduleChoice | None = None,
    target_loss: float | None = None,
):
    """The :class:`~dflash_diag.analysis.diagnosis.DiagnosisConfig` of the shared options; a bad
    value is a usage error (one line, exit 2)."""
    from dflash_diag.analysis.acceptance import AcceptanceConfig
    from dflash_diag.analysis.diagnosis import DiagnosisConfig
    from dflash_diag.analysis.run_forecast import ForecastConfig
    from dflash_diag.analysis.trend import TrendConfig
    from dflash_diag.analysis.verdict import VerdictConfig

    try:
        return DiagnosisConfig(
            phase=phase,
            from_step=from_step,
            to_step=to_step,
            window=window,
            keep_all=keep_all,
            peak_lr=peak_lr,
            trend=TrendConfig(threshold, loss_threshold, noise_aware),
            acceptance=AcceptanceConfig(block_size, target_acc, target_tau, baseline_tau),
            verdict=VerdictConfig(alpha=alpha),
            forecast=ForecastConfig(
                end_step=end_step,
                schedule=schedule.value if schedule else None,
                target_loss=target_loss,
            ),
        )
    except ValueError as exc:
        fail(str(exc))


FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-f",
        help="auto: rich on a terminal, plain text otherwise or when NO_COLOR is set.",
    ),
]


def fails_on(fail_on: list[FailOn] | None, diagnosis) -> bool:
    """Whether a ``--fail-on`` condition holds for ``diagnosis``: its verdict status, or
    ``target-unreachable`` when the forecast does not reach the target by the planned end."""
    wanted = {f.value for f in fail_on or ()}
    if diagnosis.verdict.status in wanted:
        return True
    target = diagnosis.forecast.target if diagnosis.forecast is not None else None
    return (
        FailOn.TARGET_UNREACHABLE.value in wanted
        and target is not None
        and target.within_run is False
    )


def print_notes(notes: list[str]) -> None:
    """How the inputs were read (format, preset, fields never found): one stderr line each."""
    for note in notes:
        print(f"dflash-diag: note: {' '.join(str(note).split())}", file=sys.stderr)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``dflash-diag: error: MESSAGE`` on one stderr line and exit with ``code``."""
    # Messages quote paths and log text: control characters (an ANSI or OSC escape in a file
    # name) are made visible, on stderr as on stdout.
    one_line = visible(" ".join(str(message).split()))
    print(f"dflash-diag: error: {one_line}", file=sys.stderr)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn :class:`DiagError` (and a broken output pipe) into the CLI's error policy."""
    try:
        yield
    except DiagError as exc:
        fail(str(exc))
    except BrokenPipeError:
        # `dflash-diag converge log | head` closing early is not an error worth a traceback.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the flush at exit
        raise typer.Exit(EXIT_OK) from None


def make_console(file=None) -> Console:
    """A console that honours ``NO_COLOR`` and emits no escapes when not writing to a terminal."""
    return Console(file=file, highlight=False, emoji=False, soft_wrap=False)


def use_rich(fmt: OutputFormat, console: Console) -> bool:
    """Whether ``fmt`` means rich output on this console."""
    if fmt is OutputFormat.RICH:
        return True
    if fmt is OutputFormat.AUTO:
        return console.is_terminal and not os.environ.get("NO_COLOR")
    return False

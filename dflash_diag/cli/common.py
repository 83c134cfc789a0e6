"""What every ``dflash-diag`` command shares: choice types, output choice, error policy (the
shared analysis and reading options are declared in :mod:`dflash_diag.cli.options`).

Kept free of polars and of the analysis modules so that ``dflash-diag --help`` starts fast; the
commands import the library inside their functions.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from dflash_diag.errors import DiagError
from dflash_diag.read.formats import registry as formats
from dflash_diag.text import visible

if TYPE_CHECKING:  # rich's console: imported where a command prints through one
    from rich.console import Console

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


# Declarations that are not analysis options (the signature is the interface).
LogsArgument = Annotated[
    list[str],
    typer.Argument(
        help="Log(s): JSONL files, .gz files, - for standard input, or another "
        f"trainer's {formats.described()} (file or folder; a folder holding several of "
        "these is read as the richest, and a note says which). Several files are merged in step "
        "order. A quoted glob is expanded here (e.g. "
        "'logs/train.rank*.jsonl'); per-rank logs (*.rank{N}.jsonl, from "
        "--log-all-ranks) give the per-rank throughput skew.",
        metavar="LOG...",
    ),
]
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
    """Turn :class:`DiagError`, a broken output pipe and an output that cannot be written into
    the CLI's error policy."""
    try:
        yield
    except DiagError as exc:
        fail(str(exc))
    except OSError as exc:
        raise typer.Exit(output_failure(exc)) from None


def output_failure(exc: OSError) -> int:
    """The exit status for an OSError that reached the command line, its one line printed.

    A broken pipe (`dflash-diag converge log | head` closing early) is not an error worth a
    line: status 0. The readers turn an input's OSError into a DiagError, so another one here
    is the output's (a full disk, a closed terminal) or names its file: status 2. Either way
    stdout then points at the null device, so that the flush at exit does not fail again over
    output that cannot be written.
    """
    with contextlib.suppress(OSError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - closed by the exit
    if isinstance(exc, BrokenPipeError):
        return EXIT_OK
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        message = f"{reason}: {exc.filename}"
    else:
        message = f"cannot write the output: {reason}"
    print(f"dflash-diag: error: {visible(' '.join(message.split()))}", file=sys.stderr)
    return EXIT_USAGE


def make_console(file=None) -> Console:
    """A console that honours ``NO_COLOR`` and emits no escapes when not writing to a terminal."""
    from rich.console import Console  # not for JSON, markdown or CSV output: ~0.02-0.03 s

    return Console(file=file, highlight=False, emoji=False, soft_wrap=False)


def use_rich(fmt: OutputFormat, console: Console) -> bool:
    """Whether ``fmt`` means rich output on this console."""
    if fmt is OutputFormat.RICH:
        return True
    if fmt is OutputFormat.AUTO:
        return console.is_terminal and not os.environ.get("NO_COLOR")
    return False

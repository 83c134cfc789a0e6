"""The ``dflash-diag`` command line: one module per command, registered here.

Only typer is imported at module level so ``dflash-diag --help`` starts fast; each command imports
polars and the analysis inside its function.
"""

from __future__ import annotations

import gc
import inspect
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from dflash_diag.cli.common import EXIT_USAGE, output_failure
from dflash_diag.cli.compare import compare
from dflash_diag.cli.converge import converge
from dflash_diag.cli.fast_params import install
from dflash_diag.cli.typer_parts import FlagHelp, version_flag
from dflash_diag.cli.watch import watch


class FlagHelpCommand(FlagHelp, TyperCommand):
    """A command whose ``--help`` shows no value type, and whose plain option values convert
    without importing pydantic (:mod:`dflash_diag.cli.fast_params`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self.get_params(ctx))
        return super().parse_args(ctx, args)


class OneLineErrors(FlagHelp, TyperGroup):
    """The command group, with every usage error (an unknown option, a bad ``--format`` value...)
    printed as one ``dflash-diag: error: ...`` line on stderr with exit code 2, as the product's
    own errors are, instead of click's multi-line usage box (its own options convert as the
    commands' do)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:  # typer >= 0.2x vendors click; older ones use click itself
            from typer._click.exceptions import ClickException, NoArgsIsHelpError
        except ImportError:  # pragma: no cover - depends on the installed typer
            # click's own classes, the same API under another type: hence the ignore
            from click.exceptions import (  # type: ignore[assignment]
                ClickException,
                NoArgsIsHelpError,
            )
        from typer import Abort

        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except NoArgsIsHelpError as exc:  # a bare `dflash-diag` or `dflash-diag converge`: help
            print(exc.ctx.get_help())
            rv = EXIT_USAGE if exc.ctx.parent is not None else 0
        except ClickException as exc:
            message = " ".join(exc.format_message().replace("Value error, ", "").split())
            ctx = getattr(exc, "ctx", None)  # a UsageError's; other ClickExceptions have none
            where = ctx.command_path if ctx is not None else "dflash-diag"
            print(f"dflash-diag: error: {message} (see '{where} --help')", file=sys.stderr)
            rv = EXIT_USAGE
        except Abort:
            print("dflash-diag: aborted", file=sys.stderr)
            rv = 1
        except OSError as exc:  # printing the help or the version to a full disk or a closed pipe
            rv = output_failure(exc)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="dflash-diag",
    help="Convergence diagnostics for DFlash drafter training logs (JSONL).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)


_VERSION = version_flag("dflash-diag")


@app.callback()
def _root(
    show_version: Annotated[bool, _VERSION] = False,
) -> None:
    """Convergence diagnostics for DFlash drafter training logs (JSONL)."""


def help_text(command: Any) -> str:
    """A command's docstring as its help: each paragraph on one line, for the terminal to wrap.

    typer joins the lines of a help's first paragraph but (0.2x) keeps the docstring's line
    breaks in the others, so at 80 columns they came out wrapped twice, ragged.
    """
    paragraphs = inspect.cleandoc(command.__doc__ or "").split("\n\n")
    return "\n\n".join(" ".join(p.split("\n")) for p in paragraphs)


for _name, _command in (("converge", converge), ("compare", compare), ("watch", watch)):
    app.command(_name, cls=FlagHelpCommand, help=help_text(_command))(_command)


#: The cyclic collector's thresholds for a command's process. Python's defaults (700, 10, 10) run
#: two full collections in a converge of 1M records, each walking every object polars, numpy and
#: the analysis keep alive: 0.13-0.14 s of collection per run, measured with ``gc.callbacks``
#: (0.08 s of it the full ones), about a tenth of a re-run. A young generation of 50,000 objects
#: collects the same cycles in 0.04 s, peak memory unchanged within noise; the library leaves
#: the process's settings alone.
GC_THRESHOLDS = (50_000, 20, 20)


#: Thread-pool settings for a command's process, each applied only where the user set none.
#: numpy's OpenBLAS starts one thread per core when numpy is imported: 0.06-0.07 s of CPU per run
#: on this 2-core machine, more on a cluster node's many cores, for the only BLAS work a command
#: does, solves of at most a few unknowns (the curve fits), which a pool does not speed up.
THREAD_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}


def main() -> None:
    """The command line in this process (raises :class:`SystemExit` with the exit status, as
    typer does; :func:`run` is the console script)."""
    gc.set_threshold(*GC_THRESHOLDS)
    for name, value in THREAD_DEFAULTS.items():
        os.environ.setdefault(name, value)
    app()


def run() -> None:
    """Console-script entry point (``dflash-diag``, ``python -m dflash_diag``): :func:`main`,
    then the process ends without the interpreter's finalisation.

    Tearing the interpreter down (every module, the analysis' objects, polars' and numpy's
    memory) costs a converge 0.04-0.06 s of CPU after its output is written, 5-8% of a re-run
    on a cached log; nothing is left to do by then (no atexit handler, every file closed).
    The output is flushed first (output that cannot be written is one error line, status 2, a
    closed pipe status 0: :func:`~dflash_diag.cli.common.output_failure`); where the exit status
    is not a number, or stderr cannot be flushed, the usual exit does what it always did.
    """
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    if not isinstance(code, int):
        raise SystemExit(code)
    try:
        sys.stdout.flush()
    except OSError as exc:  # output still buffered (a short one) that cannot be written
        code = output_failure(exc) if code == 0 else code
    except ValueError:
        raise SystemExit(code) from None
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        raise SystemExit(code) from None
    os._exit(code)

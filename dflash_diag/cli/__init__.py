"""The ``dflash-diag`` command line: one module per command, registered here.

Only typer is imported at module level so ``dflash-diag --help`` starts fast; each command imports
polars and the analysis inside its function.
"""

from __future__ import annotations

import typer

from dflash_diag.cli.compare import compare
from dflash_diag.cli.converge import converge
from dflash_diag.cli.watch import watch

app = typer.Typer(
    name="dflash-diag",
    help="Convergence diagnostics for DFlash drafter training logs (JSONL).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Convergence diagnostics for DFlash drafter training logs (JSONL)."""


app.command("converge")(converge)
app.command("compare")(compare)
app.command("watch")(watch)


def main() -> None:
    """Console-script entry point."""
    app()

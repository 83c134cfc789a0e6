"""typer pieces that both programs of the distribution share (``dflash-diag`` and ``dflash-train``):
``--help`` shown as the flag it is, and the ``--version`` callback. Torch-free and polars-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer


class FlagHelp:
    """Mixin for a typer command or group: typer 0.29 gives its own help option the ``<bool>``
    type column of an option that takes a value (``--help <bool>``); this shows ``--help``."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


def version_callback(prog: str) -> Callable[[bool], None]:
    """An eager ``--version`` callback printing ``<prog> <version of the distribution>``."""

    def show(value: bool) -> None:
        if value:
            from importlib.metadata import PackageNotFoundError, version

            try:
                number = version("dflash-diag")  # the distribution both programs come in
            except PackageNotFoundError:  # run from a source tree without installing
                number = "unknown"
            print(f"{prog} {number}")
            raise typer.Exit(0)

    return show


def version_flag(prog: str) -> Any:
    """The ``--version`` option of a program's root callback, the metadata of an
    ``Annotated[bool, ...]`` parameter: eager, printing ``<prog> <version>`` through
    :func:`version_callback`."""
    return typer.Option(
        "--version",
        callback=version_callback(prog),
        is_eager=True,
        metavar="",
        help="Print the version and exit.",
    )


def version_option(prog: str) -> Any:
    """The ``--version`` option of a program's root callback (an ``Annotated`` bool type):
    :func:`version_flag` as a type."""
    return Annotated[bool, version_flag(prog)]

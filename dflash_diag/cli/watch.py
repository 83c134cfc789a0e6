"""`dflash-diag watch LOG`: a live terminal view of a training log (thin over dflash_diag.watch)."""

from __future__ import annotations

import enum
import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dflash_diag.cli.common import fail, make_console, print_notes, user_errors
from dflash_diag.cli.options import TUNING, Given, Group, command
from dflash_diag.read.files import check_log_path
from dflash_diag.read.formats import registry as formats

if TYPE_CHECKING:  # the library (polars) is imported inside the functions: --help stays fast
    from rich.console import Console

    from dflash_diag.watch import LiveLog

QUIT_KEYS = (b"q", b"Q")


class WatchFormat(str, enum.Enum):
    """What ``watch`` prints: the live view, or one frame as JSON."""

    AUTO = "auto"
    JSON = "json"


class KeyWaiter:
    """Waits between refreshes, returning early with True when ``q`` is pressed.

    Keys are read only when standard input is a terminal, in cbreak mode (one key at a time, no
    echo; Ctrl-C still raises KeyboardInterrupt), and the terminal is restored on exit. Otherwise
    it simply sleeps.
    """

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stdin
        self.fd: int | None = None
        self._saved = None

    def __enter__(self):
        try:
            fd = self.stream.fileno()
            interactive = os.isatty(fd)
        except (AttributeError, OSError, ValueError):
            interactive = False
        if interactive:
            import termios
            import tty

            self.fd = fd
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None and self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when a quit key was pressed."""
        if self.fd is None:
            time.sleep(seconds)
            return False
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return False
            keys = os.read(self.fd, 64)
            if not keys:  # the terminal went away
                return True
            if any(k in keys for k in QUIT_KEYS):
                return True
        return False


def run_watch(
    live: LiveLog,
    console: Console,
    *,
    once: bool = False,
    plot: bool = False,
    waiter: KeyWaiter | None = None,
    max_refreshes: int | None = None,
    on_frame: Callable[[], None] | None = None,
) -> int:
    """The refresh loop: a rich Live view on a terminal, plain snapshots otherwise.

    Args:
        live: the followed log.
        console: where to draw; its ``is_terminal`` chooses live redraw or plain snapshots.
        once: draw one frame and return.
        plot: add the plotext charts.
        waiter: waits between refreshes and reports a quit key (a plain sleep by default).
        max_refreshes: stop after this many frames (tests); None runs until ``q`` or Ctrl-C.
        on_frame: called after each frame is drawn (tests).

    Returns:
        The exit code: 0.
    """
    from rich.live import Live

    from dflash_diag.watch import build_view, render_view

    interval = live.config.interval
    waiter = waiter or KeyWaiter(stream=_NoKeys())

    def frame():
        live.refresh()
        return render_view(build_view(live), plot=plot, width=console.width)

    if once or not console.is_terminal:
        drawn = 0
        while True:
            if console.is_terminal:
                console.print(frame())
            else:  # plain text for a pipe: no padding spaces after the table cells
                with console.capture() as captured:
                    console.print(frame())
                console.file.write(
                    "".join(line.rstrip() + "\n" for line in captured.get().splitlines())
                )
                console.file.flush()
            drawn += 1
            if on_frame is not None:
                on_frame()
            if once or (max_refreshes is not None and drawn >= max_refreshes):
                return 0
            if waiter.wait(interval):
                return 0
            console.rule(style="dim")
    with Live(frame(), console=console, auto_refresh=False, transient=False) as view:
        drawn = 1
        while max_refreshes is None or drawn < max_refreshes:
            if on_frame is not None:
                on_frame()
            if waiter.wait(interval):
                break
            view.update(frame(), refresh=True)
            drawn += 1
    return 0


class _NoKeys:
    """A stand-in stream that is never a terminal (no keys are read)."""

    def fileno(self) -> int:
        raise OSError("no keyboard")


@command(
    "log",
    "interval",
    "stall",
    "window",
    "history",
    "threshold",
    "loss_threshold",
    "noise_aware",
    "phase",
    "from_step",
    Group(TUNING),
    "once",
    "plot",
    "fmt",
    "fields",
    "input_format",
    "preset",
    "no_cache",
)
def watch(
    log: Annotated[
        Path,
        typer.Argument(
            help="The log to follow: a JSONL file (only new bytes are read), or "
            f"another trainer's {formats.described()} (read again when it changes).",
            metavar="LOG",
        ),
    ],
    interval: Annotated[
        float, typer.Option(help="Seconds between refreshes.", show_default=True)
    ] = 2.0,
    stall: Annotated[
        float, typer.Option(help="Alert when no record arrives for this many seconds.")
    ] = 300.0,
    history: Annotated[int, typer.Option(help="Windows shown in the sparklines.")] = 40,
    once: Annotated[
        bool, typer.Option("--once/--no-once", metavar="", help="Draw one frame and exit.")
    ] = False,
    plot: Annotated[
        bool,
        typer.Option("--plot/--no-plot", metavar="", help="Add line charts of loss, acc and tau."),
    ] = False,
    fmt: Annotated[
        WatchFormat,
        typer.Option(
            "--format",
            "-f",
            help="auto: the live view; json: one frame's diagnosis as JSON (implies --once).",
        ),
    ] = (WatchFormat.AUTO),
    *,
    options: Given,
) -> None:
    """Live view of a training log: sparklines, latest windows, schedule, verdict, alerts.

    Reads only the bytes appended since the previous refresh. Press q or Ctrl-C to quit.
    """
    with user_errors():
        from dflash_diag.read.formats.load import plan_input, read_planned
        from dflash_diag.watch import LiveLog, WatchConfig

        analysis = options.diagnosis()
        try:
            config = WatchConfig(
                interval=interval, stall=stall, history=history, plot=plot, analysis=analysis
            )
        except ValueError as exc:
            fail(str(exc))
        if not log.is_dir():
            check_log_path(str(log))  # a missing file, a symlink loop...: one precise line
        read = options.read()
        kwargs = read.load_kwargs(1)
        plan = plan_input(
            str(log),
            input_format=read.input_format,
            preset=kwargs["presets"][0],
            fields=kwargs["fields"],
        )
        if plan.native:
            live = LiveLog(log, config, fields=plan.fields)
        else:
            notes: list[str] = []

            def snapshot():
                # a grown JSONL of another trainer: the cached columns and its new bytes (as
                # converge reads it; the two share the cache)
                part = read_planned(plan, 0, cache=read.cache)
                if not notes:  # said once, not at every refresh
                    notes.extend(part.notes)
                    print_notes(part.notes)
                return part

            live = LiveLog(log, config, snapshot=snapshot)
        if fmt is WatchFormat.JSON:
            from dflash_diag.render.json import dump_json, watch_json
            from dflash_diag.watch import build_view

            live.refresh()
            typer.echo(dump_json(watch_json(build_view(live))))
            raise typer.Exit(0)
        console = make_console()
        try:
            with KeyWaiter() as waiter:
                code = run_watch(live, console, once=once, plot=plot, waiter=waiter)
        except KeyboardInterrupt:
            code = 0
    raise typer.Exit(code)

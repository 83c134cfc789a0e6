"""Progress of a training run on stderr, and the summary it ends with.

* On a terminal: a rich progress bar (step, loss, acc, tau estimate, tokens/s, time left).
* Elsewhere (nohup, a cluster job's log file, CI): one plain line after every ``every_steps``
  optimizer steps or ``every_seconds`` seconds, whichever comes first, and after the first step
  (so a log shows at once that training started and how fast it goes)::

      dflash-train: step 40/200 (20%)  loss 3.412  acc 0.214  tau~ 1.31  5,120 tok/s  ETA 0:01:52

* Every launch ends with a :class:`RunSummary` (rendered by the CLI).

The numbers are those of a moving window of the last ``window`` steps, summed before dividing
(exact per-token means, like the log's), so one odd step does not make the line jump. The tau
estimate is the harmonic estimate from the accepted prefixes (``dflash_diag.analysis.acceptance``,
the same function the diagnostics use): the measured tau of an ``eval`` record is the truth, this is
a guide between evals.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from dflash import StepMetrics
from dflash_diag.analysis.acceptance import harmonic_tau

if TYPE_CHECKING:
    from typing_extensions import Self

#: Steps in the moving window of the progress line and of the summary's "final window".
WINDOW = 20

BAR, LINES, OFF = "bar", "lines", "off"


def tau_estimate(metrics: StepMetrics) -> float:
    """The acceptance length the window's accepted prefixes suggest: the harmonic estimate from
    ``accept_pos``, the training-time estimate that ``dflash-diag`` ranks first after the measured
    and walked ones (the chain of per-position accuracies reads high; ``tau_train`` far higher)."""
    if not metrics.n_blocks:
        return math.nan
    tau = harmonic_tau(metrics.accept_rate_pos, metrics.block_size)
    return math.nan if tau is None else tau


def format_duration(seconds: float) -> str:
    """``0:01:52``; ``?`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


@dataclass(frozen=True)
class WindowStats:
    """The last ``steps`` optimizer steps (up to ``last_step``), summed then divided."""

    first_step: int
    last_step: int
    steps: int
    loss: float
    acc: float
    tau: float
    tok_per_sec: float
    seconds_per_step: float

    def text(self) -> str:
        """``loss 3.412  acc 0.214  tau~ 1.31  5,120 tok/s``."""
        return (
            f"loss {self.loss:.3f}  acc {self.acc:.3f}  tau~ {self.tau:.2f}  "
            f"{self.tok_per_sec:,.0f} tok/s"
        )


def window_stats(entries: list[tuple[int, float, float, StepMetrics]]) -> WindowStats | None:
    """Stats of ``(step, end_time, step_seconds, metrics)`` entries (oldest first).

    Throughput is the window's real tokens over the steps' own times (the programs leave eval
    and checkpoint time out of a step); the time per step, which the ETA uses, is the wall
    time between the window's first and last step ends, so evals and checkpoints count there.
    """
    if not entries:
        return None
    total = entries[0][3]
    for e in entries[1:]:
        total = total + e[3]
    busy = sum(e[2] for e in entries)
    if len(entries) > 1:
        per_step = (entries[-1][1] - entries[0][1]) / (entries[-1][0] - entries[0][0])
    else:
        per_step = entries[0][2]
    return WindowStats(
        first_step=entries[0][0],
        last_step=entries[-1][0],
        steps=len(entries),
        loss=total.loss,
        acc=total.acc,
        tau=tau_estimate(total),
        tok_per_sec=total.n_tokens / busy if busy > 0 else math.nan,
        seconds_per_step=per_step,
    )


def progress_line(step: int, total: int, stats: WindowStats) -> str:
    """The off-terminal progress line (one line, plain text)."""
    pct = f" ({step / total:.0%})" if total else ""
    eta = format_duration((total - step) * stats.seconds_per_step)
    return f"dflash-train: step {step}/{total}{pct}  {stats.text()}  ETA {eta}"


def progress_mode(enabled: bool | None, isatty: bool) -> str:
    """``bar`` on a terminal (or when forced), ``lines`` elsewhere, ``off`` when disabled."""
    if enabled is False:
        return OFF
    if enabled or isatty:
        return BAR
    return LINES


class StepProgress:
    """Progress of one launch: a bar on a terminal, plain lines elsewhere (see the module doc).

    Args:
        start: the step the launch starts from (a resumed run starts part-way).
        total: the last step of the run (``max_steps``).
        enabled: None = bar on a terminal, lines elsewhere; True = bar; False = nothing.
        every_steps: off a terminal, a line after this many steps (0: by time only) ...
        every_seconds: ... or after this many seconds, whichever comes first (0: by steps only).
        clock: monotonic seconds (injected by tests).
        stream: where lines go (stderr).
        window: steps averaged in a line and in the summary's final window.
        started_at: ``clock()`` when the launch began (loading included), for the wall time.
    """

    def __init__(
        self,
        start: int,
        total: int,
        enabled: bool | None = None,
        *,
        every_steps: int = 100,
        every_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        stream: IO[str] | None = None,
        window: int = WINDOW,
        started_at: float | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.mode = progress_mode(enabled, isatty)
        self.enabled = self.mode != OFF
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.clock = clock
        self._start, self._total = start, total
        self._window: deque[tuple[int, float, float, StepMetrics]] = deque(maxlen=window)
        self._progress: Progress | None = None
        self._task: Any = None
        self._last_line_step = start
        self._last_line_time = clock()
        self.started_at = self._last_line_time if started_at is None else started_at
        self.tokens = 0
        self.busy_seconds = 0.0
        self.last_step = start

    def __enter__(self) -> Self:
        if self.mode == BAR:
            self._progress = Progress(
                TextColumn("step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                "train", total=self._total, completed=self._start, stats=""
            )
        return self

    def update(self, step: int, metrics: StepMetrics, step_seconds: float) -> None:
        """Record optimizer step ``step`` (its metrics summed over ranks and micro-batches, and
        the seconds it took), and show progress when due."""
        now = self.clock()
        self._window.append((step, now, step_seconds, metrics))
        self.tokens += metrics.n_tokens
        self.busy_seconds += step_seconds
        self.last_step = step
        if self.mode == OFF:
            return
        stats = window_stats(list(self._window))
        assert stats is not None
        if self._progress is not None:
            self._progress.update(self._task, completed=step, stats=stats.text())
            return
        first = self._last_line_step == self._start
        due_steps = self.every_steps and step - self._last_line_step >= self.every_steps
        due_time = self.every_seconds and now - self._last_line_time >= self.every_seconds
        if first or due_steps or due_time or step == self._total:
            print(progress_line(step, self._total, stats), file=self.stream, flush=True)
            self._last_line_step, self._last_line_time = step, now

    def final_window(self) -> WindowStats | None:
        """The stats of the last ``window`` steps (None when no step completed)."""
        return window_stats(list(self._window))

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


@dataclass(frozen=True)
class RunSummary:
    """How one launch went, for the closing lines (rank 0 only)."""

    program: str
    start_step: int
    step: int
    max_steps: int
    reason: str
    window: WindowStats | None
    tok_per_sec: float
    """Real tokens of the launch over the time spent in its steps (evals, checkpoints excluded)."""
    wall_seconds: float
    """The whole launch: loading, steps, evals, checkpoints."""
    checkpoint: str | None
    """The last good checkpoint: written by this launch, else the one it resumed from."""
    log: str
    error: str | None = None

    @classmethod
    def of(
        cls,
        program: str,
        progress: StepProgress,
        *,
        start_step: int,
        step: int,
        max_steps: int,
        reason: str,
        checkpoint: str | None,
        log: str,
        error: str | None = None,
    ) -> RunSummary:
        busy = progress.busy_seconds
        return cls(
            program=program,
            start_step=start_step,
            step=step,
            max_steps=max_steps,
            reason=reason,
            window=progress.final_window(),
            tok_per_sec=progress.tokens / busy if busy > 0 else math.nan,
            wall_seconds=progress.clock() - progress.started_at,
            checkpoint=checkpoint,
            log=log,
            error=error,
        )

    def lines(self) -> list[str]:
        """The closing lines: what was done, the final window, where things are, what next."""
        done = self.step - self.start_step
        how = {
            "max_steps": "finished",
            "signal": "stopped by a signal",
            "nonfinite": "stopped: too many non-finite steps",
            "error": "failed",
        }.get(self.reason, self.reason)
        out = [
            f"dflash-train: {self.program} {how} at step {self.step}/{self.max_steps}: "
            f"{done} step{'s' if done != 1 else ''} in {format_duration(self.wall_seconds)}"
            + (f", {self.tok_per_sec:,.0f} tok/s" if math.isfinite(self.tok_per_sec) else "")
        ]
        if self.window is not None:
            w = self.window
            out.append(
                f"  final window (steps {w.first_step}-{w.last_step}): loss {w.loss:.3f}  "
                f"acc {w.acc:.3f}  tau~ {w.tau:.2f}"
            )
        out.append(f"  checkpoint: {self.checkpoint or 'none written'}")
        out.append(f"  log:        {self.log}")
        out.append(f"  diagnose:   dflash-diag converge {shlex.quote(self.log)}")
        return out

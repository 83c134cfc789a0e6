"""A rich progress bar for the training loops, shown only on a terminal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from typing_extensions import Self


class StepProgress:
    """Steps done out of the run's target, with the latest loss, acc and throughput.

    Args:
        start: the step the run starts from (a resumed run starts part-way).
        total: the last step of the run.
        enabled: None = only when stderr is a terminal (logs and CI output stay clean).
    """

    def __init__(self, start: int, total: int, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Progress | None = None
        self._task: Any = None
        self._start, self._total = start, total

    def __enter__(self) -> Self:
        if self.enabled:
            self._progress = Progress(
                TextColumn("step"), MofNCompleteColumn(), BarColumn(),
                TextColumn("{task.fields[stats]}"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self._total,
                                                 completed=self._start, stats="")
        return self

    def update(self, step: int, loss: float, acc: float, tok_per_sec: float | None = None) -> None:
        if self._progress is None:
            return
        stats = f"loss {loss:.3f}  acc {acc:.3f}"
        if tok_per_sec is not None:
            stats += f"  {tok_per_sec:,.0f} tok/s"
        self._progress.update(self._task, completed=step, stats=stats)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

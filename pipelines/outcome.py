"""How a launch shows itself and ends: its progress display, the closing summary, the
:class:`RunResult` and the process exit code.
"""

from __future__ import annotations

from dataclasses import dataclass

from .distributed import DataParallel
from .progress import RunSummary, StepProgress
from .run_setup import Setup
from .runlog import RunLog


@dataclass
class RunResult:
    """How a launch ended: the last step reached, why, and the process exit code."""

    step: int
    reason: str
    exit_code: int
    error: str | None = None
    summary: RunSummary | None = None
    """The closing summary (rank 0; None on the other ranks)."""


def make_progress(setup: Setup, dp: DataParallel, started_at: float) -> StepProgress:
    """The launch's progress display (rank 0 only: the others stay quiet)."""
    cfg = setup.cfg
    return StepProgress(
        setup.start_step,
        cfg.max_steps,
        cfg.progress if dp.is_main else False,
        every_steps=cfg.progress_every,
        every_seconds=cfg.progress_seconds,
        started_at=started_at,
    )


def summarize(
    program: str,
    setup: Setup,
    runlog: RunLog,
    progress: StepProgress,
    step: int,
    reason: str,
    error: str | None = None,
) -> RunSummary | None:
    """The closing summary of a launch (None off rank 0). The last good checkpoint is the
    launch's last one, else the checkpoint it resumed from."""
    if not runlog.dp.is_main:
        return None
    ckpt = runlog.last_ckpt_path or (setup.resumed_from or {}).get("path")
    return RunSummary.of(
        program,
        progress,
        start_step=setup.start_step,
        step=step,
        max_steps=setup.cfg.max_steps,
        reason=reason,
        checkpoint=str(ckpt) if ckpt is not None else None,
        log=str(setup.cfg.log),
        error=error,
    )


def exit_code_for(reason: str, signum: int | None) -> int:
    """Process exit code: 0 when the run finished, 128+signal after a graceful signal stop
    (the shell convention, so a scheduler can tell a preempted run from a finished one),
    1 after an error or too many non-finite steps."""
    if reason == "max_steps":
        return 0
    if reason == "signal":
        return 128 + (signum or 15)
    return 1

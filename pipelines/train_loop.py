"""The step loop both training programs run: stop check, :func:`~pipelines.train_step.train_step`,
then the step's tail (:func:`step_tail`: the non-finite guard, the metrics record, progress,
eval, checkpoint), the final checkpoint, and the closing ``stop`` record and :class:`RunResult`.

The lock-step trainer runs it in its one thread over batches it reads itself; the pipeline runs it
in its drafter stage over the micro-batches its target workers completed. What differs between
the two programs is declared once, in :class:`Program`. The tail runs in the thread that steps
the optimizer: a checkpoint must hold the weights and AdamW state of the step it names, which the
next step changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .csp import StopRequest
from .devices import compute_precision
from .distributed import DataParallel
from .evaluate import run_eval
from .log_records import Metrics
from .outcome import RunResult, exit_code_for, summarize
from .progress import StepProgress
from .run_setup import Setup
from .runlog import RunLog, walk_due
from .train_step import MicroBatch, StepResult, train_step

#: The pipeline's accounting: ``() -> (stage_busy, queue_fill)`` over the last logging interval.
Sampler = Callable[[], tuple[dict[str, float], dict[str, float]]]


@dataclass(frozen=True)
class Program:
    """What one training program does in the shared loop."""

    script: str
    """The ``run_start`` header's and the checkpoints' ``script``."""
    full_record: bool
    """Metrics records carry the pipeline fields (``tok_per_sec``, ``n_tokens``, ..., ``walk_*``,
    ``stage_busy``); False: the legacy six (``step, time, epoch, loss, acc, lr``)."""
    evals: bool
    """Runs the ``eval_every`` evals (measured tau on the held-out prompts)."""
    walks: bool
    """Walks the drafter every ``walk_every``-th record (the ``walk_*`` fields)."""


SYNC = Program("sync", full_record=False, evals=False, walks=False)
PIPELINE = Program("pipeline", full_record=True, evals=True, walks=True)


@dataclass
class LoopState:
    """Where the loop got to: read after it returns, or after it failed (the step reached)."""

    step: int
    cursor: dict
    """The data cursor after the last consumed micro-batch (what the final checkpoint stores)."""
    reason: str = "max_steps"
    error: str | None = None
    t_last: float = 0.0
    """``perf_counter`` at the end of the previous step's tail: a step's time is its own, the
    log writes, evals and checkpoints of the step before excluded."""


def _no_stages() -> tuple[dict[str, float], dict[str, float]]:
    return {}, {}


@dataclass
class TrainLoop:
    """Everything the loop reads and updates: the run, its log and progress, the program's
    choices and the loop's own :class:`LoopState`."""

    setup: Setup
    dp: DataParallel
    stop: StopRequest
    runlog: RunLog
    bar: StepProgress
    program: Program
    sample: Sampler = _no_stages
    state: LoopState = field(init=False)

    def __post_init__(self) -> None:
        # What a checkpoint before any step would store (read before any stage reads ahead).
        self.state = LoopState(step=self.setup.start_step, cursor=self.setup.loader.state_dict())


def run_steps(loop: TrainLoop, next_micro: Callable[[], MicroBatch]) -> None:
    """Train until ``max_steps``, a stop request or too many non-finite steps in a row, then
    write the final checkpoint (unless the launch trained nothing: its error is the state's).

    Exceptions (a failing step, a failing write) propagate; ``loop.state.step`` is the last step
    completed.
    """
    setup, cfg, state = loop.setup, loop.setup.cfg, loop.state
    setup.drafter.train()
    precision = compute_precision(cfg.device, cfg.dtype)
    state.t_last = time.perf_counter()
    with loop.bar:
        while state.step < cfg.max_steps:
            if loop.dp.any(loop.stop.is_set()):  # every rank stops after the same step
                state.reason = "signal"
                break
            k = state.step + 1
            walk = loop.program.walks and walk_due(cfg, k) and loop.dp.is_main
            result = train_step(
                setup, loop.dp, k, next_micro, precision, per_rank=loop.runlog.per_rank, walk=walk
            )
            if not step_tail(loop, result):
                break
    end_of_steps(loop)


def step_tail(loop: TrainLoop, r: StepResult) -> bool:
    """After step ``r.step``'s update: the non-finite guard, the metrics records, progress, the
    eval and the checkpoint when due. False when the run must stop (too many non-finite steps)."""
    cfg, runlog, state = loop.setup.cfg, loop.runlog, loop.state
    k = state.step = r.step  # a skipped update still consumed its batches: the count moves on
    state.cursor = r.cursor
    if not r.update.applied:
        if runlog.nonfinite(k, r.metrics.loss, r.update.grad_norm):
            state.reason = "nonfinite"
            return False
        state.t_last = time.perf_counter()  # the next step's tok/s counts its own time
        return True
    runlog.finite()
    step_time = time.perf_counter() - state.t_last
    if k % cfg.log_every == 0:
        log_step(loop, r, step_time)
    loop.bar.update(k, r.metrics, step_time)
    if loop.program.evals and cfg.eval_every and k % cfg.eval_every == 0 and loop.dp.is_main:
        s = loop.setup
        runlog.write(run_eval(s.drafter, s.target, s.eval_prompts, s.horizon, step=k))
        s.drafter.train()
    if cfg.ckpt_every and k % cfg.ckpt_every == 0:
        runlog.checkpoint(k, r.cursor, loop.program.script)
    state.t_last = time.perf_counter()  # this tail's time stays out of the next step
    return True


def log_step(loop: TrainLoop, r: StepResult, step_time: float) -> None:
    """The step's metrics record (rank 0) and this rank's own (``--log-all-ranks``)."""
    m = r.metrics
    busy: dict[str, float] | None = None
    fill: dict[str, float] | None = None
    if loop.program.full_record:
        busy, fill = loop.sample()
        record = Metrics(
            step=r.step,
            time=time.time(),
            epoch=r.epoch,
            lr=r.lr,
            tok_per_sec=m.n_tokens / step_time if step_time > 0 else 0.0,
            grad_norm=r.update.grad_norm,
            stage_busy=busy,
            queue_fill=fill,
            **m.to_log_dict(),
            **r.walk,
        )
    else:
        record = Metrics(
            step=r.step, time=time.time(), epoch=r.epoch, loss=m.loss, acc=m.acc, lr=r.lr
        )
    loop.runlog.write(record)
    loop.runlog.rank_metrics(
        r.step, r.epoch, r.lr, r.local, r.update.grad_norm, step_time, r.sync_wait, busy, fill
    )


def end_of_steps(loop: TrainLoop) -> None:
    """The launch's verdict and final checkpoint: a launch that skipped every update failed
    (reason "nonfinite", no checkpoint); otherwise the last step is saved unless it just was."""
    state, runlog = loop.state, loop.runlog
    if state.reason != "signal":
        state.error = runlog.nothing_trained(state.step)
    if state.error is not None:
        state.reason = "nonfinite"
    elif state.step > loop.setup.start_step and runlog.last_ckpt_step != state.step:
        runlog.checkpoint(state.step, state.cursor, loop.program.script)


def close_log(loop: TrainLoop, reason: str, error: str | None) -> None:
    """Write the closing ``stop`` record at the step reached and close the logs."""
    loop.runlog.stop(loop.state.step, reason, error)
    loop.runlog.close()


def end_run(loop: TrainLoop, reason: str, error: str | None = None) -> RunResult:
    """Close the logs and say how the launch ended (``reason`` "error": exit code 1)."""
    close_log(loop, reason, error)
    step = loop.state.step
    return RunResult(
        step=step,
        reason=reason,
        exit_code=exit_code_for(reason, loop.stop.signum),
        error=error,
        summary=summarize(
            loop.program.script, loop.setup, loop.runlog, loop.bar, step, reason, error
        ),
    )

"""``dflash-train sync``: the lock-step trainer (the "old script" a team migrates from).

One loop, one thing at a time: load a token-budget batch, run the target forward, the drafter
forward and backward, the optimizer step. Nothing overlaps, which is what makes it the baseline the
pipeline is measured against. It writes the plain legacy metrics record (``step, time, epoch, loss,
acc, lr``: no ``tok_per_sec``), plus the run header, checkpoint, non-finite and stop events.

Its step and loop are the pipeline's (:mod:`pipelines.train_step`, :mod:`pipelines.train_loop`):
what differs is where the micro-batch comes from (read here, the target forward inside the
step) and the choices in :data:`~pipelines.train_loop.SYNC`.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

from .config import TrainConfig
from .csp import StopRequest
from .distributed import DataParallel, init_data_parallel, shutdown_data_parallel
from .outcome import RunResult, make_progress
from .run_setup import Setup, build_setup
from .runlog import RunLog
from .train_loop import SYNC, TrainLoop, close_log, end_run, run_steps
from .train_step import read_micro_batch

SCRIPT = SYNC.script


def run_sync(cfg: TrainConfig, stop: StopRequest | None = None) -> RunResult:
    """Train in lock-step until ``cfg.max_steps``, a stop request, or too many non-finite steps.

    Args:
        cfg: validated config.
        stop: set (by a signal handler) to finish the current step, checkpoint and return.

    Raises:
        TrainingError: the run cannot start (bad target, data or checkpoint).
    """
    stop = stop or StopRequest()
    started_at = time.monotonic()
    dp = init_data_parallel(cfg.device)  # before anything is loaded: a bad launch is one line
    try:
        return _run(dataclasses.replace(cfg, device=dp.device), stop, dp, started_at)
    finally:
        shutdown_data_parallel(dp)


def _run(cfg: TrainConfig, stop: StopRequest, dp: DataParallel, started_at: float) -> RunResult:
    setup = build_setup(cfg, dp)
    with setup.lock:  # the checkpoint directory and the log are this launch's until it ends
        return _train(setup, stop, dp, started_at)


def _train(setup: Setup, stop: StopRequest, dp: DataParallel, started_at: float) -> RunResult:
    loader = setup.loader
    runlog = RunLog(setup, SCRIPT, steps_per_epoch=float(loader.batches_per_epoch()), dp=dp)
    loop = TrainLoop(setup, dp, stop, runlog, make_progress(setup, dp, started_at), SYNC)
    seqs = itertools.count()
    try:
        # One micro-batch per step, read when the step needs it: nothing runs ahead.
        run_steps(loop, lambda: read_micro_batch(loader, next(seqs)))
    except Exception as e:  # noqa: BLE001 - any failure ends the run with a stop record
        return end_run(loop, "error", f"{type(e).__name__}: {e}")
    except KeyboardInterrupt:  # a second Ctrl-C: stop now, without a final checkpoint
        close_log(loop, "signal", "interrupted twice: stopped without a final checkpoint")
        raise
    return end_run(loop, loop.state.reason, loop.state.error)

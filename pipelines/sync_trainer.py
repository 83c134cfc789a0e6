"""``dflash-train sync``: the lock-step trainer (the "old script" a team migrates from).

One loop, one thing at a time: load a token-budget batch, run the target forward, the drafter
forward and backward, the optimizer step. Nothing overlaps, which is what makes it the baseline the
pipeline is measured against. It writes the plain legacy metrics record (``step, time, epoch, loss,
acc, lr``: no ``tok_per_sec``), plus the run header, checkpoint, non-finite and stop events.
"""

from __future__ import annotations

import dataclasses
import time

from dflash import compute_loss_and_metrics

from .config import TrainConfig
from .csp import StopRequest
from .devices import compute_precision
from .distributed import DataParallel, init_data_parallel, shutdown_data_parallel
from .log_schema import Metrics
from .outcome import RunResult, exit_code_for, make_progress, summarize
from .run_setup import Setup, anchor_generator, build_setup
from .runlog import RunLog
from .update import apply_update, grad_scale_for, reduce_step

SCRIPT = "sync"


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
    cfg = setup.cfg  # max_steps resolved from --epochs
    drafter, model, target, loader = setup.drafter, setup.model, setup.target, setup.loader
    runlog = RunLog(setup, SCRIPT, steps_per_epoch=float(loader.batches_per_epoch()), dp=dp)
    step, reason = setup.start_step, "max_steps"
    cursor = loader.state_dict()
    drafter.train()
    precision = compute_precision(cfg.device, cfg.dtype)
    t_last = time.perf_counter()  # start of the current step (progress, per-rank log)
    bar = make_progress(setup, dp, started_at)
    try:
        with bar:
            while step < cfg.max_steps:
                if dp.any(stop.is_set()):  # every rank stops after the same step
                    reason = "signal"
                    break
                k = step + 1
                batch = {n: t.to(cfg.device) for n, t in loader.next_batch().items()}
                cursor = loader.state_dict()
                with precision:
                    out = compute_loss_and_metrics(
                        model, target, batch, anchor_generator(cfg.seed, k, dp.rank)
                    )
                # The unnormalised sum (DDP averages it over the ranks in this backward), scaled
                # below by world_size / the loss weight of all ranks together.
                sync_wait = dp.wait_for_others() if runlog.per_rank else 0.0
                out.loss_sum.backward()
                m = reduce_step(dp, out.metrics)
                lr = setup.schedule.lr_at(k)
                scale = grad_scale_for(dp, m)
                upd = apply_update(drafter, setup.optimizer, lr, cfg.grad_clip, m.loss, scale)
                step = k  # a skipped update still consumed its batch: the count moves on
                if not upd.applied:
                    if runlog.nonfinite(k, m.loss, upd.grad_norm):
                        reason = "nonfinite"
                        break
                    t_last = time.perf_counter()
                    continue
                runlog.finite()
                if k % cfg.log_every == 0:
                    runlog.write(
                        Metrics(
                            step=k,
                            time=time.time(),
                            epoch=loader.epoch_float,
                            loss=m.loss,
                            acc=m.acc,
                            lr=lr,
                        )
                    )
                    runlog.rank_metrics(
                        k,
                        loader.epoch_float,
                        lr,
                        out.metrics,
                        upd.grad_norm,
                        time.perf_counter() - t_last,
                        sync_wait,
                    )
                bar.update(k, m, time.perf_counter() - t_last)
                if cfg.ckpt_every and k % cfg.ckpt_every == 0:
                    runlog.checkpoint(k, cursor, SCRIPT)
                t_last = time.perf_counter()  # checkpoint time stays out of the next step
        failed = runlog.nothing_trained(step) if reason != "signal" else None
        if failed is None and step > setup.start_step and runlog.last_ckpt_step != step:
            runlog.checkpoint(step, cursor, SCRIPT)
    except Exception as e:  # noqa: BLE001 - any failure ends the run with a stop record
        error = f"{type(e).__name__}: {e}"
        runlog.stop(step, "error", error)
        runlog.close()
        return RunResult(
            step=step,
            reason="error",
            exit_code=1,
            error=error,
            summary=summarize(SCRIPT, setup, runlog, bar, step, "error", error),
        )
    except KeyboardInterrupt:  # a second Ctrl-C: stop now, without a final checkpoint
        runlog.stop(step, "signal", "interrupted twice: stopped without a final checkpoint")
        runlog.close()
        raise
    if failed is not None:
        reason = "nonfinite"
    runlog.stop(step, reason, failed)
    runlog.close()
    return RunResult(
        step=step,
        reason=reason,
        exit_code=exit_code_for(reason, stop.signum),
        error=failed,
        summary=summarize(SCRIPT, setup, runlog, bar, step, reason, failed),
    )

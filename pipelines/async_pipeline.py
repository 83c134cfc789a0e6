"""``dflash-train pipeline``: the CSP training pipeline (the "new script").

Stage graph (each stage a thread, each arrow a bounded channel of ``channel_capacity`` items)::

    loader --batches--> target0 ┐
                    └-> target1 ┼--features--> drafter (fwd/bwd x grad_accum, optimizer step,
                    └-> ...     ┘               schedule, clip, log, eval, checkpoint)

* ``loader`` packs token-budget micro-batches from the resumable data stream and tags each with a
  sequence number and the data cursor AFTER it;
* ``target<i>`` (one per ``--target-devices`` entry) runs the frozen target forward and ships the
  hidden-state features to the drafter's device;
* ``drafter`` restores the loader's order (several target workers can finish out of order), runs
  forward/backward on ``grad_accum`` micro-batches, then clips, steps the optimizer at the
  scheduled rate, logs, evaluates and checkpoints. The update has to stay in this thread: the next
  micro-batch's forward needs the updated weights.

The target forward of the next micro-batches overlaps the drafter's work on the current ones,
which is the whole point: on one device per stage the step time tends to the slowest stage's.

Resume equivalence with read-ahead: the checkpoint stores the cursor carried by the last
micro-batch the drafter consumed, so batches the loader had prefetched are simply read again.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dflash import StepMetrics, TargetModel, compute_loss_and_metrics, walk_batch

from .config import PipelineConfig
from .csp import Channel, Graph, Stage, StageError, StopRequest
from .devices import compute_precision, dtype_of
from .distributed import DataParallel, init_data_parallel, shutdown_data_parallel
from .evaluate import run_eval
from .log_schema import Metrics
from .outcome import RunResult, exit_code_for, make_progress, summarize
from .run_setup import Setup, anchor_generator, build_setup, load_target
from .runlog import RunLog, walk_due
from .update import apply_update, grad_scale_for, reduce_step

SCRIPT = "pipeline"

#: Test hook: ``inject(stage_name, item_index, item)`` runs before a stage handles an item (the
#: loader's item is None); raising injects a failure, changing the item injects bad data.
FaultHook = Callable[[str, int, "MicroBatch | None"], None]


@dataclass
class MicroBatch:
    """One token-budget batch travelling through the graph."""

    seq: int
    """Position in the loader's stream (restores order after parallel target workers)."""
    batch: dict[str, torch.Tensor]
    cursor: dict
    """Data cursor after this batch: what a checkpoint taken after consuming it must store."""
    epoch: float
    features: torch.Tensor | None = None


@dataclass
class _Outcome:
    """Where the drafter stage got to, read by the caller after the graph stops."""

    step: int
    reason: str = "max_steps"
    error: str | None = None


def _no_fault(stage: str, i: int, item: MicroBatch | None = None) -> None:
    pass


def target_workers(setup: Setup, devices: list[str]) -> list[TargetModel]:
    """One target per worker; workers on the same device share one (frozen, read-only) model."""
    cfg = setup.cfg
    by_device: dict[str, TargetModel] = {cfg.device: setup.target}
    for dev in devices:
        if dev not in by_device:
            # Checked against this device's memory before it is built, as the first copy was.
            by_device[dev] = load_target(
                cfg.target, dev, dtype_of(cfg.dtype), check_memory=cfg.check_memory
            )
    return [by_device[dev] for dev in devices]


def cpu_threads_per_stage(cfg: PipelineConfig, cores: int | None = None) -> int:
    """torch intra-op threads when the compute stages share the CPU (``torch_threads = 0``).

    The target workers and the drafter run at the same time; with torch's default (one thread
    per core in EVERY stage) they oversubscribe the cores and spin against each other. Splitting
    the cores between the stages that compute on the CPU keeps one thread per core. (The setting
    is process-wide in torch, hence one value for all stages.)
    """
    on_cpu = sum(d == "cpu" for d in cfg.target_devices) + (cfg.device == "cpu")
    if on_cpu == 0:
        return torch.get_num_threads()
    if cores is None:  # the cores this process may run on
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // on_cpu)


def run_pipeline(
    cfg: PipelineConfig, stop: StopRequest | None = None, inject: FaultHook | None = None
) -> RunResult:
    """Train with the CSP stage graph until ``cfg.max_steps``, a stop request or a failure.

    Args:
        cfg: validated pipeline config.
        stop: set (by a signal handler) to finish the current step, checkpoint and return.
        inject: test hook called in each stage before each item (raise to inject a failure).

    Returns:
        The run's outcome; a stage failure gives reason "error" and exit code 1 (the error is
        also in the ``stop`` record).

    Raises:
        TrainingError: the run cannot start (bad target, data or checkpoint).
    """
    stop = stop or StopRequest()
    started_at = time.monotonic()
    dp = init_data_parallel(cfg.device, cfg.target_devices)
    try:
        placed = dataclasses.replace(cfg, device=dp.device, target_devices=list(dp.target_devices))
        return _run(placed, stop, inject or _no_fault, dp, started_at)
    finally:
        shutdown_data_parallel(dp)


def _run(
    cfg: PipelineConfig, stop: StopRequest, inject: FaultHook, dp: DataParallel, started_at: float
) -> RunResult:
    setup = build_setup(cfg, dp)
    with setup.lock:  # the checkpoint directory and the log are this launch's until it ends
        return _train(setup, stop, inject, dp, started_at)


def _train(
    setup: Setup, stop: StopRequest, inject: FaultHook, dp: DataParallel, started_at: float
) -> RunResult:
    cfg = setup.cfg  # max_steps resolved from --epochs
    if not cfg.torch_threads:
        torch.set_num_threads(cpu_threads_per_stage(cfg))
    workers = target_workers(setup, cfg.target_devices)
    drafter, loader = setup.drafter, setup.loader
    layer_ids = drafter.config.target_layer_ids
    bpe = loader.batches_per_epoch()
    runlog = RunLog(setup, SCRIPT, steps_per_epoch=bpe / cfg.grad_accum, dp=dp)

    ch_batches = Channel("batches", cfg.channel_capacity)
    ch_features = Channel("features", cfg.channel_capacity)
    outcome = _Outcome(step=setup.start_step)
    bar = make_progress(setup, dp, started_at)
    graph: Graph  # assigned below; the drafter stage samples its accounting

    def loader_stage() -> None:
        seq = 0
        while True:
            inject("loader", seq, None)
            batch = loader.next_batch()
            ch_batches.put(
                MicroBatch(
                    seq=seq, batch=batch, cursor=loader.state_dict(), epoch=loader.epoch_float
                )
            )
            seq += 1

    def make_target_stage(name: str, target: TargetModel, device: str) -> Callable[[], None]:
        def target_stage() -> None:
            i = 0
            while True:
                item = ch_batches.get()
                inject(name, i, item)
                i += 1
                ids = item.batch["input_ids"].to(device, non_blocking=True)
                mask = item.batch["attention_mask"].to(device, non_blocking=True)
                feats = target.forward(ids, layer_ids, mask, logits=False).features
                item.features = feats.to(cfg.device)
                ch_features.put(item)

        return target_stage

    def drafter_stage() -> None:
        pending: dict[int, MicroBatch] = {}
        next_seq = 0
        consumed = 0

        def next_micro() -> MicroBatch:
            nonlocal next_seq
            while next_seq not in pending:
                item = ch_features.get()
                pending[item.seq] = item
            item = pending.pop(next_seq)
            next_seq += 1
            return item

        step = setup.start_step
        cursor = loader.state_dict()  # what a checkpoint before any step would store
        drafter.train()
        precision = compute_precision(cfg.device, cfg.dtype)
        t_last = time.perf_counter()
        with bar:
            while step < cfg.max_steps:
                if dp.any(stop.is_set()):  # every rank stops after the same step
                    outcome.reason = "signal"
                    break
                k = step + 1
                m = StepMetrics(block_size=drafter.config.block_size)
                epoch, sync_wait = 0.0, 0.0
                for micro in range(cfg.grad_accum):
                    item = next_micro()
                    inject("drafter", consumed, item)
                    consumed += 1
                    batch = {n: t.to(cfg.device, non_blocking=True) for n, t in item.batch.items()}
                    # Index in the step's global order (ranks get batches round-robin).
                    anchors = anchor_generator(cfg.seed, k, micro * dp.world_size + dp.rank)
                    # DDP all-reduces in the last micro-batch's backward only.
                    last = micro == cfg.grad_accum - 1
                    with dp.grad_sync(setup.model, last=last):
                        with precision:
                            out = compute_loss_and_metrics(
                                setup.model, setup.target, batch, anchors, features=item.features
                            )
                        # Backpropagate the unnormalised sum; scaling the accumulated gradient by
                        # world_size / the step's total loss weight below gives the exact
                        # per-token mean over the step (not a mean of micro-batch means) without
                        # knowing the total in advance.
                        if last and runlog.per_rank:
                            sync_wait = dp.wait_for_others()
                        out.loss_sum.backward()
                    m = m + out.metrics
                    cursor, epoch = item.cursor, item.epoch
                walk = {}
                if walk_due(cfg, k) and dp.is_main:
                    # The walked tau before the update (the drafter state the step's other
                    # metrics describe), without gradients; its time counts in this step's tok/s.
                    # On the held-out split: sequences never trained on, in every epoch. Without
                    # one, on the step's last micro-batch (its own target features): not yet
                    # trained on in the first epoch only.
                    with precision:
                        if setup.held_out is not None:
                            walk = setup.held_out.walk(
                                drafter,
                                setup.target,
                                layer_ids,
                                setup.horizon,
                                record=k // (cfg.log_every * cfg.walk_every) - 1,
                                n=cfg.walk_seqs,
                                device=cfg.device,
                            )
                        else:
                            walk = walk_batch(
                                drafter,
                                setup.target,
                                batch,
                                item.features,
                                horizon=setup.horizon,
                                max_seqs=cfg.walk_seqs,
                            ).to_log_dict()
                local, m = m, reduce_step(dp, m)
                lr = setup.schedule.lr_at(k)
                scale = grad_scale_for(dp, m)
                upd = apply_update(drafter, setup.optimizer, lr, cfg.grad_clip, m.loss, scale)
                step = outcome.step = k
                if not upd.applied:
                    if runlog.nonfinite(k, m.loss, upd.grad_norm):
                        outcome.reason = "nonfinite"
                        break
                    t_last = time.perf_counter()  # the next step's tok/s counts its own time
                    continue
                runlog.finite()
                now = time.perf_counter()
                step_time = now - t_last
                tok_per_sec = m.n_tokens / step_time if step_time > 0 else 0.0
                t_last = now
                if k % cfg.log_every == 0:
                    busy, fill = graph.sample()
                    runlog.write(
                        Metrics(
                            step=k,
                            time=time.time(),
                            epoch=epoch,
                            lr=lr,
                            tok_per_sec=tok_per_sec,
                            grad_norm=upd.grad_norm,
                            stage_busy=busy,
                            queue_fill=fill,
                            **m.to_log_dict(),
                            **walk,
                        )
                    )
                    runlog.rank_metrics(
                        k, epoch, lr, local, upd.grad_norm, step_time, sync_wait, busy, fill
                    )
                bar.update(k, m, step_time)
                if cfg.eval_every and k % cfg.eval_every == 0 and dp.is_main:
                    runlog.write(
                        run_eval(drafter, setup.target, setup.eval_prompts, setup.horizon, step=k)
                    )
                    drafter.train()
                    t_last = time.perf_counter()  # keep eval time out of tok/s
                if cfg.ckpt_every and k % cfg.ckpt_every == 0:
                    runlog.checkpoint(k, cursor, SCRIPT)
                    t_last = time.perf_counter()
        if outcome.reason != "signal":
            outcome.error = runlog.nothing_trained(step)
        if outcome.error is not None:
            outcome.reason = "nonfinite"
        elif step > setup.start_step and runlog.last_ckpt_step != step:
            runlog.checkpoint(step, cursor, SCRIPT)

    stages = [Stage("loader", loader_stage, outputs=[ch_batches])]
    for i, (dev, target) in enumerate(zip(cfg.target_devices, workers)):
        name = f"target{i}"
        stages.append(
            Stage(
                name,
                make_target_stage(name, target, dev),
                inputs=[ch_batches],
                outputs=[ch_features],
            )
        )
    stages.append(Stage("drafter", drafter_stage, inputs=[ch_features]))
    graph = Graph(stages)
    try:
        graph.run()
    except StageError as e:
        runlog.stop(outcome.step, "error", str(e))
        runlog.close()
        return RunResult(
            step=outcome.step,
            reason="error",
            exit_code=1,
            error=str(e),
            summary=summarize(SCRIPT, setup, runlog, bar, outcome.step, "error", str(e)),
        )
    except BaseException as e:  # KeyboardInterrupt from a second signal: stages already stopped
        runlog.stop(outcome.step, "signal", f"{type(e).__name__}: interrupted twice, no checkpoint")
        runlog.close()
        raise
    runlog.stop(outcome.step, outcome.reason, outcome.error)
    runlog.close()
    return RunResult(
        step=outcome.step,
        reason=outcome.reason,
        exit_code=exit_code_for(outcome.reason, stop.signum),
        error=outcome.error,
        summary=summarize(SCRIPT, setup, runlog, bar, outcome.step, outcome.reason, outcome.error),
    )

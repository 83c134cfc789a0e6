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

Each stage is a module-level function taking its channels and an explicit state object
(:func:`loader_stage`, :func:`target_stage`, :func:`drafter_stage`); :func:`build_graph` wires
them. The drafter stage runs the loop the lock-step trainer runs too (:mod:`pipelines.train_loop`):
each step is :func:`~pipelines.train_step.train_step`, and the logger/checkpoint work is that
loop's :func:`~pipelines.train_loop.step_tail`, in the drafter's thread because a checkpoint must
hold the weights of the step it names.

Where a new stage goes: work that can run ahead of the optimizer (packing, a tokenizer, a second
target, feature compression) is a new ``<name>_stage(inputs, outputs, state)`` function here, fed
and drained by bounded channels (:class:`~pipelines.csp.Channel`), and one ``Stage`` entry in
:func:`build_graph`; its busy fraction and its channels' fill then appear in ``stage_busy`` and
``queue_fill`` by themselves. Work that needs the weights between two updates is not a stage: it
goes in ``train_step`` (before the update, like the walked tau) or ``step_tail`` (after it, like
the eval and the checkpoint).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from dflash import TargetModel
from dflash.data import TokenBudgetLoader

from .config import PipelineConfig
from .csp import Channel, Graph, Stage, StageError, StopRequest
from .devices import dtype_of
from .distributed import DataParallel, init_data_parallel, shutdown_data_parallel
from .outcome import RunResult, make_progress
from .run_setup import Setup, build_setup, load_target
from .runlog import RunLog
from .train_loop import PIPELINE, TrainLoop, close_log, end_run, run_steps
from .train_step import MicroBatch, read_micro_batch

SCRIPT = PIPELINE.script

#: Test hook: ``inject(stage_name, item_index, item)`` runs before a stage handles an item (the
#: loader's item is None); raising injects a failure, changing the item injects bad data.
FaultHook = Callable[[str, int, "MicroBatch | None"], None]


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
    runlog = RunLog(
        setup, SCRIPT, steps_per_epoch=setup.loader.batches_per_epoch() / cfg.grad_accum, dp=dp
    )
    loop = TrainLoop(setup, dp, stop, runlog, make_progress(setup, dp, started_at), PIPELINE)
    graph = build_graph(setup, loop, workers, inject)
    loop.sample = graph.sample  # the metrics records' stage_busy and queue_fill
    try:
        graph.run()
    except StageError as e:
        return end_run(loop, "error", str(e))
    except BaseException as e:  # KeyboardInterrupt from a second signal: stages already stopped
        close_log(loop, "signal", f"{type(e).__name__}: interrupted twice, no checkpoint")
        raise
    return end_run(loop, loop.state.reason, loop.state.error)


def build_graph(
    setup: Setup, loop: TrainLoop, workers: list[TargetModel], inject: FaultHook
) -> Graph:
    """The stage graph: loader -> one target worker per ``target_devices`` entry -> drafter."""
    cfg = setup.cfg
    batches = Channel("batches", cfg.channel_capacity)
    features = Channel("features", cfg.channel_capacity)
    stages = [Stage("loader", functools.partial(loader_stage, batches, setup.loader, inject))]
    layer_ids = setup.drafter.config.target_layer_ids
    for i, (device, target) in enumerate(zip(cfg.target_devices, workers, strict=True)):
        worker = TargetWorker(f"target{i}", target, device, layer_ids, out_device=cfg.device)
        run = functools.partial(target_stage, batches, features, worker, inject)
        stages.append(Stage(worker.name, run, inputs=[batches], outputs=[features]))
    drafter = functools.partial(drafter_stage, features, loop, inject)
    stages.append(Stage("drafter", drafter, inputs=[features]))
    return Graph(stages)


def loader_stage(batches: Channel, loader: TokenBudgetLoader, inject: FaultHook) -> None:
    """Read micro-batches from the resumable data stream into ``batches``, numbered in order,
    until the graph closes ``batches`` (the loader reads ahead by the channel's capacity)."""
    seq = 0
    while True:
        inject("loader", seq, None)
        batches.put(read_micro_batch(loader, seq))
        seq += 1


@dataclass
class TargetWorker:
    """One target forward worker: its frozen model, where it runs and where it ships to."""

    name: str
    target: TargetModel
    device: str
    layer_ids: list[int]
    """The target layers whose hidden states make the drafter's features."""
    out_device: str
    """The drafter's device."""


def target_stage(
    batches: Channel, features: Channel, worker: TargetWorker, inject: FaultHook
) -> None:
    """Attach the target's hidden-state features to each micro-batch of ``batches`` and pass it
    on to ``features`` (several workers may finish out of order: the drafter reorders)."""
    i = 0
    while True:
        item = batches.get()
        inject(worker.name, i, item)
        i += 1
        ids = item.batch["input_ids"].to(worker.device, non_blocking=True)
        mask = item.batch["attention_mask"].to(worker.device, non_blocking=True)
        feats = worker.target.forward(ids, worker.layer_ids, mask, logits=False).features
        item.features = feats.to(worker.out_device)
        features.put(item)


@dataclass
class InOrder:
    """The drafter's input: the micro-batches of ``features`` in the loader's order."""

    features: Channel
    inject: FaultHook
    next_seq: int = 0
    """The next micro-batch to hand out (= how many were handed out)."""
    pending: dict[int, MicroBatch] = field(default_factory=dict)
    """Micro-batches that arrived before their turn."""

    def __call__(self) -> MicroBatch:
        while self.next_seq not in self.pending:
            item = self.features.get()
            self.pending[item.seq] = item
        item = self.pending.pop(self.next_seq)
        self.inject("drafter", self.next_seq, item)
        self.next_seq += 1
        return item


def drafter_stage(features: Channel, loop: TrainLoop, inject: FaultHook) -> None:
    """Train on the micro-batches of ``features``, in the loader's order: the shared step loop
    (``loop.state`` says where it got to), its log records, evals and checkpoints. The graph ends
    when it returns (max steps, a stop request, too many non-finite steps)."""
    run_steps(loop, InOrder(features, inject))

"""Data parallelism across ranks started by ``torchrun`` (gloo on CPU, NCCL on GPUs).

Each rank runs the whole program (its own loader shard, target workers and drafter replica). The
drafter is wrapped in ``DistributedDataParallel``: the objective calls it through its ``forward``
exactly once per micro-batch (the context projection happens inside that call, and a micro-batch
without any block still runs a dummy forward), so DDP's hooks see every parameter used. The ranks
agree once per optimizer step:

* gradients: DDP averages them over the ranks in the backward of the step's LAST micro-batch (the
  earlier ones run under ``no_sync()``, accumulating locally). Every micro-batch backpropagates its
  unnormalised loss sum, so after DDP's average the step multiplies by
  ``world_size / global loss weight``: the exact per-token mean over every micro-batch of every
  rank, not a mean of per-rank means;
* the step's metric sums (``StepMetrics.as_tensor``), all-reduced, so every rank sees the global
  loss, accuracy and loss weight, and the non-finite decision is the same everywhere;
* the stop flag, so a signal seen by one rank stops every rank after the same step.

Only rank 0 writes the log, checkpoints and runs evals (``--log-all-ranks`` adds one throughput
log per rank). With one process nothing is wrapped and nothing is communicated.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .devices import check_device_available
from .errors import TrainingError


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the ranks (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    """The drafter's device for this rank (see :func:`rank_devices`)."""
    local_rank: int = 0
    target_devices: tuple[str, ...] = ()
    """The target workers' devices for this rank (the pipeline's ``target_devices``, placed)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over ranks, in place (a no-op on one rank)."""
        if self.active:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank."""
        if not self.active:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` in DistributedDataParallel (itself on one rank).

        No buffer sync before each forward: the drafter's only buffers are rotary constants, identical
        everywhere, so there is nothing to sync before every forward. The replicas start equal
        (same seed, or the same checkpoint); DDP also broadcasts rank 0's weights once here.
        """
        if not self.active:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(self.device).index] if self.device.startswith("cuda") else None
        # Newer torch renames the option (and deprecates the old name); same meaning here.
        no_buffer_sync = (
            {"forward_sync_buffers": False}
            if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
            else {"broadcast_buffers": False}
        )
        return DistributedDataParallel(model, device_ids=ids, **no_buffer_sync)

    def grad_sync(self, model: torch.nn.Module, last: bool) -> contextlib.AbstractContextManager:
        """Around one micro-batch's backward: DDP communicates only in the step's last one."""
        if last or not hasattr(model, "no_sync"):
            return contextlib.nullcontext()
        return model.no_sync()

    @property
    def grad_average(self) -> float:
        """What DDP divided the summed gradients by (undone by the step's gradient scale)."""
        return float(self.world_size)

    def wait_for_others(self) -> float:
        """Block until every rank reaches this point; return the seconds spent waiting.

        Used by ``--log-all-ranks`` just before the step's synchronising backward, so that a
        rank's own pace (its step time minus this wait) can be told from the slowest rank's.
        Queued GPU work is finished first so that it counts as this rank's work, not as waiting.
        """
        if not self.active:
            return 0.0
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self.any(False)  # a one-element all-reduce, read back: returns when all ranks sent theirs
        return time.perf_counter() - t0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


#: What torchrun (or any launcher using the env:// rendezvous) sets for every rank.
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launch_env_problem(env: Mapping[str, str]) -> str | None:
    """Why ``env`` is a partial or inconsistent distributed launch (None when usable).

    No launch variable at all means one process; some but not all of them is almost always a
    hand-written launch that would hang in the rendezvous or fail deep inside torch.
    """
    present = [k for k in LAUNCH_ENV if k in env]
    if not present:
        return None
    missing = [k for k in LAUNCH_ENV if k not in env]
    if missing:
        return (
            f"partial distributed environment: {', '.join(present)} set but "
            f"{', '.join(missing)} missing (launch with torchrun --nproc-per-node N ...)"
        )
    try:
        rank, world, local = (int(env[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        port = int(env["MASTER_PORT"])
    except ValueError:
        return "RANK, WORLD_SIZE, LOCAL_RANK and MASTER_PORT must be integers"
    if world < 1 or not 0 <= rank < world or not 0 <= local <= rank or not 0 < port < 65536:
        return f"inconsistent distributed environment: RANK={rank} WORLD_SIZE={world} LOCAL_RANK={local} MASTER_PORT={port}"
    return None


def rank_devices(devices: list[str], local_rank: int) -> list[str]:
    """The devices of the rank ``local_rank`` of a node, from the devices the config names.

    The config describes ONE rank's devices; the ranks of a node take consecutive slices of the
    node's GPUs: explicit ``cuda:i`` becomes ``cuda:(i + local_rank * span)`` where span = the
    largest index named + 1, and a bare ``cuda`` becomes ``cuda:local_rank``. So
    ``--device cuda:0 --target-devices cuda:1,cuda:2,cuda:3`` (three target GPUs feeding one
    drafter GPU) under two ranks per node gives rank 0 GPUs 0 / 1,2,3 and rank 1 GPUs 4 / 5,6,7.
    CPU and MPS devices are shared as they are.
    """
    explicit = [int(d[5:]) for d in devices if d.startswith("cuda:")]
    span = max(explicit) + 1 if explicit else 1
    placed = []
    for d in devices:
        if d == "cuda":
            d = f"cuda:{local_rank}"
        elif d.startswith("cuda:"):
            d = f"cuda:{int(d[5:]) + local_rank * span}"
        placed.append(d)
    return placed


def init_data_parallel(
    device: str, target_devices: list[str] | None = None, env: Mapping[str, str] | None = None
) -> DataParallel:
    """Join the process group when started by ``torchrun`` (``WORLD_SIZE`` > 1), else one rank.

    Every rank places its drafter and target workers with :func:`rank_devices`.

    Raises:
        TrainingError: a partial or inconsistent launch environment (one line).
    """
    env = os.environ if env is None else env
    problem = launch_env_problem(env)
    if problem:
        raise TrainingError(problem)
    targets = list(target_devices or [])
    world = int(env.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DataParallel(device=device, target_devices=tuple(targets))
    rank, local = int(env["RANK"]), int(env["LOCAL_RANK"])
    device, *targets = rank_devices([device, *targets], local)
    if device.startswith("cuda"):
        check_device_available(device)  # one line, before NCCL fails on a missing GPU
        torch.cuda.set_device(torch.device(device))
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return DataParallel(
        rank=rank, world_size=world, device=device, local_rank=local, target_devices=tuple(targets)
    )


def shutdown_data_parallel(dp: DataParallel) -> None:
    if dp.active and dist.is_initialized():
        dist.destroy_process_group()

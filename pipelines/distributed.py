"""Data parallelism across ranks started by ``torchrun`` (gloo on CPU, NCCL on GPUs).

Each rank runs the whole program (its own loader shard, target workers and drafter replica); the
ranks agree once per optimizer step through three collectives on the drafter's device:

* the step's metric sums (``StepMetrics.as_tensor``), so every rank sees the global loss, accuracy
  and loss weight, and the non-finite decision is the same everywhere;
* the accumulated gradients, summed in one flat buffer and divided by the GLOBAL loss weight: the
  exact per-token mean over every micro-batch of every rank (what DDP with ``no_sync`` during
  accumulation computes, done explicitly because the objective calls the drafter's submodules
  directly rather than through one ``forward``);
* the stop flag, so a signal seen by one rank stops every rank after the same step.

Only rank 0 writes the log, checkpoints and runs evals. With one process nothing is communicated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the ranks (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    device: str = "cpu"

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

    def all_reduce_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients over ranks (one flat buffer; missing gradients count as zero)."""
        if not self.active:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


def init_data_parallel(device: str) -> DataParallel:
    """Join the process group when started by ``torchrun`` (``WORLD_SIZE`` > 1), else one rank.

    On CUDA each rank uses ``cuda:LOCAL_RANK`` unless ``device`` names an index explicitly.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DataParallel(device=device)
    rank = int(os.environ["RANK"])
    if device.startswith("cuda"):
        if device == "cuda":
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}"
        torch.cuda.set_device(torch.device(device))
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return DataParallel(rank=rank, world_size=world, device=device)


def shutdown_data_parallel(dp: DataParallel) -> None:
    if dp.active and dist.is_initialized():
        dist.destroy_process_group()

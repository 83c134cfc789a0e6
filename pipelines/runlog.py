"""The log of one launch, shared by both training programs: the ``run_start`` header, each rank's
own metrics (``--log-all-ranks``), checkpoints and their records, the non-finite guard and the
closing ``stop`` record (:class:`RunLog`); and which metrics records carry the walked tau.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from dflash import StepMetrics

from .checkpoints import save_training_checkpoint
from .config import TrainConfig
from .distributed import DataParallel
from .errors import TrainingError
from .log_records import CheckpointRecord, Metrics, NonFiniteRecord, RunStart, StopRecord
from .logwriter import JsonlLog, rank_log_path
from .resume import micro_batches_per_step
from .run_setup import Setup


class RunLog:
    """The log, the checkpoints and the non-finite guard of one launch.

    Args:
        setup: the run being logged.
        script: "sync" or "pipeline" (the ``run_start`` header).
        steps_per_epoch: optimizer steps per data epoch, for the header.
        dp: data-parallel ranks; only rank 0 writes the log and checkpoints, every rank counts
            non-finite steps (their decision must agree).
    """

    def __init__(
        self,
        setup: Setup,
        script: str,
        steps_per_epoch: float | None,
        dp: DataParallel | None = None,
        clock=time.time,
    ) -> None:
        self.setup = setup
        self.cfg = setup.cfg
        self.clock = clock
        dp = dp or DataParallel(device=self.cfg.device)
        self.dp = dp
        try:
            self.log = JsonlLog(self.cfg.log) if dp.is_main else None
            self.rank_log = (
                JsonlLog(rank_log_path(self.cfg.log, dp.rank)) if self.cfg.log_all_ranks else None
            )
        except OSError as e:  # LogWriteError: one line naming the file
            raise TrainingError(str(e)) from None
        self.nonfinite_in_a_row = 0
        self.updates = 0
        """Optimizer updates applied in this launch (a skipped, non-finite step is not one)."""
        self.last_ckpt_step: int | None = None
        self.last_ckpt_path: Path | None = None
        header = RunStart(
            script=script,
            time=clock(),
            config=self.cfg.to_dict(),
            schedule=setup.schedule.to_dict(),
            block_size=setup.block_size,
            steps_per_epoch=steps_per_epoch,
            world_size=dp.world_size,
            resumed_from=setup.resumed_from,
            resume_schedule=self.cfg.resume_schedule if setup.resumed_from else None,
            walk_held_out=setup.held_out.to_header() if setup.held_out else None,
        )
        try:
            self.write(header)
            self.write_rank(dataclasses.replace(header, rank=dp.rank))
        except OSError as e:  # e.g. a full disk: nothing has run yet
            self.close()
            raise TrainingError(str(e)) from None

    @property
    def per_rank(self) -> bool:
        """Whether this launch writes a per-rank log (``--log-all-ranks``)."""
        return self.rank_log is not None

    def write(self, record: Any) -> None:
        """Append to the global log (rank 0 only; a no-op elsewhere)."""
        if self.log is not None:
            self.log.write(record)

    def write_rank(self, record: Any) -> None:
        """Append to this rank's own log (a no-op without ``--log-all-ranks``)."""
        if self.rank_log is not None:
            self.rank_log.write(record)

    def rank_metrics(
        self,
        step: int,
        epoch: float,
        lr: float,
        local: StepMetrics,
        grad_norm: float,
        step_time: float,
        sync_wait: float,
        stage_busy: dict[str, float] | None = None,
        queue_fill: dict[str, float] | None = None,
    ) -> None:
        """This rank's own view of a step: its local metric sums and its own throughput
        (real tokens / (step time - time waiting for the other ranks))."""
        if self.rank_log is None:
            return
        own = step_time - sync_wait
        self.write_rank(
            Metrics(
                step=step,
                time=self.clock(),
                epoch=epoch,
                lr=lr,
                tok_per_sec=local.n_tokens / own if own > 0 else 0.0,
                grad_norm=grad_norm,
                stage_busy=stage_busy or {},
                queue_fill=queue_fill or {},
                step_time=step_time,
                sync_wait=sync_wait,
                **local.to_log_dict(),
            )
        )

    def nonfinite(self, step: int, loss: float, grad_norm: float | None) -> bool:
        """Record a skipped update; True when the run must stop (too many in a row)."""
        self.nonfinite_in_a_row += 1
        self.write(
            NonFiniteRecord(
                step=step,
                time=self.clock(),
                loss=loss,
                grad_norm=grad_norm,
                consecutive=self.nonfinite_in_a_row,
            )
        )
        return self.nonfinite_in_a_row >= self.cfg.max_nonfinite

    def finite(self) -> None:
        self.nonfinite_in_a_row = 0
        self.updates += 1

    def nothing_trained(self, step: int) -> str | None:
        """The error of a launch that ran steps but skipped every update (e.g. data with no
        supervised block: every loss NaN): it failed, whatever its step count says, and its
        drafter is not worth a checkpoint. None when it trained."""
        ran = step - self.setup.start_step
        if ran <= 0 or self.updates:
            return None
        return (
            f"every step of this launch ({ran}) was skipped: the loss or gradient was never "
            f"finite, so nothing was trained and no checkpoint was written"
        )

    def checkpoint(self, step: int, cursor: dict[str, Any], script: str) -> Path | None:
        """Write ``step-NNNNNN/`` atomically (rank 0), then its log record."""
        self.last_ckpt_step = step
        if self.log is None:
            return None
        s = self.setup
        path = save_training_checkpoint(
            Path(self.cfg.ckpt_dir),
            step,
            s.drafter,
            s.optimizer,
            state={
                "step": step,
                "cursor": cursor,
                "schedule": s.schedule.to_dict(),
                "script": script,
                "seed": self.cfg.seed,
                "world_size": self.dp.world_size,
                "micro_batches": micro_batches_per_step(self.cfg),
                "walk_held_out": s.held_out.to_header() if s.held_out else {},
            },
        )
        self.last_ckpt_path = path
        self.write(CheckpointRecord(step=step, time=self.clock(), path=str(path)))
        return path

    def stop(self, step: int, reason: str, error: str | None = None) -> None:
        """The closing record; a log that cannot take it (the failure being reported may be
        that very log, e.g. a full disk) is skipped: the error still reaches stderr."""
        record = StopRecord(step=step, time=self.clock(), reason=reason, error=error)
        for write in (self.write, self.write_rank):
            try:
                write(record)
            except OSError:
                pass

    def close(self) -> None:
        for log in (self.log, self.rank_log):
            if log is not None:
                log.close()


def walk_due(cfg: TrainConfig, step: int) -> bool:
    """Whether step ``step``'s metrics record carries the walked tau (every ``walk_every``-th
    record)."""
    return bool(cfg.walk_every) and step % (cfg.log_every * cfg.walk_every) == 0

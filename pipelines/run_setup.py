"""What both training programs share: building the models, the update rule, checkpoints, logging.

The lock-step trainer and the CSP pipeline differ only in how batches reach the drafter; the
drafter, its optimizer, the schedule, the non-finite guard and the checkpoint format are the same,
so a run can move from one program to the other (``--resume``) and continue its step count.

Reproducibility rules that make resumed runs match uninterrupted ones:

* the data order depends only on (seed, cursor), and the cursor saved is the one after the last
  batch the drafter CONSUMED (never a loader's read-ahead position);
* the anchor draw of micro-batch ``i`` of step ``s`` uses a generator seeded from
  (seed, s, i): no RNG state has to be carried across a restart.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dflash import DFlashConfig, DFlashDraftModel, StepMetrics, TargetModel
from dflash.checkpoint import CheckpointError
from dflash.data import (
    DEFAULT_DATA_DIR,
    DEFAULT_TARGET_DIR,
    Cursor,
    TokenBudgetLoader,
    load_dataset,
    load_eval_prompts,
)

from .checkpoint_state import check_cursor_fits
from .checkpoints import checkpoint_config, restore_training_checkpoint, save_training_checkpoint
from .config import BUNDLED, TrainConfig
from .devices import check_device_available, dtype_of
from .distributed import DataParallel
from .errors import TrainingError
from .log_schema import CheckpointRecord, Metrics, NonFiniteRecord, RunStart, StopRecord
from .logwriter import JsonlLog
from .memory import check_fits, estimate_for_run
from .preflight import (
    check_checkpoint_dir,
    check_torch_threads,
    check_writable_file,
    tidy_checkpoints,
)
from .progress import RunSummary, StepProgress
from .schedule import Schedule


def rank_log_path(log: str | Path, rank: int) -> Path:
    """``logs/train.jsonl`` -> ``logs/train.rank3.jsonl``: rank 3's log, beside the main one."""
    p = Path(log)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.jsonl'}")


def resolve_target(target: str) -> str:
    return str(DEFAULT_TARGET_DIR) if target == BUNDLED else target


def resolve_data(data: str) -> str:
    return str(DEFAULT_DATA_DIR) if data == BUNDLED else data


def anchor_generator(seed: int, step: int, micro: int) -> torch.Generator:
    """The CPU generator for the anchor draw of micro-batch ``micro`` of optimizer step ``step``.

    A pure function of its arguments, so a resumed run draws the same anchors as an uninterrupted
    one without saving RNG state. With data parallelism ``micro`` is the micro-batch's index in
    the step's GLOBAL order (``local_micro * world_size + rank``: the loader deals batches to the
    ranks round-robin), so W ranks x A micro-batches reproduce one rank x W*A exactly.
    """
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + micro)


@dataclass
class Setup:
    """Everything a training program needs, built (and possibly resumed) before any step runs."""

    cfg: TrainConfig
    target: TargetModel
    drafter: DFlashDraftModel
    optimizer: torch.optim.Optimizer
    loader: TokenBudgetLoader
    schedule: Schedule
    start_step: int = 0
    resumed_from: dict[str, Any] | None = None
    eval_prompts: list[list[int]] = field(default_factory=list)
    model: torch.nn.Module | None = None
    """What forward/backward call: the drafter in DistributedDataParallel on several ranks, the
    drafter itself on one. Checkpoints and evals use ``drafter`` (same parameters)."""
    horizon: int = 0
    """Tokens per response of the eval and of the walked tau (the prefill token included):
    ``eval_new_tokens``, default the longest training response."""

    def __post_init__(self) -> None:
        if self.model is None:
            self.model = self.drafter

    @property
    def block_size(self) -> int:
        return self.drafter.config.block_size


def build_setup(cfg: TrainConfig, dp: DataParallel | None = None) -> Setup:
    """Load the target and data, build (or resume) the drafter and optimizer.

    Args:
        cfg: the validated config (``cfg.device`` holds the drafter and one target copy).
        dp: this rank's place among data-parallel ranks (default: a single process).

    Raises:
        TrainingError: the target, data or checkpoint cannot be used.
    """
    preflight(cfg, dp)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    for dev in [cfg.device, *getattr(cfg, "target_devices", [])]:
        check_device_available(dev)
    dtype = dtype_of(cfg.dtype)
    try:
        target = TargetModel.from_pretrained(resolve_target(cfg.target),
                                             device=cfg.device, dtype=dtype)
        dataset = load_dataset(resolve_data(cfg.data))
        prompts = load_eval_prompts(resolve_data(cfg.data), n=cfg.eval_prompts)
    except ValueError as e:
        raise TrainingError(str(e)) from None
    vocab = target.config.vocab_size
    if int(dataset.tokens.max()) >= vocab:
        raise TrainingError(f"data {cfg.data} holds token ids up to {int(dataset.tokens.max())}: "
                            f"not made for target {cfg.target} (vocabulary {vocab})")

    if cfg.resume is not None:
        # A resumed run keeps the checkpoint's architecture; it must still fit this target.
        saved = checkpoint_config(cfg.resume)
        dcfg = DFlashConfig.for_target(target.config, **_drafter_overrides(saved))
        bad = [m for m in dcfg.mismatches(saved) if m != "target_name"]
        if bad:
            raise TrainingError(
                f"checkpoint {cfg.resume} does not fit target {cfg.target}: fields {bad} differ"
            )
        dcfg = saved
    else:
        overrides = dict(cfg.drafter)
        # The data generator records the tokenizer's mask token; prefer it to for_target's guess.
        if "mask_token_id" not in overrides and "mask_token_id" in dataset.meta:
            overrides["mask_token_id"] = int(dataset.meta["mask_token_id"])
        dcfg = DFlashConfig.for_target(target.config, **overrides)

    if cfg.check_memory:  # before the drafter, its optimizer and any activation exist
        check_fits(estimate_for_run(cfg, dcfg, target.config, dataset), cfg.token_budget)

    torch.manual_seed(cfg.seed)  # drafter initialisation
    # float32 master weights whatever the target's dtype (see compute_precision).
    drafter = DFlashDraftModel(dcfg).to(device=cfg.device)
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=cfg.peak_lr,
                                  weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    start_step, cursor, resumed_from, saved_schedule = 0, None, None, None
    dp = dp or DataParallel(device=cfg.device)
    if cfg.resume is not None:
        state = restore_training_checkpoint(cfg.resume, drafter, optimizer, device=cfg.device)
        try:
            check_cursor_fits(state, cfg.resume, len(dataset))
        except CheckpointError as e:
            raise TrainingError(f"cannot resume: {e}") from None
        # The AdamW moments travel with the checkpoint; its hyper-parameters are this config's
        # (load_state_dict brought back the old run's weight decay with the moments).
        for group in optimizer.param_groups:
            group["weight_decay"] = cfg.weight_decay
        start_step = state["step"]
        cursor = Cursor.from_json(state["cursor"]) if state.get("cursor") else None
        resumed_from = {"path": str(cfg.resume), "step": start_step}
        saved_schedule = state.get("schedule")
        note = resume_layout_note(state, dp, cfg)
        if note and dp.is_main:
            print(f"dflash-train: note: {note}", file=sys.stderr)
    try:
        loader = TokenBudgetLoader(dataset, cfg.token_budget, seed=cfg.seed, cursor=cursor,
                                   rank=dp.rank, world_size=dp.world_size)
    except ValueError as e:
        raise TrainingError(str(e)) from None
    # --epochs: the step count follows from the data (steps per epoch of THIS layout).
    cfg = cfg.for_epochs(loader.batches_per_epoch() / micro_batches_per_step(cfg))
    if start_step >= cfg.max_steps:
        raise TrainingError(
            f"checkpoint is at step {start_step}: --max-steps {cfg.max_steps} leaves nothing to do"
        )
    schedule, note = schedule_for(cfg, start_step, saved_schedule)
    if note and dp.is_main:
        print(f"dflash-train: note: {note}", file=sys.stderr)
    return Setup(cfg=cfg, target=target, drafter=drafter, optimizer=optimizer, loader=loader,
                 schedule=schedule, start_step=start_step, resumed_from=resumed_from,
                 eval_prompts=prompts, model=dp.wrap(drafter),
                 horizon=cfg.eval_new_tokens or longest_response(dataset))


def longest_response(dataset) -> int:
    """The longest response of the training data: the default eval horizon, so the eval decodes
    as far as the drafter was trained to draft."""
    return int(max(n - int(s) for n, s in zip(dataset.lengths, dataset.response_starts)))


def walk_due(cfg: TrainConfig, step: int) -> bool:
    """Whether step ``step``'s metrics record carries the walked tau (every ``walk_every``-th
    record)."""
    return bool(cfg.walk_every) and step % (cfg.log_every * cfg.walk_every) == 0


def config_schedule(cfg: TrainConfig, start_step: int = 0) -> Schedule:
    """The schedule ``cfg`` asks for, starting after step ``start_step`` (0: a fresh run).

    Raises:
        TrainingError: the schedule does not fit (e.g. its warmup is longer than what is left).
    """
    try:
        return Schedule.from_ratio(cfg.schedule_total_steps, peak_lr=cfg.peak_lr,
                                   warmup_ratio=cfg.warmup_ratio, min_lr=cfg.min_lr,
                                   kind=cfg.schedule, start_step=start_step,
                                   warmup_steps=cfg.warmup_steps)
    except ValueError as e:
        raise TrainingError(f"lr schedule: {e}") from None


def schedule_for(cfg: TrainConfig, start_step: int,
                 saved: dict[str, Any] | None) -> tuple[Schedule, str | None]:
    """The lr schedule of a launch, and what to tell the user about it when it resumes.

    * a fresh run: the config's schedule;
    * ``resume_schedule = "continue"``: the checkpoint's schedule (``saved``), at the step it
      reached: a migrated run goes on exactly as the old one would have (past its end: the
      floor). A checkpoint recording no schedule falls back to the config's, at the absolute step;
    * ``"restart"``: the config's schedule from step ``start_step + 1`` on: warmup again over
      ``warmup_steps`` (or ``warmup_ratio`` of the steps left), then the decay to ``min_lr`` at
      ``total_steps`` (default ``max_steps``).

    Raises:
        TrainingError: a restart with no steps left for the schedule, an unreadable saved schedule.
    """
    if cfg.resume is None:
        return config_schedule(cfg), None
    old = None
    if saved is not None:
        try:
            old = Schedule.from_dict(saved)
        except (TypeError, ValueError) as e:
            raise TrainingError(f"checkpoint {cfg.resume}: unreadable schedule {saved!r}: {e}") from None
    k = start_step + 1
    if cfg.resume_schedule == "restart":
        if cfg.schedule_total_steps <= start_step:
            raise TrainingError(f"--resume-schedule restart at step {start_step}: the schedule ends "
                                f"at step {cfg.schedule_total_steps} (total_steps)")
        new = config_schedule(cfg, start_step)
        before = f"{old.lr_at(start_step):.1e} -> " if old is not None and start_step else ""
        return new, (f"lr schedule restarted at step {k}: {before}{new.lr_at(k):.1e} "
                     f"({new.describe()}); the AdamW moments are the checkpoint's")
    if old is None:
        new = config_schedule(cfg)
        return new, (f"checkpoint {cfg.resume} records no lr schedule: this config's applies at "
                     f"step {k}: {new.lr_at(k):.1e} ({new.describe()})")
    note = f"lr schedule continued at step {k}: {old.lr_at(k):.1e} ({old.describe()})"
    if old.kind != "constant" and old.total_steps <= start_step:
        note += f"; it ended at step {old.total_steps}, so its floor holds"
    # Compared as if started where the checkpoint's began: a schedule this config restarted
    # earlier is this config's schedule, not another one.
    try:
        same = config_schedule(cfg, old.start_step) == old
        mine = config_schedule(cfg, start_step)  # what a restart would start here
    except TrainingError:
        same, mine = False, None
    if not same:
        note += "; this config's schedule is not used"
        if mine is not None:
            note += f": --resume-schedule restart starts it here ({mine.describe()})"
    return old, note


def preflight(cfg: TrainConfig, dp: DataParallel | None = None) -> None:
    """Machine checks before anything is loaded (one-line TrainingError each), and the tidy-up
    of what killed checkpoint saves left (by the rank that writes checkpoints)."""
    check_torch_threads(cfg.torch_threads)
    if dp is None or dp.is_main:
        check_writable_file(cfg.log, "log", "--log")
        check_checkpoint_dir(cfg.ckpt_dir)
        roots = [cfg.ckpt_dir] + ([str(Path(cfg.resume).parent)] if cfg.resume else [])
        tidy_checkpoints(*roots)
    if cfg.log_all_ranks:
        check_writable_file(rank_log_path(cfg.log, dp.rank if dp else 0), "per-rank log", "--log")


def micro_batches_per_step(cfg: TrainConfig) -> int:
    """Micro-batches each rank runs per optimizer step (the lock-step trainer: one)."""
    return int(getattr(cfg, "grad_accum", 1))


def resume_layout_note(state: dict[str, Any], dp: DataParallel, cfg: TrainConfig) -> str | None:
    """What changes when a checkpoint resumes under another rank count or accumulation.

    Nothing has to be remapped: the saved data cursor counts the examples consumed by ALL ranks
    together (dflash.data deals global batches round-robin), so the resumed run continues the
    global stream exactly where it stopped, whatever the new world size. What changes is the
    global batch (ranks x micro-batches): with the same product the run continues exactly as an
    uninterrupted run of the new layout would; otherwise each step averages a different number of
    batches (checkpoints written before world_size was recorded are taken as one rank).
    """
    old_w = int(state.get("world_size", 1))
    old_a = int(state.get("micro_batches", state.get("grad_accum", 1)))
    new_w, new_a = dp.world_size, micro_batches_per_step(cfg)
    if (old_w, old_a) == (new_w, new_a):
        return None
    same = old_w * old_a == new_w * new_a
    return (f"checkpoint of {old_w} rank(s) x {old_a} micro-batch(es) resumed as {new_w} x {new_a}: "
            f"the data cursor (examples of all ranks) continues exactly; the global batch "
            + ("is unchanged" if same else f"changes from {old_w * old_a} to {new_w * new_a} batches"))


def _drafter_overrides(saved: DFlashConfig) -> dict[str, Any]:
    """The saved drafter's hyper-parameters (a resumed run keeps its architecture)."""
    keep = ("block_size", "num_draft_layers", "target_layer_ids", "mask_token_id",
            "loss_decay_gamma", "num_anchors")
    return {k: getattr(saved, k) for k in keep}


# -- the update rule ------------------------------------------------------------------------------

@dataclass
class UpdateResult:
    applied: bool
    grad_norm: float


def apply_update(drafter: torch.nn.Module, optimizer: torch.optim.Optimizer, lr: float,
                 grad_clip: float, loss: float, grad_scale: float = 1.0) -> UpdateResult:
    """Scale, clip and apply the accumulated gradients, unless the loss or the norm is not finite.

    Args:
        loss: the step's loss (only checked for finiteness).
        grad_scale: multiplies the accumulated gradients first (1 / the step's loss weight when
            the micro-batches backpropagated unnormalised sums).

    Returns:
        Whether the update was applied, and the gradient norm before clipping.
    """
    params = [p for p in drafter.parameters() if p.grad is not None]
    if grad_scale != 1.0:
        for p in params:
            p.grad.mul_(grad_scale)
    max_norm = grad_clip if grad_clip > 0 else math.inf
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0
    applied = math.isfinite(loss) and math.isfinite(norm)
    if applied:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return UpdateResult(applied=applied, grad_norm=norm)


# -- run bookkeeping shared by both programs -------------------------------------------------------

class RunLog:
    """The log, the checkpoints and the non-finite guard of one launch.

    Args:
        setup: the run being logged.
        script: "sync" or "pipeline" (the ``run_start`` header).
        steps_per_epoch: optimizer steps per data epoch, for the header.
        dp: data-parallel ranks; only rank 0 writes the log and checkpoints, every rank counts
            non-finite steps (their decision must agree).
    """

    def __init__(self, setup: Setup, script: str, steps_per_epoch: float | None,
                 dp: DataParallel | None = None, clock=time.time) -> None:
        self.setup = setup
        self.cfg = setup.cfg
        self.clock = clock
        dp = dp or DataParallel(device=self.cfg.device)
        self.dp = dp
        try:
            self.log = JsonlLog(self.cfg.log) if dp.is_main else None
            self.rank_log = (JsonlLog(rank_log_path(self.cfg.log, dp.rank))
                             if self.cfg.log_all_ranks else None)
        except OSError as e:  # LogWriteError: one line naming the file
            raise TrainingError(str(e)) from None
        self.nonfinite_in_a_row = 0
        self.last_ckpt_step: int | None = None
        self.last_ckpt_path: Path | None = None
        header = RunStart(
            script=script, time=clock(), config=self.cfg.to_dict(),
            schedule=setup.schedule.to_dict(), block_size=setup.block_size,
            steps_per_epoch=steps_per_epoch, world_size=dp.world_size,
            resumed_from=setup.resumed_from,
            resume_schedule=self.cfg.resume_schedule if setup.resumed_from else None,
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

    def rank_metrics(self, step: int, epoch: float, lr: float, local: StepMetrics,
                     grad_norm: float, step_time: float, sync_wait: float,
                     stage_busy: dict[str, float] | None = None,
                     queue_fill: dict[str, float] | None = None) -> None:
        """This rank's own view of a step: its local metric sums and its own throughput
        (real tokens / (step time - time waiting for the other ranks))."""
        if self.rank_log is None:
            return
        own = step_time - sync_wait
        self.write_rank(Metrics(
            step=step, time=self.clock(), epoch=epoch, lr=lr,
            tok_per_sec=local.n_tokens / own if own > 0 else 0.0, grad_norm=grad_norm,
            stage_busy=stage_busy or {}, queue_fill=queue_fill or {},
            step_time=step_time, sync_wait=sync_wait, **local.to_log_dict(),
        ))

    def nonfinite(self, step: int, loss: float, grad_norm: float | None) -> bool:
        """Record a skipped update; True when the run must stop (too many in a row)."""
        self.nonfinite_in_a_row += 1
        self.write(NonFiniteRecord(step=step, time=self.clock(), loss=loss, grad_norm=grad_norm,
                                   consecutive=self.nonfinite_in_a_row))
        return self.nonfinite_in_a_row >= self.cfg.max_nonfinite

    def finite(self) -> None:
        self.nonfinite_in_a_row = 0

    def checkpoint(self, step: int, cursor: dict[str, Any], script: str) -> Path | None:
        """Write ``step-NNNNNN/`` atomically (rank 0), then its log record."""
        self.last_ckpt_step = step
        if self.log is None:
            return None
        s = self.setup
        path = save_training_checkpoint(
            Path(self.cfg.ckpt_dir), step, s.drafter, s.optimizer,
            state={"step": step, "cursor": cursor, "schedule": s.schedule.to_dict(),
                   "script": script, "seed": self.cfg.seed, "world_size": self.dp.world_size,
                   "micro_batches": micro_batches_per_step(self.cfg)},
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


def reduce_step(dp: DataParallel, metrics: StepMetrics) -> StepMetrics:
    """The step's metric sums over all ranks (the gradients were averaged by DDP in backward)."""
    if not dp.active:
        return metrics
    total = dp.all_reduce_sum(metrics.as_tensor(dp.device))
    return StepMetrics.from_tensor(total, metrics.block_size)


def grad_scale_for(dp: DataParallel, global_metrics: StepMetrics) -> float:
    """Factor turning the accumulated gradients into the step's exact per-token mean.

    Each micro-batch backpropagated its unnormalised loss sum and DDP averaged over the ranks, so
    the gradient holds (sum over every micro-batch of every rank) / world_size.
    """
    w = global_metrics.weight_sum
    return dp.grad_average / w if w else 1.0


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
    return StepProgress(setup.start_step, cfg.max_steps, cfg.progress if dp.is_main else False,
                        every_steps=cfg.progress_every, every_seconds=cfg.progress_seconds,
                        started_at=started_at)


def summarize(program: str, setup: Setup, runlog: RunLog, progress: StepProgress, step: int,
              reason: str, error: str | None = None) -> RunSummary | None:
    """The closing summary of a launch (None off rank 0). The last good checkpoint is the
    launch's last one, else the checkpoint it resumed from."""
    if not runlog.dp.is_main:
        return None
    ckpt = runlog.last_ckpt_path or (setup.resumed_from or {}).get("path")
    return RunSummary.of(program, progress, start_step=setup.start_step, step=step,
                         max_steps=setup.cfg.max_steps, reason=reason,
                         checkpoint=str(ckpt) if ckpt is not None else None,
                         log=str(setup.cfg.log), error=error)


def exit_code_for(reason: str, signum: int | None) -> int:
    """Process exit code: 0 when the run finished, 128+signal after a graceful signal stop
    (the shell convention, so a scheduler can tell a preempted run from a finished one),
    1 after an error or too many non-finite steps."""
    if reason == "max_steps":
        return 0
    if reason == "signal":
        return 128 + (signum or 15)
    return 1

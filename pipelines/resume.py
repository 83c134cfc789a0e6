"""What a resumed launch keeps and what it changes: the lr schedule across a resume (the
checkpoint's continued, or this config's restarted) and the batch layout (ranks x micro-batches
per step) a checkpoint records.
"""

from __future__ import annotations

from typing import Any

from dflash import DFlashConfig

from .config import TrainConfig
from .distributed import DataParallel
from .errors import TrainingError
from .schedule import Schedule


def config_schedule(cfg: TrainConfig, start_step: int = 0) -> Schedule:
    """The schedule ``cfg`` asks for, starting after step ``start_step`` (0: a fresh run).

    Raises:
        TrainingError: the schedule does not fit (e.g. its warmup is longer than what is left).
    """
    try:
        return Schedule.from_ratio(
            cfg.schedule_total_steps,
            peak_lr=cfg.peak_lr,
            warmup_ratio=cfg.warmup_ratio,
            min_lr=cfg.min_lr,
            kind=cfg.schedule,
            start_step=start_step,
            warmup_steps=cfg.warmup_steps,
        )
    except ValueError as e:
        raise TrainingError(f"lr schedule: {e}") from None


def schedule_for(
    cfg: TrainConfig, start_step: int, saved: dict[str, Any] | None
) -> tuple[Schedule, str | None]:
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
            raise TrainingError(
                f"checkpoint {cfg.resume}: unreadable schedule {saved!r}: {e}"
            ) from None
    k = start_step + 1
    if cfg.resume_schedule == "restart":
        if cfg.schedule_total_steps <= start_step:
            raise TrainingError(
                f"--resume-schedule restart at step {start_step}: the schedule ends "
                f"at step {cfg.schedule_total_steps} (total_steps)"
            )
        new = config_schedule(cfg, start_step)
        before = f"{old.lr_at(start_step):.1e} -> " if old is not None and start_step else ""
        return new, (
            f"lr schedule restarted at step {k}: {before}{new.lr_at(k):.1e} "
            f"({new.describe()}); the AdamW moments are the checkpoint's"
        )
    if old is None:
        new = config_schedule(cfg)
        return new, (
            f"checkpoint {cfg.resume} records no lr schedule: this config's applies at "
            f"step {k}: {new.lr_at(k):.1e} ({new.describe()})"
        )
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


def check_resume_drafter(path: str, saved: DFlashConfig, requested: dict[str, Any]) -> None:
    """A resumed run trains the checkpoint's drafter: every drafter field the user asked for
    (``--block-size``, ``--draft-layers``, a ``[drafter]`` table) must agree with it, or the
    flags would be ignored while the log header recorded them.

    Raises:
        TrainingError: one line naming each field that differs.
    """
    bad = [
        f"{k} {v!r} (the checkpoint's is {getattr(saved, k)!r})"
        for k, v in requested.items()
        if hasattr(saved, k) and getattr(saved, k) != v
    ]
    if bad:
        raise TrainingError(
            f"cannot resume {path} with {'; '.join(bad)}: a resumed run keeps "
            f"its checkpoint's drafter; drop the flag or start a fresh run"
        )


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
    ranks = f"{old_w} rank" + ("s" if old_w != 1 else "")
    micro = f"{old_a} micro-batch" + ("es" if old_a != 1 else "")
    return (
        f"checkpoint of {ranks} x {micro} resumed as {new_w} x {new_a}: "
        f"the data cursor (examples of all ranks) continues exactly; the global batch "
        + ("is unchanged" if same else f"changes from {old_w * old_a} to {new_w * new_a} batches")
    )

"""Building a training run before its first step: the target, the data, the drafter and its
optimizer, the loader and the lr schedule (:func:`build_setup`), fresh or resumed.

The lock-step trainer and the CSP pipeline differ only in how batches reach the drafter; the
drafter, its optimizer, the schedule, the non-finite guard and the checkpoint format are the same,
so a run can move from one program to the other (``--resume``) and continue its step count. The
other shared pieces: the update rule (:mod:`pipelines.update`), the log, checkpoints and
non-finite guard (:mod:`pipelines.runlog`), the schedule and batch layout across a resume
(:mod:`pipelines.resume`), the devices (:mod:`pipelines.devices`) and how a launch ends
(:mod:`pipelines.outcome`).

Reproducibility rules that make resumed runs match uninterrupted ones:

* the data order depends only on (seed, cursor), and the cursor saved is the one after the last
  batch the drafter CONSUMED (never a loader's read-ahead position);
* the anchor draw of micro-batch ``i`` of step ``s`` uses a generator seeded from
  (seed, s, i): no RNG state has to be carried across a restart.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dflash import DFlashConfig, DFlashDraftModel, TargetModel
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
from .checkpoints import checkpoint_config, restore_training_checkpoint
from .config import BUNDLED, CPU_DRAFTER, TrainConfig
from .devices import check_device_available, dtype_of
from .distributed import DataParallel
from .errors import TrainingError
from .logwriter import rank_log_path
from .memory import check_fits, check_target_fits, estimate_for_run
from .preflight import (
    check_checkpoint_dir,
    check_path_name,
    check_torch_threads,
    check_writable_file,
    tidy_checkpoints,
)
from .resume import micro_batches_per_step, resume_layout_note, schedule_for
from .run_lock import RunLock, acquire_run_lock
from .schedule import Schedule
from .walk_split import (
    EVAL_PROMPTS,
    HeldOutWalk,
    prompt_walk,
    seeded_prompt_split,
    spare_prompts,
    split_for_walk,
)


def resolve_target(target: str) -> str:
    return str(DEFAULT_TARGET_DIR) if target == BUNDLED else target


def resolve_data(data: str) -> str:
    return str(DEFAULT_DATA_DIR) if data == BUNDLED else data


def load_target(
    name: str,
    device: str,
    dtype: torch.dtype,
    *,
    check_memory: bool = True,
    copies: list[str] | None = None,
) -> TargetModel:
    """The target ``name`` (a path, a hub id or "bundled") on ``device``, its declared size
    checked against the memory free first (``copies``: every device that will hold one).

    Raises:
        TrainingError: unreadable, too big for the machine, or failing to load (one line).
    """
    path = resolve_target(name)
    try:
        if check_memory:
            config = TargetModel.read_config(path)
            check_target_fits(
                name, config, torch.empty(0, dtype=dtype).element_size(), copies or [device]
            )
        return TargetModel.from_pretrained(path, device=device, dtype=dtype)
    except ValueError as e:
        raise TrainingError(str(e)) from None


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
    held_out: HeldOutWalk | None = None
    """The held-out examples the walked tau walks (None: it walks the training batch)."""
    lock: RunLock = field(default_factory=RunLock)
    """This launch's locks on the checkpoint directory and the log (:mod:`pipelines.run_lock`),
    released when the run ends (``with setup.lock:``)."""

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
        TrainingError: the target, data or checkpoint cannot be used, or another run holds
            the checkpoint directory or the log.
    """
    lock = preflight(cfg, dp)
    try:
        setup = _build_setup(cfg, dp)
    except BaseException:
        lock.release()
        raise
    setup.lock = lock
    return setup


def _build_setup(cfg: TrainConfig, dp: DataParallel | None) -> Setup:
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    for dev in [cfg.device, *getattr(cfg, "target_devices", [])]:
        check_device_available(dev)
    dtype = dtype_of(cfg.dtype)
    copies = [cfg.device, *(d for d in getattr(cfg, "target_devices", []) if d != cfg.device)]
    target = load_target(
        cfg.target, cfg.device, dtype, check_memory=cfg.check_memory, copies=copies
    )
    try:
        dataset = load_dataset(resolve_data(cfg.data))
        prompts = load_eval_prompts(resolve_data(cfg.data), n=cfg.eval_prompts)
    except ValueError as e:
        raise TrainingError(str(e)) from None
    vocab = target.config.vocab_size
    if int(dataset.tokens.max()) >= vocab:
        raise TrainingError(
            f"data {cfg.data} holds token ids up to {int(dataset.tokens.max())}: "
            f"not made for target {cfg.target} (vocabulary {vocab})"
        )

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
        # The header records the drafter in force: the checkpoint's, not the config's defaults
        # (any field asked for that differs was refused before anything was loaded).
        cfg = dataclasses.replace(
            cfg, drafter={k: getattr(saved, k) for k in (*CPU_DRAFTER, *cfg.drafter)}
        )
    else:
        overrides = dict(cfg.drafter)
        # The data generator records the tokenizer's mask token; prefer it to for_target's guess.
        if "mask_token_id" not in overrides and "mask_token_id" in dataset.meta:
            overrides["mask_token_id"] = int(dataset.meta["mask_token_id"])
        dcfg = DFlashConfig.for_target(target.config, **overrides)

    check_blocks_fit(dataset, dcfg.block_size, cfg.data)
    if cfg.check_memory:  # before the drafter, its optimizer and any activation exist
        check_fits(estimate_for_run(cfg, dcfg, target.config, dataset), cfg.token_budget)

    torch.manual_seed(cfg.seed)  # drafter initialisation
    # float32 master weights whatever the target's dtype (see compute_precision).
    drafter = DFlashDraftModel(dcfg).to(device=cfg.device)
    optimizer = torch.optim.AdamW(
        drafter.parameters(), lr=cfg.peak_lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95)
    )
    start_step, cursor, resumed_from, saved_schedule = 0, None, None, None
    saved_split: dict[str, Any] | None = None
    dp = dp or DataParallel(device=cfg.device)
    if cfg.resume is not None:
        state = restore_training_checkpoint(cfg.resume, drafter, optimizer, device=cfg.device)
        # The AdamW moments travel with the checkpoint; its hyper-parameters are this config's
        # (load_state_dict brought back the old run's weight decay with the moments).
        for group in optimizer.param_groups:
            group["weight_decay"] = cfg.weight_decay
        saved_split = state.get("walk_held_out") or {}  # older checkpoints: trained on all
        start_step = state["step"]
        cursor = Cursor.from_json(state["cursor"]) if state.get("cursor") else None
        resumed_from = {"path": str(cfg.resume), "step": start_step}
        saved_schedule = state.get("schedule")
        note = resume_layout_note(state, dp, cfg)
        if note and dp.is_main:
            print(f"dflash-train: note: {note}", file=sys.stderr)
    # The held-out walk split comes out of the data before the loader sees it (a resume keeps
    # its checkpoint's: the cursor counts that run's training examples).
    try:
        dataset, held_out = _walk_split(cfg, dataset, target, dcfg, saved_split, dp)
        if cfg.resume is not None:
            check_cursor_fits(state, cfg.resume, len(dataset))
        if held_out is not None and held_out.eval_indices is not None:
            every = load_eval_prompts(resolve_data(cfg.data))
            prompts = [every[i] for i in held_out.eval_indices]
    except (CheckpointError, KeyError, TypeError, ValueError) as e:
        raise TrainingError(f"cannot resume: {e}") from None
    try:
        loader = TokenBudgetLoader(
            dataset,
            cfg.token_budget,
            seed=cfg.seed,
            cursor=cursor,
            rank=dp.rank,
            world_size=dp.world_size,
        )
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
    return Setup(
        cfg=cfg,
        target=target,
        drafter=drafter,
        optimizer=optimizer,
        loader=loader,
        schedule=schedule,
        start_step=start_step,
        resumed_from=resumed_from,
        eval_prompts=prompts,
        model=dp.wrap(drafter),
        held_out=held_out,
        horizon=cfg.eval_new_tokens or longest_response(dataset),
    )


def _walk_split(
    cfg: TrainConfig,
    dataset,
    target: TargetModel,
    dcfg: DFlashConfig,
    saved: dict[str, Any] | None,
    dp: DataParallel,
) -> tuple[Any, HeldOutWalk | None]:
    """The training examples and the walk's held-out split (:mod:`pipelines.walk_split`): a
    resumed run keeps its checkpoint's; a fresh one takes ``walk_source``'s, the eval-file
    prompts the eval does not use falling back to held-out training examples (with a note) when
    the file holds no more."""
    source = (saved.get("source") or "data") if saved else cfg.walk_source
    if saved is not None and not saved:
        source = "data"  # a checkpoint written before splits existed: trained on everything
    if source == EVAL_PROMPTS and (saved or cfg.walk_holdout):
        every = load_eval_prompts(resolve_data(cfg.data))
        eval_indices: list[int] | None = None
        if saved:
            indices = [int(i) for i in saved["indices"]]
            if "eval_indices" in saved:
                eval_indices = [int(i) for i in saved["eval_indices"]]
        elif cfg.eval_split == "seeded":
            eval_indices, indices = seeded_prompt_split(
                len(every), cfg.eval_prompts, cfg.walk_holdout, cfg.seed
            )
        else:
            indices = spare_prompts(len(every), cfg.eval_prompts, cfg.walk_holdout)
        if indices:
            horizon = cfg.eval_new_tokens or longest_response(dataset)
            layers = list(dcfg.target_layer_ids)
            # A resume names the checkpoint's seed, the one its split was drawn with.
            seed = int(saved["seed"]) if saved else cfg.seed
            return dataset, prompt_walk(
                target, every, indices, horizon, layers, dataset.meta, seed, eval_indices
            )
        if dp.is_main:
            print(
                f"dflash-train: note: the eval-prompt file holds {len(every)} prompts, all "
                f"used by the eval (eval_prompts = {cfg.eval_prompts}): the walk holds out "
                f"training examples instead (walk_source = data)",
                file=sys.stderr,
            )
    return split_for_walk(dataset, cfg.walk_holdout, cfg.seed, saved)


def check_blocks_fit(dataset, block_size: int, name: str) -> None:
    """Refuse data in which no example holds one whole block: an anchor needs ``block_size``
    response tokens (itself and the B-1 it predicts), so on shorter responses every step has no
    block, its loss is NaN and the update is skipped: a run that trains nothing.

    Raises:
        TrainingError: one line with the longest response and what to change.
    """
    longest = longest_response(dataset)
    if longest < block_size:
        raise TrainingError(
            f"data {name}: the longest response is {longest} token"
            f"{'s' if longest != 1 else ''}, but a block of the drafter needs "
            f"{block_size} (block_size): nothing to train on; regenerate the data "
            f"with longer responses or lower --block-size"
        )


def longest_response(dataset) -> int:
    """The longest response of the training data: the default eval horizon, so the eval decodes
    as far as the drafter was trained to draft."""
    return int(
        max(n - int(s) for n, s in zip(dataset.lengths, dataset.response_starts, strict=True))
    )


#: The config's paths and the flags that set them (checked as names before any is used).
PATH_FLAGS = {
    "log": "--log",
    "ckpt_dir": "--ckpt-dir",
    "target": "--target",
    "data": "--data",
    "resume": "--resume",
}


def preflight(cfg: TrainConfig, dp: DataParallel | None = None) -> RunLock:
    """Machine checks before anything is loaded (one-line TrainingError each), the tidy-up
    of what killed checkpoint saves left, and the locks on the checkpoint directory and the log
    (by the rank that writes them; the other ranks get an empty lock).

    Returns:
        The launch's locks: release them when the run ends.
    """
    for name, flag in PATH_FLAGS.items():
        value = getattr(cfg, name)
        if value is not None and value != BUNDLED:
            check_path_name(value, flag)
    check_torch_threads(cfg.torch_threads)
    lock = RunLock()
    if dp is None or dp.is_main:
        check_writable_file(cfg.log, "log", "--log")
        check_checkpoint_dir(cfg.ckpt_dir)
        lock = acquire_run_lock(cfg.ckpt_dir, cfg.log)  # before the tidy-up: no live run's files
        try:
            roots = [cfg.ckpt_dir] + ([str(Path(cfg.resume).parent)] if cfg.resume else [])
            tidy_checkpoints(*roots)
        except BaseException:
            lock.release()
            raise
    if cfg.log_all_ranks:
        try:
            check_writable_file(
                rank_log_path(cfg.log, dp.rank if dp else 0), "per-rank log", "--log"
            )
        except TrainingError:
            lock.release()
            raise
    return lock


def _drafter_overrides(saved: DFlashConfig) -> dict[str, Any]:
    """The saved drafter's hyper-parameters (a resumed run keeps its architecture)."""
    keep = (
        "block_size",
        "num_draft_layers",
        "target_layer_ids",
        "mask_token_id",
        "loss_decay_gamma",
        "num_anchors",
    )
    return {k: getattr(saved, k) for k in keep}

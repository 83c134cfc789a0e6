"""Presets: how other drafter trainers name their metrics, and the conventions behind the names.

A preset is a field map plus the conventions a bare map cannot express:

* per-position accuracies logged as numbered keys (``train/acc_0``, ``train/position_3_acc``)
  assembled into the canonical ``acc_pos`` list, in the order of their numbers;
* chain estimates logged without the leading 1 (TorchSpec's ``simulated_acc_len``, speculators'
  ``eal`` are sum_k prod_{j<=k} acc_j: the accepted DRAFT tokens; tau counts the verified token
  too), so the preset adds the +1 before they become ``tau_train`` or an eval's ``tau``;
* the step key (TorchSpec keys its eval rows by ``eval/step``, speculators by ``global_step``);
* the block size B (DFlash: 16 by default; EAGLE-3: its TTT length + 1) when the log does not
  say, and an overall accuracy derived from the positions when the trainer logs none (EAGLE-3).

Every name below was read from the trainers' sources (see docs/formats.md); a preset is
detected from the field names of a log when none is given (:func:`detect_preset`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dflash_diag.errors import DiagError


@dataclass(frozen=True)
class Preset:
    """One trainer's naming and conventions.

    Attributes:
        name: the ``--preset`` value.
        trainer: who writes such logs, for messages.
        fields: canonical name -> candidate log keys, first present wins. A candidate is a
            regular expression matched against the whole (normalised) key.
        acc_pos: patterns of the per-position accuracy keys; group 1 is the position number.
        step_keys: keys holding the step, first present in a record wins; without one the
            format's own step (TensorBoard's, W&B's ``_step``, HF's ``step``) is used.
        tau_train_offset: added to the mapped ``tau_train`` (1.0 where the trainer logs the
            chain without the verified token).
        eval_tau: candidate keys of an eval record's acceptance length.
        eval_tau_offset: added to it (see ``tau_train_offset``).
        eval_fields: eval record field -> candidate keys (kept in the eval event's fields).
        block_size: B when the log does not give it (None: the number of positions + 1, else
            the diagnostics' default).
        acc_from_positions: the overall accuracy is the mean of ``acc_pos`` (the trainer logs
            no overall accuracy).
        loss_from_positions: pattern of per-position losses and the decay of their weights,
            summed into ``loss`` when the trainer logs no overall loss (EAGLE-3's 0.8^i).
        signature: patterns that identify the trainer; the preset matching most of them wins
            detection.
        min_signature: how many of them a log must hold for the preset to be detected.
        required: canonical fields whose absence is worth a warning.
    """

    name: str
    trainer: str
    fields: Mapping[str, tuple[str, ...]]
    acc_pos: tuple[str, ...] = ()
    step_keys: tuple[str, ...] = ()
    tau_train_offset: float = 0.0
    eval_tau: tuple[str, ...] = ()
    eval_tau_offset: float = 0.0
    eval_fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    block_size: int | None = None
    acc_from_positions: bool = False
    loss_from_positions: tuple[str, float] | None = None
    signature: tuple[str, ...] = ()
    required: tuple[str, ...] = ("loss",)
    min_signature: int = 1


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="specforge-dflash",
            trainer="SpecForge (DFlash)",
            fields={
                "loss": ("train/loss",),
                "acc": ("train/accuracy", "train/acc"),
                "lr": ("train/lr",),
            },
            eval_fields={"loss": ("eval/loss",), "acc": ("eval/accuracy", "eval/acc")},
            block_size=16,  # --block-size default of train_dflash.py
            # two of its names at least: a generic train/acc or eval/accuracy (any console's
            # "Train Acc", an HF run's eval/accuracy) is not SpecForge
            signature=("train/accuracy", "eval/accuracy", "train/lr"),
            min_signature=2,
            required=("loss", "acc", "lr"),
        ),
        Preset(
            name="specforge-eagle3",
            trainer="SpecForge (EAGLE-3)",
            fields={"lr": ("train/lr",)},
            acc_pos=(r"train/acc_(\d+)",),
            eval_fields={"acc_0": ("eval/acc_0",), "ploss_0": ("eval/ploss_0",)},
            block_size=8,  # --ttt-length default 7, plus the verified token
            acc_from_positions=True,
            # train_eagle3.py optimises sum_i 0.8^i * ploss_i
            loss_from_positions=(r"train/ploss_(\d+)", 0.8),
            signature=(r"train/acceptance_rate_\d+", r"train/ploss_\d+", r"train/acc_\d+"),
            required=("lr",),
        ),
        Preset(
            name="torchspec",
            trainer="TorchSpec",
            fields={
                "loss": ("train/avg_loss",),
                "acc": ("train/avg_acc",),
                "lr": ("train/lr",),
                "grad_norm": ("train/grad_norm",),
                "tau_train": ("train/simulated_acc_len",),
            },
            acc_pos=(r"train/acc_(\d+)",),
            step_keys=("train/step", "eval/step"),
            tau_train_offset=1.0,  # simulated_acc_len = sum_k prod acc: no verified token
            eval_tau=("eval/simulated_acc_len",),
            eval_tau_offset=1.0,
            eval_fields={"loss": ("eval/avg_loss",), "acc": ("eval/avg_acc",)},
            block_size=16,  # dflash_block_size default
            signature=(
                "train/simulated_acc_len",
                "train/avg_acc",
                "train/avg_loss",
                "eval/simulated_acc_len",
                r"perf/train_capacity",
            ),
            required=("loss", "acc", "lr"),
        ),
        Preset(
            name="speculators",
            trainer="vLLM speculators",
            fields={
                "loss": ("train/loss",),
                "acc": ("train/full_acc",),
                "lr": ("lr", "train/lr"),
                "epoch": ("epoch",),
                "tok_per_sec": ("profile/tokens_per_s",),
                "tau_train": ("train/eal",),
            },
            # newer versions: train/cond_acc_{k} (the conditional accuracy at position k, the
            # chain's factor) beside train/full_acc_{k} (its running product) and loss_{k}
            acc_pos=(r"train/position_(\d+)_acc", r"train/cond_acc_(\d+)"),
            step_keys=("global_step",),
            tau_train_offset=1.0,  # eal = sum_k prod acc: the accepted draft tokens
            eval_tau=("val/eal_epoch", "val/eal"),
            eval_tau_offset=1.0,
            eval_fields={
                "loss": ("val/loss_epoch", "val/loss"),
                "acc": ("val/full_acc_epoch", "val/full_acc"),
            },
            signature=(
                "train/full_acc",
                "train/eal",
                r"train/position_\d+_acc",
                "profile/tokens_per_s",
                r"val/.*_epoch",
                r"train/cond_acc_\d+",
                r"train/full_acc_\d+",
            ),
            required=("loss", "acc"),
        ),
        Preset(
            name="hf-trainer",
            trainer="Hugging Face Trainer / TRL",
            fields={
                "loss": ("loss",),
                "acc": ("mean_token_accuracy",),
                "lr": ("learning_rate",),
                "grad_norm": ("grad_norm",),
                "epoch": ("epoch",),
            },
            eval_fields={"loss": ("eval_loss",), "acc": ("eval_mean_token_accuracy",)},
            signature=(
                "learning_rate",
                "eval_loss",
                "train_runtime",
                "total_flos",
                "mean_token_accuracy",
            ),
            required=("loss", "lr"),
        ),
        Preset(
            name="hf-trainer-tensorboard",
            trainer="Hugging Face Trainer (TensorBoard / W&B)",
            fields={
                "loss": ("train/loss",),
                "acc": ("train/mean_token_accuracy",),
                "lr": ("train/learning_rate",),
                "grad_norm": ("train/grad_norm",),
                "epoch": ("train/epoch",),
            },
            step_keys=("train/global_step",),
            eval_fields={
                "loss": ("eval/loss",),
                "acc": ("eval/accuracy", "eval/mean_token_accuracy"),
            },
            signature=(
                "train/learning_rate",
                "train/epoch",
                "train/train_runtime",
                "train/total_flos",
                "eval/runtime",
                "eval/samples_per_second",
                "train/global_step",
            ),
            required=("loss",),
        ),
        Preset(
            name="lightning",
            trainer="PyTorch Lightning (CSVLogger)",
            fields={
                "loss": (
                    "train_loss",
                    "train_loss_step",
                    "train/loss",
                    "loss",
                    "loss_step",
                    "train_loss_epoch",
                ),
                "acc": (
                    "train_acc",
                    "train_acc_step",
                    "acc_step",
                    "train_accuracy",
                    "train_acc_epoch",
                    "acc_epoch",
                ),
                "lr": (r"lr-[A-Za-z]+", r"lr-[A-Za-z]+/pg\d+", "lr"),
            },
            # self.log(..., on_step=True, on_epoch=True) names, LearningRateMonitor's lr-Adam
            signature=(r"lr-[A-Za-z]+.*", r"\w*(?:loss|acc\w*)_step", r"\w*(?:loss|acc\w*)_epoch"),
            required=(),
        ),
        Preset(
            name="llama-factory",
            trainer="LLaMA-Factory (trainer_log.jsonl)",
            fields={
                "loss": ("loss",),
                "lr": ("lr", "learning_rate"),
                "epoch": ("epoch",),
                "acc": ("accuracy", "mean_token_accuracy"),
            },
            step_keys=("current_steps",),
            eval_fields={"loss": ("eval_loss",), "acc": ("eval_accuracy",)},
            signature=(
                "current_steps",
                "total_steps",
                "remaining_time",
                "elapsed_time",
                "percentage",
            ),
            required=(),
        ),
        Preset(
            name="nanogpt",
            trainer="nanoGPT-style (iter, train/val loss)",
            fields={"loss": ("loss", "train/loss", "train_loss"), "lr": ("lr",)},
            step_keys=("iter", "iter_num"),
            eval_fields={"loss": ("val/loss", "val_loss", "eval/loss")},
            signature=("iter", "iter_num", "mfu", "time_ms", "dt"),
            required=(),
        ),
        Preset(
            name="torchtitan",
            trainer="torchtitan",
            fields={
                "loss": ("loss_metrics/global_avg_loss",),
                "lr": ("lr", r"lr/.+"),
                "grad_norm": ("grad_norm", "loss_metrics/grad_norm"),
                "tok_per_sec": (r"throughput\(tps\)", "tps"),
            },
            signature=(
                "loss_metrics/global_avg_loss",
                "loss_metrics/global_max_loss",
                r"throughput\(tps\)",
                r"memory/.*",
            ),
            required=("loss",),
        ),
    )
}

#: Canonical fields a preset may map (besides the lists).
_LIST_FIELDS = ("acc_pos", "accept_pos")
#: Placeholders for the position number in a ``--field acc_pos=...`` map.
_NUMBER_PLACEHOLDER = re.compile(r"\{[a-z]?\}|\*|#")


def get_preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        DiagError: an unknown name (the message lists the known ones).
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise DiagError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None


def normalise_key(key: str) -> str:
    """``train.full_acc`` and ``train/full_acc`` are one field: dots become slashes."""
    return key.replace(".", "/")


def _matches(pattern: str, key: str) -> bool:
    return re.fullmatch(pattern, key) is not None


def detect_preset(keys: Iterable[str]) -> Preset | None:
    """The preset whose signature matches most of ``keys`` (None when none matches any).

    Ties go to the preset listed first; a preset needs at least one signature key present.
    """
    names = tuple(normalise_key(k) for k in keys)
    # Every input of a command is planned: 200 small logs of one run share their key set, and
    # the signatures' regular expressions cost about 1 ms per call. The presets an answer was
    # found among are kept with it, so a preset added or replaced since is seen.
    presets = tuple(PRESETS.values())
    known = _DETECTED.get(names)
    if (
        known is not None
        and len(known[0]) == len(presets)
        and all(a is b for a, b in zip(known[0], presets, strict=True))
    ):
        return known[1]
    best = _detect(names, presets)
    if len(_DETECTED) >= _DETECTED_MAX:
        _DETECTED.clear()
    _DETECTED[names] = (presets, best)
    return best


#: detect_preset's answers per key set, with the presets they were found among (held, so
#: that a preset added or replaced since is seen), bounded.
_DETECTED: dict[tuple[str, ...], tuple[tuple[Preset, ...], Preset | None]] = {}
_DETECTED_MAX = 256


def _detect(names: Sequence[str], presets: Sequence[Preset]) -> Preset | None:
    best, best_score = None, 0
    for preset in presets:
        score = sum(1 for pattern in preset.signature if any(_matches(pattern, k) for k in names))
        if score > best_score and score >= preset.min_signature:
            best, best_score = preset, score
    return best


def field_map_preset(fields: Mapping[str, str], base: Preset | None = None) -> Preset:
    """A preset for a user's ``--field`` map, layered over ``base`` (a user map wins).

    ``acc_pos``/``accept_pos`` take a family of numbered keys: ``train/acc_{i}``,
    ``train/acc_*`` or one member such as ``train/acc_0`` (its number becomes the placeholder).
    Other names are literal keys (dots and slashes alike).
    """
    scalars = dict(base.fields) if base else {}
    acc_pos = base.acc_pos if base else ()
    step_keys = base.step_keys if base else ()
    tau_offset = base.tau_train_offset if base else 0.0
    for canonical, log_name in fields.items():
        name = normalise_key(log_name)
        if canonical in _LIST_FIELDS:
            if canonical == "acc_pos":
                acc_pos = (numbered_pattern(name),)
            continue
        pattern = re.escape(name)
        if canonical == "step":
            step_keys = (pattern,)
        else:
            scalars[canonical] = (pattern,)
        if canonical == "tau_train":
            tau_offset = 0.0  # a user's own map is taken at its word
    base_fields: dict[str, Any] = (
        {}
        if base is None
        else {
            "eval_tau": base.eval_tau,
            "eval_tau_offset": base.eval_tau_offset,
            "eval_fields": base.eval_fields,
            "block_size": base.block_size,
            "acc_from_positions": base.acc_from_positions,
            "loss_from_positions": base.loss_from_positions,
            "required": base.required,
        }
    )
    return Preset(
        name=base.name if base else "field-map",
        trainer=base.trainer if base else "",
        fields=scalars,
        acc_pos=acc_pos,
        step_keys=step_keys,
        tau_train_offset=tau_offset,
        signature=(),
        **base_fields,
    )


def numbered_pattern(name: str) -> str:
    """The pattern of a family of numbered keys from ``train/acc_{i}`` or ``train/acc_0``."""
    parts = _NUMBER_PLACEHOLDER.split(name)
    if len(parts) == 2:
        return re.escape(parts[0]) + r"(\d+)" + re.escape(parts[1])
    digits = list(re.finditer(r"\d+", name))
    if not digits:
        raise DiagError(
            f"--field acc_pos={name}: give the numbered keys' pattern, e.g. acc_pos=train/acc_{{i}}"
        )
    last = digits[-1]
    return re.escape(name[: last.start()]) + r"(\d+)" + re.escape(name[last.end() :])

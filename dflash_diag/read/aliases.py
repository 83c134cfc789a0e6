"""The one table of metric aliases: which names real trainers give each canonical field.

Every reader's keys are matched against this table when no preset or ``--field`` map names the
field (a preset's own names come first, then these; a user's map is taken at its word). The
names were read from real public logs (HF Trainer's ``trainer_state.json`` and TensorBoard tags,
Lightning's ``CSVLogger`` columns, LLaMA-Factory's ``trainer_log.jsonl``, nanoGPT-style console
lines, TorchSpec, SpecForge and AngelSlim drafter logs), and are documented in docs/formats.md.

Candidates are regular expressions matched against the whole normalised key (``.`` is ``/``,
case as written, except where a pattern says otherwise); the first candidate present wins, so
a per-step name is listed before an epoch aggregate (Lightning's ``train_loss_step`` before
``train_loss_epoch``).

Validation series keep apart from the train ones: they become the ``eval`` events' ``loss`` and
``acc`` (:data:`VALIDATION`), never train metrics, so a validation loss cannot pass for the
training curve. Their canonical names for an analysis are :data:`VALIDATION_SERIES`.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping

#: Keys that hold a record's step, first present wins (a preset or ``--field step=`` may name
#: another). ``current_steps``: LLaMA-Factory; ``iter``: nanoGPT-style; ``trainer/global_step``:
#: Lightning's W&B logger; ``train/global_step``: HF Trainer's W&B and TensorBoard.
STEP: tuple[str, ...] = (
    "step",
    "global_step",
    "_step",
    "train/step",
    "trainer/global_step",
    "train/global_step",
    "iteration",
    "iter",
    "current_steps",
)


def _lightning(*names: str) -> tuple[str, ...]:
    """``names``, then Lightning's per-step ``<name>_step`` columns, then its ``<name>_epoch``
    aggregates (``self.log(..., on_step=True, on_epoch=True)`` writes both): per-step first."""
    return (*names, *(f"{n}_step" for n in names), *(f"{n}_epoch" for n in names))


#: Canonical train field -> candidate keys, first present wins (any source).
GENERAL: dict[str, tuple[str, ...]] = {
    "loss": (
        *_lightning(
            "loss",
            "train/loss",
            "train_loss",
            "training_loss",
            "train/training_loss",
            "trn_loss",
            "tr_loss",
            "train/avg_loss",
            "avg_loss",
            "mean_loss",
            "train/mean_loss",
            "train/total_loss",
            "total_loss",
            "train_loss_avg",
            "avg_train_loss",
            "loss/train",
            "Loss/train",
            "train/Loss",
            "Loss",
            "batch_loss",
            "epoch_loss",
        ),
        r"train_loss_[a-z]\w*",
        r"train/loss_[a-z]\w*",
    ),  # a unit suffix: train_loss_nats_per_byte
    "acc": _lightning(
        "acc",
        "accuracy",
        "train/acc",
        "train/accuracy",
        "train_acc",
        "train_accuracy",
        "training_accuracy",
        "train/avg_acc",
        "avg_acc",
        "mean_acc",
        "mean_token_accuracy",
        "train/mean_token_accuracy",
        "train/full_acc",
        "token_acc",
        "train/token_acc",
        "acc/train",
        "accuracy/train",
        "Accuracy/train",
        "train/Accuracy",
        "avg_train_acc",
        "batch_accuracy",
        "epoch_accuracy",
        "epoch_acc",
        "epoch_sparse_categorical_accuracy",
        "epoch_categorical_accuracy",
        "sparse_categorical_accuracy",
        "categorical_accuracy",
    ),
    "lr": (
        "lr",
        "learning_rate",
        "train/lr",
        "train/learning_rate",
        "train_lr",
        "optim/lr",
        "lr-[A-Za-z]+",
        r"lr-[A-Za-z]+/pg\d+",
        r"lr/.+",
        r"lr_\d+",
        "LR",
        "Lr",
        "epoch_learning_rate",
        "epoch_lr",
    ),
    "grad_norm": _lightning(
        "grad_norm",
        "train/grad_norm",
        "gradient_norm",
        "train/gradient_norm",
        "grad-norm",
        "total_norm",
        "train/total_norm",
    ),
    "epoch": ("epoch", "train/epoch", "trainer/epoch", "epochs"),
    "n_tokens": (
        "n_tokens",
        "tokens",
        "num_tokens",
        "train/num_tokens",
        "num_input_tokens_seen",
        "train/num_input_tokens_seen",
        "tokens_seen",
        "total_tokens",
    ),
    "tok_per_sec": ("tok_per_sec", "tokens_per_sec", "tokens_per_second", "tps"),
}

#: Validation field (an ``eval`` event's) -> candidate keys, first present wins.
VALIDATION: dict[str, tuple[str, ...]] = {
    "loss": (
        *_lightning(
            "eval/loss",
            "eval_loss",
            "val_loss",
            "val/loss",
            "validation/loss",
            "validation_loss",
            "valid_loss",
            "valid/loss",
            "eval/avg_loss",
            "loss/val",
            "Loss/val",
            "avg_val_loss",
            "val/Loss",
            "test/loss",
            "test_loss",
            "avg_test_loss",
            "val/epoch_loss",
        ),
        r"val(?:idation)?_loss_[a-z]\w*",
        r"val(?:idation)?/loss_[a-z]\w*",
    ),
    "acc": _lightning(
        "eval/accuracy",
        "eval/acc",
        "eval_accuracy",
        "eval_acc",
        "val_acc",
        "val_accuracy",
        "val/acc",
        "val/accuracy",
        "validation/accuracy",
        "validation/acc",
        "valid_acc",
        "valid/acc",
        "eval_mean_token_accuracy",
        "eval/mean_token_accuracy",
        "eval/avg_acc",
        "eval/full_acc",
        "val/full_acc",
        "acc/val",
        "accuracy/val",
        "Accuracy/val",
        "avg_val_acc",
        "test/acc",
        "test/accuracy",
        "test_acc",
        "test_accuracy",
        "avg_test_acc",
        "val/epoch_accuracy",
        "val/epoch_acc",
        "val/epoch_sparse_categorical_accuracy",
        "val_sparse_categorical_accuracy",
        "val_categorical_accuracy",
    ),
}

#: Canonical names of the validation series an analysis reads from a log's ``eval`` events
#: (see :func:`dflash_diag.read.validation.validation_frame`): event field -> series name.
VALIDATION_SERIES: dict[str, str] = {"loss": "eval_loss", "acc": "eval_acc", "tau": "eval_tau"}

_MATCHERS: dict[str, Callable[[str], object]] = {}
#: Characters that make a candidate a regular expression; most candidates are plain names.
_REGEX_CHARS = frozenset(".^$*+?{}[]\\|()")


def _matcher(candidate: str) -> Callable[[str], object]:
    """A full-match test for one candidate: string equality for a plain name (compiling the
    ~350 names of the tables cost about 0.1 s of every foreign log's read), else its regex."""
    matcher = _MATCHERS.get(candidate)
    if matcher is None:
        if _REGEX_CHARS.isdisjoint(candidate):
            matcher = functools.partial(operator.eq, candidate)
        else:
            matcher = re.compile(candidate).fullmatch
        _MATCHERS[candidate] = matcher
    return matcher


def first_alias(candidates: Iterable[str], names: Iterable[str]) -> str | None:
    """The first of ``names`` matching the earliest candidate, or None."""
    names = list(names)
    for candidate in candidates:
        matches = _matcher(candidate)
        for name in names:
            if matches(name):
                return name
    return None


def is_alias(name: str) -> bool:
    """Whether ``name`` is a known alias of any train, validation or step field."""
    tables: list[Mapping[str, tuple[str, ...]]] = [GENERAL, VALIDATION]
    return any(_matcher(c)(name) for c in STEP) or any(
        _matcher(c)(name) for table in tables for cands in table.values() for c in cands
    )


def is_validation(name: str) -> bool:
    """Whether ``name`` is a known alias of a validation series."""
    return any(_matcher(c)(name) for cands in VALIDATION.values() for c in cands)

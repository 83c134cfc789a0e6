"""The JSONL training log schema v1: every record kind and its field names, defined once.

The writer (``pipelines/log_records.py``: record dataclasses and a validator) and the reader
(:mod:`dflash_diag.read.schema`: what is parsed into the polars frame and what a ``--field`` map may
rename) both take their field names from here, so the two cannot drift apart silently: a test
builds every record the writer can emit and checks each key against :func:`record_fields`.
docs/pipelines.md describes the records for people; docs/design.md says why they look so.

Pure data, nothing heavy imported: the trainer imports it without polars, the CLI without torch.

One record per line. A metric record (one optimizer step) has no ``event`` key (the lock-step
trainer's legacy format); every other record names its kind in ``event``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = 1
#: ``run_start.script``: which trainer wrote the run.
SCRIPTS: tuple[str, ...] = ("sync", "pipeline")
#: ``stop.reason``: why a launch ended.
STOP_REASONS: tuple[str, ...] = ("max_steps", "signal", "nonfinite", "error", "data_exhausted")
#: Keys of ``run_start.schedule``.
SCHEDULE_FIELDS: tuple[str, ...] = ("kind", "peak_lr", "warmup_steps", "total_steps", "min_lr")
#: Optional key of ``run_start.schedule``: only when the schedule restarted at a resume, the steps
#: before its own step 1 (its warmup counts from ``start_step + 1``; ``total_steps`` is absolute).
SCHEDULE_OPTIONAL_FIELDS: tuple[str, ...] = ("start_step",)
#: ``run_start.resume_schedule`` (resumed launches only): what the resume did with the lr schedule.
RESUME_SCHEDULE_MODES: tuple[str, ...] = ("continue", "restart")
#: Keys of ``run_start.resumed_from`` (null on a fresh start).
RESUMED_FROM_FIELDS: tuple[str, ...] = ("path", "step")
#: Keys of ``run_start.walk_held_out``: the examples held out of training for the walked tau
#: (their count, the seed of the draw, the dataset's size, their indices). A header without it
#: walks training sequences: out of sample in the first epoch only.
WALK_HELD_OUT_FIELDS: tuple[str, ...] = ("examples", "seed", "of", "indices")
#: Optional key of ``run_start.walk_held_out`` (absent in logs written before it: ``data``).
#: ``eval_indices``: the eval file's prompts the eval measures, when a seeded split drew them
#: (absent: the file's first ``n_prompts``).
WALK_HELD_OUT_OPTIONAL_FIELDS: tuple[str, ...] = ("source", "eval_indices")
#: ``walk_held_out.source``: the eval-prompt file's prompts the eval does not use, with the
#: target's greedy continuations (``indices`` and ``of`` count prompts of that file), or
#: training examples held out of the data.
WALK_HELD_OUT_SOURCES: tuple[str, ...] = ("eval_prompts", "data")

# -- metric records ---------------------------------------------------------------------------

#: The legacy record, written by both trainers: ``step, time, epoch, loss, acc, lr``.
LEGACY_METRICS: tuple[str, ...] = ("step", "time", "epoch", "loss", "acc", "lr")
#: Per-block-position lists of a pipeline metric record (index 0 is block position 1).
METRIC_LISTS: tuple[str, ...] = ("acc_pos", "accept_pos")
#: Per-stage fractions in [0, 1] (JSON objects) of a pipeline metric record.
METRIC_MAPS: tuple[str, ...] = ("stage_busy", "queue_fill")
#: The pipeline trainer's fields on top of the legacy ones: all present, or none.
PIPELINE_METRICS: tuple[str, ...] = (
    "tok_per_sec",
    "n_tokens",
    "n_blocks",
    "n_pred",
    *METRIC_LISTS,
    "tau_train",
    "grad_norm",
    *METRIC_MAPS,
)
#: Fields of per-rank logs only (``--log-all-ranks``), on top of the pipeline fields.
RANK_METRICS: tuple[str, ...] = ("step_time", "sync_wait")
#: The walked tau (``dflash.walk``), on every ``walk_every``-th pipeline record, all three
#: together: the drafter's teacher-forced predictions on a few training sequences walked block by
#: block as greedy decoding does. ``walk_tokens`` = tokens the walked steps produced (summed over
#: the sequences), ``walk_steps`` = steps taken, ``walk_hist[k]`` = steps that produced k + 1
#: tokens (B entries). tau_walk = walk_tokens / walk_steps; over a window, a ratio of sums.
WALK_METRICS: tuple[str, ...] = ("walk_tokens", "walk_steps", "walk_hist")
#: The walk's list field, parsed (as a list of numbers) whenever the numbers are: it is on few
#: records, so it costs little, unlike the per-position lists.
WALK_LISTS: tuple[str, ...] = ("walk_hist",)
#: Scalar numbers of a metric record that the diagnostics parse into their frame (``step`` is read
#: as a float, since some writers emit ``15000.0``, and cast to an integer afterwards).
METRIC_NUMBERS: tuple[str, ...] = (
    *LEGACY_METRICS,
    "tok_per_sec",
    "n_tokens",
    "n_blocks",
    "n_pred",
    "tau_train",
    "grad_norm",
    "walk_tokens",
    "walk_steps",
)

# -- every record kind --------------------------------------------------------------------------

#: Kind -> fields every record of that kind has, in the order the writer emits them.
REQUIRED: dict[str, tuple[str, ...]] = {
    "metrics": LEGACY_METRICS,
    "run_start": (
        "event",
        "schema",
        "script",
        "time",
        "config",
        "schedule",
        "block_size",
        "steps_per_epoch",
        "world_size",
        "resumed_from",
    ),
    "eval": ("event", "step", "time", "tau", "tau_hist", "n_prompts", "new_tokens", "temperature"),
    "checkpoint": ("event", "step", "time", "path"),
    "nonfinite": ("event", "step", "time", "loss", "consecutive"),
    "stop": ("event", "step", "time", "reason"),
}
#: Kind -> fields a record of that kind may leave out.
OPTIONAL: dict[str, tuple[str, ...]] = {
    "metrics": (*PIPELINE_METRICS, *RANK_METRICS, *WALK_METRICS),
    # per-rank logs only; resumed launches only; runs with a held-out walk split only
    "run_start": ("rank", "resume_schedule", "walk_held_out"),
    # logs written since per-prompt results (the eval's SE between prompts) only
    "eval": ("prompt_tokens", "prompt_steps"),
    "checkpoint": (),
    "nonfinite": ("grad_norm",),
    "stop": ("error",),
}
#: Every record kind: ``"metrics"`` (no ``event`` key) and the event names.
RECORD_KINDS: tuple[str, ...] = tuple(REQUIRED)
EVENT_KINDS: tuple[str, ...] = tuple(kind for kind in RECORD_KINDS if kind != "metrics")

#: Fields of event records that the diagnostics read. Events are rare, so they are not part of the
#: polars schema (every declared column costs parse time on every line); their lines are decoded
#: whole, so every other field stays available in the event as written. These names (with the
#: metric numbers and lists) are the ones a ``--field`` map may rename.
EVENT_FIELDS: tuple[str, ...] = (
    "event",
    "script",
    "schema",
    "tau",
    "tau_hist",
    "n_prompts",
    "new_tokens",
    "temperature",
    "block_size",
    "steps_per_epoch",
    "world_size",
    "schedule",
    "resumed_from",
    "config",
    "path",
    "reason",
    "resume_schedule",
    "walk_held_out",
)


def record_kind(record: Mapping[str, Any]) -> str:
    """``"metrics"`` for a record without ``event``, else the event name (as written: a value that
    is not a string is no known kind)."""
    return record.get("event", "metrics")


def record_fields(kind: str) -> tuple[str, ...]:
    """Every field a record of ``kind`` may hold (required first).

    Raises:
        KeyError: an unknown kind.
    """
    return REQUIRED[kind] + OPTIONAL[kind]

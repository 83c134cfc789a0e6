"""The JSONL log schema v1 as small record dataclasses plus a validator.

The field names of every record kind are defined once, in :mod:`dflash_diag.logschema` (torch-free,
shared with the reader); this module adds the writer's side: the dataclasses, the JSON key order
and the value types the validator checks. docs/pipelines.md lists the records, docs/design.md
("The log schema") says why they look so.

Each record becomes one JSON object on one line (see :mod:`pipelines.logwriter`). Metric records
carry no ``event`` key: that is the legacy format of the lock-step trainer, which readers already
know; every other record names its ``event``. Optional pipeline fields left as ``None`` are omitted,
so the lock-step trainer's records are exactly ``step, time, epoch, loss, acc, lr``.

Non-finite floats are written as the bare tokens ``NaN``/``Infinity`` (Python's ``json`` default).
Python's ``json.loads`` reads them back as floats, so a NaN loss stays a NaN (counted by the
diagnostics) instead of turning into ``null`` (a missing value).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from dflash_diag import logschema
from dflash_diag.logschema import SCHEMA_VERSION, SCRIPTS, STOP_REASONS, record_kind

__all__ = [
    "SCHEMA_VERSION",
    "SCRIPTS",
    "STOP_REASONS",
    "CheckpointRecord",
    "EvalRecord",
    "Metrics",
    "NonFiniteRecord",
    "RunStart",
    "StopRecord",
    "record_kind",
    "validate_record",
]


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _event_first(d: dict[str, Any]) -> dict[str, Any]:
    """Put ``event`` first, for people reading the log with ``head`` or ``grep``."""
    return {"event": d.pop("event"), **d}


@dataclass
class RunStart:
    """Header written at every launch (a resumed launch writes its own, with ``resumed_from``)."""

    script: str
    time: float
    config: dict[str, Any]
    schedule: dict[str, Any]
    block_size: int
    steps_per_epoch: float | None
    world_size: int = 1
    resumed_from: dict[str, Any] | None = None  # {"path": str, "step": int}
    rank: int | None = None
    """Only in a per-rank log (``--log-all-ranks``): the rank that wrote it."""
    resume_schedule: str | None = None
    """Only in a resumed launch: ``continue`` (the checkpoint's lr schedule goes on) or
    ``restart`` (``schedule`` starts anew after the resumed step; its ``start_step`` says where)."""
    walk_held_out: dict[str, Any] | None = None
    """The held-out examples the walked tau walks (``{"examples", "seed", "of", "indices"}``);
    absent when the walk reads the training batches."""
    event: str = "run_start"
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("rank", "resume_schedule", "walk_held_out"):
            if d[name] is None:
                del d[name]
        # key order: event and schema first, for people reading the log with `head`
        return {"event": d.pop("event"), "schema": d.pop("schema"), **d}


@dataclass
class Metrics:
    """One optimizer step. The first six fields are the legacy record; the rest are pipeline-only.

    ``loss`` and ``acc`` are exact per-token means over the step (sums divided by ``n_pred``),
    not means of micro-batch means.
    """

    step: int
    time: float
    epoch: float
    loss: float
    acc: float
    lr: float
    tok_per_sec: float | None = None
    n_tokens: int | None = None
    n_blocks: int | None = None
    n_pred: int | None = None
    acc_pos: list[float] | None = None
    accept_pos: list[float] | None = None
    tau_train: float | None = None
    grad_norm: float | None = None
    stage_busy: dict[str, float] | None = None
    queue_fill: dict[str, float] | None = None
    step_time: float | None = None
    """Per-rank logs only: wall seconds of this step on this rank (waits included)."""
    sync_wait: float | None = None
    """Per-rank logs only: seconds of ``step_time`` spent waiting for the other ranks."""
    walk_tokens: int | None = None
    """Walked tau (every ``walk_every``-th record): tokens the walked decoding steps produced,
    summed over the walked sequences; tau_walk = walk_tokens / walk_steps."""
    walk_steps: int | None = None
    """Walked tau: decoding steps taken, summed over the walked sequences."""
    walk_hist: list[int] | None = None
    """Walked tau: walk_hist[k] = steps that produced k + 1 tokens (length = block size)."""

    def to_json(self) -> dict[str, Any]:
        return _drop_none(asdict(self))


@dataclass
class EvalRecord:
    """Real acceptance length from speculative decoding on held-out prompts."""

    step: int
    time: float
    tau: float
    tau_hist: list[int]
    n_prompts: int
    new_tokens: int
    temperature: float = 0.0
    prompt_tokens: list[int] | None = None
    """Per prompt, in the order measured: tokens gained (the sum of its accepted lengths, the
    numerator of ``tau``), so that the eval's standard error between prompts is computed, not
    guessed (absent in logs written before it)."""
    prompt_steps: list[int] | None = None
    """Per prompt: verify steps (the denominator; ``tau = sum(prompt_tokens) / sum(prompt_steps)``)."""
    event: str = "eval"

    def to_json(self) -> dict[str, Any]:
        return _event_first(
            {k: v for k, v in asdict(self).items() if v is not None or not k.startswith("prompt_")}
        )


@dataclass
class CheckpointRecord:
    step: int
    time: float
    path: str
    event: str = "checkpoint"

    def to_json(self) -> dict[str, Any]:
        return _event_first(asdict(self))


@dataclass
class NonFiniteRecord:
    """A step whose loss or gradient was not finite: the update was skipped."""

    step: int
    time: float
    loss: float
    grad_norm: float | None
    consecutive: int
    event: str = "nonfinite"

    def to_json(self) -> dict[str, Any]:
        return _event_first(_drop_none(asdict(self)))


@dataclass
class StopRecord:
    """The last record of a launch: why it ended, at which step."""

    step: int
    time: float
    reason: str
    error: str | None = None
    event: str = "stop"

    def __post_init__(self) -> None:
        if self.reason not in STOP_REASONS:
            raise ValueError(f"stop reason must be one of {STOP_REASONS}, got {self.reason!r}")

    def to_json(self) -> dict[str, Any]:
        return _event_first(_drop_none(asdict(self)))


# -- validation (used by the tests on every record written) ------------------------------------

_NUM = (int, float)


@dataclass
class _Spec:
    required: dict[str, tuple[type, ...]]
    optional: dict[str, tuple[type, ...]] = field(default_factory=dict)


#: The value types of every field, by name (a name means the same in every record kind).
_TYPES: dict[str, tuple[type, ...]] = {
    "step": (int,),
    "time": _NUM,
    "epoch": _NUM,
    "loss": _NUM,
    "acc": _NUM,
    "lr": _NUM,
    "tok_per_sec": _NUM,
    "n_tokens": (int,),
    "n_blocks": (int,),
    "n_pred": (int,),
    "acc_pos": (list,),
    "accept_pos": (list,),
    "tau_train": _NUM,
    "grad_norm": _NUM,
    "stage_busy": (dict,),
    "queue_fill": (dict,),
    "step_time": _NUM,
    "sync_wait": _NUM,
    "walk_tokens": (int,),
    "walk_steps": (int,),
    "walk_hist": (list,),
    "event": (str,),
    "schema": (int,),
    "script": (str,),
    "config": (dict,),
    "schedule": (dict,),
    "block_size": (int,),
    "steps_per_epoch": (*_NUM, type(None)),
    "world_size": (int,),
    "resumed_from": (dict, type(None)),
    "rank": (int,),
    "walk_held_out": (dict,),
    "tau": _NUM,
    "tau_hist": (list,),
    "n_prompts": (int,),
    "new_tokens": (int,),
    "temperature": _NUM,
    "prompt_tokens": (list,),
    "prompt_steps": (list,),
    "path": (str,),
    "consecutive": (int,),
    "reason": (str,),
    "error": (str,),
    "resume_schedule": (str,),
}
#: Field names from the shared schema, types from here (a name without a type fails at import).
_SPECS = {
    kind: _Spec(
        {name: _TYPES[name] for name in logschema.REQUIRED[kind]},
        {name: _TYPES[name] for name in logschema.OPTIONAL[kind]},
    )
    for kind in logschema.RECORD_KINDS
}
_PIPELINE = frozenset(logschema.PIPELINE_METRICS)
#: Fields of the per-rank logs (``--log-all-ranks``) only, on top of the pipeline fields.
_RANK_METRICS = frozenset(logschema.RANK_METRICS)


def _check_prompt_results(rec: dict[str, Any]) -> None:
    """An eval's per-prompt results: both lists or neither, one int per prompt each, adding up
    to its histogram's verify steps."""
    tokens, steps = rec.get("prompt_tokens"), rec.get("prompt_steps")
    if tokens is None and steps is None:
        return
    if tokens is None or steps is None:
        raise ValueError("eval: prompt_tokens and prompt_steps come together")
    for name, values in (("prompt_tokens", tokens), ("prompt_steps", steps)):
        if len(values) != rec["n_prompts"] or not all(type(x) is int and x >= 0 for x in values):
            raise ValueError(f"eval: {name} must hold n_prompts ({rec['n_prompts']}) counts")
    if sum(steps) != sum(rec["tau_hist"]):
        raise ValueError(
            f"eval: prompt_steps add up to {sum(steps)}, tau_hist to {sum(rec['tau_hist'])}"
        )


def validate_record(rec: dict[str, Any]) -> str:
    """Check one decoded log record against schema v1.

    Returns:
        The record's kind (see :func:`record_kind`).

    Raises:
        ValueError: unknown event, missing or unexpected field, or a field of the wrong type.
    """
    kind = record_kind(rec)
    spec = _SPECS.get(kind)
    if spec is None:
        raise ValueError(f"unknown event {kind!r}")
    for name, types in spec.required.items():
        if name not in rec:
            raise ValueError(f"{kind}: missing field {name!r}")
        _check_type(kind, name, rec[name], types)
    for name, value in rec.items():
        if name in spec.required:
            continue
        if name not in spec.optional:
            raise ValueError(f"{kind}: unexpected field {name!r}")
        _check_type(kind, name, value, spec.optional[name])
    if kind == "run_start":
        if rec["schema"] != SCHEMA_VERSION or rec["script"] not in SCRIPTS:
            raise ValueError(f"run_start: bad schema/script {rec['schema']}/{rec['script']}")
        keys = set(rec["schedule"])
        if (
            not set(logschema.SCHEDULE_FIELDS)
            <= keys
            <= set(logschema.SCHEDULE_FIELDS) | set(logschema.SCHEDULE_OPTIONAL_FIELDS)
        ):
            raise ValueError(f"run_start: schedule fields {sorted(rec['schedule'])}")
        if "resume_schedule" in rec and (
            rec["resume_schedule"] not in logschema.RESUME_SCHEDULE_MODES
            or rec["resumed_from"] is None
        ):
            raise ValueError(
                f"run_start: resume_schedule {rec['resume_schedule']!r} "
                f"(one of {logschema.RESUME_SCHEDULE_MODES}, in a resumed launch only)"
            )
        if rec["resumed_from"] is not None and set(rec["resumed_from"]) != set(
            logschema.RESUMED_FROM_FIELDS
        ):
            raise ValueError("run_start: resumed_from must be {path, step}")
        if "walk_held_out" in rec:
            split = rec["walk_held_out"]
            if set(split) - set(logschema.WALK_HELD_OUT_OPTIONAL_FIELDS) != set(
                logschema.WALK_HELD_OUT_FIELDS
            ):
                raise ValueError(
                    f"run_start: walk_held_out must be "
                    f"{{{', '.join(logschema.WALK_HELD_OUT_FIELDS)}[, source, eval_indices]}}"
                )
            if split.get("source", "data") not in logschema.WALK_HELD_OUT_SOURCES:
                raise ValueError(
                    f"run_start: walk_held_out.source {split['source']!r} "
                    f"(one of {logschema.WALK_HELD_OUT_SOURCES})"
                )
        if "rank" in rec and not 0 <= rec["rank"] < rec["world_size"]:
            raise ValueError(
                f"run_start: rank {rec['rank']} outside world_size {rec['world_size']}"
            )
    if kind == "eval":
        _check_prompt_results(rec)
    if kind == "metrics":
        present = set(rec) & set(_PIPELINE)
        if present and present != set(_PIPELINE):
            raise ValueError(
                f"metrics: partial pipeline fields, missing {set(_PIPELINE) - present}"
            )
        rank_fields = set(rec) & set(_RANK_METRICS)
        if rank_fields and (rank_fields != set(_RANK_METRICS) or not present):
            raise ValueError(
                "metrics: step_time and sync_wait come together, with the pipeline fields"
            )
        for name in ("acc_pos", "accept_pos"):
            if name in rec and not all(isinstance(x, _NUM) for x in rec[name]):
                raise ValueError(f"metrics: {name} must hold numbers")
        walk = set(rec) & set(logschema.WALK_METRICS)
        if walk:
            _check_walk(rec, walk, pipeline=bool(present))
        for name in ("stage_busy", "queue_fill"):
            if name in rec and not all(
                isinstance(v, _NUM) and (math.isnan(v) or 0.0 <= v <= 1.0)
                for v in rec[name].values()
            ):
                raise ValueError(f"metrics: {name} values must be fractions in [0, 1]")
    if kind == "stop" and rec["reason"] not in STOP_REASONS:
        raise ValueError(f"stop: unknown reason {rec['reason']!r}")
    return kind


def _check_walk(rec: dict[str, Any], present: set[str], pipeline: bool) -> None:
    """The walk fields come together, on a pipeline record, and add up: the histogram's steps
    and tokens are walk_steps and walk_tokens."""
    if present != set(logschema.WALK_METRICS) or not pipeline:
        raise ValueError(
            "metrics: walk_tokens, walk_steps and walk_hist come together, with the pipeline fields"
        )
    hist = rec["walk_hist"]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in hist):
        raise ValueError("metrics: walk_hist must hold counts")
    if len(hist) != len(rec["accept_pos"]) + 1:
        raise ValueError(
            f"metrics: walk_hist has {len(hist)} entries, block size is "
            f"{len(rec['accept_pos']) + 1}"
        )
    if (
        sum(hist) != rec["walk_steps"]
        or sum((k + 1) * c for k, c in enumerate(hist)) != rec["walk_tokens"]
    ):
        raise ValueError("metrics: walk_hist does not add up to walk_steps / walk_tokens")


def _check_type(kind: str, name: str, value: Any, types: tuple[type, ...]) -> None:
    # bool is an int subclass in Python; a bool where a number belongs is a bug, not a number.
    if isinstance(value, bool) or not isinstance(value, types):
        raise ValueError(f"{kind}: field {name!r} has type {type(value).__name__}")  # noqa: TRY004

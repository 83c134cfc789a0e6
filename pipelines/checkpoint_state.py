"""Validation of a training checkpoint's ``state.json`` (what the training programs wrote there).

``state.json`` is plain JSON that a user can edit, a disk can damage and another version can
write, so every field is checked against one table before a run resumes from it. A bad value is
refused with one line naming the file, the field and what was expected: ``"step": true`` would
otherwise pass as the integer 1 (Python's bool is an int) and retrain from step 2 a model trained
to step 40.

The fields (see :mod:`pipelines.checkpoints`):

=============== ======== ==========================================================
field           required value
=============== ======== ==========================================================
step            yes      int >= 0 (not a bool): the last optimizer step applied
cursor          no       null or {"epoch": int >= 0, "position": int >= 0}
schedule        no       {"peak_lr", "warmup_steps", "total_steps", "min_lr", "kind"} and, for a
                         schedule restarted at a resume, "start_step"
                         forming a valid :class:`~pipelines.schedule.Schedule`
script          no       "sync" or "pipeline"
seed            no       int in [0, 2**32)
world_size      no       int >= 1
micro_batches   no       int >= 1 (older checkpoints: ``grad_accum``)
walk_held_out   no       {} (no split) or {"examples": int >= 1, "seed", "of": int, "indices"
                         [, "source": "eval_prompts" or "data" (absent: data)]
                         [, "eval_indices": the eval's prompts of a seeded split]}: the
                         held-out walk split (:mod:`pipelines.walk_split`)
=============== ======== ==========================================================

Unknown keys are kept and ignored (a newer version may add some).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash.checkpoint import STATE_FILE, CheckpointError

from .config import SEED_LIMIT, WALK_SOURCES

SCRIPTS = ("sync", "pipeline")


def _int_at_least(low: int, high: int | None = None) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if type(v) is not int:
            return f"an integer, got {v!r:.60}"
        if v < low or (high is not None and v >= high):
            bound = f"in [{low}, {high})" if high is not None else f">= {low}"
            return f"an integer {bound}, got {v}"
        return None

    return check


def _cursor(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) != {"epoch", "position"}:
        return f'null or {{"epoch": int, "position": int}}, got {v!r:.60}'
    for key in ("epoch", "position"):
        if type(v[key]) is not int or v[key] < 0:
            return f"{key} an integer >= 0, got {v[key]!r:.40}"
    return None


def _schedule(v: Any) -> str | None:
    from .schedule import Schedule

    keys = {"peak_lr", "warmup_steps", "total_steps", "min_lr", "kind"}
    # start_step: only in a schedule restarted at a resume (--resume-schedule restart)
    if not isinstance(v, dict) or not keys <= set(v) <= keys | {"start_step"}:
        return (
            f"an object with {', '.join(sorted(keys))} (and optionally start_step), got {v!r:.60}"
        )
    for key in ("warmup_steps", "total_steps", "start_step"):
        if key in v and type(v[key]) is not int:
            return f"{key} an integer, got {v[key]!r:.40}"
    for key in ("peak_lr", "min_lr"):
        if type(v[key]) not in (int, float) or not math.isfinite(v[key]):
            return f"{key} a finite number, got {v[key]!r:.40}"
    try:
        Schedule(**v)
    except (TypeError, ValueError) as e:
        return f"a valid schedule ({e})"
    return None


def _held_out(v: Any) -> str | None:
    if v == {}:
        return None
    keys = {"examples", "seed", "of", "indices"}
    if not isinstance(v, dict) or set(v) - {"source", "eval_indices"} != keys:
        return (
            f"{{}} or an object with {', '.join(sorted(keys))}[, source, eval_indices], "
            f"got {v!r:.60}"
        )
    if "eval_indices" in v and (
        not isinstance(v["eval_indices"], list)
        or not all(type(i) is int and i >= 0 for i in v["eval_indices"])
    ):
        return f"eval_indices a list of prompt indices, got {v['eval_indices']!r:.40}"
    if v.get("source", "data") not in WALK_SOURCES:
        return f"source one of {', '.join(WALK_SOURCES)}, got {v['source']!r:.40}"
    for key, low, high in (("examples", 1, None), ("seed", 0, SEED_LIMIT), ("of", 2, None)):
        if _int_at_least(low, high)(v[key]) is not None:
            return f"{key} {_int_at_least(low, high)(v[key])}"
    if v["examples"] >= v["of"]:
        return f"examples below of ({v['of']}), got {v['examples']}"
    return None


def _script(v: Any) -> str | None:
    return None if v in SCRIPTS and isinstance(v, str) else f"'sync' or 'pipeline', got {v!r:.40}"


#: field -> (required, check returning None or what was expected)
STATE_FIELDS: dict[str, tuple[bool, Callable[[Any], str | None]]] = {
    "step": (True, _int_at_least(0)),
    "cursor": (False, _cursor),
    "schedule": (False, _schedule),
    "script": (False, _script),
    "seed": (False, _int_at_least(0, SEED_LIMIT)),
    "world_size": (False, _int_at_least(1)),
    "micro_batches": (False, _int_at_least(1)),
    "grad_accum": (False, _int_at_least(1)),
    "walk_held_out": (False, _held_out),
}


def validate_training_state(state: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """Check every known field of a checkpoint's ``state.json``; return ``state`` unchanged.

    Args:
        state: the parsed JSON object (``format`` already removed).
        path: the checkpoint directory (for the message).

    Raises:
        CheckpointError: one line naming ``path/state.json``, the field and the expected value.
    """
    for name, (required, check) in STATE_FIELDS.items():
        if name not in state:
            if required:
                raise CheckpointError(
                    path,
                    f"records no {name!r}: not a training checkpoint, or "
                    "damaged; use another checkpoint",
                    STATE_FILE,
                )
            continue
        problem = check(state[name])
        if problem is not None:
            raise CheckpointError(
                path,
                f"{name!r} must be {problem}; the file is damaged or was "
                "edited: use another checkpoint",
                STATE_FILE,
            )
    return state


def check_cursor_fits(state: dict[str, Any], path: str | Path, n_examples: int) -> None:
    """The saved data cursor must point inside a dataset of ``n_examples`` examples.

    Raises:
        CheckpointError: the cursor lies beyond the data (another dataset, or an edited file).
    """
    cursor = state.get("cursor")
    if cursor is not None and cursor["position"] > n_examples:
        raise CheckpointError(
            path,
            f"data cursor position {cursor['position']} lies beyond the "
            f"{n_examples} examples of the data: the checkpoint was trained "
            "on other data, or the file was edited",
            STATE_FILE,
        )

"""Is this a drafter's training log? One detector, one reason.

An acceptance length, a block size, a baseline drafter and a drafter's accuracy target mean
something only for a speculative-decoding drafter. A TRL SFT run's ``mean_token_accuracy`` or a
classifier's accuracy is no drafter's per-position accuracy, and ``1 + 15 * acc`` of it is no
acceptance length. The log is a drafter's when it shows one of (strongest first):

* this project's JSONL schema (a DFlash drafter's by contract), a block size in a ``run_start``
  header with a schema version, or ``--block-size`` given;
* per-position metrics (``acc_pos``, ``accept_pos``: a reader assembles them from
  ``train/acc_0`` .. ``train/acc_N`` and the like);
* a drafter trainer's preset (SpecForge, TorchSpec, vLLM speculators), given or detected;
* acceptance fields: ``tau_train``, ``walk_tokens``/``walk_steps``, or eval records with a
  measured ``tau``.

Other logs get windows, trend, schedule and verdict, and no acceptance section.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

import polars as pl

from dflash_diag.analysis.numbers import finite_number
from dflash_diag.read.records import LogEvent

#: Presets of drafter trainers (their logs are drafters' even without per-position metrics).
DRAFTER_PRESETS = ("specforge-dflash", "specforge-eagle3", "torchspec", "speculators")

#: The reason for a log in this project's JSONL schema: a DFlash drafter's log by contract.
NATIVE_SCHEMA = "this project's JSONL schema (a DFlash drafter's log)"
NOT_A_DRAFTER = (
    "no drafter evidence: no block size in a run_start header, no per-position "
    "accuracy, no drafter trainer's preset, no tau or walk fields"
)


@dataclass(frozen=True)
class DrafterEvidence:
    """Whether the log is a drafter's, and why.

    Attributes:
        is_drafter: an acceptance section belongs in the report.
        reason: what told it (or that nothing did), for a note and the JSON.
    """

    is_drafter: bool
    reason: str


def is_schema_header(header: LogEvent | None) -> TypeGuard[LogEvent]:
    """A ``run_start`` header our drafter trainer wrote (it carries the schema version), as
    opposed to one a reader made up from another trainer's metadata."""
    return header is not None and header.fields.get("schema") is not None


def _has_values(frame: pl.DataFrame, name: str) -> bool:
    if name not in frame.columns or frame.height == 0:
        return False
    column = frame[name]
    if isinstance(column.dtype, pl.List):
        return bool((column.list.len() > 0).fill_null(False).any())
    return bool(column.is_finite().fill_null(False).any())


def detect_drafter(
    frame: pl.DataFrame,
    *,
    header: LogEvent | None = None,
    evals: Sequence[LogEvent] = (),
    block_size_option: int | None = None,
    foreign: bool = True,
    list_rows: pl.DataFrame | None = None,
    presets: Sequence[str] = (),
) -> DrafterEvidence:
    """The one drafter detector (see the module docstring for the evidence, strongest first).

    Args:
        frame: the analysed records.
        header: the governing ``run_start`` header.
        evals: the eval records.
        block_size_option: ``--block-size``.
        foreign: the log was read by another trainer's reader; False for this project's JSONL
            schema, a drafter's by contract.
        list_rows: rows with their per-position lists read (a JSONL log read without its lists
            has them null in ``frame``).
        presets: the presets the readers applied.
    """
    if not foreign:
        return DrafterEvidence(True, NATIVE_SCHEMA)
    if block_size_option is not None:
        return DrafterEvidence(True, f"--block-size {block_size_option} given")
    if is_schema_header(header) and finite_number(header.fields.get("block_size")):
        return DrafterEvidence(
            True, f"block size {int(header.fields['block_size'])} in the run_start header"
        )
    for name in ("acc_pos", "accept_pos"):
        if _has_values(frame, name) or (list_rows is not None and _has_values(list_rows, name)):
            return DrafterEvidence(True, f"per-position metrics ({name})")
    named = [header.fields.get("preset")] if header is not None else []
    preset = next((p for p in [*named, *presets] if p in DRAFTER_PRESETS), None)
    if preset is not None:
        return DrafterEvidence(True, f"preset {preset} (a drafter trainer)")
    for name in ("tau_train", "walk_tokens"):
        if _has_values(frame, name):
            return DrafterEvidence(True, f"acceptance fields ({name})")
    if any(finite_number(e.fields.get("tau")) is not None for e in evals):
        return DrafterEvidence(True, "eval records with a measured tau")
    return DrafterEvidence(False, NOT_A_DRAFTER)

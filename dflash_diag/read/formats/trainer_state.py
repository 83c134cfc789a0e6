"""Hugging Face Trainer / TRL ``trainer_state.json``: one JSON object with a ``log_history`` list.

``Trainer`` writes it into every ``checkpoint-N/`` folder (and into the output folder at the end
of ``train()`` when asked to save its state). Each entry of ``log_history`` is one logging call:
training entries (``loss``, ``learning_rate``, ``grad_norm``, ``epoch``, TRL's
``mean_token_accuracy``, ``step``), evaluation entries (``eval_loss``, ``eval_*``, same
``step``) and a final summary (``train_runtime``, ``train_loss``...). The history is cumulative,
so the latest checkpoint's file holds all of it: given an output folder, the file with the
largest ``global_step`` wins (ties: the newest).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.records import ParseIssues

FORMAT = "HF trainer_state.json"
FILENAME = "trainer_state.json"
#: Larger files are not a trainer state (it holds one entry per logging call: KBs to a few MBs).
_MAX_BYTES = 512 * 2**20


def looks_like_trainer_state(head: bytes) -> bool:
    """Whether a file's first bytes open a JSON object that names the trainer state's keys."""
    text = head.lstrip()
    return text.startswith(b"{") and (b'"log_history"' in head or b'"global_step"' in head)


def find_state_files(folder: Path) -> list[Path]:
    """``trainer_state.json`` files of an output folder and its ``checkpoint-N`` folders."""
    found = []
    top = folder / FILENAME
    if top.is_file():
        found.append(top)
    for child in folder.iterdir() if folder.is_dir() else ():
        if child.is_dir() and re.fullmatch(r"checkpoint-\d+", child.name):
            candidate = child / FILENAME
            if candidate.is_file():
                found.append(candidate)
    return found


def _load(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise DiagError(f"{path}: too large for a trainer_state.json")
        with path.open("rb") as handle:
            state = json.load(handle)
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise DiagError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise DiagError(f"{path}: not a trainer_state.json (no log_history list)")
    return state


def read_trainer_state(path: str | Path) -> Scalars:
    """Read a ``trainer_state.json``, or the latest one of an HF output folder.

    Raises:
        DiagError: no such file in the folder, invalid JSON, or no ``log_history`` list.
    """
    path = Path(path)
    notes = []
    if path.is_dir():
        files = find_state_files(path)
        if not files:
            raise DiagError(f"{path}: no trainer_state.json in it or in its checkpoint-N folders")
        states = [(_load(f), f) for f in files]
        state, chosen = max(states, key=lambda sf: (_number(sf[0].get("global_step")),
                                                    os.stat(sf[1]).st_mtime))
        if len(files) > 1:
            notes.append(f"latest of {len(files)} trainer states: {chosen}")
    else:
        state = _load(path)
    collector = RowCollector()
    issues = ParseIssues()
    for entry in state["log_history"]:
        issues.lines += 1
        if not isinstance(entry, dict):
            issues.malformed += 1
            continue
        if "train_runtime" in entry:
            # the run's closing summary (train_loss = the mean over the run): no logging call
            entry = {f"summary/{k}": v for k, v in entry.items() if k != "step"} | {
                "step": entry.get("step")}
        collector.add({k: v for k, v in entry.items() if k != "step"}, step=entry.get("step"))
    meta = {k: state.get(k) for k in ("max_steps", "num_train_epochs", "logging_steps",
                                      "eval_steps", "train_batch_size") if k in state}
    return Scalars(frame=collector.frame(), format=FORMAT, issues=issues, meta=meta, notes=notes)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else -1.0

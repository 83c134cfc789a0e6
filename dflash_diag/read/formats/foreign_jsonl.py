"""Other trainers' JSONL (and JSON-lines exports of W&B or HF histories), record by record.

The fast JSONL reader declares the canonical schema and reads only those fields, which is
right for this project's own logs. Another trainer's lines need what a schema cannot give:
nested objects flattened (``{"train": {"full_acc": 0.4}}`` is ``train/full_acc``), numbered
keys found by pattern, and the step taken from whichever key the trainer uses. Those logs are
read here, line by line with :mod:`json`, in chunks (memory: the values kept plus a chunk).
A line that is not a JSON object is counted as malformed; a torn last line is ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

from dflash_diag.errors import DiagError
from dflash_diag.logschema import METRIC_MAPS, REQUIRED
from dflash_diag.read.aliases import STEP, is_validation
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.records import FIRST_N, ParseIssues

FORMAT = "JSONL"
CHUNK_BYTES = 16 * 2**20
#: Step keys of a JSON record, first present wins (a preset may name another).
STEP_KEYS = STEP


def read_foreign_jsonl(path: str | Path, *, strict: bool = False) -> Scalars:
    """Read a JSONL file record by record, flattening nested objects.

    Raises:
        DiagError: an unreadable file, or a malformed line with ``strict``.
    """
    path = Path(path)
    collector = RowCollector()
    issues = ParseIssues()
    line_no = 0
    previous_step = None
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    with handle:
        pending = b""
        while True:
            try:
                block = handle.read(CHUNK_BYTES)
            except OSError as exc:
                raise DiagError(f"cannot read {path}: {exc}") from None
            buffer = pending + block
            lines = buffer.split(b"\n")
            pending = lines.pop() if block else b""
            if not block and lines and not buffer.endswith(b"\n"):
                last = lines.pop()
                lines_final = [(last, True)]
            else:
                lines_final = []
            for raw, is_tail in [(line, False) for line in lines] + lines_final:
                line_no += 1
                # a crash's zero-fill before the records (or a torn write's) is no record
                raw = raw.lstrip(b"\x00")
                if not raw.strip():
                    continue
                issues.lines += 1
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError):
                    record = None
                if not isinstance(record, dict):
                    if is_tail:
                        issues.torn_tail.append(0)
                        continue
                    if strict:
                        raise DiagError(
                            f"{path}: malformed line {line_no} (not a JSON object); --strict is set"
                        )
                    issues.malformed += 1
                    if len(issues.malformed_lines) < FIRST_N:
                        issues.malformed_lines.append((0, line_no))
                    continue
                if is_own_event(record):
                    continue  # this project's own events belong to the native reader
                step = next((record[k] for k in STEP_KEYS if k in record), None)
                if step is not None and step == previous_step and _is_epoch_summary(record):
                    record = _summary_names(record)
                previous_step = step
                collector.add(record, step=step, time=record.get("time", record.get("_timestamp")))
            if not block:
                break
    return Scalars(frame=collector.frame(), format=FORMAT, issues=issues)


def _is_epoch_summary(record: dict) -> bool:
    """An end-of-epoch row (``{"epoch": 4, "step": 34100, "train_loss": ..., "val_loss": ...}``)
    written at the step of the epoch's last train row: it carries validation values."""
    return "epoch" in record and any(is_validation(str(k)) for k in record)


def _summary_names(record: dict) -> dict:
    """An epoch summary's train values renamed ``epoch_summary/<name>``: an epoch mean must not
    overwrite the step's own value; its validation values stay as they are."""
    return {
        k: v if k in STEP_KEYS or k == "epoch" or is_validation(str(k)) else None
        for k, v in record.items()
    } | {
        f"epoch_summary/{k}": v
        for k, v in record.items()
        if k not in STEP_KEYS and k != "epoch" and not is_validation(str(k))
    }


#: This project's own event kinds (schema v1), which the native reader reads; another trainer's
#: ``event`` values (``"step"``, ``"train"``, ``"log"``...) mark its metric records.
_OWN_EVENTS = frozenset(kind for kind in REQUIRED if kind != "metrics")


def is_own_event(record: dict) -> bool:
    """Whether a JSON record is one of this project's event records (not a metric record)."""
    event = record.get("event")
    return isinstance(event, str) and event in _OWN_EVENTS


def has_foreign_events(head: bytes) -> bool:
    """Whether the first lines hold records whose ``event`` is another trainer's kind."""
    for raw in head.lstrip(b"\x00").split(b"\n")[:-1][:200]:
        if b'"event"' not in raw:
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if (
            isinstance(record, dict)
            and "event" in record
            and not is_own_event(record)
            and record.get("event") not in (None, "metrics")
        ):
            return True
    return False


def sample_keys(head: bytes) -> tuple[dict[str, type], bool]:
    """Flattened keys of the first complete lines of a JSONL log (with the type of the first
    value seen), and whether any metric record nests an object."""
    keys: dict[str, type] = {}
    nested = False
    for raw in head.lstrip(b"\x00").split(b"\n")[:-1][:200]:
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict) or is_own_event(record):
            continue  # this project's event records hold objects by design
        for key, value in record.items():
            if isinstance(value, dict) and key not in METRIC_MAPS:
                nested = True
                for inner, inner_value in value.items():
                    keys.setdefault(f"{key}/{inner}", type(inner_value))
            else:
                keys.setdefault(key, type(value))
    return keys, nested

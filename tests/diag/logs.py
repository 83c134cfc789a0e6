"""Small builders for test logs (inline records; the big realistic one is make_sample_log)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path

#: The original analysis: mean accuracy of the seven 50-step pipeline windows from step 15000.
ORIGINAL_MEANS = (0.1504, 0.1613, 0.1602, 0.1691, 0.1692, 0.1714, 0.1766)
ORIGINAL_ARROWS = (None, "up", "flat", "up", "flat", "flat", "up")


def dumps(records: Iterable[dict]) -> bytes:
    """JSONL bytes (Python's json, so NaN is written as the bare token ``NaN``)."""
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def write(path: Path, records: Iterable[dict], *, gz: bool = False, tail: bytes = b"") -> Path:
    data = dumps(records) + tail
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def original_analysis(per_window: int = 50, legacy: bool = True) -> list[dict]:
    """A lock-step phase then a pipeline phase whose windows have :data:`ORIGINAL_MEANS`.

    Within a window, records come in pairs with the same ``n_pred`` and accuracies mean +/- d, so
    the ``n_pred``-weighted window mean is exactly the listed mean while entries still vary.
    """
    records: list[dict] = []
    if legacy:
        for step in range(14000, 15000, 10):
            records.append(
                {
                    "step": step,
                    "time": 1.7e9 + step,
                    "epoch": step / 5000,
                    "loss": 1.57,
                    "acc": 0.149,
                    "lr": 2.4e-4,
                }
            )
    records.append(
        {
            "event": "run_start",
            "schema": 1,
            "script": "pipeline",
            "schedule": {
                "kind": "cosine",
                "peak_lr": 6e-4,
                "warmup_steps": 37500,
                "total_steps": 937500,
                "min_lr": 6e-5,
            },
            "block_size": 16,
            "steps_per_epoch": 5000,
            "world_size": 1,
            "resumed_from": {"path": "ckpt/step_15000", "step": 15000},
        }
    )
    step = 15000
    for w, mean in enumerate(ORIGINAL_MEANS):
        for i in range(per_window):
            d = 0.01 * (1 + (i // 2) % 3) * (1 if i % 2 == 0 else -1)
            n_pred = 50000 + 1000 * (i // 2)
            records.append(
                {
                    "step": step,
                    "time": 1.7e9 + 15000 + 4.1 * (step - 15000),
                    "epoch": step / 5000,
                    "loss": 3.11 - 0.01 * w,
                    "acc": mean + d,
                    "lr": 2.43e-4 * step / 15349,
                    "tok_per_sec": 16000.0,
                    "n_tokens": 65536,
                    "n_pred": n_pred,
                }
            )
            step += 1
    return records

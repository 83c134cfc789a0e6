"""Generated log shapes for bench_converge.py: one writer per layout a real trainer writes.

Each shape is a name, a writer (path, lines) and the bare polars scan a reader is measured
against (the schema of the scalar columns the analysis needs, the step column and the value
averaged in the 50-step group-by). TensorBoard and trainer_state are other formats with the
HF shape's values; their bare scan is the HF JSONL's scan (there is no polars scan of an event
file), so their ratio says what the format costs over reading the same values as JSONL.
"""

from __future__ import annotations

import json
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Shape:
    """One generated layout.

    Attributes:
        name: the ``--shapes`` name.
        write: writes ``lines`` records at the path (a file, or a folder for TensorBoard).
        file: the log's path relative to the shape's folder.
        scan_schema: the bare scan's schema (polars type names, a dict for a struct), in the
            log's names.
        scan_step: the scan's step column (a struct field path ``a.b`` for nested ones).
        scan_value: the scan's averaged value (the same notation).
        scan_of: another shape whose JSONL file the bare scan reads (same values).
    """

    name: str
    write: Callable[[Path, int], None]
    file: str
    scan_schema: dict[str, object]
    scan_step: str
    scan_value: str
    scan_of: str | None = None


def _pipeline(path: Path, lines: int) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_converge import write_log

    write_log(path, lines)


def _mixed(path: Path, lines: int, seed: int = 1) -> None:
    """Issue 21's shape: 30% plain records, then 70% pipeline records with one acc_pos list."""
    rng = random.Random(seed)
    positions = [
        "[" + ", ".join(f"{rng.uniform(0.02, 0.6):.5f}" for _ in range(15)) + "]"
        for _ in range(256)
    ]
    plain = lines * 3 // 10
    t = 1.767e9
    with path.open("w") as out:
        for step in range(1, lines + 1):
            t += 0.9
            acc = 0.15 + 0.1 * step / lines + rng.gauss(0, 0.01)
            head = (
                f'{{"step": {step}, "loss": {3.1 - acc:.4f}, "acc": {acc:.4f}, '
                f'"lr": {6e-4 * min(1.0, step / 20000):.6e}, "time": {t:.3f}, '
                f'"epoch": {step / 5000:.4f}'
            )
            if step <= plain:
                out.write(head + "}\n")
            else:
                out.write(
                    head + f', "tok_per_sec": {16000 + rng.random() * 500:.1f}, '
                    f'"acc_pos": {positions[step % 256]}}}\n'
                )


def hf_values(lines: int, seed: int = 2):
    """The HF Trainer's logging calls: (step, loss, grad_norm, learning_rate, epoch)."""
    rng = random.Random(seed)
    for step in range(1, lines + 1):
        yield (
            step,
            2.0 / step**0.3 + rng.gauss(0, 0.01),
            1.0 + rng.random(),
            2e-4 * (1 - step / (lines + 1)),
            step / 5000,
        )


def _hf(path: Path, lines: int) -> None:
    """``{"loss", "grad_norm", "learning_rate", "epoch", "step"}``, step last (HF's order)."""
    with path.open("w") as out:
        for step, loss, grad_norm, lr, epoch in hf_values(lines):
            out.write(
                f'{{"loss": {loss:.4f}, "grad_norm": {grad_norm:.4f}, '
                f'"learning_rate": {lr:.6e}, "epoch": {epoch:.4f}, "step": {step}}}\n'
            )


def _hf_extras(path: Path, lines: int) -> None:
    """The HF shape with what other trainers add beside it, each of which once sent the whole
    file to the line reader: a wall-clock ``time`` as text, a per-position accuracy list, and a
    ``null`` in the first record."""
    with path.open("w") as out:
        for step, loss, grad_norm, lr, epoch in hf_values(lines):
            acc = 0.8 - 0.3 * loss / 2.0
            positions = ", ".join(f"{acc * 0.9**k:.4f}" for k in range(7))
            norm = "null" if step == 1 else f"{grad_norm:.4f}"
            clock = f"{step // 3600 % 24:02d}:{step // 60 % 60:02d}:{step % 60:02d}"
            out.write(
                f'{{"loss": {loss:.4f}, "grad_norm": {norm}, "learning_rate": {lr:.6e}, '
                f'"epoch": {epoch:.4f}, "time": "2026-11-{1 + step // 86400 % 28:02d}T{clock}", '
                f'"acc_pos": [{positions}], "step": {step}}}\n'
            )


def _llama_factory(path: Path, lines: int, seed: int = 4) -> None:
    """LLaMA-Factory's ``trainer_log.jsonl``: ``current_steps``, progress and clock texts, and
    an eval row at the train row's step every 500 records (an end-of-epoch summary to the line
    reader's rule: it holds ``epoch``, ``eval_loss`` and the train row's ``total_steps``)."""
    rng = random.Random(seed)
    with path.open("w") as out:
        written = 0
        step = 0
        while written < lines:
            step += 1
            loss = 2.0 / step**0.3 + rng.gauss(0, 0.01)
            common = (
                f'"epoch": {3 * step / lines:.6f}, "percentage": {100 * step / lines:.2f}, '
                f'"elapsed_time": "{step // 3600}:{step // 60 % 60:02d}:{step % 60:02d}", '
                f'"remaining_time": "0:{step % 60:02d}:00"'
            )
            out.write(
                f'{{"current_steps": {step}, "total_steps": {lines}, "loss": {loss:.4f}, '
                f'"lr": {2e-4 * (1 - step / (lines + 1)):.6e}, {common}}}\n'
            )
            written += 1
            if step % 500 == 0 and written < lines:
                out.write(
                    f'{{"current_steps": {step}, "total_steps": {lines}, '
                    f'"eval_loss": {loss + 0.1:.4f}, {common}}}\n'
                )
                written += 1


def _nested(path: Path, lines: int, seed: int = 3) -> None:
    """speculators' layout: a ``train`` object with numbered per-position accuracies."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for step in range(lines):
            acc = 0.2 + 0.3 * step / lines + rng.gauss(0, 0.01)
            pos = ", ".join(f'"position_{k}_acc": {acc * 0.9**k:.4f}' for k in range(1, 8))
            out.write(
                f'{{"global_step": {step}, "lr": {2e-4 * (1 - step / (lines + 1)):.6e}, '
                f'"train": {{"loss": {3.0 - acc:.4f}, "full_acc": {acc:.4f}, '
                f'"eal": {1.5 + acc:.4f}, {pos}}}}}\n'
            )


def _heldout_eagle(path: Path, lines: int, seed: int = 5) -> None:
    """Held out (issue 21: never profiled or tuned on): an EAGLE-3 trainer's flat records with
    slash keys, per-position accuracies, a string timestamp, and an eval record every 100 steps."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for step in range(1, lines + 1):
            acc = 0.3 + 0.4 * step / lines + rng.gauss(0, 0.01)
            pos = ", ".join(f'"train/acc_{k}": {acc * 0.85**k:.4f}' for k in range(3))
            out.write(
                f'{{"step": {step}, "train/loss": {2.5 - acc:.4f}, {pos}, '
                f'"train/lr": {1e-4 * (1 - step / (lines + 1)):.6e}, '
                f'"timestamp": "2026-11-{1 + step * 28 // lines:02d}T12:00:00"}}\n'
            )
            if step % 100 == 0:
                out.write(f'{{"step": {step}, "eval/loss": {2.6 - acc:.4f}}}\n')


def _tensorboard(folder: Path, lines: int) -> None:
    """The HF values as SummaryWriter.add_scalar events, under the HF log's names."""
    sys.path.insert(0, str(ROOT))
    from dflash_diag.read.formats.tensorboard import masked_crc32c

    folder.mkdir(parents=True, exist_ok=True)
    version = b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2"
    header = struct.pack("<Q", len(version))
    events: list[bytes] = []
    with (folder / "events.out.tfevents.1700000000.bench.1.0").open("wb") as tb:
        tb.write(
            header
            + struct.pack("<I", masked_crc32c(header))
            + version
            + struct.pack("<I", masked_crc32c(version))
        )
        for step, loss, grad_norm, lr, epoch in hf_values(lines):
            for tag, value in (
                ("loss", loss),
                ("grad_norm", grad_norm),
                ("learning_rate", lr),
                ("epoch", epoch),
            ):
                events.append(_event(step, tag, value))
            if len(events) >= 2**16:
                tb.write(_framed(events))
                events = []
        tb.write(_framed(events))


def _event(step: int, tag: str, value: float) -> bytes:
    """An ``add_scalar`` Event message (bench_formats._record's, without the framing)."""
    raw = tag.encode()
    item = b"\x0a" + bytes([len(raw)]) + raw + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + bytes([len(item)]) + item
    step_bytes = bytearray()
    rest = step
    while True:
        low, rest = rest & 0x7F, rest >> 7
        step_bytes.append(low | (0x80 if rest else 0))
        if not rest:
            break
    return (
        b"\x09"
        + struct.pack("<d", 1.7e9 + step)
        + b"\x10"
        + bytes(step_bytes)
        + b"\x2a"
        + bytes([len(summary)])
        + summary
    )


def _framed(events: list[bytes]) -> bytes:
    """TFRecord framing of ``events``, the CRCs computed for all records of one length at once
    (the pure-Python CRC of every record made writing the shape take minutes)."""
    import numpy as np

    if not events:
        return b""
    by_length: dict[int, list[int]] = {}
    for i, event in enumerate(events):
        by_length.setdefault(len(event), []).append(i)
    header_crc: dict[int, int] = {}
    data_crc = [0] * len(events)
    for length, indices in by_length.items():
        header = struct.pack("<Q", length)
        header_crc[length] = _masked_crc32c_rows(np.frombuffer(header, np.uint8)[None, :])[0]
        rows = np.frombuffer(b"".join(events[i] for i in indices), np.uint8).reshape(-1, length)
        for i, crc in zip(indices, _masked_crc32c_rows(rows).tolist(), strict=True):
            data_crc[i] = crc
    return b"".join(
        struct.pack("<QI", len(e), header_crc[len(e)]) + e + struct.pack("<I", crc)
        for e, crc in zip(events, data_crc, strict=True)
    )


def _masked_crc32c_rows(rows):
    """TFRecord's masked CRC-32C of each row of a 2-D uint8 array (vectorised over rows)."""
    import numpy as np

    from dflash_diag.read.formats.tensorboard import _CRC_TABLE

    table = np.asarray(_CRC_TABLE, dtype=np.uint32)
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for k in range(rows.shape[1]):
        crc = table[(crc ^ rows[:, k]) & 0xFF] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


def _trainer_state(path: Path, lines: int) -> None:
    """The HF values as a ``trainer_state.json`` ``log_history``."""
    history = [
        {
            "loss": round(loss, 4),
            "grad_norm": round(g, 4),
            "learning_rate": lr,
            "epoch": round(epoch, 4),
            "step": step,
        }
        for step, loss, g, lr, epoch in hf_values(lines)
    ]
    path.write_text(
        json.dumps({"global_step": lines, "max_steps": lines * 2, "log_history": history})
    )


_PIPELINE_SCAN = {
    "step": "Float64",
    "time": "Float64",
    "epoch": "Float64",
    "loss": "Float64",
    "acc": "Float64",
    "lr": "Float64",
    "tok_per_sec": "Float64",
    "n_pred": "Float64",
    "event": "String",
}
_HF_SCAN = {
    "loss": "Float64",
    "grad_norm": "Float64",
    "learning_rate": "Float64",
    "epoch": "Float64",
    "step": "Float64",
}

SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("pipeline", _pipeline, "train.jsonl", _PIPELINE_SCAN, "step", "acc"),
        Shape(
            "mixed",
            _mixed,
            "train.jsonl",
            {
                "step": "Float64",
                "loss": "Float64",
                "acc": "Float64",
                "lr": "Float64",
                "time": "Float64",
                "tok_per_sec": "Float64",
            },
            "step",
            "acc",
        ),
        Shape("hf", _hf, "train.jsonl", _HF_SCAN, "step", "loss"),
        Shape("hf_extras", _hf_extras, "train.jsonl", _HF_SCAN, "step", "loss"),
        Shape(
            "llama_factory",
            _llama_factory,
            "trainer_log.jsonl",
            {"current_steps": "Float64", "loss": "Float64", "lr": "Float64", "epoch": "Float64"},
            "current_steps",
            "loss",
        ),
        Shape(
            "nested",
            _nested,
            "metrics.jsonl",
            {
                "global_step": "Float64",
                "lr": "Float64",
                "train": {"loss": "Float64", "full_acc": "Float64", "eal": "Float64"},
            },
            "global_step",
            "train.full_acc",
        ),
        Shape("tensorboard", _tensorboard, "runs", _HF_SCAN, "step", "loss", scan_of="hf"),
        Shape(
            "heldout_eagle",
            _heldout_eagle,
            "train.jsonl",
            {"step": "Float64", "train/loss": "Float64"},
            "step",
            "train/loss",
        ),
        Shape(
            "trainer_state",
            _trainer_state,
            "trainer_state.json",
            _HF_SCAN,
            "step",
            "loss",
            scan_of="hf",
        ),
    )
}

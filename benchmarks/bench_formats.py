"""Benchmark: reading 1M scalar events from TensorBoard against the same values in JSONL.

Not a timed test: run it by hand and read the ratio.

    python benchmarks/bench_formats.py                 # 1,000,000 scalar events
    python benchmarks/bench_formats.py --events 200000 # quicker

It writes one TensorBoard event file in the layout ``SummaryWriter.add_scalar`` writes
(``train/loss``, ``train/accuracy``, ``train/lr``, ``train/grad_norm`` every step, an eval pair
every 1000 steps: SpecForge DFlash's names) and the same values as JSONL lines in this project's
log schema (one line per step, ``loss``/``acc``/``lr``/``grad_norm``; eval values on their
own lines). Then each reader runs in a fresh process, interleaved round by round:

* ``jsonl``        ``load_log(log.jsonl)``: the JSONL reader;
* ``tensorboard``  ``load_log(runs/)``: detection, the event reader and the canonical log.

Figures: process CPU time (user + system) of the read alone (imports excluded), best of
``--repeat``, and the ratio tensorboard / jsonl (target: at most 1.5).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAGS = ("train/loss", "train/accuracy", "train/lr", "train/grad_norm")
JSONL_NAMES = ("loss", "acc", "lr", "grad_norm")

READ = textwrap.dedent("""
    import resource, sys, time
    from dflash_diag.read.jsonl import load_log
    t0 = time.process_time()
    log = load_log(sys.argv[1])
    cpu = time.process_time() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(cpu, log.metrics.height, rss)
""")


def _varint(n: int) -> bytes:
    from dflash_diag.read.formats.protobuf import encode_varint

    return encode_varint(n)


def _record(step: int, tag: str, value: float) -> bytes:
    from dflash_diag.read.formats.tensorboard import masked_crc32c

    raw = tag.encode()
    item = b"\x0a" + bytes([len(raw)]) + raw + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + bytes([len(item)]) + item
    event = (
        b"\x09"
        + struct.pack("<d", 1.7e9 + step)
        + b"\x10"
        + _varint(step)
        + b"\x2a"
        + bytes([len(summary)])
        + summary
    )
    header = struct.pack("<Q", len(event))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + event
        + struct.pack("<I", masked_crc32c(event))
    )


def write_logs(folder: Path, events: int) -> tuple[Path, Path]:
    """The event file and the JSONL with the same values (float32-rounded, as TensorBoard keeps)."""
    sys.path.insert(0, str(ROOT))
    runs = folder / "runs"
    runs.mkdir()
    steps = events // len(TAGS)
    version = b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2"
    header = struct.pack("<Q", len(version))
    from dflash_diag.read.formats.tensorboard import masked_crc32c

    with (
        (runs / "events.out.tfevents.1700000000.bench.1.0").open("wb") as tb,
        (folder / "log.jsonl").open("w") as jl,
    ):
        tb.write(
            header
            + struct.pack("<I", masked_crc32c(header))
            + version
            + struct.pack("<I", masked_crc32c(version))
        )
        for step in range(1, steps + 1):
            values = (2.0 / step**0.3, 0.5 - 0.3 / step**0.3, 1e-4, 1.0 + (step % 7) / 10)
            values = tuple(struct.unpack("<f", struct.pack("<f", v))[0] for v in values)
            tb.write(b"".join(_record(step, t, v) for t, v in zip(TAGS, values, strict=True)))
            jl.write(
                json.dumps({"step": step, **dict(zip(JSONL_NAMES, values, strict=True))}) + "\n"
            )
            if step % 1000 == 0:
                tb.write(
                    _record(step, "eval/loss", values[0]) + _record(step, "eval/accuracy", 0.3)
                )
                jl.write(
                    json.dumps({"step": step, "event": "eval", "loss": values[0], "acc": 0.3})
                    + "\n"
                )
    return runs, folder / "log.jsonl"


def run(path: Path) -> tuple[float, int, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", READ, str(path)], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return float(out[0]), int(out[1]), float(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs, jsonl = write_logs(Path(tmp), args.events)
        tb_bytes = sum(p.stat().st_size for p in runs.iterdir())
        print(
            f"{args.events:,} scalar events: TensorBoard {tb_bytes / 2**20:.1f} MiB, "
            f"JSONL {jsonl.stat().st_size / 2**20:.1f} MiB (load {os.getloadavg()[0]:.1f})"
        )
        best: dict[str, tuple[float, int, float]] = {}
        for round_no in range(args.repeat):
            for name, path in (("jsonl", jsonl), ("tensorboard", runs)):
                cpu, rows, rss = run(path)
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, rows, rss)
                print(
                    f"  round {round_no + 1} {name:<12} cpu {cpu:6.2f} s  records {rows:,}  "
                    f"peak {rss:,.0f} MiB"
                )
        ratio = best["tensorboard"][0] / best["jsonl"][0]
        print(
            f"best cpu: jsonl {best['jsonl'][0]:.2f} s, tensorboard {best['tensorboard'][0]:.2f} s"
            f" -> ratio {ratio:.2f} (target <= 1.5)"
        )


if __name__ == "__main__":
    main()

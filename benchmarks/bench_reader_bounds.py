"""Benchmark: peak memory of `dflash-diag converge` on hostile inputs, beside a clean log.

Each case writes an input built to make a reader hold more than it should, runs `dflash-diag
converge -f json` on it in a fresh process and reads that process's peak RSS (``os.wait4``):

* ``gzip-bomb``: ``--gb`` GB of zero bytes (no newline: one endless line) between a few hundred
  valid records, about 1 MB of disk per GB, built as concatenated gzip members. The reader
  skips a line longer than its limit (16 MiB) while it streams; before that limit, the whole
  line was held (over 6 GB for 10 GB of zeros).
* ``tb-claim``: a TensorBoard event file of ``--mb`` MB whose fourth record claims 2^40 bytes
  (its header CRC valid). The unfinished record used to be re-joined with every 16 MiB chunk to
  the end (1 GiB: 2,129 MiB, 31 s).
* ``wandb``: a W&B ``.wandb`` of ``--mb`` MB: valid history records around zero-filled blocks
  (the whole file used to be read into memory).
* ``mlflow-lines``: an MLflow run whose metric file holds ``--lines`` lines (10M: 309 MB; it
  used to cost 2,742 MiB, 18 s). The reader merges such a run by step itself (no long frame):
  the read is 1.6-1.8x the file, converge's peak is the analysis' (docs/reliability.md).
* ``csv-wide``: a Lightning ``metrics.csv`` with ``--columns`` columns (100k: 5.7 MB, 1,042 MiB).
* ``trainer-state``: a ``trainer_state.json`` of about ``--mb`` MB (300 MB: 1,248 MiB, 4.2x).
* ``acc-pos``: a JSONL log whose records carry ``acc_pos`` lists of ``--elements`` elements
  (10^6: a 5 MB log cost 523 MiB).

    python benchmarks/bench_reader_bounds.py                       # every case, default sizes
    python benchmarks/bench_reader_bounds.py --case tb-claim --mb 1024
    python benchmarks/bench_reader_bounds.py --case gzip-bomb --gb 1

Targets: issue 13, peak RSS under 500 MB for the 10 GB bomb; issue 19, memory of every other
case bounded by what its valid records cost, not by the input's size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dflash_diag.read.formats.wandb_offline import frame_records

MEMBER_BYTES = 16 * 2**20  # zeros per gzip member


def records(first: int, last: int) -> bytes:
    return b"".join(
        json.dumps(
            {"step": s, "loss": 3 - s / 1000, "acc": s / 2000, "lr": 1e-3, "time": float(s)}
        ).encode()
        + b"\n"
        for s in range(first, last)
    )


def write_bomb(path: Path, gigabytes: float) -> int:
    """The bomb file; returns the number of zero bytes in it."""
    members = max(1, round(gigabytes * 1e9 / MEMBER_BYTES))
    member = gzip.compress(bytes(MEMBER_BYTES), 9)
    with open(path, "wb") as out:
        out.write(gzip.compress(records(1, 301)))
        out.writelines(member for _ in range(members))
        out.write(gzip.compress(b"\n" + records(301, 601)))
    return members * MEMBER_BYTES


# --------------------------------------------------------------------------------------------
# the other formats' hostile inputs (small writers of each documented layout, docs/formats.md)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _tb_framed(event: bytes, length: int | None = None) -> bytes:
    from dflash_diag.read.formats.tensorboard import masked_crc32c

    header = struct.pack("<Q", len(event) if length is None else length)
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + event
        + struct.pack("<I", masked_crc32c(event))
    )


def _tb_scalar(step: int, tag: str, value: float) -> bytes:
    raw = tag.encode()
    item = b"\x0a" + _varint(len(raw)) + raw + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + _varint(len(item)) + item
    return _tb_framed(
        b"\x09"
        + struct.pack("<d", 1.7e9 + step)
        + b"\x10"
        + _varint(step)
        + b"\x2a"
        + _varint(len(summary))
        + summary
    )


def write_tb_claim(folder: Path, megabytes: float) -> Path:
    """Three good records, then one whose header claims 2^40 bytes, then filler to the size.

    Returns the run folder (a file named directly is the rank split's business, issue 17)."""
    path = folder / "events.out.tfevents.1.host"
    version = _tb_framed(b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2")
    good = b"".join(_tb_scalar(s, "loss", 3 - s / 1000) for s in range(1, 301))
    claim = struct.pack("<Q", 2**40)
    from dflash_diag.read.formats.tensorboard import masked_crc32c

    with open(path, "wb") as out:
        out.write(version + good + claim + struct.pack("<I", masked_crc32c(claim)))
        filler = good * max(1, MEMBER_BYTES // len(good))
        left = int(megabytes * 1e6) - out.tell()
        while left > 0:
            out.write(filler[:left])
            left -= len(filler)
    return folder


def _wandb_history(step: int) -> bytes:
    row = {
        "train/loss": 3 - step / 1000,
        "train/acc": step / 2000,
        "_step": step,
        "_timestamp": 1.7e9 + step,
    }
    items = b"".join(
        _field(1, _field(1, k.encode()) + _field(16, json.dumps(v).encode()))
        for k, v in row.items()
    )
    return _varint(1 << 3) + _varint(step) + _field(2, items)


def write_wandb(folder: Path, megabytes: float) -> Path:
    """300 history records, zero-filled blocks to the size, 300 more records."""
    path = folder / "run-bench.wandb"
    with open(path, "wb") as out:
        out.write(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
        out.write(frame_records([_wandb_history(s) for s in range(1, 301)], out.tell()))
        out.write(b"\x00" * (32768 - out.tell() % 32768))
        zeros = bytes(MEMBER_BYTES)
        left = int(megabytes * 1e6) - out.tell()
        while left > 0:
            out.write(zeros[: min(left, len(zeros))])
            left -= len(zeros)
        out.write(b"\x00" * (-out.tell() % 32768))
        out.write(frame_records([_wandb_history(s) for s in range(301, 601)], out.tell()))
    return path


def write_mlflow_lines(folder: Path, lines: int) -> Path:
    """An MLflow run folder whose ``metrics/loss`` holds ``lines`` values."""
    run = folder / "mlruns" / "0" / "run1"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("start_time: 5\nlifecycle_stage: active\n")
    with open(run / "metrics" / "loss", "w") as out:
        step = 0
        while step < lines:
            stop = min(lines, step + 100_000)
            out.write(
                "".join(f"{1700000000000 + s} {3 - s * 1e-7:.6f} {s}\n" for s in range(step, stop))
            )
            step = stop
    return run.parent.parent


def write_csv_wide(folder: Path, columns: int) -> Path:
    """A metrics.csv with ``columns`` metric columns and 50 sparse lines."""
    path = folder / "metrics.csv"
    names = ["step", "loss", "acc"] + [f"m{i:06d}" for i in range(columns - 2)]
    with open(path, "w") as out:
        out.write(",".join(names) + "\n")
        for step in range(1, 51):
            cells = [""] * columns
            cells[0], cells[1] = f"{3 - step / 100:.4f}", f"{step / 200:.4f}"
            out.write(f"{step}," + ",".join(cells) + "\n")
    return path


def write_trainer_state(folder: Path, megabytes: float) -> Path:
    """A trainer_state.json of about ``megabytes`` MB (one entry per logging call)."""
    path = folder / "trainer_state.json"
    entry = '{{"step": {s}, "loss": {l:.6f}, "learning_rate": 0.0001, "grad_norm": 1.25, "epoch": {e:.6f}}}'
    with open(path, "w") as out:
        out.write('{"global_step": 0, "max_steps": 0, "log_history": [')
        step = 1
        while out.tell() < megabytes * 1e6:
            out.write(
                ",".join(
                    entry.format(s=s, l=3 - s * 1e-8, e=s * 1e-6)
                    for s in range(step, step + 10_000)
                )
                + ","
            )
            step += 10_000
        out.write(entry.format(s=step, l=1.0, e=1.0) + "]}")
    return path


def write_acc_pos(folder: Path, elements: int, lists: int = 1) -> Path:
    """200 records with 7-position ``acc_pos``, then ``lists`` records with huge lists."""
    path = folder / "train.jsonl"
    with open(path, "w") as out:
        out.write(json.dumps({"event": "run_start", "block_size": 8}) + "\n")
        out.writelines(
            json.dumps(
                {
                    "step": s,
                    "loss": 3 - s / 1000,
                    "acc": 0.5,
                    "acc_pos": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3],
                }
            )
            + "\n"
            for s in range(1, 201)
        )
        big = "[" + ",".join(["0.5"] * elements) + "]"
        out.writelines(
            f'{{"step": {s}, "loss": 2.7, "acc": 0.5, "acc_pos": {big}}}\n'
            for s in range(201, 201 + lists)
        )
    return path


def peak_rss(args: list[str]) -> tuple[float, float, int, str]:
    """(peak RSS in MB, wall seconds, exit code, last stderr line) of one command."""
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = process.stderr.read() if process.stderr else b""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    last = stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return usage.ru_maxrss / 1024, seconds, process.returncode, last[0]


def _size(path: Path) -> float:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6
    return path.stat().st_size / 1e6


CASES = ("gzip-bomb", "tb-claim", "wandb", "mlflow-lines", "csv-wide", "trainer-state", "acc-pos")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=(*CASES, "all"), default="all")
    parser.add_argument("--gb", type=float, default=10.0, help="GB of zeros in the gzip bomb")
    parser.add_argument(
        "--mb",
        type=float,
        default=1024.0,
        help="MB of the tb-claim and wandb files (trainer-state: 300)",
    )
    parser.add_argument("--lines", type=int, default=10_000_000, help="mlflow-lines: lines")
    parser.add_argument("--columns", type=int, default=100_000, help="csv-wide: columns")
    parser.add_argument("--elements", type=int, default=1_000_000, help="acc-pos: list length")
    parser.add_argument("--lists", type=int, default=1, help="acc-pos: records with such lists")
    args = parser.parse_args()
    cli = shutil.which("dflash-diag") or str(Path(sys.executable).with_name("dflash-diag"))
    cases = CASES if args.case == "all" else (args.case,)
    with tempfile.TemporaryDirectory() as tmp:
        clean = Path(tmp) / "clean.jsonl.gz"
        clean.write_bytes(gzip.compress(records(1, 601)))
        base_mb, base_s, base_rc, _ = peak_rss([cli, "converge", str(clean), "-f", "json"])
        print(
            f"{'clean log (600 records)':34} peak RSS {base_mb:7.1f} MB  {base_s:6.1f} s  "
            f"exit {base_rc}"
        )
        for case in cases:
            folder = Path(tmp) / case
            folder.mkdir()
            if case == "gzip-bomb":
                path = folder / "bomb.jsonl.gz"
                write_bomb(path, args.gb)
                what = f"{args.gb:g} GB of zeros"
            elif case == "tb-claim":
                path, what = write_tb_claim(folder, args.mb), "a 2^40-byte claim"
            elif case == "wandb":
                path, what = write_wandb(folder, args.mb), "zero blocks"
            elif case == "mlflow-lines":
                path, what = write_mlflow_lines(folder, args.lines), f"{args.lines:,} lines"
            elif case == "csv-wide":
                path, what = write_csv_wide(folder, args.columns), f"{args.columns:,} columns"
            elif case == "trainer-state":
                mb = 300.0 if args.mb == 1024.0 else args.mb
                path, what = write_trainer_state(folder, mb), "log_history"
            else:
                path = write_acc_pos(folder, args.elements, args.lists)
                what = f"{args.lists} x {args.elements:,} acc_pos"
            label = f"{case} ({what}, {_size(path):.1f} MB)"
            rss, seconds, rc, err = peak_rss([cli, "converge", str(path), "-f", "json"])
            print(f"{label:34} peak RSS {rss:7.1f} MB  {seconds:6.1f} s  exit {rc}  {err[:100]}")
            shutil.rmtree(folder)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

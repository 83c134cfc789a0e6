"""Benchmark: peak memory of `dflash-diag converge` on a gzip bomb, beside a clean log.

Writes a gzip file holding ``--gb`` GB of zero bytes (no newline: one endless line) between a few
hundred valid records, about 1 MB of disk per GB, built as concatenated gzip members (the format
allows them; `gzip -d` and Python read them as one stream). Then runs `dflash-diag converge -f json`
on it in a fresh process and reads that process's peak RSS (``os.wait4``), side by side with the
same run on the valid records alone. The reader skips a line longer than its limit (16 MiB) while
it streams, so the bomb should cost about what the clean log costs; before that limit, the whole
line was held (over 6 GB for 10 GB of zeros).

    python benchmarks/bench_reader_bounds.py            # 10 GB of zeros, about 10 MB on disk
    python benchmarks/bench_reader_bounds.py --gb 1

Target (issue 13): peak RSS under 500 MB for the 10 GB bomb.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEMBER_BYTES = 16 * 2**20  # zeros per gzip member


def records(first: int, last: int) -> bytes:
    return b"".join(json.dumps({"step": s, "loss": 3 - s / 1000, "acc": s / 2000, "lr": 1e-3,
                                "time": float(s)}).encode() + b"\n" for s in range(first, last))


def write_bomb(path: Path, gigabytes: float) -> int:
    """The bomb file; returns the number of zero bytes in it."""
    members = max(1, round(gigabytes * 1e9 / MEMBER_BYTES))
    member = gzip.compress(bytes(MEMBER_BYTES), 9)
    with open(path, "wb") as out:
        out.write(gzip.compress(records(1, 301)))
        out.writelines(member for _ in range(members))
        out.write(gzip.compress(b"\n" + records(301, 601)))
    return members * MEMBER_BYTES


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=10.0, help="GB of zeros in the bomb")
    args = parser.parse_args()
    cli = shutil.which("dflash-diag") or str(Path(sys.executable).with_name("dflash-diag"))
    with tempfile.TemporaryDirectory() as tmp:
        bomb, clean = Path(tmp) / "bomb.jsonl.gz", Path(tmp) / "clean.jsonl.gz"
        zeros = write_bomb(bomb, args.gb)
        clean.write_bytes(gzip.compress(records(1, 601)))
        print(f"bomb: {zeros / 1e9:.1f} GB of zeros in {bomb.stat().st_size / 1e6:.1f} MB on disk")
        base_mb, base_s, base_rc, _ = peak_rss([cli, "converge", str(clean), "-f", "json"])
        bomb_mb, bomb_s, bomb_rc, err = peak_rss([cli, "converge", str(bomb), "-f", "json"])
    print(f"clean log : peak RSS {base_mb:7.1f} MB  {base_s:6.1f} s  exit {base_rc}")
    print(f"gzip bomb : peak RSS {bomb_mb:7.1f} MB  {bomb_s:6.1f} s  exit {bomb_rc}  {err}")
    print(f"ratio bomb/clean: {bomb_mb / base_mb:.2f}x; target < 500 MB: "
          f"{'met' if bomb_mb < 500 else 'MISSED'}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

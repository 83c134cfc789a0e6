"""Benchmark: one `dflash-diag watch` refresh after 100 appended lines, against a full re-read.

Writes a 1M-line pipeline log (schema v1 records, most carrying a 15-element ``acc_pos``), opens
it with the watch's `LiveLog` (the first, full read), then repeatedly appends 100 lines and times a
refresh: reading and parsing the new bytes, updating the state, building the view and rendering
it. Side by side, in the same run, it times what a non-incremental watch would do per refresh:
re-read the whole file and run the same analysis. Prints medians, the ratio and the load average
(the machine is shared, so figures move with the load).

    python benchmarks/bench_watch.py            # 1M lines (about 300 MB in a temp dir)
    python benchmarks/bench_watch.py --lines 200000 --rounds 10

Target (issue 5): under 50 ms per refresh here.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from dflash_diag.analysis.restarts import resolve_restarts
from dflash_diag.read.jsonl import load_log
from dflash_diag.watch import LiveLog, WatchConfig, build_view, render_view

HEADER = {
    "event": "run_start",
    "schema": 1,
    "script": "pipeline",
    "time": 1.7e9,
    "config": {"token_budget": 65536, "grad_accum": 4},
    "schedule": {
        "kind": "cosine",
        "peak_lr": 6e-4,
        "warmup_steps": 2000,
        "total_steps": 2_000_000,
        "min_lr": 6e-5,
    },
    "block_size": 16,
    "steps_per_epoch": 100000,
    "world_size": 1,
    "resumed_from": None,
}


def record_lines(start: int, n: int, rng: random.Random) -> str:
    """``n`` pipeline metric records from step ``start``, as JSONL text."""
    out = []
    for step in range(start, start + n):
        acc = min(0.9, 0.15 + step * 2e-7) + rng.gauss(0, 0.01)
        acc_pos = [round(max(0.0, acc * (1 - 0.04 * k)), 4) for k in range(15)]
        out.append(
            json.dumps(
                {
                    "step": step,
                    "time": 1.7e9 + step * 0.5,
                    "epoch": step / 100000,
                    "loss": round(3.1 - step * 1e-6 + rng.gauss(0, 0.03), 5),
                    "acc": round(acc, 5),
                    "lr": 6e-4,
                    "tok_per_sec": 16000.0,
                    "n_tokens": 65536,
                    "n_pred": 30000 + step % 500,
                    "acc_pos": acc_pos,
                    "tau_train": round(1 + sum(acc_pos[:5]), 4),
                }
            )
        )
    return "\n".join(out) + "\n"


def write_log(path: Path, lines: int, rng: random.Random) -> None:
    with path.open("w") as f:
        f.write(json.dumps(HEADER) + "\n")
        for start in range(0, lines, 50_000):
            f.write(record_lines(start, min(50_000, lines - start), rng))


def full_reread(path: Path, config: WatchConfig, console: Console) -> None:
    """What a watch without an offset would do per refresh: read everything, then analyse."""
    live = LiveLog(path, config)
    live.refresh()
    console.print(render_view(build_view(live)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20, help="incremental refreshes timed")
    parser.add_argument("--full", type=int, default=3, help="full re-reads timed")
    args = parser.parse_args()
    rng = random.Random(0)
    config = WatchConfig()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        t0 = time.perf_counter()
        write_log(path, args.lines, rng)
        size = path.stat().st_size
        print(
            f"log: {args.lines:,} lines, {size / 1e6:.0f} MB, written in "
            f"{time.perf_counter() - t0:.1f} s"
        )

        console = Console(file=io.StringIO(), width=120, color_system=None)
        live = LiveLog(path, config)
        t0 = time.perf_counter()
        live.refresh()
        console.print(render_view(build_view(live)))
        first = time.perf_counter() - t0
        print(
            f"first frame (the one full read, in 16 MiB pieces): {first * 1e3:.0f} ms, "
            f"{live.log.metrics.height} records kept of {live.total_records:,}; peak RSS so far "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
        )

        step = args.lines
        incremental, parse_only = [], []
        for _ in range(args.rounds):
            with path.open("a") as f:
                f.write(record_lines(step, 100, rng))
            step += 100
            t0 = time.perf_counter()
            stats = live.refresh()
            t1 = time.perf_counter()
            console.print(render_view(build_view(live)))
            t2 = time.perf_counter()
            assert stats.new_records == 100, stats
            incremental.append(t2 - t0)
            parse_only.append(t1 - t0)

        full = []
        for _ in range(args.full):
            t0 = time.perf_counter()
            full_reread(path, config, console)
            full.append(time.perf_counter() - t0)

        # the converge-style read alone, for reference: load + restart resolution of the file
        t0 = time.perf_counter()
        log = load_log(path)
        resolve_restarts(log.metrics)
        load_only = time.perf_counter() - t0

    inc, par, ful = (statistics.median(x) for x in (incremental, parse_only, full))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (cpus: {os.cpu_count()})")
    print(f"{'':32}{'median':>12}")
    print(
        f"{'refresh after 100 lines':32}{inc * 1e3:>9.1f} ms  "
        f"(read+parse+state {par * 1e3:.1f} ms, view+render {(inc - par) * 1e3:.1f} ms)"
    )
    print(f"{'full re-read + same view':32}{ful * 1e3:>9.1f} ms")
    print(f"{'load_log + restarts only':32}{load_only * 1e3:>9.1f} ms")
    print(
        f"ratio full / incremental: {ful / inc:.0f}x; target < 50 ms per refresh: "
        f"{'met' if inc < 0.05 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()

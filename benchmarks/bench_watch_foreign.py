"""Benchmark: a `dflash-diag watch` refresh on another trainer's growing JSONL, through the
parsed-log cache against reading the whole file again (``--no-cache``), side by side.

Writes an HF-style log (``{"loss", "grad_norm", "learning_rate", "epoch", "step"}``, the
``hf`` shape of bench_shapes.py) twice, opens each with watch's `LiveLog` the way the CLI does
for a non-native input (a snapshot read at every change), then, round by round, appends the same
100 new steps to both and times one refresh of each (read, state, view and render; CPU time of
this process, all threads), the two alternated. Prints the medians, their ratio and the load.

    python benchmarks/bench_watch_foreign.py                 # 1M records (about 100 MB)
    python benchmarks/bench_watch_foreign.py --lines 200000 --rounds 6
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_shapes import hf_values

from dflash_diag.read.formats.load import plan_input, read_planned
from dflash_diag.watch import LiveLog, WatchConfig, build_view, render_view


def hf_line(step: int, loss: float, grad_norm: float, lr: float, epoch: float) -> str:
    return (
        f'{{"loss": {loss:.4f}, "grad_norm": {grad_norm:.4f}, '
        f'"learning_rate": {lr:.6e}, "epoch": {epoch:.4f}, "step": {step}}}\n'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=8, help="refreshes timed per mode")
    args = parser.parse_args()
    values = list(hf_values(args.lines + 100 * args.rounds))
    with tempfile.TemporaryDirectory() as tmp:
        # the cache in the scratch folder: never the user's
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        head = "".join(hf_line(*v) for v in values[: args.lines])
        console = Console(file=io.StringIO(), width=120, color_system=None)
        lives = {}
        for mode in ("cache", "no cache"):
            path = Path(tmp) / f"{mode.replace(' ', '_')}.jsonl"
            path.write_text(head)
            plan = plan_input(str(path))
            assert not plan.native, "the HF shape is another trainer's JSONL"
            cache = mode == "cache"
            lives[mode] = (
                path,
                LiveLog(
                    path,
                    WatchConfig(),
                    snapshot=lambda plan=plan, cache=cache: read_planned(plan, 0, cache=cache),
                ),
            )
        first = {}
        for mode, (_, live) in lives.items():
            t0 = time.process_time()
            live.refresh()
            console.print(render_view(build_view(live)))
            first[mode] = time.process_time() - t0
        times: dict[str, list[float]] = {mode: [] for mode in lives}
        for r in range(args.rounds):
            more = "".join(
                hf_line(*v) for v in values[args.lines + 100 * r : args.lines + 100 * (r + 1)]
            )
            for mode, (path, live) in lives.items():
                with path.open("a") as out:
                    out.write(more)
                t0 = time.process_time()
                stats = live.refresh()
                console.print(render_view(build_view(live)))
                times[mode].append(time.process_time() - t0)
                assert stats.new_records == 100, (mode, stats)
    print(f"{args.lines:,} records + {args.rounds} x 100 new steps (HF JSONL)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (cpus: {os.cpu_count()})")
    print(f"{'':24}{'first frame':>14}{'refresh (median)':>20}")
    for mode in lives:
        print(
            f"{mode:24}{first[mode] * 1e3:>11.0f} ms{statistics.median(times[mode]) * 1e3:>17.0f} ms"
        )
    ratio = statistics.median(times["cache"]) / statistics.median(times["no cache"])
    print(f"refresh, cache / no cache: {ratio:.2f}x (CPU s of this process)")


if __name__ == "__main__":
    main()

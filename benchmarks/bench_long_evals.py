"""What a long eval series costs the diagnosis, with the forecast's bound on its points and
without it (issue 21).

A pipeline log that evaluates every ``--every`` steps (default: every 2 steps of 200,000, i.e.
100,000 eval records with tau, loss and acc) is written to a temp folder, read once, and
diagnosed in turn with the forecast's eval series bounded
(:data:`~dflash_diag.analysis.forecast.MAX_EVAL_POINTS`) and unbounded (every eval fitted),
CPU seconds in-process, medians of ``--repeat`` rounds. Then, per eval metric, the two forecasts
side by side and their gap as a share of the unbounded interval's width. Not a timed test.

    python benchmarks/bench_long_evals.py                      # 200k steps, an eval every 2
    python benchmarks/bench_long_evals.py --steps 20000 --repeat 3

The curves are generated (seeded saturating curves with noise): a cost benchmark; the forecast's
agreement on a real curve is tested in ``tests/diag/test_forecast_bound.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_diag import diagnose, load_log
from dflash_diag.analysis import run_forecast
from dflash_diag.analysis.forecast import MAX_EVAL_POINTS


def write_log(path: Path, steps: int, every: int, seed: int = 21) -> int:
    """A run of ``steps`` training records and an eval every ``every`` steps; the evals' count."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1)
    progress = 1.0 - np.exp(-s / (0.3 * steps))
    loss = 2.0 - 1.5 * progress + rng.normal(0, 0.05, steps)
    acc = 0.2 + 0.35 * progress + rng.normal(0, 0.01, steps)
    tau = 2.0 + 3.8 * progress + rng.normal(0, 0.05, steps)
    evals = 0
    with path.open("w") as out:
        out.write(json.dumps({"event": "run_start", "schema_version": 1, "block_size": 16}) + "\n")
        for i in range(steps):
            step = int(s[i])
            out.write(json.dumps({"step": step, "loss": loss[i], "acc": acc[i], "lr": 1e-4}) + "\n")
            if step % every == 0:
                evals += 1
                record = {
                    "event": "eval",
                    "step": step,
                    "tau": tau[i],
                    "loss": loss[i] - 0.01,
                    "acc": acc[i],
                    "n_prompts": 8,
                }
                out.write(json.dumps(record) + "\n")
    return evals


def cpu_of(log, bound: int):
    run_forecast.MAX_EVAL_POINTS = bound
    start = time.process_time()
    diagnosis = diagnose(log)
    return time.process_time() - start, diagnosis


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--every", type=int, default=2, help="steps between evals")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:  # kept while diagnosing: lists read back
        path = Path(folder) / "evals.jsonl"
        evals = write_log(path, args.steps, args.every)
        log = load_log(str(path))
        print(f"{args.steps:,} steps, {evals:,} evals (one every {args.every} steps)")
        cpu_of(log, MAX_EVAL_POINTS)  # warm: imports and caches
        bounded, unbounded = [], []
        for _ in range(args.repeat):  # in turn, so both see the same machine load
            seconds, fast = cpu_of(log, MAX_EVAL_POINTS)
            bounded.append(seconds)
            seconds, slow = cpu_of(log, 10**12)
            unbounded.append(seconds)
    run_forecast.MAX_EVAL_POINTS = MAX_EVAL_POINTS
    a, b = statistics.median(bounded), statistics.median(unbounded)
    print(f"diagnose CPU: bounded at {MAX_EVAL_POINTS:,} points {a:.2f} s, every eval {b:.2f} s")
    print(f"ratio bounded / every eval: {a / b:.3f}x")
    assert fast.forecast is not None
    assert slow.forecast is not None
    print(f"{'metric':10} {'points':>7} {'bounded':>28} {'every eval':>28} {'gap/width':>9}")
    for name, raw in slow.forecast.metrics.items():
        new = fast.forecast.metrics[name]
        if raw.value is None or new.value is None:
            continue
        width = raw.high - raw.low
        gap = abs(new.value - raw.value) / width if width > 0 else math.inf
        print(
            f"{name:10} {new.n_points:>7} {new.value:10.4g} ({new.low:.4g}-{new.high:.4g})"
            f" {raw.value:10.4g} ({raw.low:.4g}-{raw.high:.4g}) {gap:9.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The training memory estimate (pipelines.memory) against the measured peak, side by side.

For each token budget a fresh process builds the lock-step trainer's setup on the bundled target
and data (memory check off), resets the kernel's peak-RSS counter (``/proc/self/clear_refs``),
runs real training steps (target forward, drafter forward and backward, AdamW) and reads the peak
resident memory above the pre-step level (``VmHWM - VmRSS``). The estimate excludes the target's
weights (loaded before the check), as does the measurement. Linux only.

    python benchmarks/bench_memory_estimate.py [--budgets 1024,4096,16384] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(budget: int, steps: int, anchors: int) -> dict:
    """One budget, in this process: estimated and measured bytes."""
    import torch

    from dflash import compute_loss_and_metrics
    from pipelines.config import CPU_DRAFTER, TrainConfig
    from pipelines.memory import estimate_for_run
    from pipelines.run_setup import anchor_generator, build_setup
    from pipelines.update import apply_update

    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp()
    cfg = TrainConfig(
        token_budget=budget,
        max_steps=steps + 1,
        check_memory=False,
        log=f"{tmp}/l.jsonl",
        ckpt_dir=f"{tmp}/ck",
        progress=False,
        drafter={**CPU_DRAFTER, "num_anchors": anchors},
    )
    setup = build_setup(cfg)
    dataset = setup.loader.dataset
    est = estimate_for_run(cfg, setup.drafter.config, setup.target.config, dataset)
    batches = [setup.loader.next_batch() for _ in range(steps)]
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kb("VmRSS")
    for k, batch in enumerate(batches, start=1):
        out = compute_loss_and_metrics(
            setup.drafter, setup.target, batch, anchor_generator(0, k, 0)
        )
        out.loss_sum.backward()
        apply_update(setup.drafter, setup.optimizer, 1e-4, 1.0, float(out.loss), 1.0)
    peak = _status_kb("VmHWM")
    return {
        "budget": budget,
        "estimate": est.total,
        "parts": est.parts,
        "measured": (peak - before) * 1024,
        "tokens": int(sum(int(b["attention_mask"].sum()) for b in batches) / steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="1024,4096,16384")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--anchors", default="8", help="num_anchors values (comma-separated)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.steps, int(args.anchors))))
        return
    print(f"load average {os.getloadavg()[0]:.1f}; bundled target and data, sync step, CPU")
    print(
        f"{'budget':>8} {'anchors':>7} {'estimate MiB':>13} {'measured MiB':>13} "
        f"{'measured/est':>13}  largest term"
    )
    for b, a in [
        (int(x), int(y)) for x in args.budgets.split(",") for y in args.anchors.split(",")
    ]:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(b),
                "--steps",
                str(args.steps),
                "--anchors",
                str(a),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        top = max(r["parts"], key=r["parts"].get)
        print(
            f"{b:>8} {a:>7} {r['estimate'] / 2**20:>13.0f} {r['measured'] / 2**20:>13.0f} "
            f"{r['measured'] / r['estimate']:>13.2f}  {top} ({r['parts'][top] / 2**20:.0f} MiB)"
        )


if __name__ == "__main__":
    main()

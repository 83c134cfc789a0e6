"""Benchmark: the cost of the walked tau as a share of the training step time.

Not a timed test: run it by hand and read the figures.

    python benchmarks/bench_walk.py                       # the pipeline defaults, bundled target
    python benchmarks/bench_walk.py --target real_target/smollm2-135m-instruct --data real_target/data

With the pipeline's config (defaults unless given), it times, interleaved round by round in one
process: one optimizer step as the pipeline's drafter stage runs it (``grad_accum`` micro-batches,
each a target forward, a drafter forward and backward; then AdamW), and one walk
(``walk_batch`` on ``walk_seqs`` sequences of the last micro-batch, reusing its features). The
walk runs on one step in ``log_every * walk_every``, so its share of the training time is
walk / (log_every * walk_every * step). In the pipeline the target forward overlaps the drafter,
so the share of the drafter stage's time (step without the target forwards) is printed too: that
is the share of wall time when the drafter stage is the bottleneck.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from dflash import compute_loss_and_metrics, walk_batch
from pipelines.config import PipelineConfig
from pipelines.run_setup import anchor_generator, build_setup
from pipelines.update import apply_update


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="bundled")
    p.add_argument("--data", default="bundled")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--walk-seqs", type=int, default=None)
    p.add_argument("--walk-every", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    over = {
        k: v
        for k, v in {"walk_seqs": args.walk_seqs, "walk_every": args.walk_every}.items()
        if v is not None
    }
    cfg = PipelineConfig(target=args.target, data=args.data, progress=False, **over)
    torch.set_num_threads(args.threads)
    setup = build_setup(cfg)
    drafter, target, layer_ids = setup.drafter, setup.target, setup.drafter.config.target_layer_ids
    steps, drafter_parts, walks = [], [], []
    for r in range(args.rounds + 1):  # round 0 warms up
        t0 = time.perf_counter()
        t_target = 0.0
        for micro in range(cfg.grad_accum):
            batch = setup.loader.next_batch()
            t1 = time.perf_counter()
            feats = target.forward(
                batch["input_ids"], layer_ids, batch["attention_mask"], logits=False
            ).features
            t_target += time.perf_counter() - t1
            out = compute_loss_and_metrics(
                drafter, target, batch, anchor_generator(cfg.seed, r, micro), features=feats
            )
            out.loss_sum.backward()
        apply_update(
            drafter,
            setup.optimizer,
            cfg.peak_lr,
            cfg.grad_clip,
            0.0,
            1.0 / max(out.metrics.weight_sum, 1.0),
        )
        t_step = time.perf_counter() - t0
        t2 = time.perf_counter()
        w = walk_batch(drafter, target, batch, feats, horizon=setup.horizon, max_seqs=cfg.walk_seqs)
        t_walk = time.perf_counter() - t2
        if r:
            steps.append(t_step)
            drafter_parts.append(t_step - t_target)
            walks.append(t_walk)
        print(
            f"round {r}: step {t_step:.3f}s (target {t_target:.3f}s), walk {t_walk:.3f}s "
            f"({w.steps} steps, tau_walk {w.tau:.2f}), load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    step, dpart, walk = (statistics.median(x) for x in (steps, drafter_parts, walks))
    every = cfg.log_every * cfg.walk_every
    print(
        f"\nmedians over {args.rounds} rounds: step {step:.3f}s, drafter part {dpart:.3f}s, "
        f"walk ({cfg.walk_seqs} seqs, horizon {setup.horizon}) {walk:.3f}s = "
        f"{walk / step:.1%} of one step"
    )
    print(
        f"walked every {every} steps (log_every {cfg.log_every} x walk_every {cfg.walk_every}): "
        f"{walk / (every * step):.2%} of the step time, "
        f"{walk / (every * dpart):.2%} of the drafter stage's time"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: DFlash drafter training throughput (tokens/s) on this machine at two token budgets.

One training step = target forward for the features (no grad) + drafter forward/backward over all
sampled blocks + AdamW. Side by side, in the same run, it also times the drafter part alone
(features precomputed, as in the pipeline where a separate stage runs the target), so the ratio
shows where the time goes. Inputs are random token ids (throughput does not depend on content),
sequences of fixed length with a short unsupervised prompt. Prints medians and the load average
(the machine is shared, so figures move with the load).

    python benchmarks/bench_drafter.py                        # budgets 2048 and 8192
    python benchmarks/bench_drafter.py --budgets 4096 16384 --anchors 128 --threads 2
    python benchmarks/bench_drafter.py --layouts per_block per_sequence   # compare layouts

Uses the bundled tiny target (pipelines/assets/tiny_target) when present, else a random Qwen3 of
the same shape.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from dflash import DFlashConfig, DFlashDraftModel, TargetModel, compute_loss_and_metrics

BUNDLED = Path(__file__).resolve().parent.parent / "pipelines" / "assets" / "tiny_target"


def load_target() -> tuple[TargetModel, str]:
    if (BUNDLED / "config.json").is_file():
        try:
            return TargetModel.from_pretrained(
                str(BUNDLED), dtype=torch.float32
            ), "bundled tiny_target"
        except ValueError:
            pass
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=640,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=1024,
    )
    return TargetModel(Qwen3ForCausalLM(cfg)), "random Qwen3 (tiny_target shape)"


def make_batch(budget: int, seq_len: int, prompt_len: int, vocab: int, seed: int) -> dict:
    n = max(1, budget // seq_len)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (n, seq_len), generator=g)
    loss_mask = torch.ones(n, seq_len, dtype=torch.bool)
    loss_mask[:, :prompt_len] = False
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(n, seq_len, dtype=torch.long),
        "loss_mask": loss_mask,
    }


def time_steps(
    drafter, target, batch, opt, rounds: int, with_target: bool, layout: str
) -> tuple[float, int]:
    """Median seconds per step and blocks per step."""
    feats = None
    if not with_target:
        feats = target.forward(
            batch["input_ids"],
            drafter.config.target_layer_ids,
            batch["attention_mask"],
            logits=False,
        ).features
    times, blocks = [], 0
    for r in range(rounds + 1):  # round 0 warms up (allocator, lazy init)
        t0 = time.perf_counter()
        out = compute_loss_and_metrics(
            drafter, target, batch, torch.Generator().manual_seed(r), features=feats, layout=layout
        )
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if r:
            times.append(dt)
        blocks = out.metrics.n_blocks
    return statistics.median(times), blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", type=int, nargs=2, default=[2048, 8192])
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=64, help="blocks per sequence")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--layers", type=int, default=1, help="draft layers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--layouts",
        nargs="+",
        default=["per_block"],
        choices=["per_block", "per_sequence"],
        help="attention layouts to compare",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    target, which = load_target()
    cfg = DFlashConfig.for_target(
        target.config,
        block_size=args.block_size,
        num_draft_layers=args.layers,
        num_anchors=args.anchors,
    )
    print(
        f"target: {which}, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, "
        f"{cfg.num_target_layers} layers; drafter: B={cfg.block_size}, "
        f"{cfg.num_draft_layers} layer(s), {args.anchors} anchors/seq, seq_len {args.seq_len}; "
        f"torch threads {args.threads}"
    )
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{'layout':>12} {'budget':>7} {'seqs':>5} {'blocks':>7} {'step s':>8} {'tok/s':>9} "
        f"{'drafter-only s':>15} {'tok/s':>9} {'drafter share':>14}"
    )
    for layout in args.layouts:
        for budget in args.budgets:
            batch = make_batch(budget, args.seq_len, args.prompt_len, cfg.vocab_size, seed=budget)
            n_tok = int(batch["attention_mask"].sum())
            torch.manual_seed(0)
            drafter = DFlashDraftModel(cfg)
            opt = torch.optim.AdamW(drafter.parameters(), lr=6e-4)
            full, blocks = time_steps(drafter, target, batch, opt, args.rounds, True, layout)
            alone, _ = time_steps(drafter, target, batch, opt, args.rounds, False, layout)
            print(
                f"{layout:>12} {budget:>7} {batch['input_ids'].shape[0]:>5} {blocks:>7} "
                f"{full:>8.3f} {n_tok / full:>9.0f} {alone:>15.3f} {n_tok / alone:>9.0f} "
                f"{alone / full:>14.2f}"
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""Benchmark: which sequences should the walk walk? Measured tau of one run's checkpoints on four
sets of sequences, by greedy speculative decoding, beside the walk of the same sequences.

    python benchmarks/make_forecast_runs.py constant-5e-4-s8-160 --ckpt-every 16 \\
        --walk-source data --out runs/walk_gap            # the committed run, checkpoints kept
    python benchmarks/bench_walk_gap.py runs/forecast_runs/constant-5e-4-s8-160 --seed 8 \\
        --steps 32 48 112 128 144 160

For each checkpoint: the eval's own prompts (the first ``--eval-prompts`` of the data's eval
file), the eval file's other prompts (what the walk walks with ``walk_source = eval_prompts``),
the run's held-out training examples (what it walked with ``walk_source = data``: the seeded
split of ``walk_holdout`` examples) and as many trained examples (a seeded draw), each with the
standard error between sequences (:func:`ratio_se`), and how many sequences the walk reproduces
exactly (tokens and steps). The eval-file prompts' responses are the target's greedy
continuations (:func:`pipelines.walk_split.greedy_continuations`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ratio_se(tokens: list[int], steps: list[int]) -> tuple[float, float]:
    """``sum tokens / sum steps`` and its delta-method SE, sequences as the draws."""
    k, ratio = len(tokens), sum(tokens) / sum(steps)
    residual = sum((t - ratio * s) ** 2 for t, s in zip(tokens, steps, strict=True)) / (k - 1)
    return ratio, math.sqrt(residual / k) / (sum(steps) / k)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ckpt_dir", type=Path, help="the run's --ckpt-dir (step-NNNNNN/ inside)")
    p.add_argument("--steps", type=int, nargs="+", required=True)
    p.add_argument("--seed", type=int, required=True, help="the run's seed (its data split)")
    p.add_argument("--data", type=Path, default=REPO / "runs" / "forecast_runs" / "data")
    p.add_argument("--horizon", type=int, default=40)
    p.add_argument("--eval-prompts", type=int, default=8)
    p.add_argument("--holdout", type=int, default=32)
    args = p.parse_args(argv)

    import torch

    from dflash import evaluate_tau, walk_batch
    from dflash.checkpoint import load_drafter
    from dflash.data import Dataset, collate, load_dataset, load_eval_prompts
    from pipelines.run_setup import load_target
    from pipelines.walk_split import greedy_continuations, split_for_walk

    torch.set_num_threads(1)
    target = load_target("bundled", "cpu", torch.float32)
    data = load_dataset(args.data)
    train, held = split_for_walk(data, args.holdout, args.seed)
    assert held is not None
    prompts = load_eval_prompts(args.data)
    first = load_drafter(str(args.ckpt_dir / f"step-{args.steps[0]:06d}"), device="cpu")
    layers = list(first.config.target_layer_ids)
    responses = greedy_continuations(target, prompts, args.horizon, layers)
    eval_file = Dataset.from_examples(list(zip(prompts, responses, strict=True)), data.meta)
    drawn = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
    trained = train.subset(sorted(drawn[: args.holdout].tolist()))
    sets = {
        "eval": (eval_file, range(args.eval_prompts)),
        "eval_file_rest": (eval_file, range(args.eval_prompts, len(prompts))),
        "held_out_train": (held.examples, range(len(held.examples))),
        "trained": (trained, range(len(trained))),
    }

    def decode(drafter, dataset, rows):
        tok, stp, walked = [], [], 0
        for i in rows:
            ex = dataset[i]
            res = evaluate_tau(
                target, drafter, [ex.input_ids[: ex.response_start]], max_new_tokens=args.horizon
            )
            t = sum((k + 1) * c for k, c in enumerate(res.tau_hist))
            s = sum(res.tau_hist)
            batch = collate([ex], dataset.pad_token_id)
            feats = target.forward(
                batch["input_ids"], layers, batch["attention_mask"], logits=False
            ).features
            w = walk_batch(drafter, target, batch, feats, horizon=args.horizon)
            walked += (w.tokens, w.steps) == (t, s)
            tok.append(t)
            stp.append(s)
        return (*ratio_se(tok, stp), walked, len(tok))

    for step in args.steps:
        drafter = load_drafter(str(args.ckpt_dir / f"step-{step:06d}"), device="cpu")
        row: dict[str, object] = {"step": step}
        for name, (dataset, rows) in sets.items():
            tau, se, same, n = decode(drafter, dataset, rows)
            row[name] = {"tau": round(tau, 4), "se": round(se, 4), "walk_exact": f"{same}/{n}"}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

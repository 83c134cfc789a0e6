"""Lock-step trainer vs CSP pipeline: tokens/s side by side, interleaved, in one run.

Both programs train the same drafter on the same data (same seed, same token budget, so the same
micro-batches in the same order). The pipeline runs ``--steps`` optimizer steps of
``--grad-accum`` micro-batches; the lock-step trainer runs ``steps * grad_accum`` steps of one
micro-batch, so both process exactly the same tokens. Throughput is measured between the first and
the last metric record (start-up and the first step excluded) from the logs' timestamps.

Two settings (issue 4, section 8):

  (a) one core per stage: torch limited to one intra-op thread in every stage and in the sync loop
      (stands in for one device per stage, the setting the pipeline exists for);
  (b) the whole machine: torch's default thread count for the sync loop; the pipeline splits the
      cores between its CPU stages (its ``torch_threads = 0`` default).

Printed per setting: tokens/s of each program, their ratio, the pipeline's per-stage busy fractions
and the ideal overlap bound = sum of the stage times / the largest stage time (the best speed-up
over running the same stages one after another), and the ratio as a fraction of that bound, for
the median and for the best run of each program. The machine is shared, so the load average is
printed with the figures.

    python benchmarks/bench_pipeline.py                 # bundled tiny target, CPU
    python benchmarks/bench_pipeline.py --steps 20 --rounds 3
    python benchmarks/bench_pipeline.py --device cuda:0 --target-devices cuda:1 \\
        --target /path/to/qwen3 --token-budget 8192 --num-anchors 512
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dflash.data import TokenBudgetLoader, load_dataset
from pipelines.async_pipeline import run_pipeline
from pipelines.config import BUNDLED, PipelineConfig, TrainConfig
from pipelines.run_setup import resolve_data
from pipelines.sync_trainer import run_sync

#: Randomly initialised Qwen3 targets for measuring at a realistic size without downloading
#: weights (the bundled data's token ids fit any of these vocabularies).
RANDOM_TARGETS = {
    "qwen3-1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 4096,
        "tie_word_embeddings": True,
    },
}


def make_random_target(name: str, directory: Path, dtype: str) -> str:
    """Save a randomly initialised Qwen3 of a named size into ``directory``; return its path."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(max_position_embeddings=4096, pad_token_id=1, **RANDOM_TARGETS[name])
    model = Qwen3ForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(directory)
    return str(directory)


def micro_batch_tokens(data: str, token_budget: int, seed: int, n: int) -> list[int]:
    """Real (non-padding) tokens of the first ``n`` micro-batches both programs consume."""
    loader = TokenBudgetLoader(load_dataset(resolve_data(data)), token_budget, seed=seed)
    return [int(loader.next_batch()["attention_mask"].sum()) for _ in range(n)]


def metric_records(log: Path) -> list[dict]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if "event" not in r]


def run_one(
    program: str, args: argparse.Namespace, threads: int, workdir: Path, tokens: list[int]
) -> dict:
    """Run one program once; return its tokens/s (and the pipeline's stage busy fractions)."""
    torch.set_num_threads(threads)
    tag = f"{program}-{threads}t-{time.monotonic_ns()}"
    common = {
        "target": args.target,
        "data": args.data,
        "device": args.device,
        "seed": args.seed,
        "token_budget": args.token_budget,
        "log": str(workdir / f"{tag}.jsonl"),
        "ckpt_dir": str(workdir / tag),
        "ckpt_every": 0,
        "progress": False,
        "drafter": {"num_anchors": args.num_anchors, "block_size": args.block_size},
        "dtype": args.dtype,
        "torch_threads": 1 if threads == 1 else 0,
    }
    ga = args.grad_accum
    if program == "sync":
        res = run_sync(TrainConfig(max_steps=args.steps * ga, **common))
        per_step = 1
    else:
        res = run_pipeline(
            PipelineConfig(
                max_steps=args.steps,
                grad_accum=ga,
                eval_every=0,
                target_devices=args.target_devices or [args.device],
                **common,
            )
        )
        per_step = ga
    if res.exit_code != 0:
        raise SystemExit(f"{program} failed: {res.error or res.reason}")
    recs = metric_records(workdir / f"{tag}.jsonl")
    first, last = recs[0], recs[-1]
    # Tokens of the micro-batches consumed after the first record, up to the last one.
    n_tok = sum(tokens[first["step"] * per_step : last["step"] * per_step])
    out = {"tok_per_sec": n_tok / (last["time"] - first["time"])}
    if program == "pipeline":
        busy = [r["stage_busy"] for r in recs[1:]]
        out["stage_busy"] = {k: statistics.fmean(b[k] for b in busy) for k in busy[0]}
    return out


def run_isolated(argv: list[str], program: str, target: str, threads: int, workdir: Path) -> dict:
    """:func:`run_one` in a fresh process, so no run inherits another's thread pools, allocator
    state or torch thread setting (start-up is excluded from the figures anyway)."""
    cmd = [
        sys.executable,
        __file__,
        *argv,
        "--target",
        target,
        "--one",
        program,
        "--threads",
        str(threads),
        "--workdir",
        str(workdir),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{program} run failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def overlap_bound(busy: dict[str, float]) -> float:
    """Sum of the stage times over the largest: the speed-up of perfect overlap."""
    return sum(busy.values()) / max(busy.values())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="pipeline optimizer steps per run")
    p.add_argument("--rounds", type=int, default=5, help="interleaved repetitions")
    p.add_argument("--grad-accum", type=int, default=4)
    p.add_argument("--token-budget", type=int, default=TrainConfig.token_budget)
    p.add_argument("--num-anchors", type=int, default=None, help="drafter blocks per sequence")
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--target", default=BUNDLED)
    p.add_argument(
        "--random-target",
        choices=sorted(RANDOM_TARGETS),
        default=None,
        help="use a randomly initialised Qwen3 of this size as the target",
    )
    p.add_argument("--data", default=BUNDLED)
    p.add_argument("--device", default="cpu")
    p.add_argument("--target-devices", type=lambda s: s.split(","), default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--settings", default="a,b", help="comma list of a (1 thread) and b (all)")
    # internal: run one program once in this (fresh) process and print its figures as JSON
    p.add_argument("--one", choices=["sync", "pipeline"], help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    defaults = TrainConfig().drafter
    if args.num_anchors is None:
        args.num_anchors = defaults.get("num_anchors", 512)
    if args.block_size is None:
        args.block_size = defaults.get("block_size", 16)

    if args.one:
        tokens = micro_batch_tokens(
            args.data, args.token_budget, args.seed, (args.steps + 1) * args.grad_accum
        )
        print(json.dumps(run_one(args.one, args, args.threads, args.workdir, tokens)))
        return

    whole = torch.get_num_threads()
    settings = {"a": 1, "b": whole}
    chosen = [s for s in args.settings.split(",") if s]
    print(
        f"# bench_pipeline: {args.steps} pipeline steps x grad_accum {args.grad_accum} "
        f"(= {args.steps * args.grad_accum} sync steps), budget {args.token_budget}, "
        f"anchors {args.num_anchors}, block {args.block_size}, rounds {args.rounds}, "
        f"torch default threads {whole}, cpus {os.cpu_count()}"
    )
    print(f"# load average before: {os.getloadavg()}")
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        if args.random_target:
            args.target = make_random_target(args.random_target, Path(tmp) / "target", args.dtype)
            print(f"# target: random {args.random_target} ({args.dtype})")
        for rnd in range(args.rounds):
            for s in chosen:
                for program in ("sync", "pipeline") if rnd % 2 == 0 else ("pipeline", "sync"):
                    r = run_isolated(argv, program, args.target, settings[s], Path(tmp))
                    results.setdefault((s, program), []).append(r)
                    print(
                        f"  round {rnd} setting ({s}) {program:8s} {r['tok_per_sec']:9.0f} tok/s",
                        flush=True,
                    )
    print(f"# load average after: {os.getloadavg()}")
    names = {"a": "(a) one thread per stage", "b": "(b) whole machine"}
    for s in chosen:
        runs = results[(s, "pipeline")]
        busy = {
            k: statistics.fmean(r["stage_busy"][k] for r in runs) for k in runs[0]["stage_busy"]
        }
        bound = overlap_bound(busy)
        print(f"{names[s]}:")
        # Median: typical; best: least disturbed by other processes on a shared machine
        # (as timeit reports the minimum time).
        for label, pick in (("median", statistics.median), ("best", max)):
            sync = pick(r["tok_per_sec"] for r in results[(s, "sync")])
            pipe = pick(r["tok_per_sec"] for r in runs)
            ratio = pipe / sync
            print(
                f"    {label:6s} sync {sync:7,.0f} tok/s  pipeline {pipe:7,.0f} tok/s  "
                f"ratio {ratio:.2f}x  = {ratio / bound:.0%} of the ideal overlap bound "
                f"{bound:.2f}x"
            )
        print(
            "    stage busy (pipeline, mean): " + ", ".join(f"{k} {v:.2f}" for k, v in busy.items())
        )


if __name__ == "__main__":
    main()

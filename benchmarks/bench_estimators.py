"""Benchmark: how close each training-time estimate of tau lands to the measured tau, on a real LLM.

Not a timed test: run it by hand (after ``make real-target``) and read the table.

    nice -n 10 python benchmarks/bench_estimators.py                  # SmolLM2-135M-Instruct
    python benchmarks/bench_estimators.py --steps 20 --evals 1 --prompts 2   # quicker
    python benchmarks/bench_estimators.py --work runs/bench --skip-train    # re-measure a run
    python benchmarks/bench_estimators.py --log sample_logs/train.jsonl     # a log's own evals

With ``--log`` nothing is trained or measured: each ``eval`` record of the log (the bundled
target's held-out prompts in the sample log) is the measured tau, and the estimators come from
the metric records of the window before it.

1. Trains a drafter with the real ``dflash-train pipeline`` command on the real target's data
   (``real_target/data``), logging every step with the walked tau on every ``--walk-every``-th
   record and a checkpoint at each of ``--evals`` evenly spaced steps.
2. At each checkpoint, measures tau per benchmark (HumanEval, held-out stdlib functions) by greedy
   speculative decoding on ``--prompts`` prompts each, to the training horizon (the longest
   training response), stopping at the end-of-turn token as serving does.
3. From the log records of the ``--window`` steps up to that checkpoint, computes every estimator
   (pure functions below: the diagnostics' own modules are not imported, so this stays a check
   from the log's fields alone) and prints its value and its error against the measured tau:

   * walk      sum walk_tokens / sum walk_steps (the walked tau)
   * harmonic  1 / sum_{k=0}^{B-1} (A_k - A_{k+1}) / (k+1), A_0 = 1, A_k = accept_pos[k], A_B = 0
   * chain     1 + sum_k prod_{j<=k} acc_pos[j]
   * linear    1 + (B-1) acc
   * tau_train 1 + sum_k accept_pos[k] (the size-biased upper view)

The walk is shown with its standard error over the window's walked records, and the ``primary``
column applies the report's rule: the walk leads with at least 3 walked records and a relative
standard error of at most 10%, else the harmonic estimate does.

Targets: walk within 5% of measured at every eval, harmonic within 15%.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# -- estimators (pure) -----------------------------------------------------------------------------


def window_means(records: Sequence[dict]) -> dict[str, object]:
    """Block-weighted means of the per-position lists and the prediction-weighted accuracy of
    metric records, and the walk sums."""
    blocks = sum(r["n_blocks"] for r in records)
    preds = sum(r["n_pred"] for r in records)
    k = len(records[0]["acc_pos"])
    acc_pos = [sum(r["acc_pos"][i] * r["n_blocks"] for r in records) / blocks for i in range(k)]
    accept_pos = [
        sum(r["accept_pos"][i] * r["n_blocks"] for r in records) / blocks for i in range(k)
    ]
    walked = [r for r in records if r.get("walk_steps")]
    return {
        "walk_pairs": [(r["walk_tokens"], r["walk_steps"]) for r in walked],
        "acc": sum(r["acc"] * r["n_pred"] for r in records) / preds,
        "acc_pos": acc_pos,
        "accept_pos": accept_pos,
        "walk_tokens": sum(r["walk_tokens"] for r in walked),
        "walk_steps": sum(r["walk_steps"] for r in walked),
        "block_size": k + 1,
        "walked": len(walked),
    }


def walk_tau(walk_tokens: int, walk_steps: int) -> float:
    return walk_tokens / walk_steps if walk_steps else math.nan


def walk_se(pairs: Sequence[tuple[float, float]]) -> float:
    """Standard error of the ratio of sums over the walked records (the records are the draws):
    sqrt(sum (t - R s)^2 / (n (n-1))) / mean(s)."""
    n = len(pairs)
    if n < 2:
        return math.nan
    r = sum(t for t, _ in pairs) / sum(s for _, s in pairs)
    spread = sum((t - r * s) ** 2 for t, s in pairs) / (n * (n - 1))
    return math.sqrt(spread) / (sum(s for _, s in pairs) / n)


#: The report's rule (dflash_diag defaults WALK_MIN_RECORDS, WALK_MAX_REL_SE), restated.
WALK_MIN_RECORDS, WALK_MAX_REL_SE = 3, 0.10


def primary(est: dict[str, float], se: float, walked: int) -> str:
    """The estimator the report would lead with: the walk on adequate evidence, else harmonic."""
    walk = est["walk"]
    if walked >= WALK_MIN_RECORDS and math.isfinite(walk) and se / walk <= WALK_MAX_REL_SE:
        return "walk"
    return "harmonic"


def harmonic_tau(accept_pos: Sequence[float]) -> float:
    """Exact when every anchor of a decoding step accepts the same length: uniform anchors then
    see a step of length l with probability proportional to l times its frequency."""
    a = [1.0, *accept_pos, 0.0]
    return 1.0 / sum((a[k] - a[k + 1]) / (k + 1) for k in range(len(a) - 1))


def chain_tau(acc_pos: Sequence[float]) -> float:
    total, run = 1.0, 1.0
    for p in acc_pos:
        run *= p
        total += run
    return total


def linear_tau(acc: float, block_size: int) -> float:
    return 1.0 + (block_size - 1) * acc


def train_tau(accept_pos: Sequence[float]) -> float:
    return 1.0 + sum(accept_pos)


def estimates(means: dict) -> dict[str, float]:
    return {
        "walk": walk_tau(means["walk_tokens"], means["walk_steps"]),
        "harmonic": harmonic_tau(means["accept_pos"]),
        "chain": chain_tau(means["acc_pos"]),
        "linear": linear_tau(means["acc"], means["block_size"]),
        "tau_train": train_tau(means["accept_pos"]),
    }


# -- the run ---------------------------------------------------------------------------------------


def train(args, work: Path, ckpt_every: int) -> None:
    cfg = work / "bench.toml"
    cfg.write_text(
        "\n".join(
            [
                f'target = "{args.target}"',
                f'data = "{args.data}"',
                f"token_budget = {args.token_budget}",
                "log_every = 1",
                f"walk_every = {args.walk_every}",
                f"walk_seqs = {args.walk_seqs}",
                "eval_every = 0",
                f"ckpt_every = {ckpt_every}",
                f"max_steps = {args.steps}",
                f"grad_accum = {args.grad_accum}",
                f"peak_lr = {args.lr}",
                f"min_lr = {args.lr / 10}",
                f'log = "{work / "train.jsonl"}"',
                f'ckpt_dir = "{work / "ckpt"}"',
                "progress = false",
                "[drafter]",
                "block_size = 16",
                "num_draft_layers = 1",
                f"num_anchors = {args.anchors}",
            ]
        )
        + "\n"
    )
    print(f"$ dflash-train pipeline --config {cfg}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "pipeline", "--config", str(cfg)],
        check=True,
        cwd=REPO,
    )


def measure(args, work: Path, steps: list[int]) -> dict[int, dict[str, tuple[float, int]]]:
    """Measured tau and verify steps per benchmark at each checkpoint step."""
    import torch

    from dflash import TargetModel, evaluate_tau
    from dflash.checkpoint import load_drafter
    from dflash.data import load_dataset
    from pipelines.real_target import load_benchmarks
    from pipelines.run_setup import longest_response

    torch.set_num_threads(args.threads)
    target = TargetModel.from_pretrained(args.target)
    data = load_dataset(args.data)
    horizon = longest_response(data)
    eos = data.meta.get("eos_token_id")
    benches = {k: v[: args.prompts] for k, v in load_benchmarks(args.data).items()}
    out = {}
    for s in steps:
        drafter = load_drafter(str(work / "ckpt" / f"step-{s:06d}"), dtype=target.dtype)
        out[s] = {}
        for name, prompts in benches.items():
            t0 = time.time()
            res = evaluate_tau(
                target,
                drafter,
                prompts,
                max_new_tokens=horizon,
                stop_token_ids=[eos] if eos is not None else None,
            )
            out[s][name] = (res.tau, res.n_steps)
            print(
                f"step {s} {name}: measured tau {res.tau:.3f} over {res.n_steps} steps "
                f"({time.time() - t0:.0f}s)",
                flush=True,
            )
    return out


def pooled(results: dict[str, tuple[float, int]]) -> float:
    """The measured tau over every benchmark's verify steps (tokens / steps, pooled)."""
    steps = sum(n for _, n in results.values())
    return sum(tau * n for tau, n in results.values()) / steps if steps else math.nan


def cell(value: float, truth: float) -> str:
    """``value (error vs truth)``, or n/a (no walked record in the window)."""
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.2f} ({(value - truth) / truth:+.0%})"


def latest_records(records: Sequence[dict]) -> list[dict]:
    """Metric records with a restart's re-logged steps resolved (the later entry of a step wins)."""
    by_step: dict[int, dict] = {}
    for r in records:
        if "event" not in r:
            by_step[r["step"]] = r
    return [by_step[s] for s in sorted(by_step)]


#: The estimate columns of both tables, after the measured ones.
ESTIMATE_HEAD = (
    ["walk ± se (err)", "walked"]
    + [f"{e} (err)" for e in ("harmonic", "chain", "linear", "tau_train")]
    + ["primary (err)"]
)


def estimate_cells(means: dict, truth: float) -> list[str]:
    """The estimate columns of one eval: the walk with its SE, the walked records, each other
    estimator, and the report's primary estimate, each with its error against ``truth``."""
    est = estimates(means)
    se = walk_se(means["walk_pairs"])
    walk = cell(est["walk"], truth)
    if math.isfinite(se) and math.isfinite(est["walk"]):
        walk = walk.replace(" (", f" ± {se:.2f} (", 1)
    lead = primary(est, se, means["walked"])
    return (
        [walk, str(means["walked"])]
        + [cell(est[e], truth) for e in ("harmonic", "chain", "linear", "tau_train")]
        + [f"{lead} {cell(est[lead], truth)}"]
    )


def log_table(path: Path, window: int) -> int:
    """The estimator table of an existing log against its own eval records."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    metrics = [r for r in latest_records(records) if "accept_pos" in r]
    evals = {r["step"]: r for r in records if r.get("event") == "eval"}  # later entries win
    head = ["step", "tau measured", *ESTIMATE_HEAD]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for s, ev in sorted(evals.items()):
        window_recs = [r for r in metrics if s - window < r["step"] <= s]
        if not window_recs:
            continue
        truth = ev["tau"]
        cells = [str(s), f"{truth:.2f}", *estimate_cells(window_means(window_recs), truth)]
        print("| " + " | ".join(cells) + " |")
    print(
        f"\nestimates from the pipeline records of steps (s-{window}, s]; measured: the log's "
        f"eval records ({next(iter(evals.values()))['n_prompts']} held-out prompts)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=str(REPO / "real_target" / "smollm2-135m-instruct"))
    p.add_argument("--data", default=str(REPO / "real_target" / "data"))
    p.add_argument("--work", type=Path, default=REPO / "runs" / "bench_estimators")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--evals", type=int, default=2, help="evenly spaced eval points")
    p.add_argument("--window", type=int, default=20, help="steps of records per estimate")
    p.add_argument("--prompts", type=int, default=3, help="eval prompts per benchmark")
    p.add_argument("--token-budget", type=int, default=512)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--anchors", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--walk-every", type=int, default=4)
    p.add_argument("--walk-seqs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-train", action="store_true", help="re-measure the run in --work")
    p.add_argument(
        "--reuse-measured",
        action="store_true",
        help="with --skip-train: tabulate the run's saved measurements (measured.json)",
    )
    p.add_argument("--log", type=Path, help="only tabulate this log against its eval records")
    args = p.parse_args(argv)
    if args.log is not None:
        return log_table(args.log, args.window)
    if not (Path(args.target) / "config.json").is_file():
        print(f"error: no target at {args.target} (run `make real-target`)", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    every = max(1, args.steps // args.evals)
    steps = [every * i for i in range(1, args.evals + 1)]
    t0 = time.time()
    if not args.skip_train:
        if (args.work / "train.jsonl").exists():
            (args.work / "train.jsonl").unlink()
        train(args, args.work, every)
    t_train = time.time() - t0
    records = [json.loads(line) for line in (args.work / "train.jsonl").read_text().splitlines()]
    metrics = latest_records(records)
    saved = args.work / "measured.json"
    if args.reuse_measured and saved.is_file():
        measured = {
            int(k): {n: tuple(v) for n, v in r.items()}
            for k, r in json.loads(saved.read_text()).items()
        }
    else:
        measured = measure(args, args.work, steps)
        saved.write_text(json.dumps(measured, indent=1) + "\n")
    names = sorted(next(iter(measured.values())))
    print(
        f"\ntraining {t_train:.0f}s; measurement {time.time() - t0 - t_train:.0f}s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    head = ["step"] + [f"tau {n}" for n in names] + ["tau all", *ESTIMATE_HEAD]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    walks: dict[int, float] = {}
    for s in steps:
        window = [r for r in metrics if s - args.window < r["step"] <= s and "accept_pos" in r]
        means = window_means(window)
        walks[s] = walk_tau(means["walk_tokens"], means["walk_steps"])
        truth = pooled(measured[s])
        cells = [str(s)] + [f"{measured[s][n][0]:.2f}" for n in names] + [f"{truth:.2f}"]
        cells += estimate_cells(means, truth)
        print("| " + " | ".join(cells) + " |")
    print(
        f"\nestimates from the records of steps (s-{args.window}, s]; walk over "
        f"{args.walk_seqs} training sequences every {args.walk_every} steps; errors against "
        f"'tau all' (the measured tau pooled over the benchmarks' verify steps); primary: the "
        f"report's rule (walk on {WALK_MIN_RECORDS}+ walked records with SE <= "
        f"{WALK_MAX_REL_SE:.0%}, else harmonic)"
    )
    in_dist = [n for n in names if n != "humaneval"]
    if in_dist:
        print(
            "walk error against the benchmark drawn like the training data ("
            + ", ".join(in_dist)
            + "): "
            + ", ".join(
                f"step {s} " + cell(walks[s], pooled({n: measured[s][n] for n in in_dist}))
                for s in steps
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

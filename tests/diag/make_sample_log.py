"""Generate a realistic, seeded DFlash training log (JSONL schema v1) for the quick start and tests.

The story is the original analysis' (docs/design.md, The original analysis): a drafter trained by the lock-step
script (legacy records, no header, no ``tok_per_sec``; data-parallel 2, so its loss is normalised
to about half of the pipeline's) up to step 15000, then resumed by the asynchronous pipeline
(``run_start`` with ``script: "pipeline"``, per-position metrics, 16K tokens/s). The pipeline crashes
once and resumes from its last checkpoint (a restart: steps logged twice), writes two eval records
and a NaN gradient norm, and is still running: the last line is torn.

Run as a script to (re)write the committed sample::

    python -m tests.diag.make_sample_log sample_logs/train.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

BLOCK = 16
PEAK_LR = 6e-4
WARMUP = 37_500
TOTAL = 937_500
MIN_LR = 6e-5
SWITCH_STEP = 15_000


def schedule_lr(step: int) -> float:
    """Linear warmup to PEAK_LR over WARMUP steps, cosine to MIN_LR at TOTAL (absolute steps)."""
    if step <= WARMUP:
        return PEAK_LR * step / WARMUP
    frac = (step - WARMUP) / (TOTAL - WARMUP)
    return MIN_LR + 0.5 * (PEAK_LR - MIN_LR) * (1 + math.cos(math.pi * frac))


def learned_acc(step: int) -> float:
    """The drafter's underlying accuracy: fast early gains, then a steady climb in the pipeline."""
    return 0.165 * (1 - math.exp(-step / 5000)) + 0.00008 * max(0, step - SWITCH_STEP)


def position_metrics(acc: float, rng: random.Random) -> tuple[list[float], list[float]]:
    """acc_pos (block positions 1..B-1, mean ``acc``) and accept_pos (prefix acceptance rates).

    Errors cluster (a block right at position 1 is usually right at 2), so prefix acceptance is
    far above the product of the marginals: about three quarters of the marginal mass survives
    as prefix, geometrically falling with position. The marginals are the prefix rates plus a
    constant share of "right after an earlier miss".
    """
    positions = BLOCK - 1
    marginal_total = acc * positions
    prefix_total = 0.75 * marginal_total
    ratio = 0.75
    first = prefix_total * (1 - ratio) / (1 - ratio**positions)
    accept_pos = [first * ratio**k * (1 + rng.gauss(0, 0.01)) for k in range(positions)]
    extra = (marginal_total - sum(accept_pos)) / positions
    acc_pos = [min(0.999, p + extra) for p in accept_pos]
    return [round(p, 5) for p in acc_pos], [round(p, 5) for p in accept_pos]


def _dump(record: dict) -> str:
    return json.dumps(record)


def generate(seed: int = 0, *, pipeline_steps: int = 1_000, torn: bool = True) -> bytes:
    """The whole sample log as bytes (deterministic for a given seed).

    Args:
        seed: random seed.
        pipeline_steps: optimizer steps the pipeline phase logs after step 15000 (every 2 steps).
        torn: end with a torn (half-written) line.
    """
    rng = random.Random(seed)
    lines: list[str] = []
    t = 1_767_000_000.0
    # Lock-step phase: every 25 steps, legacy record only. DP=2 averaged the loss over twice the
    # sequences per token budget, halving it against the pipeline's per-token normalisation.
    for step in range(25, SWITCH_STEP + 1, 25):
        t += 25 * 0.93
        acc = max(0.0, learned_acc(step) + rng.gauss(0, 0.006))  # an accuracy is never negative
        loss = 0.5 * (4.8 - 9.7 * learned_acc(step)) + rng.gauss(0, 0.02)
        lines.append(
            _dump(
                {
                    "step": step,
                    "time": round(t, 3),
                    "epoch": round(step / 5000, 4),
                    "loss": round(loss, 4),
                    "acc": round(acc, 4),
                    "lr": schedule_lr(step),
                }
            )
        )
    lines.append(
        _dump({"event": "checkpoint", "step": SWITCH_STEP, "path": "checkpoints/sync/step_015000"})
    )

    def header(resumed_step: int, path: str) -> str:
        return _dump(
            {
                "event": "run_start",
                "schema": 1,
                "script": "pipeline",
                "time": round(t, 3),
                "config": {
                    "token_budget": 65536,
                    "grad_accum": 4,
                    "block_size": BLOCK,
                    "num_anchors": 512,
                    "target": "bundled-tiny-qwen3",
                },
                "schedule": {
                    "kind": "cosine",
                    "peak_lr": PEAK_LR,
                    "warmup_steps": WARMUP,
                    "total_steps": TOTAL,
                    "min_lr": MIN_LR,
                },
                "block_size": BLOCK,
                "steps_per_epoch": 5000,
                "world_size": 1,
                "resumed_from": {"path": path, "step": resumed_step},
            }
        )

    def pipeline_record(step: int) -> dict:
        acc_true = learned_acc(step)
        n_pred = rng.randint(52_000, 64_000)
        acc = min(0.99, max(0.0, acc_true + rng.gauss(0, 0.01)))
        acc_pos, accept_pos = position_metrics(acc, rng)
        tok_per_sec = 16_000 + rng.gauss(0, 400)
        return {
            "step": step,
            "time": round(t, 3),
            "epoch": round(step / 5000, 4),
            "loss": round(4.8 - 9.7 * acc_true + rng.gauss(0, 0.04), 4),
            "acc": round(acc, 4),
            "lr": schedule_lr(step),
            "tok_per_sec": round(tok_per_sec, 1),
            "n_tokens": 65536,
            "n_blocks": n_pred // (BLOCK - 1),
            "n_pred": n_pred,
            "acc_pos": acc_pos,
            "accept_pos": accept_pos,
            "tau_train": round(1 + sum(accept_pos), 4),
            "grad_norm": round(abs(rng.gauss(0.9, 0.15)), 4),
            "stage_busy": {"loader": 0.21, "target": 0.97, "draft": 0.88, "optim": 0.05},
            "queue_fill": {"batches": 0.4, "hidden": 0.93, "grads": 0.1},
        }

    lines.append(header(SWITCH_STEP, "checkpoints/sync/step_015000"))
    crash_at, resume_from = SWITCH_STEP + 740, SWITCH_STEP + 600
    step = SWITCH_STEP
    while step < SWITCH_STEP + pipeline_steps:
        step += 2
        t += 2 * 65536 / 16_000
        record = pipeline_record(step)
        if step == SWITCH_STEP + 400:
            record["grad_norm"] = float("nan")  # json writes NaN: the reader must count it
        lines.append(_dump(record))
        if step % 200 == 0:
            lines.append(
                _dump(
                    {
                        "event": "checkpoint",
                        "step": step,
                        "path": f"checkpoints/pipeline/step_{step:06d}",
                    }
                )
            )
        if step == SWITCH_STEP + 300:
            hist = [0] * (BLOCK + 1)
            for _ in range(128):
                hist[min(BLOCK, max(1, int(rng.gauss(3.2, 1.3))))] += 1
            lines.append(
                _dump(
                    {
                        "event": "eval",
                        "step": step,
                        "tau": 3.02,
                        "tau_hist": hist,
                        "n_prompts": 32,
                        "new_tokens": 4096,
                        "temperature": 0.0,
                    }
                )
            )
        if step == crash_at:
            # The pipeline dies here; the next launch resumes from the step-15600 checkpoint.
            t += 600
            lines.append(header(resume_from, f"checkpoints/pipeline/step_{resume_from:06d}"))
            step = resume_from
            crash_at = -1
    hist = [0] * (BLOCK + 1)
    for _ in range(128):
        hist[min(BLOCK, max(1, int(rng.gauss(3.4, 1.3))))] += 1
    lines.append(
        _dump(
            {
                "event": "eval",
                "step": step,
                "tau": 3.41,
                "tau_hist": hist,
                "n_prompts": 32,
                "new_tokens": 4096,
                "temperature": 0.0,
            }
        )
    )
    text = "\n".join(lines) + "\n"
    if torn:
        t += 2 * 65536 / 16_000
        text += _dump(pipeline_record(step + 2))[:57]  # the writer is mid-line
    return text.encode()


def write_sample_log(path: str | Path, seed: int = 0, **kwargs) -> Path:
    """Write :func:`generate`'s log to ``path`` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(generate(seed, **kwargs))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="sample_logs/train.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write_sample_log(args.out, args.seed))


if __name__ == "__main__":
    main()

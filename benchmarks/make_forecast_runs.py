"""Generate the committed pipeline runs of ``tests/fixtures/runs/`` (the forecast backtest's own
runs, issue 22): the bundled tiny target on CPU, different schedules, learning rates and seeds, a
measured eval every ~10% of the run, past the first epoch, with the held-out walk.

    nice -n 10 python benchmarks/make_forecast_runs.py cosine-6e-4-s0      # one run
    nice -n 10 python benchmarks/make_forecast_runs.py --list              # the table
    nice -n 10 python benchmarks/make_forecast_runs.py --heldout           # the held-out runs

The held-out runs (:data:`HELDOUT`, written to ``tests/fixtures/runs_heldout/``) are other
schedules, learning rates and seeds that no forecast constant was tuned on: the backtest reports
them separately (``bench_forecast.py --heldout-runs``).

Each run trains on the first ``--examples`` examples of the bundled data (written once to
``<work>/data``: the same target-generated sequences, fewer of them, so that several epochs fit
in minutes on a loaded 2-core machine), holds 32 of them out for the walk, walks 4 held-out
sequences on every step, and measures tau on 8 held-out prompts over a 40-token horizon every
``eval_every`` steps. Only the JSONL log is kept (``tests/fixtures/runs/<name>/train.jsonl``).

What the walk walks (``--walk-source``): by default the eval file's 24 prompts past the eval's 8,
each with the target's greedy continuation (the pipeline's default ``walk_source``), every one
of the 384 examples trained on; ``data`` holds 32 training examples out instead, as the runs of
``tests/fixtures/runs/`` and ``runs_heldout/`` were made (``--out tests/fixtures/runs_evalwalk``
for the runs made with the eval-prompt walk).

``--eval64`` makes the runs of ``tests/fixtures/runs_eval64/`` (issue 22: an eval precise enough
to judge an estimate by): the data's eval file is the 256-prompt file of
``benchmarks/make_eval_prompts.py`` (the bundled 32 first), each eval measures 64 of them, a draw
seeded by the run's seed (``eval_split = "seeded"``), and the walk walks the other 192; every
eval record carries its per-prompt results.

    nice -n 10 python benchmarks/make_forecast_runs.py --eval64 --eval-every 16 \
        --out tests/fixtures/runs_eval64 cosine-6e-4-s0
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Flags of the longer runs (after COMMON's, so they win): 160 steps, an eval every 16.
LONG = ["--max-steps", "160", "--eval-every", "16", "--progress-every", "16"]

#: name -> flags of ``dflash-train pipeline`` on top of COMMON.
RUNS: dict[str, list[str]] = {
    "cosine-6e-4-s0": ["--schedule", "cosine", "--lr", "6e-4", "--seed", "0"],
    "linear-1e-3-s1": ["--schedule", "linear", "--lr", "1e-3", "--seed", "1"],
    "constant-3e-4-s2": ["--schedule", "constant", "--lr", "3e-4", "--seed", "2"],
    "cosine-1.5e-3-s3": ["--schedule", "cosine", "--lr", "1.5e-3", "--seed", "3"],
    # twice as long (6.5 epochs), an eval every 16 steps: a 30% cut sees 48 records, not 24
    "cosine-8e-4-s7-160": ["--schedule", "cosine", "--lr", "8e-4", "--seed", "7", *LONG],
    "constant-5e-4-s8-160": ["--schedule", "constant", "--lr", "5e-4", "--seed", "8", *LONG],
}

#: Held out from tuning: name -> flags, as :data:`RUNS`.
HELDOUT: dict[str, list[str]] = {
    "cosine-1e-3-s4": ["--schedule", "cosine", "--lr", "1e-3", "--seed", "4"],
    "linear-5e-4-s5": ["--schedule", "linear", "--lr", "5e-4", "--seed", "5"],
    "constant-8e-4-s6": ["--schedule", "constant", "--lr", "8e-4", "--seed", "6"],
    "linear-1.2e-3-s9-160": ["--schedule", "linear", "--lr", "1.2e-3", "--seed", "9", *LONG],
}

#: What every run shares: about 24 optimizer steps an epoch on the 384-example data (352
#: trained on), 80 steps (3.3 epochs), an eval every 8 steps (10%).
COMMON = [
    "--max-steps",
    "80",
    "--grad-accum",
    "2",
    "--eval-every",
    "8",
    "--ckpt-every",
    "0",
    "--progress-every",
    "8",
]
TOML = """eval_new_tokens = 40
eval_prompts = {eval_prompts}
walk_every = 1
walk_seqs = 4
walk_holdout = {walk_holdout}
walk_source = "{walk_source}"
eval_split = "{eval_split}"
"""

#: The larger eval file (``benchmarks/make_eval_prompts.py``: 256 prompts, the first 32 the
#: bundled file's) and how the runs of ``tests/fixtures/runs_eval64*/`` split it.
LARGE_EVAL = REPO / "benchmarks" / "eval_data" / "eval_prompts.jsonl"


def make_data(work: Path, examples: int, eval_file: Path | None = None) -> Path:
    """The first ``examples`` examples of the bundled data, with its eval prompts (or
    ``eval_file``'s; written again whenever the file differs)."""
    from dflash.data import DEFAULT_DATA_DIR, EVAL_FILE, load_dataset, save_dataset

    out = work / "data"
    if not (out / "train.safetensors").is_file():
        full = load_dataset(DEFAULT_DATA_DIR)
        save_dataset(out, full.subset(list(range(examples))), [])
    source = eval_file or DEFAULT_DATA_DIR / EVAL_FILE
    if not (out / EVAL_FILE).is_file() or (out / EVAL_FILE).read_bytes() != source.read_bytes():
        shutil.copy(source, out / EVAL_FILE)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="runs to make (default: all)")
    p.add_argument("--list", action="store_true", help="print the table of runs")
    p.add_argument("--heldout", action="store_true", help="the held-out runs (HELDOUT)")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "forecast_runs")
    p.add_argument("--out", type=Path, default=None, help="default: tests/fixtures/runs[_heldout]")
    p.add_argument("--examples", type=int, default=384)
    p.add_argument(
        "--walk-source",
        choices=("eval_prompts", "data"),
        default="eval_prompts",
        help="what the walk walks: the eval file's spare prompts (the default since the "
        "committed runs of tests/fixtures/runs_evalwalk/) or held-out training examples (the "
        "runs of tests/fixtures/runs/ and runs_heldout/ were made so)",
    )
    p.add_argument(
        "--ckpt-every", type=int, default=0, help="keep checkpoints (bench_walk_gap.py reads them)"
    )
    p.add_argument(
        "--eval-file",
        type=Path,
        default=None,
        help="the data's eval-prompt file (default: the bundled data's 32 prompts)",
    )
    p.add_argument("--eval-prompts", type=int, default=8, help="prompts per eval")
    p.add_argument(
        "--eval-every", type=int, default=None, help="steps between evals (default: the table's)"
    )
    p.add_argument("--walk-holdout", type=int, default=32, help="the walk's held-out sequences")
    p.add_argument(
        "--eval-split",
        choices=("first", "seeded"),
        default="first",
        help="which prompts of the eval file the eval measures (the config's eval_split)",
    )
    p.add_argument(
        "--eval64",
        action="store_true",
        help="the runs of tests/fixtures/runs_eval64*/: the 256-prompt eval file, 64 prompts per "
        "eval, the other 192 walked, a seeded split (--eval-file benchmarks/eval_data/"
        "eval_prompts.jsonl --eval-prompts 64 --walk-holdout 192 --eval-split seeded)",
    )
    args = p.parse_args(argv)
    if args.eval64:
        args.eval_file, args.eval_prompts, args.walk_holdout = LARGE_EVAL, 64, 192
        args.eval_split = "seeded"
    table = HELDOUT if args.heldout else RUNS
    out = args.out or REPO / "tests" / "fixtures" / ("runs_heldout" if args.heldout else "runs")
    if args.list:
        for name, flags in table.items():
            print(name, " ".join(flags))
        return 0
    unknown = [n for n in args.names if n not in table]
    if unknown:
        p.error(f"unknown run(s) {', '.join(unknown)}: see --list")
    data = make_data(args.work, args.examples, args.eval_file)
    toml = args.work / "runs.toml"
    toml.write_text(
        TOML.format(
            walk_source=args.walk_source,
            eval_prompts=args.eval_prompts,
            walk_holdout=args.walk_holdout,
            eval_split=args.eval_split,
        )
    )
    for name in args.names or list(table):
        log = out / name / "train.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        if log.exists():
            log.unlink()
        cmd = [
            sys.executable,
            "-m",
            "pipelines.cli",
            "pipeline",
            "--config",
            str(toml),
            "--data",
            str(data),
            "--log",
            str(log),
            "--ckpt-dir",
            str(args.work / name),
            *COMMON,
            *table[name],
            *(["--ckpt-every", str(args.ckpt_every)] if args.ckpt_every else []),
            *(["--eval-every", str(args.eval_every)] if args.eval_every else []),
        ]
        print(" ".join(cmd), flush=True)
        if subprocess.run(cmd, cwd=REPO, check=False).returncode != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

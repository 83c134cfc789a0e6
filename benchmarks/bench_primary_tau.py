"""Benchmark: with the evals hidden, how far is the report's primary tau from each measured eval?

Issue 22's target: within 10% of the measured tau at every eval past the first epoch of the
committed pipeline runs (``tests/fixtures/runs/*/train.jsonl``, made by
``benchmarks/make_forecast_runs.py``), which walk a held-out split.

    python benchmarks/bench_primary_tau.py                          # every committed run
    python benchmarks/bench_primary_tau.py --window 8 run/train.jsonl  # 8-step windows
    python benchmarks/bench_primary_tau.py --all-evals              # the first epoch too

For each eval record at step s, the log is cut after step s's metric record and EVERY eval record
is removed; ``dflash-diag converge``'s report (the library: ``build_converge_report``) then gives
its primary estimate, which is compared with the eval's measured tau. Nothing is trained.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def primary_at_evals(path: Path, window: int | None, all_evals: bool = False) -> list[dict]:
    """One row per eval of ``path`` (past the first epoch unless ``all_evals``): the measured
    tau, the primary estimate of the report with every eval hidden, and its relative error.
    ``window``: steps per window (None: converge's default, ``--window auto``)."""
    from dflash_diag import ConvergeConfig, build_converge_report, load_log

    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    epoch_at = {r["step"]: r.get("epoch") for r in records if "event" not in r}
    rows = []
    for ev in (r for r in records if r.get("event") == "eval"):
        step, epoch = ev["step"], epoch_at.get(ev["step"])
        if epoch is None or (epoch <= 1 and not all_evals):
            continue
        kept = [
            r
            for r in records
            if r.get("event") != "eval"
            and not ("event" not in r and r["step"] > step)
            and not (r.get("event") in ("checkpoint", "stop") and r["step"] > step)
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("".join(json.dumps(r) + "\n" for r in kept))
        try:
            report = build_converge_report(load_log(f.name), ConvergeConfig(window=window))
        finally:
            Path(f.name).unlink()
        a = report.acceptance
        rows.append(
            {
                "run": path.parent.name,
                "step": step,
                "epoch": epoch,
                "measured": ev["tau"],
                "primary": a.tau,
                "estimator": a.estimator,
                "error": a.tau / ev["tau"] - 1,
            }
        )
    return rows


def window_arg(text: str) -> int | None:
    """``--window``: a positive number of steps, or ``auto``."""
    if text == "auto":
        return None
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--window must be >= 1 or auto, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logs", nargs="*", type=Path)
    p.add_argument(
        "--window",
        type=window_arg,
        default=None,
        help="steps per window, or auto (converge's default, the default here)",
    )
    p.add_argument("--all-evals", action="store_true", help="the first epoch's evals too")
    args = p.parse_args(argv)
    logs = args.logs or sorted((REPO / "tests" / "fixtures" / "runs").glob("*/train.jsonl"))
    rows = [row for log in logs for row in primary_at_evals(log, args.window, args.all_evals)]
    print(
        f"{'run':<20} {'step':>5} {'epoch':>6} {'measured':>9} {'primary':>8} "
        f"{'estimator':<10} {'error':>7}"
    )
    for r in rows:
        print(
            f"{r['run']:<20} {r['step']:>5} {r['epoch']:>6.2f} {r['measured']:>9.3f} "
            f"{r['primary']:>8.3f} {r['estimator']:<10} {r['error']:>+7.1%}"
        )
    if rows:
        errors = [abs(r["error"]) for r in rows]
        within = sum(e <= 0.10 for e in errors)
        print(
            f"\n{len(rows)} evals: |error| median {statistics.median(errors):.1%}, max "
            f"{max(errors):.1%}; within 10%: {within}/{len(rows)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

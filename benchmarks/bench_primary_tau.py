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

Each figure is shown with its standard error: the measured tau's between its prompts where the
eval record holds per-prompt results (``prompt_tokens``, ``prompt_steps``: logs written since
issue 22; :func:`dflash_diag.analysis.estimators.eval_se`), else from its ``tau_hist`` (the verify
steps taken as independent draws: a lower bound, since the steps of one prompt are correlated;
over the 8 prompts of ``constant-5e-4-s8-160``'s evals the SE between prompts was 1.1-2.1x
larger; such rows are marked ``h``), the primary's as the report gives it (the walk's, between
records), and the error's by the product rule: the relative SE of a ratio is the root sum of
squares of the two relative SEs. ``z`` is the error over its SE: an eval missed by more than 10%
with ``|z| < 2`` is missed within the two measurements' own noise.
"""

from __future__ import annotations

import argparse
import json
import math
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
    from dflash_diag.analysis.estimators import eval_se

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
        primary = next((e for e in a.estimates if e.name == a.estimator), None)
        between_prompts = eval_se(ev)
        measured_se = (
            between_prompts if between_prompts is not None else hist_se(ev.get("tau_hist") or [])
        )
        primary_se = primary.se if primary is not None else None
        ratio = a.tau / ev["tau"]
        rel = [x / v for x, v in ((measured_se, ev["tau"]), (primary_se, a.tau)) if x is not None]
        error_se = ratio * math.sqrt(sum(r * r for r in rel)) if rel else None
        rows.append(
            {
                "run": path.parent.name,
                "step": step,
                "epoch": epoch,
                "measured": ev["tau"],
                "measured_se": measured_se,
                "se_from": "prompts" if between_prompts is not None else "hist",
                "n_prompts": ev.get("n_prompts"),
                "primary": a.tau,
                "primary_se": primary_se,
                "estimator": a.estimator,
                "error": ratio - 1,
                "error_se": error_se,
            }
        )
    return rows


def hist_se(hist: list[int]) -> float | None:
    """Standard error of the mean tokens per verify step of an eval's ``tau_hist`` (hist[k]:
    steps that gained k + 1 tokens), the steps taken as independent (a lower bound)."""
    n = sum(hist)
    if n < 2:
        return None
    mean = sum((k + 1) * c for k, c in enumerate(hist)) / n
    var = sum(c * (k + 1 - mean) ** 2 for k, c in enumerate(hist)) / (n - 1)
    return math.sqrt(var / n)


def _pm(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


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
        f"{'run':<20} {'step':>5} {'epoch':>6} {'measured':>9} {'± SE':>6} {'primary':>8} "
        f"{'± SE':>6} {'estimator':<10} {'error':>7} {'± SE':>6} {'z':>5}"
    )
    for r in rows:
        e_se = r["error_se"]
        z = f"{r['error'] / e_se:>+5.1f}" if e_se else f"{'':>5}"
        print(
            f"{r['run']:<20} {r['step']:>5} {r['epoch']:>6.2f} {r['measured']:>9.3f} "
            f"{_pm(r['measured_se']):>6}{'h' if r['se_from'] == 'hist' else ' '}"
            f"{r['primary']:>8.3f} {_pm(r['primary_se']):>6} "
            f"{r['estimator']:<10} {r['error']:>+7.1%} "
            f"{'' if e_se is None else f'{e_se:.1%}':>6} {z}"
        )
    if rows:
        errors = [abs(r["error"]) for r in rows]
        within = sum(e <= 0.10 for e in errors)
        noisy = sum(
            abs(r["error"]) > 0.10 and r["error_se"] and abs(r["error"]) < 2 * r["error_se"]
            for r in rows
        )
        ses = [r["error_se"] for r in rows if r["error_se"]]
        print(
            f"\n{len(rows)} evals: |error| median {statistics.median(errors):.1%}, max "
            f"{max(errors):.1%}; within 10%: {within}/{len(rows)}"
            + (
                f"; error SE median {statistics.median(ses):.1%}; of the misses, "
                f"{noisy} within 2 SE"
                if ses
                else ""
            )
        )
        # The signed mean by run: an offset the same at every eval of a run is which prompts the
        # eval and the walk read (a fixed split repeats it in every run; a seeded one draws it).
        runs = list(dict.fromkeys(r["run"] for r in rows))
        print(
            "mean error by run: "
            + ", ".join(
                f"{run} {statistics.mean(r['error'] for r in rows if r['run'] == run):+.1%}"
                for run in runs
            )
        )
        by_prompts = [r for r in rows if r["se_from"] == "prompts"]
        if by_prompts:
            rel = [r["measured_se"] / r["measured"] for r in by_prompts]
            print(
                f"measured SE between prompts ({len(by_prompts)} evals of "
                f"{'/'.join(str(n) for n in sorted({r['n_prompts'] for r in by_prompts}))} "
                f"prompts): median {statistics.median(rel):.1%} of tau, max {max(rel):.1%}"
                + (
                    f"; {len(rows) - len(by_prompts)} evals from the histogram (h)"
                    if len(by_prompts) < len(rows)
                    else ""
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

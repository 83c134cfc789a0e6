"""Backtest of the forecast on real curves: cut a completed run, forecast its end, compare.

Not a timed test: run it by hand and read the figures.

    python benchmarks/bench_forecast.py                          # the corpus at shared/wild
    python benchmarks/bench_forecast.py --root PATH/wild_heldout # another corpus
    python benchmarks/bench_forecast.py --runs tests/fixtures/runs  # add pipeline runs
    python benchmarks/bench_forecast.py --runs tests/fixtures/runs \
        --heldout-runs tests/fixtures/runs_heldout --by-metric          # held-out runs, per metric

Three kinds of real curves:

(a) the completed public runs of the corpus (``index.csv`` rows whose ``notes`` say
    ``complete``; without an index, every trainer state whose ``global_step`` reached its
    ``max_steps``): each cut at 20%, 30% and 50% of its planned steps, the plan kept (the
    header's end, else ``--end-step`` = the run's last step), and its training loss, accuracy
    and eval loss/accuracy forecast at the end;
(b) pipeline runs of this repository (``--runs DIR``: every ``*.jsonl`` under it is a run, the
    plan in its header, tau measured by its evals);
(c) the acceptance-length curves users posted (``benchmarks/curves/*.json``);
(d) held-out pipeline runs (``--heldout-runs DIR``, as (b)): runs no forecast constant was tuned
    on, reported apart (the held-out corpus is ``--root`` pointed at it).

Per cut it prints the forecast's median error of the final value as a share of the run's whole
change (``|forecast - final| / |first - final|``), beside two contenders on the same prefix: the
last value (no further change) and a Theil-Sen straight line through the prefix's points
extrapolated to the end; beside them, for reference, a denoised last value (the mean of the
prefix's newest tenth, the forecast's own ``flat`` member: the targets stay against the raw last
value, as issue 22 defines them); in how many cases the forecast was closer than the last value (a
median over a mix of metrics can sit between them, ``--by-metric`` splits it, and the last column,
"case ratio", is the median of each case's own forecast/last ratio); the share of 80% intervals
that hold the final value (the forecast's interval is of the mean of the run's last
``FINAL_SHARE`` of records, as the final value is measured); and how often
"within this run" was answered right for two loss targets per run: halfway from the cut's value
to the final one (the final value meets it: reachable) and half as far again beyond the final one
(the final value does not: not within the run). Targets at the 30% cut: median error <= 0.8x the last value's and <= 0.5x the
straight line's; coverage 70-95%.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl

from dflash_diag.analysis.diagnosis import DiagnosisConfig, diagnose
from dflash_diag.analysis.forecast import FINAL_SHARE, Series, Timeline, binned, forecast_series
from dflash_diag.analysis.plan import RunPlan
from dflash_diag.analysis.robust_trend import theil_sen_slope
from dflash_diag.analysis.run_forecast import ForecastConfig
from dflash_diag.errors import DiagError
from dflash_diag.read.formats.load import ReadOptions
from dflash_diag.read.jsonl import load_log
from dflash_diag.read.records import ParsedLog

CUTS = (0.2, 0.3, 0.5)
# The final value is the mean of the records in the run's last FINAL_SHARE of steps: what the
# forecast of a training metric is of (its interval's noise).
METRICS = {"loss": False, "acc": True, "eval_loss": False, "eval_acc": True, "tau": True}


@dataclass
class Case:
    """One forecast checked: a run's metric at one cut."""

    source: str
    metric: str
    cut: float
    error: float | None  # forecast, share of the whole change
    last_error: float
    line_error: float | None
    covered: bool | None
    window_error: float | None = None  # the denoised last value (:func:`last_window`)
    within_right: list[bool] = field(default_factory=list)


def completed_runs(root: Path) -> list[tuple[Path, int | None]]:
    """The corpus' completed runs and their planned end where the index notes one
    (``max_steps=N``, ``total_steps=N``): ``index.csv`` rows noted ``complete``, else trainer
    states at their ``max_steps``."""
    index = root / "index.csv"
    if index.is_file():
        with index.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        found: dict[Path, int | None] = {}
        for row in rows:
            notes = (row.get("notes") or "").lower()
            if "broken" in notes:  # a run the corpus notes as broken (a loss of 0) says nothing
                continue
            if "complete" in notes and "incomplete" not in notes and "not complete" not in notes:
                rel = row.get("path") or ""
                candidate = root / rel
                if not candidate.exists():
                    continue
                planned = re.search(r"(?:max_steps|total_steps)\s*=\s*(\d+)", notes)
                found[candidate] = int(planned.group(1)) if planned else None
        return sorted(found.items())
    print(f"(no {index}: scanning trainer states that reached max_steps)")
    found = []
    for state in sorted(root.rglob("trainer_state.json")):
        try:
            data = json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        if data.get("max_steps") and data.get("global_step") == data.get("max_steps"):
            found.append((state, int(data["max_steps"])))
    return found


#: Field maps tried in turn when a corpus file's names are not read as a loss on their own
#: (Lightning's ``train_loss``/``val_loss``, LLaMA-Factory's ``current_steps``).
FALLBACK_FIELDS = (
    (),
    ("loss=train_loss_step",),
    ("loss=train_loss",),
    ("step=current_steps",),
)


def load(path: Path) -> ParsedLog:
    """The log read as the CLI reads it, else with the first fallback field map that gives a
    loss."""
    error = None
    for fields in FALLBACK_FIELDS:
        read = ReadOptions(None, (), fields)
        try:
            log = load_log([str(path)], lists=False, **read.load_kwargs(1))
        except DiagError as exc:
            error = error or exc
            continue
        if (
            log.metrics.height
            and "loss" in log.metrics.columns
            and log.metrics["loss"].drop_nulls().len()
        ):
            return log
    raise error or DiagError(f"{path}: no loss")


def eval_points(log: ParsedLog, name: str) -> list[tuple[float, float]]:
    pts = []
    for e in log.evals:
        v = e.fields.get(name)
        if e.step is not None and isinstance(v, (int, float)) and math.isfinite(float(v)):
            pts.append((float(e.step), float(v)))
    return sorted(pts)


def metric_points(log: ParsedLog, metric: str) -> list[tuple[float, float]]:
    if metric.startswith("eval_"):
        return eval_points(log, metric[5:])
    if metric == "tau":
        return eval_points(log, "tau")
    frame = log.metrics
    if metric not in frame.columns:
        return []
    rows = frame.select("step", metric).drop_nulls().filter(pl.col(metric).is_finite())
    return [(float(s), float(v)) for s, v in rows.iter_rows()]


def final_value(points: list[tuple[float, float]], first: float, end: float) -> float:
    lo = end - FINAL_SHARE * (end - first)
    tail = [v for s, v in points if s >= lo] or [points[-1][1]]
    return statistics.fmean(tail)


def prefix_of(log: ParsedLog, cut_step: int) -> ParsedLog:
    return ParsedLog(
        metrics=log.metrics.filter(pl.col("step") <= cut_step),
        events=[e for e in log.events if e.kind == "run_start" or (e.step or 0) <= cut_step],
        issues=log.issues,
        sources=log.sources,
    )


#: The denoised last value averages the prefix's points in this newest share of its steps.
WINDOW_SHARE = 0.1


def last_window(points: list[tuple[float, float]]) -> float:
    """The denoised last value: the mean of the prefix's bins in its newest
    :data:`WINDOW_SHARE` of steps, at least the last two (the forecast's own ``flat`` member):
    a contender that no single noisy record decides."""
    series = binned([p[0] for p in points], [p[1] for p in points], basis="")
    lo = series.steps[-1] - WINDOW_SHARE * (series.steps[-1] - series.steps[0])
    tail = [i for i, s in enumerate(series.steps) if s >= lo]
    if len(tail) < 2:
        tail = list(range(max(0, len(series.steps) - 2), len(series.steps)))
    counts = [series.counts[i] for i in tail]
    return sum(series.values[i] * c for i, c in zip(tail, counts, strict=True)) / sum(counts)


def straight_line(points: list[tuple[float, float]], end: float) -> float | None:
    series = binned([p[0] for p in points], [p[1] for p in points], basis="")
    if len(series.steps) < 3:
        return None
    slope = theil_sen_slope(list(series.steps), list(series.values))
    # through the newest point, as the verdict's ETA did (from the current value at the slope)
    return series.values[-1] + slope * (end - series.steps[-1])


def backtest_log(
    name: str, log: ParsedLog, cuts=CUTS, planned: int | None = None
) -> tuple[list[Case], list[str]]:
    """Cases of one completed run (every tracked metric, every cut); the plan is the header's
    end, else ``planned`` (the index's), else the run's last step."""
    cases: list[Case] = []
    skipped: list[str] = []
    header = log.run_starts[-1] if log.run_starts else None
    sched = (header.fields.get("schedule") or {}) if header else {}
    steps = log.metrics["step"]
    if steps.len() == 0:
        return cases, [f"{name}: no metric records"]
    first, last = float(steps.min()), int(steps.max())
    end = int(sched.get("total_steps") or planned or last)
    gaps = steps.unique().sort().diff().drop_nulls()
    gap = float(gaps.median()) if gaps.len() else 0.0
    if last < end - max(2 * gap, 0.02 * end):  # the last logging call may come before the end
        return cases, [f"{name}: ends at step {last} of {end} planned: not complete"]
    for cut in cuts:
        cut_step = round(first + cut * (end - first))
        prefix = prefix_of(log, cut_step)
        if prefix.metrics.height < 2:
            skipped.append(f"{name} @ {cut:.0%}: nothing before the cut")
            continue
        loss_pts = metric_points(log, "loss")
        targets = []
        if loss_pts:
            cut_loss = [v for s, v in loss_pts if s <= cut_step]
            final_loss = final_value(loss_pts, first, end)
            if cut_loss:
                now = binned([s for s, _ in loss_pts if s <= cut_step], cut_loss, basis="").values[
                    -1
                ]
                d = final_loss - now
                targets = [now + 0.5 * d, final_loss + 0.5 * d]
        try:
            base = DiagnosisConfig(phase="all", forecast=ForecastConfig(end_step=end))
            diagnosis = diagnose(prefix, base)
            etas = []
            for t in targets:
                cfg = DiagnosisConfig(
                    phase="all", forecast=ForecastConfig(end_step=end, target_loss=t)
                )
                etas.append(diagnose(prefix, cfg).forecast.target)
        except DiagError as exc:
            skipped.append(f"{name} @ {cut:.0%}: {exc}")
            continue
        fc = diagnosis.forecast
        for metric in METRICS:
            pts = metric_points(log, metric)
            seen = [p for p in pts if p[0] <= cut_step]
            if len(pts) < 2 or not seen:
                continue
            truth = (
                final_value(pts, first, end)
                if not metric.startswith(("eval", "tau"))
                else pts[-1][1]
            )
            start_value = binned([p[0] for p in pts], [p[1] for p in pts], basis="").values[0]
            change = abs(start_value - truth)
            if change <= 1e-12:
                continue
            m = fc.metrics.get(metric)
            last_value = binned([p[0] for p in seen], [p[1] for p in seen], basis="").values[-1]
            line = straight_line(seen, end)
            case = Case(
                source=name,
                metric=metric,
                cut=cut,
                error=None,
                last_error=abs(last_value - truth) / change,
                line_error=abs(line - truth) / change if line is not None else None,
                covered=None,
                window_error=abs(last_window(seen) - truth) / change,
            )
            if m is not None and m.available:
                case.error = abs(m.value - truth) / change
                case.covered = m.low <= truth <= m.high
            if metric == "loss":
                # the first target is met by the final value, the second is not (by construction)
                for eta, truth_within in zip(etas, (True, False), strict=False):
                    if eta is None or eta.within_run is None:
                        continue
                    case.within_right.append(eta.within_run == truth_within)
            cases.append(case)
    return cases, skipped


def backtest_curve(path: Path, cuts=CUTS) -> tuple[list[Case], list[str]]:
    """Cases of one posted tau curve (only the curve: no lr, no records)."""
    data = json.loads(path.read_text())
    pts = [(float(x), float(y)) for x, y in data["points"]]
    end = float(data.get("planned_end") or pts[-1][0])
    first = pts[0][0]
    truth = pts[-1][1]
    change = abs(pts[0][1] - truth)
    cases, notes = [], []
    for cut in [*cuts, "last-but-one"]:
        cut_x = pts[-2][0] if cut == "last-but-one" else first + cut * (end - first)
        seen = [p for p in pts if p[0] <= cut_x]
        if not seen:
            notes.append(f"{data['name']} @ {cut}: no point before the cut")
            continue
        series = Series(
            tuple(p[0] for p in seen),
            tuple(p[1] for p in seen),
            tuple(1 for _ in seen),
            f"{len(seen)} posted points",
        )
        timeline = Timeline(RunPlan(end_step=None, end_source=None), (), (), end)
        m = forecast_series(
            "tau", series, timeline=timeline, target_step=end, higher_is_better=True
        )
        line = straight_line(seen, end)
        case = Case(
            source=data["name"],
            metric="tau",
            cut=cut if cut != "last-but-one" else -1.0,
            error=abs(m.value - truth) / change if m.available and change else None,
            last_error=abs(seen[-1][1] - truth) / change if change else 0.0,
            line_error=abs(line - truth) / change if line is not None and change else None,
            covered=(m.low <= truth <= m.high) if m.available else None,
            window_error=abs(last_window(seen) - truth) / change if change else 0.0,
        )
        if not m.available:
            notes.append(f"{data['name']} @ {cut}: {m.reason}")
        cases.append(case)
    return cases, notes


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary(cases: list[Case], title: str) -> list[str]:
    out = [
        f"## {title}",
        "",
        (
            "| cut | forecasts | no evidence | median error: forecast | last value | straight line "
            "| forecast/last | forecast/line | closer than last | 80% coverage | within-run right "
            "| last window | forecast/window | case ratio |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cut in sorted({c.cut for c in cases}):
        group = [c for c in cases if c.cut == cut]
        made = [c for c in group if c.error is not None]
        fc = _median(c.error for c in made)
        last = _median(c.last_error for c in made)
        line = _median(c.line_error for c in made)
        window = _median(c.window_error for c in made)
        cov = [c.covered for c in made if c.covered is not None]
        right = [r for c in group for r in c.within_right]
        closer = sum(c.error < c.last_error for c in made if c.error is not None)
        # the median of each case's own forecast/last ratio: a median over metrics whose errors
        # differ thirtyfold (a loss's 1%, an accuracy's 30%) is the worst of one and the best of
        # the other, and their ratio says little about either; each case's ratio does not mix
        case_ratio = _median(c.error / c.last_error for c in made if c.last_error > 0)

        def pct(v):
            return "-" if v is None else f"{100 * v:.1f}%"

        def ratio(a, b):
            return "-" if a is None or not b else f"{a / b:.2f}x"

        label = "last-but-one" if cut < 0 else f"{cut:.0%}"
        out.append(
            f"| {label} | {len(made)} | {len(group) - len(made)} | {pct(fc)} | {pct(last)} | "
            f"{pct(line)} | {ratio(fc, last)} | {ratio(fc, line)} | {closer}/{len(made)} | "
            f"{pct(sum(cov) / len(cov) if cov else None)} ({sum(cov)}/{len(cov)}) | "
            f"{pct(sum(right) / len(right) if right else None)} ({sum(right)}/{len(right)}) | "
            f"{pct(window)} | {ratio(fc, window)} | "
            f"{'-' if case_ratio is None else f'{case_ratio:.2f}x'} |"
        )
    out.append("")
    return out


def by_metric(cases: list[Case], title: str) -> list[str]:
    """:func:`summary` of each metric's cases apart (a median over a mix of metrics can sit
    between a metric forecast well and one forecast badly)."""
    out: list[str] = []
    for metric in METRICS:
        group = [c for c in cases if c.metric == metric]
        if any(c.error is not None for c in group):
            out += summary(group, f"{title}: {metric} only")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT / "shared" / "wild",
        help="corpus folder with index.csv (default: shared/wild)",
    )
    parser.add_argument(
        "--runs", type=Path, nargs="+", default=None, help="folders of pipeline runs (*.jsonl)"
    )
    parser.add_argument(
        "--heldout-runs",
        type=Path,
        nargs="+",
        default=None,
        help="folders of held-out pipeline runs",
    )
    parser.add_argument("--curves", type=Path, default=ROOT / "benchmarks" / "curves")
    parser.add_argument(
        "--by-metric", action="store_true", help="each table again per metric (loss, acc, ...)"
    )
    parser.add_argument("--verbose", action="store_true", help="one line per case")
    args = parser.parse_args()
    started = time.perf_counter()
    lines: list[str] = []
    corpus_cases: list[Case] = []
    notes: list[str] = []
    if args.root.is_dir():
        for path, planned in completed_runs(args.root):
            name = str(path.relative_to(args.root)) if path.is_relative_to(args.root) else str(path)
            try:
                log = load(path)
            except DiagError as exc:
                notes.append(f"{name}: {exc}")
                continue
            cases, skipped = backtest_log(name, log, planned=planned)
            corpus_cases += cases
            notes += skipped
        runs = len({c.source for c in corpus_cases})
        lines += summary(corpus_cases, f"(a) completed public runs of {args.root} ({runs} runs)")
        if args.by_metric:
            lines += by_metric(corpus_cases, f"(a) {args.root}")
    else:
        notes.append(f"no corpus at {args.root}")
    for folders, label in ((args.runs, "(b) pipeline runs"), (args.heldout_runs, "(d) held-out")):
        folders = [f for f in folders or () if f.is_dir()]
        if not folders:
            continue
        run_cases: list[Case] = []
        for folder in folders:
            for path in sorted(folder.rglob("*.jsonl")):
                # the folder named when there are several (the same run names recur)
                name = str(path.relative_to(folder if len(folders) == 1 else folder.parent))
                try:
                    cases, skipped = backtest_log(name, load(path))
                except DiagError as exc:
                    notes.append(f"{name}: {exc}")
                    continue
                run_cases += cases
                notes += skipped
        where = " + ".join(str(f) for f in folders)
        title = f"{label} pipeline runs of {where}" if label.startswith("(d)") else label
        if not label.startswith("(d)"):
            title = f"{label} of {where}"
        lines += summary(run_cases, f"{title} ({len({c.source for c in run_cases})} runs)")
        if args.by_metric:
            lines += by_metric(run_cases, title)
        corpus_cases += run_cases
    curve_cases: list[Case] = []
    for path in sorted(args.curves.glob("*.json")):
        cases, skipped = backtest_curve(path)
        curve_cases += cases
        notes += skipped
    lines += summary(
        curve_cases, f"(c) posted tau curves ({len(list(args.curves.glob('*.json')))})"
    )
    print("\n".join(lines))
    if args.verbose:
        for c in corpus_cases + curve_cases:
            print(
                f"{c.source:60.60} {c.metric:10} {c.cut:5} fc={c.error} last={c.last_error:.3f} "
                f"line={c.line_error} cov={c.covered} within={c.within_right} "
                f"window={c.window_error}"
            )
    for note in notes:
        print(f"note: {note}")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The forecast on short, noisy runs (issue 22): our own pipeline runs, one record a step.

The real material is a committed pipeline run (``tests/fixtures/runs/``: 80 steps, a loss that
collapses tenfold in five steps and then learns slowly); generated series cover the edge cases
(pure noise, a noise spike among the newest records).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from typer.testing import CliRunner

from dflash_diag.analysis.forecast import (
    Series,
    Timeline,
    _convex_part,
    _finite_lr_pairs,
    forecast_series,
)
from dflash_diag.analysis.plan import RunPlan
from dflash_diag.analysis.run_forecast import _lr_points
from dflash_diag.cli import app

ROOT = Path(__file__).resolve().parents[2]
#: Cosine from 6e-4 over 80 steps, seed 0 (tests/fixtures/runs/README.md).
PIPELINE_RUN = ROOT / "tests" / "fixtures" / "runs" / "cosine-6e-4-s0" / "train.jsonl"
runner = CliRunner()


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _forecast_of_prefix(path: Path, cut: int, tmp_path: Path) -> dict:
    """converge's JSON forecast of the run at ``path`` cut after step ``cut``, its header kept."""
    rows = _records(path)
    prefix = tmp_path / "train.jsonl"
    prefix.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in rows
            if r.get("event") == "run_start" or (r.get("step") or 0) <= cut
        )
    )
    result = runner.invoke(
        app,
        ["converge", str(prefix), "-f", "json", "--phase", "all"],
        env={"COLUMNS": "100", "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["forecast"]


def _series(path: Path, metric: str) -> list[tuple[int, float]]:
    return [(r["step"], r[metric]) for r in _records(path) if metric in r and "event" not in r]


def test_a_pipeline_run_cut_at_30_percent_forecasts_its_loss_better_than_no_change(tmp_path):
    losses = _series(PIPELINE_RUN, "loss")
    end = _records(PIPELINE_RUN)[0]["schedule"]["total_steps"]
    final = np.mean([v for s, v in losses if s > end - 4])  # the last 5% of the run
    cut = 25  # 30% of the way from step 1 to step 80
    forecast = _forecast_of_prefix(PIPELINE_RUN, cut, tmp_path)
    assert forecast["end_step"] == end
    loss = forecast["metrics"]["loss"]
    # No change: the newest records' mean (a single record is noisier still).
    last = np.mean([v for s, v in losses if cut - 3 < s <= cut])
    assert loss["low"] <= final <= loss["high"]
    # Fitted from the steepest point only, the curve follows the collapse and stays flat after
    # it (3.43 against a final 2.73, no change 3.33); a member fitted from a later start
    # follows the slow phase.
    assert abs(loss["value"] - final) < 0.5 * abs(last - final)


def test_an_accuracy_still_rising_straight_is_not_extrapolated_to_its_ceiling(tmp_path):
    run = PIPELINE_RUN.parent.parent / "linear-1e-3-s1" / "train.jsonl"
    accs = _series(run, "acc")
    final = np.mean([v for s, v in accs if s > 76])  # 0.265
    acc = _forecast_of_prefix(run, 25, tmp_path)["metrics"]["acc"]
    # From steps 13-25 (0.11 rising to 0.41) every curve saturates only at acc 1 and forecast
    # 0.58-0.89 at step 80; the accuracy settled at 0.27 by step 40.
    assert abs(acc["value"] - final) < 0.15
    assert acc["low"] <= final <= acc["high"]


def test_on_noise_no_curve_that_fails_to_beat_no_change_counts():
    rng = np.random.default_rng(5)
    steps = np.arange(1, 41, dtype=float)
    values = 2.0 + 0.3 * rng.standard_normal(len(steps))
    series = Series(tuple(steps), tuple(values), tuple(1 for _ in steps), "noise")
    timeline = Timeline(RunPlan(end_step=None, end_source=None), (), (), 160.0)
    fc = forecast_series(
        "loss", series, timeline=timeline, target_step=160.0, higher_is_better=False, best=0.0
    )
    # Every curve misses the validated points by more than "no further change" does: the
    # forecast is the flat member alone (with them, an exponential from step 17 bent it down).
    assert fc.method == "flat 1.00"
    assert fc.low is not None
    assert fc.high is not None
    assert fc.low <= 2.0 <= fc.high


def test_a_noise_spike_among_the_newest_records_is_not_taken_for_the_bend():
    x = np.arange(1, 26, dtype=float)
    z = 4.0 - 0.04 * x  # a slow, straight improvement ...
    z[-3:] -= np.array([0.0, 0.6, 1.2])  # ... and the newest records spiking low
    kept, _, _ = _convex_part(x, z, np.ones_like(x))
    assert len(kept) >= len(x) // 2


def test_the_lr_timeline_follows_every_record_not_the_window_means():
    frame = pl.DataFrame({"step": [1, 2, 3, 4], "lr": [1e-4, 2e-4, 3e-4, 4e-4]})
    steps, lrs = _lr_points(frame, [])
    assert steps.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert lrs.tolist() == [1e-4, 2e-4, 3e-4, 4e-4]
    steps, lrs = _lr_points(frame.drop("lr"), [])
    assert steps.tolist() == []
    assert lrs.tolist() == []


def test_the_lr_timeline_leaves_out_missing_and_negative_lrs_and_orders_ties_by_lr():
    # the order of a repeated step's lrs decides what np.interp reads at that step
    frame = pl.DataFrame(
        {"step": [3, 1, 2, 2, 4, 5], "lr": [3e-4, 1e-4, 5e-4, 2e-4, None, -1.0]},
        schema={"step": pl.Int64, "lr": pl.Float64},
    )
    steps, lrs = _lr_points(frame, [])
    assert steps.tolist() == [3.0, 1.0, 2.0, 2.0]  # the records' own order: Timeline sorts
    xs, ys = _finite_lr_pairs(steps, lrs)
    assert list(zip(xs.tolist(), ys.tolist(), strict=True)) == sorted(
        zip(steps.tolist(), lrs.tolist(), strict=True)
    )
    # a warmup from 0: its first logged lr, 0, is a point of the timeline (not a missing value)
    steps, lrs = _lr_points(pl.DataFrame({"step": [0, 1, 2], "lr": [0.0, 1e-4, 2e-4]}), [])
    assert lrs.tolist() == [0.0, 1e-4, 2e-4]
    xs, ys = _finite_lr_pairs([1.0, 2.0, 3.0, 4.0], [1e-4, None, float("nan"), float("inf")])
    assert xs.tolist() == [1.0]
    assert ys.tolist() == [1e-4]

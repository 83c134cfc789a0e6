"""The forecast's 80% interval (issue 22, fourth pass): what it is of, and how it grows.

The interval is of the metric's level at the target step as it will be measured (a training
metric: the mean of the records in the run's last ``FINAL_SHARE`` of steps; an eval: one point),
and its validation part grows with the look-ahead as the rolling-origin errors do (squared
errors linear in the look-ahead). Pure functions on exact inputs; the wiring on a generated run
(an edge case: identical train and eval points); the coverage on the committed pipeline runs
(real material, ``slow``: the backtest of ``benchmarks/bench_forecast.py`` at the 30% cut).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dflash_diag import LogEvent
from dflash_diag.analysis.forecast import FINAL_SHARE, Series, error_variance_rate
from dflash_diag.analysis.plan import plan_of
from dflash_diag.analysis.run_forecast import forecast_run, records_at_the_end

ROOT = Path(__file__).resolve().parents[2]


def test_squared_errors_grow_linearly_with_look_ahead():
    ahead = np.array([0.1, 0.2, 0.4, 0.8])
    noise = 0.01
    errors = np.sqrt(noise + 0.5 * ahead)  # squared error = the noise + 0.5 per unit look-ahead
    weight = np.array([1.0, 2.0, 1.0, 3.0])
    assert error_variance_rate(errors, ahead, weight, noise) == pytest.approx(0.5)
    # errors within the noise: no growth (never a negative variance)
    assert error_variance_rate(np.full(4, 0.05), ahead, weight, noise) == 0.0
    # nothing validated, or no look-ahead: no growth
    assert error_variance_rate(np.zeros(0), np.zeros(0), np.zeros(0), noise) == 0.0
    assert error_variance_rate(errors, np.zeros(4), weight, noise) == 0.0


def test_the_final_records_are_the_last_share_of_the_run_at_the_prefix_rate():
    one_a_step = Series(tuple(range(1, 25)), (1.0,) * 24, (1,) * 24, "records")
    # 24 records over steps 1-24, a run planned to step 80: its last 5% holds about 4 of them
    assert records_at_the_end(one_a_step, 1, 24, 80) == pytest.approx(24 / 23 * FINAL_SHARE * 79)
    ten_a_bin = Series((5.0, 15.0), (1.0, 1.0), (10, 10), "records")
    assert records_at_the_end(ten_a_bin, 0, 20, 2000) == pytest.approx(FINAL_SHARE * 2000)
    # never fewer than one record
    assert records_at_the_end(one_a_step, 1, 24, 10) == 1.0


def test_a_training_metric_is_forecast_as_the_mean_of_its_final_records_an_eval_as_one_point():
    """The same noisy points as training records and as evals: the eval's interval holds one
    noisy eval, the loss's the mean of the ~40 records of the run's last 5%. Before, both held
    one record's noise and a pipeline run's intervals were too wide."""
    rng = np.random.default_rng(5)
    steps = list(range(1, 41))
    values = (3.0 + 0.3 * rng.standard_normal(len(steps))).tolist()
    frame = pl.DataFrame({"step": steps, "loss": values, "lr": [1e-3] * len(steps)})
    evals = [
        LogEvent("eval", 0, 0, s, {"step": s, "loss": v})
        for s, v in zip(steps, values, strict=True)
    ]
    run = forecast_run(frame, plan=plan_of(None, end_step=800), evals=evals)
    loss, eval_loss = run.metrics["loss"], run.metrics["eval_loss"]
    assert loss.value == pytest.approx(eval_loss.value)
    assert loss.method == "flat 1.00"  # noise: no curve beats no change (no spread)
    assert loss.low is not None
    assert loss.high is not None
    assert eval_loss.low is not None
    assert eval_loss.high is not None
    assert loss.high - loss.low < 0.8 * (eval_loss.high - eval_loss.low)  # 0.65 (was 1.0)


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_forecast", ROOT / "benchmarks" / "bench_forecast.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_forecast", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_tuning_runs_intervals_cover_70_to_95_percent_at_the_30_percent_cut():
    """Issue 22's coverage target on the twelve tuning pipeline runs (24 forecasts: loss and
    acc). With one record's noise and errors squared in the look-ahead, 23 of 24 (95.8%)."""
    bench = _bench()
    covered = []
    for folder in ("runs", "runs_more"):
        for path in sorted((ROOT / "tests" / "fixtures" / folder).rglob("*.jsonl")):
            cases, _ = bench.backtest_log(path.name, bench.load(path), cuts=(0.3,))
            covered += [c.covered for c in cases if c.covered is not None]
    assert len(covered) == 24
    assert 0.7 <= sum(covered) / len(covered) <= 0.95

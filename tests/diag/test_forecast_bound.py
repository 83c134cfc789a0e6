"""The bound on the points of an eval series in the forecast (issue 21): past
:data:`~dflash_diag.analysis.forecast.MAX_EVAL_POINTS`, consecutive evals are merged before the
fits; at or below it nothing changes.

The real curve is the densest eval series of the corpus with a learning curve: a Keras
CSVLogger's 50 epochs of validation accuracy and loss (``shared/wild/AKBoles__Voice-
Identification/speaker250_training.log``). No corpus or committed series reaches the bound (the
longest has 100 evals), so the dense case interpolates that real curve linearly between its
evals, 100 points an epoch (4,900 evals): its bumps are the real ones, drawn out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dflash_diag import LogEvent, diagnose, load_log
from dflash_diag.analysis.forecast import (
    MAX_EVAL_POINTS,
    MetricForecast,
    Series,
    Timeline,
    bounded,
    forecast_series,
)
from dflash_diag.analysis.plan import RunPlan, plan_of
from dflash_diag.analysis.run_forecast import eval_series, forecast_run
from dflash_diag.analysis.target_eta import eta_to

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "shared" / "wild" / "AKBoles__Voice-Identification" / "speaker250_training.log"
#: The longest eval series of the corpus and the committed runs (100 evals of val_acc).
LONGEST = (
    ROOT / "shared" / "wild" / "120L010916__epilepsy" / "wandb" / "run-20250531_221309-3r9xyok3"
)
#: (field, higher is better, best, worst) of the real curve's two series.
FIELDS = (("acc", True, 1.0, 0.0), ("loss", False, 0.0, None))


def _real(name: str) -> Series:
    return eval_series(load_log(str(REAL)).evals, name, 0, 10**9)


def _interpolated(series: Series, per_step: int = 100) -> Series:
    x = np.array(series.steps)
    dense = np.linspace(x[0], x[-1], per_step * (len(x) - 1))
    values = np.interp(dense, x, np.array(series.values))
    return Series(tuple(dense.tolist()), tuple(values.tolist()), (1,) * len(dense), "evals")


def _forecast(series: Series, name: str, max_points: int | None) -> MetricForecast:
    higher, best, worst = next((h, b, w) for f, h, b, w in FIELDS if f == name)
    end = 2 * round(series.steps[-1])  # the run planned twice as long as observed
    timeline = Timeline(RunPlan(end_step=end, end_source="header"), (), (), end)
    return forecast_series(
        name,
        series,
        timeline=timeline,
        target_step=end,
        higher_is_better=higher,
        best=best,
        worst=worst,
        max_points=max_points,
    )


@pytest.mark.parametrize("name", ["acc", "loss"])
def test_a_real_curve_past_the_bound_is_forecast_as_its_raw_fit(name):
    """Merged 5 to 1 (4,900 evals to 980 points), the forecast at the planned end stays within
    5% of the raw fit's interval width of the raw fit's value, each end of the interval within
    10% of it, and the ETA to a target halfway from the newest eval to the forecast is the same
    step (its early end too)."""
    dense = _interpolated(_real(name))
    assert len(dense.steps) > MAX_EVAL_POINTS
    raw = _forecast(dense, name, None)
    merged = _forecast(dense, name, MAX_EVAL_POINTS)
    assert "merged in runs of 5" in merged.reason
    assert merged.n_points <= MAX_EVAL_POINTS
    assert raw.value is not None
    assert merged.value is not None
    width = raw.high - raw.low
    assert abs(merged.value - raw.value) <= 0.05 * width
    assert abs(merged.low - raw.low) <= 0.1 * width
    assert abs(merged.high - raw.high) <= 0.1 * width
    assert merged.last_value == raw.last_value
    assert merged.path[0][0] == raw.path[0][0] == dense.steps[-1]  # from the newest eval
    target = raw.last_value + 0.5 * (raw.value - raw.last_value)
    last = round(dense.steps[-1])
    etas = [
        eta_to(
            f,
            target=target,
            current=f.last_value,
            last_step=last,
            planned=True,
            seconds_per_step=None,
        )
        for f in (raw, merged)
    ]
    assert etas[0].eta_step is not None
    assert etas[1].eta_step == etas[0].eta_step
    assert etas[1].eta_low_step == etas[0].eta_low_step
    assert etas[1].within_run == etas[0].within_run


def test_the_real_evals_merged_in_pairs_keep_their_forecast():
    """The 50 real evals themselves, merged 2 to 1 under a bound of 25: the forecast stays inside
    the raw fit's interval, within a quarter of its width of the raw value."""
    for name, *_ in FIELDS:
        series = _real(name)
        raw, merged = _forecast(series, name, None), _forecast(series, name, 25)
        assert merged.n_points == 25
        assert raw.low <= merged.value <= raw.high
        assert abs(merged.value - raw.value) <= 0.25 * (raw.high - raw.low)


@pytest.mark.parametrize("extra", [0, 7])
def test_at_or_below_the_bound_the_forecast_is_the_raw_fit(extra):
    """A series of the bound's length or shorter is fitted point for point: the same forecast,
    path and wording as without a bound."""
    series = _real("acc")
    bound = len(series.steps) + extra
    assert bounded(series, bound) is series
    assert _forecast(series, "acc", bound) == _forecast(series, "acc", None)


def test_bounded_merges_runs_of_consecutive_points_by_count():
    series = Series((1.0, 2.0, 3.0, 4.0, 5.0), (10.0, 20.0, 30.0, 40.0, 50.0), (1,) * 5, "5 evals")
    merged = bounded(series, 2)
    assert merged.steps == (2.0, 4.5)
    assert merged.values == (20.0, 45.0)
    assert merged.counts == (3, 2)
    assert merged.basis == "5 evals merged in runs of 3"


def test_the_longest_eval_series_of_the_corpus_is_under_the_bound():
    """The bound leaves every corpus and committed forecast as it was: the longest eval series
    (100 evals) is fitted point for point."""
    diagnosis = diagnose(load_log(str(LONGEST)))
    assert diagnosis.forecast is not None
    forecast = diagnosis.forecast.metrics["eval_acc"]
    assert forecast.n_points == 100
    assert "merged" not in forecast.reason
    assert forecast.n_points <= MAX_EVAL_POINTS


def test_the_run_forecast_bounds_eval_series_and_not_binned_records():
    """forecast_run hands the bound to the series made of evals (eval acc, measured tau), not to
    the binned training records."""
    real = _interpolated(_real("acc"), per_step=50)  # 2,450 evals
    steps = list(range(round(real.steps[-1]) + 1))  # a record a step, up to the last eval
    frame = pl.DataFrame(
        {"step": steps, "loss": [3.0 - s / 100 for s in steps], "lr": [1e-3] * len(steps)}
    )
    evals = [
        LogEvent("eval", 0, i, round(s), {"acc": v, "tau": 1.0 + 2.0 * v})
        for i, (s, v) in enumerate(zip(real.steps, real.values, strict=True))
    ]
    run = forecast_run(frame, plan=plan_of(None, end_step=100), evals=evals, block_size=8)
    for name in ("eval_acc", "tau"):
        assert run.metrics[name].n_points == 817  # 2,450 evals in runs of 3
        assert "merged in runs of 3" in run.metrics[name].reason
    assert "merged" not in run.metrics["loss"].reason

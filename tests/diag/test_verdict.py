"""Theil-Sen, Mann-Kendall, and the verdict with its ETA."""

from __future__ import annotations

import math

import polars as pl
import pytest

from dflash_diag import VerdictConfig, judge, mann_kendall, theil_sen_slope
from dflash_diag.analysis.verdict import MAX_POINTS, seconds_per_step
from dflash_diag.analysis.windows import Window


def test_theil_sen_is_the_median_pairwise_slope():
    # slopes: 2, 0.5, 4/3, -1, 1, 3 -> median (1 + 4/3) / 2
    assert theil_sen_slope([1, 2, 3, 4], [1, 3, 2, 5]) == pytest.approx(7 / 6)
    # one wild outlier does not move it
    assert theil_sen_slope(list(range(10)), [2 * x for x in range(9)] + [1000]) == pytest.approx(2)
    with pytest.raises(ValueError, match="two distinct x values"):
        theil_sen_slope([1, 1], [1, 2])


def test_mann_kendall_known_values():
    # Strictly increasing, n = 10: S = 45, Var = 10*9*25/18 = 125, z = 44/sqrt(125).
    result = mann_kendall(list(range(10)))
    assert (result.s, result.variance) == (45, 125)
    assert result.z == pytest.approx(44 / math.sqrt(125))
    assert result.p_value == pytest.approx(8.302e-5, rel=1e-3)
    # Ties: y = 1,2,2,3 -> S = 5, Var = (4*3*13 - 2*1*9)/18.
    tied = mann_kendall([1, 2, 2, 3])
    assert tied.s == 5
    assert tied.variance == pytest.approx(138 / 18)
    assert mann_kendall([5, 5, 5]).p_value == 1.0


def _windows(values, size=50, start=0):
    return [
        Window(
            index=i,
            start=start + i * size,
            end=start + (i + 1) * size - 1,
            n=size,
            first_step=start + i * size,
            last_step=start + (i + 1) * size - 1,
            loss=None,
            acc=v,
            weighted=False,
            acc_se=None,
            loss_se=None,
            nonfinite=0,
            tau_train=None,
        )
        for i, v in enumerate(values)
    ]


def test_statuses():
    up = [0.10, 0.11, 0.12, 0.13, 0.14, 0.15, 0.16]
    assert judge(_windows(up), current_acc=0.16, target_acc=0.27).status == "converging"
    assert judge(_windows(up[::-1]), current_acc=0.10, target_acc=0.27).status == "diverging"
    flat = [0.10, 0.12, 0.09, 0.11, 0.10, 0.12, 0.09]
    assert judge(_windows(flat), current_acc=0.09, target_acc=0.27).status == "plateau"
    few = judge(_windows(up[:4]), current_acc=0.13, target_acc=0.27)
    assert few.status == "not enough data"
    assert few.slope_per_1k_steps is None


def test_eta_at_the_slope():
    values = [0.10 + 0.01 * i for i in range(6)]  # +0.01 per 50 steps = 0.2 per 1k
    verdict = judge(_windows(values), current_acc=0.15, target_acc=0.27)
    assert verdict.slope_per_1k_steps == pytest.approx(0.2)
    assert verdict.eta_steps == pytest.approx(0.12 / 0.0002)
    reached = judge(_windows(values), current_acc=0.3, target_acc=0.27)
    assert reached.eta_steps == 0
    falling = judge(_windows(values[::-1]), current_acc=0.1, target_acc=0.27)
    assert falling.eta_steps is None


def test_loss_is_judged_when_there_is_no_accuracy():
    windows = [
        Window(
            index=i,
            start=i * 10,
            end=i * 10 + 9,
            n=10,
            first_step=i * 10,
            last_step=i * 10 + 9,
            loss=3.0 - 0.1 * i,
            acc=None,
            weighted=False,
            acc_se=None,
            loss_se=None,
            nonfinite=0,
            tau_train=None,
        )
        for i in range(8)
    ]
    verdict = judge(windows, current_acc=None, target_acc=0.27)
    assert (verdict.metric, verdict.status, verdict.eta_steps) == ("loss", "converging", None)


def test_many_windows_are_merged_to_bound_the_cost():
    verdict = judge(
        _windows([0.001 * i for i in range(3 * MAX_POINTS)], size=1),
        current_acc=0.5,
        target_acc=0.27,
    )
    # The wording counts the windows analysed (not the groups the statistics ran on).
    assert verdict.n_points == 3 * MAX_POINTS
    assert verdict.status == "converging"
    assert f"over 900 windows (merged into {MAX_POINTS} groups)" in verdict.reason


def test_seconds_per_step_from_time_or_throughput():
    timed = pl.DataFrame({"step": [1, 2, 4, 5], "time": [0.0, 4.0, 12.0, 1000.0]})
    assert seconds_per_step(timed) == (4.0, "time")  # the median ignores the restart's gap
    throughput = pl.DataFrame(
        {
            "step": [1, 2],
            "time": [None, None],
            "n_tokens": [65536.0, 65536.0],
            "tok_per_sec": [16384.0, 16384.0],
        },
        schema_overrides={"time": pl.Float64},
    )
    assert seconds_per_step(throughput) == (4.0, "tok_per_sec")


def test_eta_hours_and_config_validation():
    frame = pl.DataFrame(
        {"step": list(range(0, 300, 50)), "time": [3.6 * s for s in range(0, 300, 50)]}
    )
    values = [0.10 + 0.01 * i for i in range(6)]
    verdict = judge(_windows(values), current_acc=0.15, target_acc=0.27, frame=frame)
    assert verdict.eta_hours == pytest.approx(600 * 3.6 / 3600)
    with pytest.raises(ValueError, match="alpha must be in"):
        VerdictConfig(alpha=1.5)


def test_eta_only_when_the_verdict_supports_one():
    values = [0.10 + 0.01 * i for i in range(6)]
    converging = judge(_windows(values), current_acc=0.15, target_acc=0.27)
    assert converging.eta_steps is not None
    assert "fitted on the accuracy windows" in converging.eta_reason
    few = judge(_windows(values[:3]), current_acc=0.12, target_acc=0.27)
    assert few.status == "not enough data"
    assert few.eta_steps is None
    assert few.eta_reason == "no ETA without a trend (not enough data)"
    flat = judge(
        _windows([0.10, 0.12, 0.09, 0.11, 0.10, 0.12, 0.09]), current_acc=0.09, target_acc=0.27
    )
    assert flat.status == "plateau"
    assert flat.eta_steps is None
    assert "plateau" in flat.eta_reason


def test_tau_eta_is_fitted_on_its_own_series():
    from dflash_diag.analysis.verdict import eta_toward, fitted_slope

    verdict = judge(
        _windows([0.10 + 0.01 * i for i in range(6)]), current_acc=0.15, target_acc=0.27
    )
    points = [(100.0, 1.5), (200.0, 1.6), (300.0, 1.7)]  # +1 tau per 1k steps
    assert fitted_slope(points) == pytest.approx(0.001)
    eta = eta_toward(
        verdict,
        current=1.7,
        goal=2.5,
        slope=fitted_slope(points),
        basis="eval points (3)",
        units="tau (measured)",
    )
    assert eta.eta_steps == pytest.approx(800)
    assert "eval points" in eta.eta_reason
    assert fitted_slope(points[:2]) is None  # two evals are no trend
    none = eta_toward(
        verdict, current=1.7, goal=2.5, slope=None, basis="eval points (2)", units="tau"
    )
    assert none.eta_steps is None
    assert "too few eval points (2) to fit a slope (need 3)" in none.eta_reason


def test_no_overfitting_while_another_validation_series_improves():
    """A real BERT fine-tune (subro608, checkpoint-2400): eval loss falls to its best at the end
    while eval accuracy slips 0.003 below its best; the evidence disagrees, so the verdict stays
    the training trend's. Without the improving series the same slip is overfitting."""
    from dflash_diag.analysis.validation import ValidationTrend
    from dflash_diag.analysis.verdict import CONVERGING, OVERFITTING, Verdict, with_health

    base = Verdict(
        status=CONVERGING,
        metric="loss",
        slope_per_1k_steps=-0.09,
        p_value=1e-4,
        n_points=12,
        eta_steps=None,
        eta_hours=None,
        seconds_per_step=None,
        seconds_source=None,
        reason="Theil-Sen slope of loss over 12 windows",
    )
    acc = ValidationTrend(
        field="acc",
        label="eval acc",
        status="worse",
        n_points=24,
        best_step=1900,
        reason="eval acc best 0.9094 at step 1900",
    )
    loss = ValidationTrend(
        field="loss",
        label="eval loss",
        status="improving",
        n_points=24,
        reason="eval loss improving",
    )
    assert with_health(base, validation=[acc]).status == OVERFITTING
    assert with_health(base, validation=[acc, loss]).status == CONVERGING

"""Windows (alignment, n_pred weighting, NaN counts) and trend arrows (thresholds, noise-aware)."""

from __future__ import annotations

import polars as pl
import pytest

from dflash_diag import TrendConfig, compute_trends, compute_windows
from dflash_diag.trend import classify
from dflash_diag.windows import Window


def _frame(rows):
    return pl.DataFrame(rows, schema={"step": pl.Int64, "loss": pl.Float64, "acc": pl.Float64,
                                      "n_pred": pl.Float64, "n_blocks": pl.Float64,
                                      "tau_train": pl.Float64, "lr": pl.Float64})


def test_windows_align_to_start_and_count_entries():
    frame = _frame([{"step": s, "acc": 0.1} for s in range(103, 230, 3)])
    windows = compute_windows(frame, 50, start=100)
    assert [(w.start, w.end) for w in windows] == [(100, 149), (150, 199), (200, 249)]
    assert [w.n for w in windows] == [16, 17, 10]
    assert windows[0].first_step == 103 and windows[-1].last_step == 229
    default = compute_windows(frame, 50)
    assert default[0].start == 103


def test_weighted_by_n_pred_when_every_entry_has_it():
    frame = _frame([{"step": 1, "acc": 0.1, "loss": 1.0, "n_pred": 100.0},
                    {"step": 2, "acc": 0.3, "loss": 2.0, "n_pred": 300.0}])
    (window,) = compute_windows(frame, 10)
    assert window.weighted
    assert window.acc == pytest.approx(0.25)
    assert window.loss == pytest.approx(1.75)


def test_plain_mean_when_n_pred_is_missing_somewhere():
    frame = _frame([{"step": 1, "acc": 0.1, "n_pred": 100.0}, {"step": 2, "acc": 0.3}])
    (window,) = compute_windows(frame, 10)
    assert not window.weighted
    assert window.acc == pytest.approx(0.2)


def test_nonfinite_values_are_left_out_of_means_and_counted():
    frame = _frame([{"step": 1, "acc": 0.2, "loss": float("nan")},
                    {"step": 2, "acc": float("inf"), "loss": 1.0},
                    {"step": 3, "acc": 0.4, "loss": 3.0}])
    (window,) = compute_windows(frame, 10)
    assert window.acc == pytest.approx(0.3)
    assert window.loss == pytest.approx(2.0)
    assert window.nonfinite == 2


def test_lr_and_tok_per_sec_plain_means_without_nonfinite():
    frame = _frame([{"step": 1, "lr": 1e-4, "n_pred": 100.0},
                    {"step": 2, "lr": 3e-4, "n_pred": 300.0},  # not weighted by n_pred
                    {"step": 3, "lr": float("nan")},
                    {"step": 12, "lr": 5e-4}])
    frame = frame.with_columns(pl.Series("tok_per_sec", [1000.0, None, float("inf"), 3000.0]))
    first, second = compute_windows(frame, 10)
    assert first.lr == pytest.approx(2e-4) and first.tok_per_sec == pytest.approx(1000.0)
    assert second.lr == pytest.approx(5e-4) and second.tok_per_sec == pytest.approx(3000.0)
    legacy = compute_windows(frame.drop("tok_per_sec"), 10)  # no tok_per_sec column at all
    assert [w.tok_per_sec for w in legacy] == [None, None]


def test_tau_train_weighted_by_blocks():
    frame = _frame([{"step": 1, "tau_train": 2.0, "n_blocks": 1.0},
                    {"step": 2, "tau_train": 4.0, "n_blocks": 3.0}])
    assert compute_windows(frame, 10)[0].tau_train == pytest.approx(3.5)


def test_window_size_must_be_positive():
    with pytest.raises(ValueError):
        compute_windows(_frame([{"step": 1}]), 0)


def _window(acc, loss=None, acc_se=None, loss_se=None):
    return Window(0, 0, 9, 10, 0, 9, loss, acc, False, acc_se, loss_se, 0, None)


def test_acc_threshold_and_loss_relative_threshold():
    windows = [_window(0.100, 2.00), _window(0.106, 1.99), _window(0.103, 2.10)]
    trends = compute_trends(windows, TrendConfig(acc_threshold=0.005, loss_threshold=0.01))
    assert [t.acc_trend for t in trends] == [None, "up", "flat"]
    assert trends[1].acc_delta == pytest.approx(0.006)
    # -0.5% is within 1% (flat); +5.5% is worse, and for loss worse is "down".
    assert [t.loss_trend for t in trends] == [None, "flat", "down"]


def test_threshold_edge_is_flat():
    assert classify(0.1766 - 0.1716, 0.005) == "flat"
    assert classify(-0.0051, 0.005) == "down"
    assert classify(-0.02, 0.0, higher_is_better=False) == "up"


def test_noise_aware_uses_standard_error_of_difference():
    windows = [_window(0.100, acc_se=0.006), _window(0.108, acc_se=0.008)]  # se_diff = 0.01
    assert compute_trends(windows, TrendConfig(noise_aware=True))[1].acc_trend == "flat"
    assert compute_trends(windows, TrendConfig())[1].acc_trend == "up"
    quiet = [_window(0.100, acc_se=0.0006), _window(0.103, acc_se=0.0008)]
    assert compute_trends(quiet, TrendConfig(noise_aware=True))[1].acc_trend == "up"


def test_trend_config_validation():
    with pytest.raises(ValueError):
        TrendConfig(acc_threshold=-1)

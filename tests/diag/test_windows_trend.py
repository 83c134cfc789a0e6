"""Windows (alignment, n_pred weighting, NaN counts) and trend arrows (thresholds, noise-aware)."""

from __future__ import annotations

import math
import random
import statistics

import polars as pl
import pytest

from dflash_diag import TrendConfig, compute_trends, compute_windows
from dflash_diag.analysis.trend import classify
from dflash_diag.analysis.windows import Window


def _frame(rows):
    return pl.DataFrame(
        rows,
        schema={
            "step": pl.Int64,
            "loss": pl.Float64,
            "acc": pl.Float64,
            "n_pred": pl.Float64,
            "n_blocks": pl.Float64,
            "tau_train": pl.Float64,
            "lr": pl.Float64,
        },
    )


def test_windows_align_to_start_and_count_entries():
    frame = _frame([{"step": s, "acc": 0.1} for s in range(103, 230, 3)])
    windows = compute_windows(frame, 50, start=100)
    assert [(w.start, w.end) for w in windows] == [(100, 149), (150, 199), (200, 249)]
    assert [w.n for w in windows] == [16, 17, 10]
    assert windows[0].first_step == 103
    assert windows[-1].last_step == 229
    default = compute_windows(frame, 50)
    assert default[0].start == 103


def test_weighted_by_n_pred_when_every_entry_has_it():
    frame = _frame(
        [
            {"step": 1, "acc": 0.1, "loss": 1.0, "n_pred": 100.0},
            {"step": 2, "acc": 0.3, "loss": 2.0, "n_pred": 300.0},
        ]
    )
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
    frame = _frame(
        [
            {"step": 1, "acc": 0.2, "loss": float("nan")},
            {"step": 2, "acc": float("inf"), "loss": 1.0},
            {"step": 3, "acc": 0.4, "loss": 3.0},
        ]
    )
    (window,) = compute_windows(frame, 10)
    assert window.acc == pytest.approx(0.3)
    assert window.loss == pytest.approx(2.0)
    assert window.nonfinite == 2


def test_lr_and_tok_per_sec_plain_means_without_nonfinite():
    frame = _frame(
        [
            {"step": 1, "lr": 1e-4, "n_pred": 100.0},
            {"step": 2, "lr": 3e-4, "n_pred": 300.0},  # not weighted by n_pred
            {"step": 3, "lr": float("nan")},
            {"step": 12, "lr": 5e-4},
        ]
    )
    frame = frame.with_columns(pl.Series("tok_per_sec", [1000.0, None, float("inf"), 3000.0]))
    first, second = compute_windows(frame, 10)
    assert first.lr == pytest.approx(2e-4)
    assert first.tok_per_sec == pytest.approx(1000.0)
    assert second.lr == pytest.approx(5e-4)
    assert second.tok_per_sec == pytest.approx(3000.0)
    legacy = compute_windows(frame.drop("tok_per_sec"), 10)  # no tok_per_sec column at all
    assert [w.tok_per_sec for w in legacy] == [None, None]


def test_tau_train_weighted_by_blocks():
    frame = _frame(
        [
            {"step": 1, "tau_train": 2.0, "n_blocks": 1.0},
            {"step": 2, "tau_train": 4.0, "n_blocks": 3.0},
        ]
    )
    assert compute_windows(frame, 10)[0].tau_train == pytest.approx(3.5)


def test_window_size_must_be_positive():
    with pytest.raises(ValueError, match="window size must be >= 1"):
        compute_windows(_frame([{"step": 1}]), 0)


def test_records_before_start_are_ignored_and_gaps_skip_indices():
    frame = _frame([{"step": s, "acc": 0.1} for s in (5, 12, 14, 41)])
    windows = compute_windows(frame, 10, start=10)
    assert [(w.index, w.start, w.end, w.n) for w in windows] == [(0, 10, 19, 2), (3, 40, 49, 1)]


def test_loss_only_window_reports_the_loss_weighting():
    frame = _frame(
        [
            {"step": 1, "loss": 1.0, "n_pred": 1.0},
            {"step": 2, "loss": 4.0, "n_pred": 3.0},
            {"step": 11, "loss": 1.0, "n_pred": 1.0},
            {"step": 12, "loss": 4.0},
        ]
    )
    first, second = compute_windows(frame, 10)
    assert first.acc is None
    assert first.weighted
    assert first.loss == pytest.approx(3.25)
    assert not second.weighted
    assert second.loss == pytest.approx(2.5)


def test_zero_or_negative_n_pred_falls_back_to_the_plain_mean():
    frame = _frame(
        [
            {"step": 1, "acc": 0.1, "n_pred": 0.0},
            {"step": 2, "acc": 0.3, "n_pred": 300.0},
            {"step": 11, "acc": 0.1, "n_pred": -5.0},
            {"step": 12, "acc": 0.4, "n_pred": 5.0},
        ]
    )
    first, second = compute_windows(frame, 10)
    assert not first.weighted
    assert first.acc == pytest.approx(0.2)
    assert not second.weighted
    assert second.acc == pytest.approx(0.25)


def test_standard_errors_need_two_finite_entries():
    frame = _frame(
        [
            {"step": 1, "acc": 0.1, "loss": 2.0},
            {"step": 2, "acc": 0.2, "loss": float("nan")},
            {"step": 3, "acc": 0.6, "loss": float("inf")},
        ]
    )
    (window,) = compute_windows(frame, 10)
    assert window.acc_se == pytest.approx(statistics.stdev([0.1, 0.2, 0.6]) / math.sqrt(3))
    assert window.loss_se is None  # one finite loss
    assert window.nonfinite == 2


def test_tau_train_plain_mean_when_a_block_count_is_missing():
    frame = _frame(
        [
            {"step": 1, "tau_train": 2.0, "n_blocks": 1.0},
            {"step": 2, "tau_train": 4.0},
            {"step": 3, "tau_train": float("nan"), "n_blocks": 9.0},
        ]
    )
    (window,) = compute_windows(frame, 10)
    assert window.tau_train == pytest.approx(3.0)
    assert window.nonfinite == 1


def _reference_windows(rows, size, start):
    """The documented window semantics, one window at a time in plain Python."""

    def finite(v):
        return v is not None and math.isfinite(v)

    def picked(entries, value, weight):
        ok = [e for e in entries if finite(e[value])]
        if not ok:
            return None, False, None
        se = statistics.stdev([e[value] for e in ok]) / math.sqrt(len(ok)) if len(ok) >= 2 else None
        if all(finite(e[weight]) and e[weight] > 0 for e in ok):
            return sum(e[value] * e[weight] for e in ok) / sum(e[weight] for e in ok), True, se
        return statistics.fmean(e[value] for e in ok), False, se

    by_index: dict[int, list[dict]] = {}
    for row in rows:
        if row["step"] >= start:
            by_index.setdefault((row["step"] - start) // size, []).append(row)
    out = []
    for index in sorted(by_index):
        entries = by_index[index]
        acc, acc_w, acc_se = picked(entries, "acc", "n_pred")
        loss, loss_w, loss_se = picked(entries, "loss", "n_pred")
        tau = picked(entries, "tau_train", "n_blocks")[0]
        lrs = [e["lr"] for e in entries if finite(e["lr"])]
        nonfinite = sum(
            1
            for e in entries
            for k in ("loss", "acc", "tau_train", "lr")
            if e[k] is not None and not math.isfinite(e[k])
        )
        steps = [e["step"] for e in entries]
        out.append(
            Window(
                index=index,
                start=start + index * size,
                end=start + (index + 1) * size - 1,
                n=len(entries),
                first_step=min(steps),
                last_step=max(steps),
                loss=loss,
                acc=acc,
                weighted=acc_w or (acc is None and loss_w),
                acc_se=acc_se,
                loss_se=loss_se,
                nonfinite=nonfinite,
                tau_train=tau,
                lr=statistics.fmean(lrs) if lrs else None,
                tok_per_sec=None,
            )
        )
    return out


def test_windows_match_a_plain_python_reference_on_messy_records():
    rng = random.Random(7)
    special = [None, float("nan"), float("inf"), -float("inf")]

    def value(low, high, p_special=0.1):
        return rng.choice(special) if rng.random() < p_special else rng.uniform(low, high)

    rows = [
        {
            "step": step,
            "loss": value(1.0, 5.0),
            "acc": value(0.0, 0.4),
            "n_pred": rng.choice([None, 0.0, 100.0, 250.0, 400.0, 400.0, 400.0]),
            "n_blocks": rng.choice([None, 8.0, 16.0, 16.0]),
            "tau_train": value(1.0, 4.0),
            "lr": value(1e-5, 1e-3),
        }
        for step in sorted(rng.sample(range(600), 240))
    ]
    for size, start in ((7, None), (50, 30), (1, None)):
        got = compute_windows(_frame(rows), size, start=start)
        want = _reference_windows(rows, size, rows[0]["step"] if start is None else start)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert (
                g.index,
                g.start,
                g.end,
                g.n,
                g.first_step,
                g.last_step,
                g.weighted,
                g.nonfinite,
            ) == (w.index, w.start, w.end, w.n, w.first_step, w.last_step, w.weighted, w.nonfinite)
            for name in ("loss", "acc", "acc_se", "loss_se", "tau_train", "lr"):
                expected = getattr(w, name)
                if expected is None:
                    assert getattr(g, name) is None, (size, g.index, name)
                else:
                    assert getattr(g, name) == pytest.approx(expected, rel=1e-12), (
                        size,
                        g.index,
                        name,
                    )


def _window(acc, loss=None, acc_se=None, loss_se=None):
    return Window(
        index=0,
        start=0,
        end=9,
        n=10,
        first_step=0,
        last_step=9,
        loss=loss,
        acc=acc,
        weighted=False,
        acc_se=acc_se,
        loss_se=loss_se,
        nonfinite=0,
        tau_train=None,
    )


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
    with pytest.raises(ValueError, match="accuracy threshold"):
        TrendConfig(acc_threshold=-1)


def test_logging_interval_sorted_fast_path_matches_the_definition():
    # the median gap between distinct steps, and the distinct count of choose_window, whether
    # the steps come sorted (the fast path: no unique, no sort) or not, with repeats and nulls
    from dflash_diag.analysis.windows import _distinct_gaps, logging_interval

    rng = random.Random(7)
    for _ in range(2000):
        steps = [rng.randint(0, 300) for _ in range(rng.randint(0, 25))]
        if rng.random() < 0.6:
            steps.sort()
        if steps and rng.random() < 0.2:
            steps[rng.randrange(len(steps))] = None
        series = pl.Series("step", steps, dtype=pl.Int64)
        distinct = series.drop_nulls().unique().sort()
        want = None if distinct.len() < 2 else max(1, int(distinct.diff().drop_nulls().median()))
        assert logging_interval(series) == want, steps
        if distinct.len() >= 2:
            assert _distinct_gaps(series).len() + 1 == distinct.len(), steps

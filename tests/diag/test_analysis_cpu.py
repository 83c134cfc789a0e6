"""The analysis' cheaper computations (issue 21) against the ones they replace, on edge cases:
the finite-column test, the weights-everywhere test, the finite range of a metric, and the
Theil-Sen and Mann-Kendall pairwise loops."""

from __future__ import annotations

import random
from collections import Counter
from statistics import median

import numpy as np
import polars as pl
import pytest

from dflash_diag.analysis import alive, diagnosis, forecast, robust_trend, schedule, windows

INF, NAN = float("inf"), float("nan")

COLUMNS = [
    [],
    [None, None],
    [1.0, 2.0, None],
    [1.0, NAN, 3.0],
    [INF, 1.0],
    [-INF, INF],
    [1e308, 1e308],  # finite values whose sum overflows
    [-1e308, -1e308, None],
    [0.0, -0.0, 5.0],
    [3.0] * 7,
    [None, 2.5, 2.5, 2.5, 2.5, 2.5],
]


@pytest.mark.parametrize("values", COLUMNS)
def test_all_finite_is_the_elementwise_test(values: list[float | None]) -> None:
    column = pl.Series("x", values, dtype=pl.Float64)
    assert windows.all_finite(column) is bool(column.is_finite().all(ignore_nulls=True))


def _old_finite(frame: pl.DataFrame, name: str) -> pl.Series:
    if name not in frame.columns or frame.height == 0:
        return pl.Series(name, [], pl.Float64)
    values = frame[name].drop_nulls()
    return values.filter(values.is_finite())


@pytest.mark.parametrize("values", COLUMNS)
@pytest.mark.parametrize("dtype", [pl.Float64, pl.Float32])
def test_finite_range_is_that_of_the_finite_values(
    values: list[float | None], dtype: pl.DataType
) -> None:
    frame = pl.DataFrame({"loss": pl.Series(values, dtype=dtype)})
    old = _old_finite(frame, "loss")
    assert alive.finite_range(frame, "loss") == (old.len(), old.min(), old.max())
    assert alive.finite_range(frame, "acc") == (0, None, None)


def test_finite_range_of_integers() -> None:
    frame = pl.DataFrame({"loss": [3, None, 3, 1]})
    old = _old_finite(frame, "loss")
    assert alive.finite_range(frame, "loss") == (old.len(), old.min(), old.max())


def _old_weight_everywhere(frame: pl.DataFrame, value: str, weight: str, clean: set[str]) -> bool:
    if value not in clean or weight not in clean:
        return False
    return windows._weight_everywhere_query(frame, value, weight)


@pytest.mark.parametrize(
    ("acc", "n_pred"),
    [
        ([0.5, 0.6, 0.7], [10.0, 12.0, 9.0]),
        ([0.5, 0.6, 0.7], [10.0, 0.0, 9.0]),  # a zero weight
        ([0.5, 0.6, 0.7], [10.0, -1.0, 9.0]),
        ([0.5, None, 0.7], [10.0, None, 9.0]),  # nulls in the same rows
        ([0.5, None, 0.7], [None, 3.0, 9.0]),  # as many nulls, other rows
        ([0.5, None, 0.7], [10.0, 3.0, 9.0]),
        ([None, None], [None, None]),
        ([], []),
    ],
)
def test_weight_everywhere_is_the_query(acc: list, n_pred: list) -> None:
    frame = pl.DataFrame(
        {"acc": pl.Series(acc, dtype=pl.Float64), "n_pred": pl.Series(n_pred, dtype=pl.Float64)}
    )
    clean = {"acc", "n_pred"}
    assert windows._weight_everywhere(frame, "acc", "n_pred", clean) is _old_weight_everywhere(
        frame, "acc", "n_pred", clean
    )
    assert windows._weight_everywhere(frame, "acc", "n_pred", {"acc"}) is False


def _old_theil_sen(x: list, y: list) -> float:
    slopes = [
        (y[j] - y[i]) / (x[j] - x[i])
        for i in range(len(x))
        for j in range(i + 1, len(x))
        if x[j] != x[i]
    ]
    return median(slopes)


def _old_sign_sum(y: list) -> int:
    s = 0
    for i in range(len(y) - 1):
        for j in range(i + 1, len(y)):
            diff = y[j] - y[i]
            s += (diff > 0) - (diff < 0)
    return s


def _cases() -> list[tuple[list, list]]:
    rng = random.Random(21)
    cases: list[tuple[list, list]] = []
    for n in (2, 3, 15, 16, 17, 40, 101, 200):
        xs = sorted(rng.uniform(0, 1e5) for _ in range(n))
        cases.append((xs, [rng.gauss(2.0, 0.3) for _ in range(n)]))
        cases.append((list(range(n)), [round(rng.gauss(2.0, 0.3), 2) for _ in range(n)]))  # ties
        cases.append(([float(i // 3) for i in range(n)], [1.5] * n))  # repeated x, flat y
        cases.append((list(range(n, 0, -1)), [rng.randint(-5, 5) for _ in range(n)]))
    n = 30
    cases.append((list(range(n)), [2.0**52 + i for i in range(n)]))  # past exact: the loop
    cases.append((list(range(n)), [1.0] * (n - 1) + [NAN]))
    cases.append(([0.0] * n, list(range(n))))  # no distinct x
    return cases


@pytest.mark.parametrize(("x", "y"), _cases())
def test_theil_sen_and_mann_kendall_are_the_loops(x: list, y: list) -> None:
    if not any(x[j] != x[i] for i in range(len(x)) for j in range(i + 1, len(x))):
        with pytest.raises(ValueError, match="two distinct x"):
            robust_trend.theil_sen_slope(x, y)
    else:
        old, new = _old_theil_sen(x, y), robust_trend.theil_sen_slope(x, y)
        assert repr(new) == repr(old)  # bit for bit, the sign of a zero too
    if len(y) >= 3:
        test = robust_trend.mann_kendall(y)
        assert test.s == _old_sign_sum(y)
        ties = sum(t * (t - 1) * (2 * t + 5) for t in Counter(y).values() if t > 1)
        assert test.variance == (len(y) * (len(y) - 1) * (2 * len(y) + 5) - ties) / 18.0 or (
            test.variance == 0.0
        )


def _old_max_lr(frame: pl.DataFrame) -> float | None:
    if "lr" not in frame.columns or frame.height == 0:
        return None
    lr = frame["lr"].drop_nulls()
    lr = lr.filter(lr.is_finite())
    return float(lr.max()) if lr.len() else None  # type: ignore[arg-type]


@pytest.mark.parametrize("values", COLUMNS)
def test_max_lr_is_the_largest_finite(values: list[float | None]) -> None:
    frame = pl.DataFrame({"lr": pl.Series(values, dtype=pl.Float64)})
    assert repr(diagnosis.max_lr_of(frame)) == repr(_old_max_lr(frame))
    ints = pl.DataFrame({"lr": [3, None, 5]})
    assert diagnosis.max_lr_of(ints) == _old_max_lr(ints) == 5.0


@pytest.mark.parametrize("values", COLUMNS[1:])
def test_schedule_position_reads_the_finite_lrs(values: list[float | None]) -> None:
    frame = pl.DataFrame(
        {
            "step": list(range(1, len(values) + 1)),
            "lr": pl.Series(values, dtype=pl.Float64),
            "loss": [1.0] * len(values),
        }
    )
    old = frame.filter(pl.col("lr").is_finite().fill_null(False))["lr"]
    position = schedule.schedule_position(frame)
    assert position.current == (float(old[-1]) if old.len() else None)
    if old.len():
        assert position.peak in (float(old.max()), None)  # type: ignore[arg-type]


def test_binned_fast_range_is_the_pieces_range() -> None:
    rng = random.Random(7)
    n = 3 * forecast._BIN_PIECE + 17
    steps = np.arange(5, 5 + n, dtype=np.int64)
    values = np.array([rng.gauss(1.0, 0.1) for _ in range(n)])
    fast = forecast.binned(steps, values, basis="b")
    # a record without a value inside the range takes the piecewise pass; the bins are the same
    slow = forecast.binned(
        np.concatenate((steps[:100], [400], steps[100:])),
        np.concatenate((values[:100], [NAN], values[100:])),
        basis="b",
    )
    assert fast == slow
    assert fast.counts[0] > 0
    assert sum(fast.counts) == n
    floats = forecast.binned(steps.astype(float) / 3.0, values, basis="b")
    assert sum(floats.counts) == n
    assert len(floats.steps) == forecast.MAX_BINS

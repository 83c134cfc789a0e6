"""The eval records read as columns (issue 21): the validation's, the forecast's and the measured
tau's readings of the evals give what their per-record Python loops gave, on every kind of value
a record may hold (a bool, a string, NaN, an int beyond the float range, a numpy scalar), on
steps out of order, evaluated twice or missing. The loops are kept here as the reference."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dflash_diag import LogEvent
from dflash_diag.analysis import estimators, run_forecast, validation
from dflash_diag.analysis.eval_columns import finite_values, latest_per_step
from dflash_diag.analysis.numbers import finite_number
from dflash_diag.analysis.windows import Window

#: Values a field may hold, with what finite_number makes of them.
ODD_VALUES = [
    1.5,
    2,
    0.0,
    -0.0,
    True,
    False,
    None,
    "3.0",
    float("nan"),
    float("inf"),
    -float("inf"),
    10**400,
    2**60 + 1,
    np.float64(0.25),
    np.float32(0.5),
    [1.0],
]


def test_finite_values_are_finite_number_of_each():
    plain = [v for v in ODD_VALUES if type(v) in (int, float)]  # one numpy conversion
    for raw in (ODD_VALUES, plain, [v for v in plain if v != 10**400], [1.0, None]):
        expected = [finite_number(v) for v in raw]
        got = finite_values(raw).tolist()
        assert [None if math.isnan(v) else v for v in got] == expected
    assert finite_values([]).shape == (0,)


def test_latest_per_step_is_a_dict_by_step_in_step_order():
    rng = random.Random(3)
    for _ in range(50):
        steps = np.array([rng.randrange(8) for _ in range(rng.randrange(12))], dtype=np.int64)
        keep = np.array([rng.random() < 0.8 for _ in steps], dtype=bool)
        by_step = {int(s): i for i, (s, k) in enumerate(zip(steps, keep, strict=True)) if k}
        assert latest_per_step(steps, keep).tolist() == [by_step[s] for s in sorted(by_step)]


def _events(seed: int, n: int = 60) -> list[LogEvent]:
    """Evals with odd values, odd steps (None, out of order, repeated) and tau intervals."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        step = rng.choice([None, *range(0, 40, 3)]) if rng.random() < 0.3 else 2 * i
        fields = {}
        for name in ("tau", "loss", "acc"):
            if rng.random() < 0.85:
                fields[name] = (
                    rng.choice(ODD_VALUES) if rng.random() < 0.25 else rng.uniform(0.5, 4)
                )
        choice = rng.random()
        if choice < 0.3:
            fields["tau_se"] = rng.choice([0.1, -1.0, "x", float("nan"), 0.05])
        elif choice < 0.6:
            fields["tau_ci"] = [rng.uniform(1, 2), rng.uniform(2, 3)]
        elif choice < 0.8:
            fields["tau_hist"] = [rng.randrange(5) for _ in range(4)]
        out.append(LogEvent("eval", 0, i + 1, step, fields))
    return out


def _window(i: int) -> Window:
    first = 10 * i
    return Window(
        index=i,
        start=first,
        end=first + 9,
        n=10,
        first_step=first,
        last_step=first + 9,
        loss=None,
        acc=None,
        weighted=False,
        acc_se=None,
        loss_se=None,
        nonfinite=0,
        tau_train=None,
    )


# -- the per-record loops these columns replaced, as they were ---------------------------------


def _old_validation_series(evals, name, up_to_step=None, from_step=None):
    by_step = {}
    for event in evals:
        if event.step is None:
            continue
        if (up_to_step is not None and event.step > up_to_step) or (
            from_step is not None and event.step < from_step
        ):
            continue
        value = finite_number(event.fields.get(name))
        if value is None:
            continue
        se = validation.tau_se(event.fields) if name == "tau" else None
        by_step[event.step] = validation.EvalPoint(event.step, value, se)
    return [by_step[s] for s in sorted(by_step)]


def _old_forecast_points(evals, name, first_step, last_step):
    pts = [
        (float(e.step), float(e.fields[name]))
        for e in evals
        if e.step is not None
        and first_step <= e.step <= last_step
        and isinstance(e.fields.get(name), (int, float))
        and not isinstance(e.fields.get(name), bool)
        and math.isfinite(float(e.fields[name]))
    ]
    pts.sort()
    return pts


def _old_measurements(evals, up_to_step=None, from_step=None):
    by_step = {}
    for event in evals:
        tau = event.fields.get("tau")
        if (
            isinstance(tau, bool)
            or not isinstance(tau, (int, float))
            or not math.isfinite(tau)
            or event.step is None
        ):
            continue
        if up_to_step is not None and event.step > up_to_step:
            continue
        if from_step is not None and event.step < from_step:
            continue
        by_step[event.step] = event
    return [by_step[s] for s in sorted(by_step)]


def _without_huge_ints(evals):
    """The old forecast and measurement loops raised OverflowError on an int beyond the float
    range (the readers turn one into inf; a LogEvent made by hand may hold it): such values are
    left out of the events compared with them."""
    return [
        LogEvent(
            e.kind,
            e.source,
            e.seq,
            e.step,
            {k: v for k, v in e.fields.items() if not (type(v) is int and abs(v) > 2**1023)},
        )
        for e in evals
    ]


@pytest.mark.parametrize("seed", range(6))
def test_the_validation_series_and_its_judgement_are_the_loops(seed):
    evals = _events(seed)
    for name in ("tau", "loss", "acc"):
        for bounds in ((None, None), (50, 6), (200, None)):
            assert validation.eval_series(evals, name, *bounds) == _old_validation_series(
                evals, name, *bounds
            )
    judged = validation.judge_validation(evals, up_to_step=90, from_step=3)
    expected = [
        validation.judge_series(
            _old_validation_series(evals, name, 90, 3),
            field=name,
            label=label,
            higher_is_better=higher,
        )
        for name, label, higher in validation.SERIES
        if _old_validation_series(evals, name, 90, 3)
    ]
    assert judged == expected


@pytest.mark.parametrize("seed", range(6))
def test_the_forecast_series_and_the_measurements_are_the_loops(seed):
    evals = _without_huge_ints(_events(seed))
    for name in ("tau", "loss", "acc"):
        series = run_forecast.eval_series(evals, name, 4, 80)
        assert list(zip(series.steps, series.values, strict=True)) == _old_forecast_points(
            evals, name, 4, 80
        )
        assert series.counts == (1,) * len(series.steps)
        assert series.basis == f"{len(series.steps)} evals"
    for bounds in ((None, None), (50, 6), (30, None)):
        assert estimators.measurements(evals, *bounds) == _old_measurements(evals, *bounds)
    windows = [_window(i) for i in range(-1, 12)]
    inp = estimators.SeriesInput(windows, None, None, evals, 8)  # type: ignore[arg-type]
    points = [(e.step, float(e.fields["tau"])) for e in _old_measurements(evals, 119)]
    expected = []
    for w in windows:
        before = [v for s, v in points if s <= w.last_step]
        expected.append(before[-1] if before else None)
    assert estimators._measured_series(inp) == expected


def test_an_int_beyond_the_float_range_is_left_out_not_raised():
    """A hand-made eval holding an int no float can hold (the readers give inf) is no number:
    the forecast and the measured tau skip it, as the validation always did."""
    evals = [
        LogEvent("eval", 0, 1, 10, {"tau": 2.0, "acc": 0.5}),
        LogEvent("eval", 0, 2, 20, {"tau": 10**400, "acc": 10**400}),
    ]
    assert run_forecast.eval_series(evals, "acc", 0, 100).steps == (10.0,)
    assert [e.step for e in estimators.measurements(evals)] == [10]
    assert [p.step for p in validation.eval_series(evals, "tau")] == [10]

"""The windows of the JSON output written a column at a time (``render/json_columns.py``) are the
bytes the encoder writes for each window's dict: floats of every magnitude (polars writes the
plain ones, Python the rest), None, NaN and infinities, ints, bools, numpy scalars, odd strings,
no window and one window; and the same when polars is not trusted with the floats."""

from __future__ import annotations

import json
import math
import random
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from dflash_diag.analysis.diagnosis import WindowRow
from dflash_diag.analysis.trend import Trend
from dflash_diag.analysis.windows import Window
from dflash_diag.render import json_columns
from dflash_diag.render.json import _COMPACT, json_number, window_json, windows_text

from .references import csv_module_text

SEPARATOR = ",\n    "


def _reference(rows: list[WindowRow]) -> str:
    return SEPARATOR.join(_COMPACT.encode(window_json(row)) for row in rows)


def _floats(seed: int, n: int) -> list[float]:
    """Random doubles of every magnitude (random bit patterns and scaled uniforms), plus edges."""
    rng = random.Random(seed)
    bits = [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(n)]
    scaled = [rng.uniform(-1, 1) * 10 ** rng.uniform(-8, 18) for _ in range(n)]
    rounded = [round(rng.random(), rng.randint(1, 17)) for _ in range(n)]
    edges = [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e16, 9999999999999998.0, 5e-324, 1e-5]
    edges += [math.nan, math.inf, -math.inf, 1.7976931348623157e308, 2.2250738585072014e-308]
    return bits + scaled + rounded + edges


def _rows(values: list, *, ints=None, trends=None) -> list[WindowRow]:
    rows = []
    for i, value in enumerate(values):
        n = ints[i] if ints is not None else i
        trend = trends[i % len(trends)] if trends else None
        window = Window(
            index=i, start=n, end=n, n=n, first_step=i, last_step=i, loss=value,
            acc=values[-1 - i], weighted=False, acc_se=None, loss_se=None, nonfinite=0,
            tau_train=None,
        )  # fmt: skip
        rows.append(WindowRow(window, Trend(value, trend, values[i // 2], trend)))
    return rows


def test_every_float_is_written_as_the_encoder_writes_it():
    values = _floats(seed=3, n=4000)
    expected = [json.dumps(json_number(v)) for v in values]
    assert json_columns.number_column(values).to_list() == expected
    rows = _rows(values, trends=["up", "down", "flat", None])
    assert windows_text(rows, SEPARATOR) == _reference(rows)


def test_none_and_non_finite_values_are_null():
    values = [None, math.nan, -math.inf, 0.25, None, math.inf, 1e-7]
    assert json_columns.number_column(values).to_list() == [
        "null", "null", "null", "0.25", "null", "null", "1e-07",
    ]  # fmt: skip


def test_floats_below_the_plain_range_are_pythons_text_not_polars():
    # polars writes 1.5e-05 as 0.000015 and 2e-07 as 2e-7: Python writes these
    values = [1.5e-05, 2e-07, -3.25e-05, 0.00012, 1.5e16, 123.0]
    texts = json_columns.number_column(values).to_list()
    assert texts == ["1.5e-05", "2e-07", "-3.25e-05", "0.00012", "1.5e+16", "123.0"]


def test_columns_of_other_types_are_written_by_the_encoder():
    # ints, numpy floats and numpy float32 among the numbers; a bool among the counts; strings
    # needing escapes among the trends
    floats = [1, np.float64(0.1), np.float32(0.1), 2.5, True, None, np.float64("nan")]
    ints = [0, 7, True, 2**70, -3, 5, 6]
    trends = ["up", 'say "x"', "ünïcode", None, "tab\tand\\"]
    rows = _rows(floats, ints=ints, trends=trends)
    assert windows_text(rows, SEPARATOR) == _reference(rows)


def test_ints_beyond_int64_are_written_whole():
    values = [2**63 - 1, -(2**63), 2**64, 3]
    expected = [json.dumps(v) for v in values]
    assert json_columns.integer_column(values, _COMPACT.encode).to_list() == expected


@pytest.mark.parametrize("count", [0, 1, 2, 300])
def test_any_number_of_windows(count):
    rows = _rows([0.5 + i / 3 for i in range(count)], trends=["up", None])
    assert windows_text(rows, SEPARATOR) == _reference(rows)


def test_without_polars_agreeing_python_writes_every_float(monkeypatch):
    values = _floats(seed=5, n=500)
    rows = _rows(values, trends=["flat"])
    monkeypatch.setattr(json_columns, "_AGREES", False)
    assert windows_text(rows, SEPARATOR) == _reference(rows)


def test_polars_agrees_with_python_on_this_install():
    # the check that decides the fast path; a polars that failed it would only be slower
    json_columns._AGREES = None
    assert json_columns._polars_agrees() is True


@pytest.mark.parametrize(
    ("ints", "trends"),
    [
        (None, ["up", "down", "flat", None]),
        ([2**70, -1, True, 4] * 1000, ["up"]),  # beyond Int64, a bool: written by Python
        (None, ["a,b", 'say "x"', "line\nbreak", None]),  # need quoting: the csv module
    ],
    ids=["labels", "big-ints", "quoted"],
)
def test_csv_of_many_windows_is_the_csv_modules(ints, trends):
    from dflash_diag.render.csv import render_csv

    values = _floats(seed=11, n=1000)
    rows = _rows(values, ints=ints, trends=trends)
    report = SimpleNamespace(windows=rows)
    assert render_csv(report) == csv_module_text(SimpleNamespace(windows=rows))
    assert render_csv(SimpleNamespace(windows=[])) == csv_module_text(SimpleNamespace(windows=[]))

"""A diagnosis' windows as columns end to end (issue 21): ``Diagnosis.windows`` is a lazy
``WindowRows`` equal to the rows the objects gave, the JSON and CSV outputs read its columns
without building a row, and the analysis' column shortcuts (a clean column taken unmasked, the
forecast's lr points without a filtered copy or a sort) give the same values as the general
path."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import polars as pl
import pytest

from dflash_diag import load_log
from dflash_diag.analysis.diagnosis import WindowRow
from dflash_diag.analysis.forecast import _finite_lr_pairs
from dflash_diag.analysis.run_forecast import _lr_points
from dflash_diag.analysis.trend import compute_trends, trend_columns
from dflash_diag.analysis.verdict import seconds_per_step
from dflash_diag.analysis.window_rows import WindowRows
from dflash_diag.analysis.windows import _aggregate, compute_window_table, compute_windows
from dflash_diag.converge.report import build_converge_report
from dflash_diag.render.csv import render_csv
from dflash_diag.render.json import render_json
from tests.diag.wild_harness import ROOT

SAMPLE = ROOT / "sample_logs" / "train.jsonl"


def _frame(n: int = 600, seed: int = 3) -> pl.DataFrame:
    rng = random.Random(seed)
    return pl.DataFrame(
        {
            "step": list(range(n)),
            "loss": [rng.uniform(1, 3) for _ in range(n)],
            "acc": [rng.choice([None, rng.uniform(0, 1)]) for _ in range(n)],
            "n_pred": [float(rng.randrange(1, 9)) for _ in range(n)],
            "lr": [1e-4 * (1 + i % 7) for i in range(n)],
        }
    )


def test_window_rows_equal_the_objects_and_build_only_what_is_read():
    table = compute_window_table(_frame(), 7)
    rows = WindowRows(table, trend_columns(table))
    expected = [
        WindowRow(w, t)
        for w, t in zip(compute_windows(_frame(), 7), compute_trends(table), strict=True)
    ]
    assert len(rows) == len(expected) == 86
    assert rows[-1] == expected[-1]
    assert rows[0] == expected[0]
    assert rows[-3:] == expected[-3:]
    assert rows[10:12] == expected[10:12]
    assert rows[5:2] == []
    with pytest.raises(IndexError, match="window 86 of 86"):
        rows[86]
    # read alone: no object of the other windows was built
    assert rows._rows is None
    assert table._windows is None
    for name in ("start", "end", "n", "loss", "acc", "weighted", "nonfinite", "tau_train"):
        assert rows.column(name) == [getattr(r.window, name) for r in expected], name
    for name in ("acc_delta", "acc_trend", "loss_delta", "loss_trend"):
        assert rows.column(name) == [getattr(r.trend, name) for r in expected], name
    assert table._windows is None
    assert rows == expected  # iterating builds them all, once
    assert list(rows) is not None
    assert rows._rows is not None
    assert rows[3] is rows._rows[3]


def test_diagnosis_windows_are_columns_and_the_outputs_read_them():
    """converge's JSON and CSV of a diagnosis' ``WindowRows`` are those of the same rows as a
    list (the per-row path)."""
    report = build_converge_report(load_log(SAMPLE))
    assert isinstance(report.windows, WindowRows)
    assert report.window_table is report.windows.table
    text, csv_text = render_json(report), render_csv(report)
    as_list = dataclasses.replace(report, windows=list(report.windows))
    assert not isinstance(as_list.windows, WindowRows)
    assert render_json(as_list) == text
    assert render_csv(as_list) == csv_text
    assert as_list.window_table.frame.equals(report.window_table.frame)


def test_diagnose_builds_no_window_objects_on_a_long_log(tmp_path):
    """At one window per 50 steps of a 5000-step log, the analysis reads columns only: the
    ``Window`` objects are not built for the JSON (the memory of 20,000 objects at 1M steps)."""
    rng = random.Random(5)
    n = 5000
    path = tmp_path / "train.jsonl"
    path.write_text(
        "".join(
            json.dumps({"step": i, "loss": 2.0 - i / n + rng.uniform(0, 0.01), "lr": 1e-3}) + "\n"
            for i in range(n)
        )
    )
    d = build_converge_report(load_log(path))
    assert len(d.windows) == 100
    assert isinstance(d.windows, WindowRows)
    render_json(d)
    assert d.windows.table._windows is None
    assert d.windows._rows is None


def test_clean_columns_give_what_the_masked_query_gives():
    """A column without NaN or Inf is aggregated as it is (no masked copy, no non-finite count);
    the windows are the full query's, bit for bit, with and without the start filter."""
    rng = random.Random(17)
    names = ["loss", "acc", "n_pred", "n_blocks", "tau_train", "lr", "tok_per_sec"]
    names += ["walk_tokens", "walk_steps"]
    for trial in range(40):
        n = 700
        columns: dict[str, list] = {"step": sorted(rng.sample(range(3000), n))}
        for name in names:
            odd = [math.nan, math.inf, -math.inf] if rng.random() < 0.3 else []
            columns[name] = [
                rng.choice([*odd, None, 0.0, 1.0, rng.uniform(0, 9), rng.uniform(0, 9)])
                for _ in range(n)
            ]
        frame = pl.DataFrame(
            columns, schema={k: pl.Int64 if k == "step" else pl.Float64 for k in columns}
        )
        if trial % 3 == 0:
            frame = frame.sample(fraction=1.0, shuffle=True, seed=trial)
        for size, start in ((7, 0), (50, 13), (11, -5)):
            fast = _aggregate(frame, size, start)
            assert fast.height > 0
            # records before the start step count in no window (the filter, where it is needed)
            assert fast["_n"].sum() == frame.filter(pl.col("step") >= start).height
            assert fast["_window"].min() >= 0
            assert fast.equals(_aggregate(frame, size, start, elide_empty=False)), trial


def _lr_points_reference(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    # the filtered frame the forecast read before (tests the numpy path against it)
    rows = frame.select(pl.col("step").cast(pl.Float64), pl.col("lr").cast(pl.Float64))
    rows = rows.drop_nulls().filter(pl.col("lr").is_finite() & (pl.col("lr") >= 0))
    return rows["step"].to_numpy(), rows["lr"].to_numpy()


@pytest.mark.parametrize("seed", range(8))
def test_lr_points_and_pairs_are_the_sorted_filtered_records(seed):
    rng = random.Random(seed)
    n = 300
    steps: list = sorted(rng.sample(range(1000), n)) if seed % 2 else list(range(n))
    if seed >= 4:  # repeated steps, a null step: the general path
        steps = sorted(rng.choice(steps[:50]) for _ in range(n))
        steps[rng.randrange(n)] = None
    lrs = [rng.choice([None, math.nan, math.inf, -1e-4, 0.0, 3e-4, rng.random()]) for _ in steps]
    frame = pl.DataFrame({"step": steps, "lr": lrs}, schema={"step": pl.Int64, "lr": pl.Float64})
    xs, ys = _lr_points(frame, [])
    ref_x, ref_y = _lr_points_reference(frame)
    assert xs.tolist() == ref_x.tolist()
    assert ys.tolist() == ref_y.tolist()
    pair_x, pair_y = _finite_lr_pairs(xs, ys)
    order = np.lexsort((ref_y, ref_x))
    assert pair_x.tolist() == ref_x[order].tolist()
    assert pair_y.tolist() == ref_y[order].tolist()


def test_lr_pairs_sort_equal_steps_by_lr():
    xs, ys = _finite_lr_pairs([1.0, 2.0, 2.0, 3.0], [5.0, 9.0, 4.0, 1.0])
    assert xs.tolist() == [1.0, 2.0, 2.0, 3.0]
    assert ys.tolist() == [5.0, 4.0, 9.0, 1.0]
    xs, ys = _finite_lr_pairs([3.0, 1.0], [1.0, 2.0])
    assert xs.tolist() == [1.0, 3.0]
    assert ys.tolist() == [2.0, 1.0]


def test_seconds_per_step_skips_columns_of_nulls_only():
    frame = pl.DataFrame(
        {
            "step": [1, 2, 3],
            "time": [None, None, None],
            "n_tokens": [10.0, 10.0, 10.0],
            "tok_per_sec": [5.0, 4.0, 5.0],
        },
        schema_overrides={"time": pl.Float64},
    )
    assert seconds_per_step(frame) == (2.0, "tok_per_sec")
    assert seconds_per_step(frame.with_columns(pl.lit(None, pl.Float64).alias("n_tokens"))) == (
        None,
        None,
    )
    timed = frame.with_columns(pl.Series("time", [0.0, 3.0, 6.0]))
    assert seconds_per_step(timed) == (3.0, "time")


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1 << 16])
def test_gap_tally_across_pieces_gives_the_median_and_count_of_the_gaps(monkeypatch, piece):
    """choose_window's gap tally, a piece of steps at a time (pieces of 1-7 steps here, so
    every boundary case is crossed), small gaps by bincount and large ones by a sort: the
    median gap and the distinct step count of the definition (unique, sort, diff)."""
    from dflash_diag.analysis import windows

    monkeypatch.setattr(windows, "_GAP_PIECE", piece)
    rng = random.Random(piece)
    for _ in range(400):
        spread = rng.choice([3, 50, 40_000])
        steps = [rng.randint(0, spread) for _ in range(rng.randint(0, 30))]
        if rng.random() < 0.7:
            steps.sort()
        if steps and rng.random() < 0.2:
            steps[rng.randrange(len(steps))] = None
        series = pl.Series("step", steps, dtype=pl.Int64)
        distinct = series.drop_nulls().unique().sort()
        gaps = distinct.diff().drop_nulls()
        want = None if distinct.len() < 2 else max(1, int(gaps.median()))
        assert windows.logging_interval(series) == want, steps
        values, counts = windows._gap_counts(series)
        assert sum(counts) == gaps.len(), steps
        assert values == sorted(set(gaps.to_list())), steps


def _measured_reference(windows, evals) -> list:
    # the loop the bisection replaced: per window, the latest eval at or before its last step
    from dflash_diag.analysis.estimators import measurements

    points = [(e.step, float(e.fields["tau"])) for e in measurements(evals, windows[-1].last_step)]
    out = []
    for w in windows:
        before = [tau for step, tau in points if step <= w.last_step]
        out.append(before[-1] if before else None)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_measured_series_is_the_latest_eval_at_or_before_each_window(seed):
    from dflash_diag.analysis.estimators import SeriesInput, estimator_series
    from dflash_diag.read.records import LogEvent

    rng = random.Random(seed)
    frame = _frame(900, seed)
    table = compute_window_table(frame, rng.choice([7, 50, 101]))
    evals = [
        LogEvent("eval", 0, 0, step, {"step": step, "tau": rng.choice([rng.uniform(1, 5), 2.0])})
        for step in [rng.randrange(-20, 1000) for _ in range(rng.randrange(0, 40))]
    ]
    evals.append(LogEvent("eval", 0, 0, 30, {"step": 30, "tau": math.nan}))  # not a measurement
    want = _measured_reference(table.windows(), evals)
    fresh = compute_window_table(frame, table[0].end - table[0].start + 1)
    inp = SeriesInput(fresh, frame, lambda rows: rows, evals, 8)
    assert estimator_series("measured", inp) == want
    assert fresh._windows is None  # the columns were read, no Window built
    as_list = SeriesInput(table.windows(), frame, lambda rows: rows, evals, 8)
    assert estimator_series("measured", as_list) == want

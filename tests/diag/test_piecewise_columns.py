"""The analysis' per-record passes computed a piece at a time (numpy, bounded memory) give what
the polars queries they replace give, bit for bit: the seconds per step (verdict), the
file-order and restart test (restarts), the window keys (windows). Each is run with tiny pieces
so that every piece boundary is crossed, on random columns with nulls, NaN, infinities, ties,
repeats and falls."""

from __future__ import annotations

import math
import random

import numpy as np
import polars as pl
import pytest

from dflash_diag.analysis import restarts, verdict, windows
from dflash_diag.analysis.restarts import resolve_restarts
from dflash_diag.analysis.verdict import polars_median, positive_rates, seconds_per_step
from dflash_diag.analysis.windows import _aggregate, window_index, window_keys, window_pieces


@pytest.fixture(autouse=True)
def _tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verdict, "_RATE_PIECE", 7)
    monkeypatch.setattr(restarts, "_RISE_PIECE", 5)
    monkeypatch.setattr(windows, "_KEY_PIECE", 6)


def _rates_reference(frame: pl.DataFrame, top: str, bottom: str, differences: bool) -> pl.Series:
    # the polars query seconds_per_step ran before
    quotient = (
        pl.col(top).diff() / pl.col(bottom).diff().cast(pl.Float64)
        if differences
        else pl.col(top) / pl.col(bottom)
    )
    return frame.select(quotient.alias("r")).filter(pl.col("r").is_finite() & (pl.col("r") > 0))[
        "r"
    ]


def _seconds_reference(frame: pl.DataFrame) -> tuple[float | None, str | None]:
    def has(name: str) -> bool:
        return name in frame.columns and frame[name].null_count() < frame.height

    if frame.height >= 2 and has("time"):
        rates = _rates_reference(frame, "time", "step", True)
        if len(rates):
            return float(rates.median()), "time"  # type: ignore[arg-type]
    if has("n_tokens") and has("tok_per_sec"):
        rates = _rates_reference(frame, "n_tokens", "tok_per_sec", False)
        if len(rates):
            return float(rates.median()), "tok_per_sec"  # type: ignore[arg-type]
    return None, None


def _value(rng: random.Random, odd: bool) -> float | None:
    pool = [
        None,
        0.0,
        -1.5,
        2.0,
        2.0,
        rng.uniform(-3, 9),
        rng.uniform(0, 1e-3),
        rng.uniform(0, 5e9),
    ]
    if odd:
        pool += [math.nan, math.inf, -math.inf]
    return rng.choice(pool)


def _random_frame(rng: random.Random, n: int) -> pl.DataFrame:
    step = sorted(rng.sample(range(4 * n + 5), n)) if rng.random() < 0.6 else None
    if step is None:
        step = [rng.randrange(-3, 3 * n) for _ in range(n)]  # repeats and falls
    odd = rng.random() < 0.5
    time = [(_value(rng, odd) if rng.random() < 0.2 else i * rng.uniform(0.5, 2.5)) for i in step]
    if rng.random() < 0.5:
        time = sorted(t for t in time if t is not None and not math.isnan(t)) + [None] * sum(
            1 for t in time if t is None or math.isnan(t)
        )
    return pl.DataFrame(
        {
            "step": step,
            "time": time,
            "n_tokens": [_value(rng, odd) for _ in range(n)],
            "tok_per_sec": [_value(rng, odd) for _ in range(n)],
        },
        schema={
            "step": pl.Int64,
            "time": pl.Float64,
            "n_tokens": pl.Float64,
            "tok_per_sec": pl.Float64,
        },
    )


def test_seconds_per_step_is_the_polars_query_s():
    rng = random.Random(21)
    for trial in range(300):
        frame = _random_frame(rng, rng.choice([0, 1, 2, 3, 6, 7, 8, 13, 14, 15, 40, 101]))
        if trial % 4 == 1 and frame.height:  # one chunk per few rows: the pieces read across chunks
            frame = pl.concat([frame.slice(i, 3) for i in range(0, frame.height, 3)], rechunk=False)
        if trial % 5 == 2:  # a time column of nulls only (another trainer's log)
            frame = frame.with_columns(pl.lit(None, pl.Float64).alias("time"))
        got = seconds_per_step(frame)
        want = _seconds_reference(frame)
        assert got == want, (trial, got, want)
        assert [type(v) for v in got] == [type(v) for v in want], trial
        for top, bottom, differences in (
            ("time", "step", True),
            ("n_tokens", "tok_per_sec", False),
        ):
            rates = positive_rates(frame[top], frame[bottom], differences=differences)
            assert rates is not None
            reference = _rates_reference(frame, top, bottom, differences).to_numpy()
            assert rates.tobytes() == reference.tobytes(), trial


def test_rates_of_other_types_take_the_query():
    """Int64 with nulls (a time in nanoseconds past 2^53 would be rounded before it is
    differenced as a float), Int32 and Float32: the polars query, same answer."""
    big = 1_700_000_000_000_000_000
    frame = pl.DataFrame(
        {
            "step": [1, 2, 3, 4, 5],
            "time": [big, big + 3, None, big + 9, big + 10],
        },
        schema={"step": pl.Int64, "time": pl.Int64},
    )
    assert positive_rates(frame["time"], frame["step"], differences=True) is None
    assert seconds_per_step(frame) == _seconds_reference(frame) == (2.0, "time")
    for dtype in (pl.Int32, pl.Float32):
        other = frame.with_columns(pl.col("step").cast(dtype))
        assert positive_rates(other["time"], other["step"], differences=True) is None
    whole = frame.fill_null(big + 6)
    rates = positive_rates(whole["time"], whole["step"], differences=True)
    assert rates is not None
    assert rates.tolist() == [3.0, 3.0, 3.0, 1.0]


def test_polars_median_is_the_series_median():
    rng = np.random.default_rng(4)
    for n in [1, 2, 3, 4, 5, 10, 11, 1000, 1001]:
        for _ in range(40):
            values = np.abs(rng.standard_normal(n)) * 10.0 ** float(rng.integers(-6, 6))
            if n > 3:
                values[: n // 3] = values[n // 3]  # ties
            want = pl.Series(values).median()
            assert polars_median(values.copy()) == want
    # the linear interpolation, not the mean of the two middle values: they differ in the last bit
    lo, hi = 0.01, 2.45
    assert 0.5 * (hi - lo) + lo != (lo + hi) / 2
    assert polars_median(np.array([hi, lo])) == pl.Series([lo, hi]).median() == 0.5 * (hi - lo) + lo


def _resolve_reference(
    frame: pl.DataFrame, keep_all: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[pl.DataFrame, list[restarts.Restart]]:
    with monkeypatch.context() as m:
        m.setattr(restarts, "_strictly_rising", lambda column: None)  # the query decides
        return resolve_restarts(frame, keep_all=keep_all)


def test_restarts_found_by_pieces_are_the_query_s(monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(5)
    for trial in range(300):
        n = rng.choice([0, 1, 2, 5, 6, 11, 12, 30])
        step = list(range(1, n + 1))
        seq = list(range(n))
        kind = trial % 6
        if kind == 1 and n > 2:  # a resume: the steps go back once
            cut = rng.randrange(1, n)
            step = step[:cut] + [s - rng.randrange(0, cut) for s in step[cut:]]
        elif kind == 2 and n > 1:  # a step logged twice
            i = rng.randrange(1, n)
            step[i] = step[i - 1]
        elif kind == 3 and n > 1:  # out of file order
            rng.shuffle(seq)
        elif kind == 4 and n > 1:  # a repeated line number
            i = rng.randrange(1, n)
            seq[i] = seq[i - 1]
        elif kind == 5:  # rising by more than one, in several chunks
            step = sorted(rng.sample(range(10 * n + 1), n))
        frame = pl.DataFrame(
            {"source": [0] * n, "seq": seq, "step": step, "loss": [float(i) for i in range(n)]},
            schema={"source": pl.Int32, "seq": pl.Int64, "step": pl.Int64, "loss": pl.Float64},
        )
        if trial % 3 == 0 and n:
            frame = pl.concat([frame.slice(i, 4) for i in range(0, n, 4)], rechunk=False)
        for keep_all in (False, True):
            got, found = resolve_restarts(frame, keep_all=keep_all)
            want, expected = _resolve_reference(frame, keep_all, monkeypatch)
            assert got.equals(want), (trial, keep_all)
            assert got.columns == want.columns
            assert found == expected, (trial, keep_all)


def test_strictly_rising_decides_only_what_it_reads_exactly():
    assert restarts._strictly_rising(pl.Series([1, 2, None, 4])) is None  # nulls: the query
    assert restarts._strictly_rising(pl.Series([1.0, 2.0])) is None  # floats: the query
    assert restarts._strictly_rising(pl.Series([1, 2, 3, 4, 5, 6, 7, 8])) is True
    assert restarts._strictly_rising(pl.Series([1, 2, 3, 4, 5, 5, 7, 8])) is False  # a tie
    assert restarts._strictly_rising(pl.Series([1, 2, 3, 4, 5, 6, 7, 3])) is False  # the last pair
    assert restarts._strictly_rising(pl.Series([], dtype=pl.Int64)) is True


def test_window_keys_are_window_index_s():
    rng = random.Random(8)
    for trial in range(200):
        n = rng.choice([0, 1, 5, 6, 7, 50])
        start = rng.choice([0, 1, 13, -40])
        size = rng.choice([1, 7, 50, 2500])
        step = sorted(rng.randrange(max(start, 0), max(start, 0) + 9000) for _ in range(n))
        if trial % 2:
            rng.shuffle(step)
        steps = pl.Series("step", step, dtype=pl.Int64)
        if trial % 3 == 0 and n:
            steps = pl.concat([steps.slice(i, 4) for i in range(0, n, 4)], rechunk=False)
        keys = window_keys(steps, size, start)
        assert keys is not None
        assert keys.dtype == pl.Int32
        want = pl.DataFrame({"step": steps}).select(window_index(start, size))["_window"]
        assert keys.cast(pl.Int64).to_list() == want.to_list(), trial
    # windows past 2^31 keep their keys in 64 bits
    steps = pl.Series("step", [0, 2**40, 2**41 + 5], dtype=pl.Int64)
    keys = window_keys(steps, 3, 0)
    assert keys is not None
    assert keys.dtype == pl.Int64
    assert keys.to_list() == [0, 2**40 // 3, (2**41 + 5) // 3]
    assert window_keys(pl.Series([1, None, 3], dtype=pl.Int64), 2, 0) is None
    assert window_keys(pl.Series([1.0, 2.0]), 2, 0) is None


def test_windows_on_keys_are_the_expression_query_s(monkeypatch: pytest.MonkeyPatch):
    """The windows' query on the precomputed keys gives the frame the expression gave, bit for
    bit, in step order (slices) and not (hashed), and where a window starts past 2^31."""
    rng = random.Random(12)
    for trial in range(60):
        n = rng.choice([1, 6, 40, 300])
        step = sorted(rng.sample(range(5 * n + 3), n))
        if trial % 10 == 9:
            step = [s + 2**33 for s in step]
        if trial % 3 == 1:
            rng.shuffle(step)
        frame = pl.DataFrame(
            {
                "step": step,
                "loss": [_value(rng, trial % 2 == 0) for _ in range(n)],
                "acc": [rng.uniform(0, 1) for _ in range(n)],
                "n_pred": [rng.choice([None, 3.0, 40.0]) for _ in range(n)],
            },
            schema={"step": pl.Int64, "loss": pl.Float64, "acc": pl.Float64, "n_pred": pl.Float64},
        )
        for size in (1, 7, 50):
            start = min(step)
            got = _aggregate(frame, size, start)
            with monkeypatch.context() as m:
                m.setattr(windows, "window_keys", lambda steps, size, start: None)
                want = _aggregate(frame, size, start)
            assert got.equals(want), (trial, size)
            assert got.schema == want.schema


def test_window_pieces_cut_where_a_window_starts():
    keys = pl.Series([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 3, 5, 5, 9])  # one step a window
    assert window_pieces(keys, 1, 0, 100) == [(0, 15)]
    assert window_pieces(keys, 1, 0, 4) == [(0, 3), (3, 5), (5, 12), (12, 15)]
    assert window_pieces(keys, 1, 0, 1) == [
        (0, 3),
        (3, 5),
        (5, 11),
        (11, 12),
        (12, 14),
        (14, 15),
    ]
    assert window_pieces(pl.Series([7] * 10), 1, 0, 3) == [(0, 10)]  # a window past a piece
    # windows of 10 steps from step 3: [3, 12], [13, 22], ...
    steps = pl.Series([3, 5, 12, 13, 14, 22, 23, 40, 41, 52])
    assert window_pieces(steps, 10, 3, 2) == [(0, 3), (3, 6), (6, 7), (7, 10)]
    rng = random.Random(2)
    for trial in range(100):
        n = rng.randrange(1, 60)
        size, start = rng.choice([1, 3, 10]), rng.choice([0, 2, -7])
        steps = pl.Series(sorted(rng.randrange(max(start, 0), 200) for _ in range(n)))
        keys = [(s - start) // size for s in steps.to_list()]
        for rows in (1, 2, 5, 17, 100):
            pieces = window_pieces(steps, size, start, rows)
            assert pieces[0][0] == 0
            assert pieces[-1][1] == n
            assert [p[0] for p in pieces[1:]] == [p[1] for p in pieces[:-1]], trial
            assert all(keys[low] != keys[low - 1] for low, _ in pieces[1:]), trial  # whole windows


def test_windows_in_pieces_are_the_whole_query_s(monkeypatch: pytest.MonkeyPatch):
    """The windows of records in step order, aggregated on pieces of whole windows, are the
    windows of one query on every record, bit for bit: every field, with NaN, Inf, nulls,
    weights present, missing or partial, walks, windows of one record and windows longer than
    a piece."""
    rng = random.Random(31)
    names = ["loss", "acc", "n_pred", "n_blocks", "tau_train", "lr", "tok_per_sec"]
    names += ["walk_tokens", "walk_steps"]
    for trial in range(40):
        n = rng.choice([30, 400, 2000])
        step = sorted(rng.sample(range(3 * n), n))
        columns: dict[str, list] = {"step": step}
        for name in names:
            if rng.random() < 0.2:
                continue  # absent
            odd = [math.nan, math.inf] if rng.random() < 0.3 else []
            gaps = [None] if rng.random() < 0.5 else []
            columns[name] = [
                rng.choice([*odd, *gaps, 1.0, rng.uniform(0, 9), rng.uniform(0, 1e-3)])
                for _ in range(n)
            ]
        frame = pl.DataFrame(
            columns, schema={k: pl.Int64 if k == "step" else pl.Float64 for k in columns}
        )
        if trial % 2:
            frame = pl.concat([frame.slice(i, 37) for i in range(0, n, 37)], rechunk=False)
        for size in (1, 5, 50, 10 * n):
            with monkeypatch.context() as m:
                m.setattr(windows, "_WINDOW_PIECE", 10**9)
                whole = _aggregate(frame, size, 0)
            for rows in (1, 7, 64, 333):
                monkeypatch.setattr(windows, "_WINDOW_PIECE", rows)
                got = _aggregate(frame, size, 0)
                assert got.equals(whole), (trial, size, rows)
                assert got.schema == whole.schema
                assert got["_loss"].n_chunks() == 1


def test_weights_beside_every_value_need_no_mask():
    """A weight beside every value (a pipeline log's n_pred beside every acc): the columns are
    aggregated as they are, and give what the masked query gives; a weight missing, zero or
    negative anywhere, or beside no value, takes the masks."""
    rng = random.Random(3)
    for trial in range(80):
        n = rng.choice([3, 40, 300])
        step = sorted(rng.sample(range(4 * n), n))
        present = [rng.random() < 0.8 for _ in range(n)]
        acc = [rng.uniform(0, 1) if p else None for p in present]
        n_pred = [float(rng.randrange(1, 400)) if p else None for p in present]
        spoil = trial % 5
        i = rng.randrange(n)
        if spoil == 1:
            n_pred[i] = 0.0
        elif spoil == 2:
            n_pred[i] = -3.0
        elif spoil == 3:
            n_pred[i] = None if acc[i] is not None else 5.0
        elif spoil == 4:
            acc[i] = None if n_pred[i] is not None else 0.5
        frame = pl.DataFrame(
            {"step": step, "acc": acc, "loss": acc, "n_pred": n_pred},
            schema={"step": pl.Int64, "acc": pl.Float64, "loss": pl.Float64, "n_pred": pl.Float64},
        )
        clean = {"acc", "loss", "n_pred"}
        assert windows._weight_everywhere(frame, "acc", "n_pred", clean) is (spoil == 0)
        for size in (1, 7, 50):
            assert _aggregate(frame, size, 0).equals(
                _aggregate(frame, size, 0, elide_empty=False)
            ), (trial, size)


def test_a_contiguous_selection_is_a_slice(monkeypatch: pytest.MonkeyPatch):
    """The pipeline phase after a lock-step one (and a step range of a sorted frame) is one block
    of rows: taken as a slice from its first row, never through a filter (a copy of every
    column)."""
    from dflash_diag.analysis import phase

    frame = pl.DataFrame(
        {
            "step": list(range(1, 11)),
            "tok_per_sec": [None, None, None, 5.0, 5.0, 5.0, 5.0, 5.0, None, None],
            "script": [None] * 10,
        },
        schema={"step": pl.Int64, "tok_per_sec": pl.Float64, "script": pl.String},
    )

    def no_filter(self: pl.DataFrame, *args: object, **kwargs: object) -> pl.DataFrame:
        raise AssertionError("a contiguous selection was filtered")

    monkeypatch.setattr(pl.DataFrame, "filter", no_filter)
    selected, selection = phase.select_phase(frame, "auto", from_step=5)
    assert selected["step"].to_list() == [5, 6, 7, 8]
    assert selection.selected == 4


def test_the_governing_header_is_the_last_record_s():
    from dflash_diag import load_log
    from dflash_diag.analysis.diagnosis import governing_header

    log = load_log("sample_logs/train.jsonl")
    assert len(log.run_starts) == 3  # the lock-step script, the pipeline, its resume
    first = log.metrics.head(3)
    assert governing_header(log, log.metrics) is log.run_starts[2]  # the resumed pipeline's
    assert governing_header(log, first) is log.run_starts[0]  # the lock-step script's
    assert governing_header(log, log.metrics.clear()) is None

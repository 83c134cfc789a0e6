"""The per-window stages on columns (``WindowTable``): trend arrows, loss spikes and the
verdict's points give exactly what the one-window-at-a-time code gives (the same floats, bit for
bit), on the corpus' real logs and on generated edge cases (None, NaN, Inf, ties, short runs)."""

from __future__ import annotations

import dataclasses
import math
import random

import polars as pl
import pytest

from dflash_diag import load_log
from dflash_diag.analysis.alerts import loss_spikes, value_resolution
from dflash_diag.analysis.alive import screen_records
from dflash_diag.analysis.phase import select_phase
from dflash_diag.analysis.restarts import resolve_restarts
from dflash_diag.analysis.trend import TrendConfig, compute_trends
from dflash_diag.analysis.verdict import MAX_POINTS, _points, judge
from dflash_diag.analysis.windows import (
    Window,
    WindowTable,
    choose_window,
    compute_window_table,
    compute_windows,
)
from dflash_diag.errors import DiagError
from tests.diag.wild_harness import ROOT, load_expectations
from tests.diag.window_references import (
    compute_trends_reference,
    loss_spikes_reference,
    points_reference,
)

WILD = ROOT / "shared" / "wild"
SPECIAL = [None, math.nan, math.inf, -math.inf]
CONFIGS = [
    TrendConfig(),
    TrendConfig(noise_aware=True),
    TrendConfig(acc_threshold=0.0, loss_threshold=0.0),
    TrendConfig(acc_threshold=0.05, loss_threshold=0.2, noise_aware=True),
]


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (repr tells every float apart, and -0.0 from 0.0)."""
    return repr(a) == repr(b)


def _random_windows(rng: random.Random, count: int, p_special: float) -> list[Window]:
    def value(low, high):
        if rng.random() < p_special:
            return rng.choice(SPECIAL)
        # a few repeated values: ties of the medians and of the deltas
        return rng.choice([low, high, round(rng.uniform(low, high), 3)])

    windows, step = [], 0
    for index in range(count):
        first = step + rng.randrange(3)
        last = first + rng.randrange(5)
        windows.append(
            Window(
                index=index,
                start=step,
                end=step + 9,
                n=rng.randrange(1, 60),
                first_step=first,
                last_step=last,
                loss=value(1.0, 3.0),
                acc=value(0.1, 0.4),
                weighted=rng.random() < 0.5,
                acc_se=value(0.0, 0.02),
                loss_se=value(0.0, 0.05),
                nonfinite=0,
                tau_train=None,
            )
        )
        step += 10 * rng.randrange(1, 3)
    return windows


@pytest.mark.parametrize("seed", range(12))
def test_trends_on_columns_match_the_loop(seed):
    rng = random.Random(seed)
    windows = _random_windows(
        rng, rng.choice([0, 1, 2, 7, 300]), p_special=[0.0, 0.2, 0.6][seed % 3]
    )
    for config in CONFIGS:
        got = compute_trends(WindowTable.from_windows(windows), config)
        assert _same(got, compute_trends_reference(windows, config)), config
        assert _same(compute_trends(windows, config), got)  # objects take the same path


@pytest.mark.parametrize("seed", range(40))
def test_loss_spikes_on_columns_match_the_loop(seed):
    rng = random.Random(100 + seed)
    n = rng.choice([0, 1, 2, 3, 5, 20, 400])
    base = [3.0 * math.exp(-i / 50) + rng.gauss(0, 0.02) for i in range(n)]
    losses: list[float | None] = [
        round(v, rng.choice([2, 4, 8])) if rng.random() < 0.5 else v for v in base
    ]
    for i in range(n):
        roll = rng.random()
        if roll < 0.05:
            losses[i] = rng.choice(SPECIAL)
        elif roll < 0.1:
            losses[i] = (losses[i - 1] if i and losses[i - 1] is not None else 1.0) * 3  # a spike
        elif roll < 0.15 and i:
            losses[i] = losses[i - 1]  # a tie with the window before
    for kwargs in (
        {},
        {"neighbours": 1},
        {"neighbours": 2, "factor": 2.0},
        {"neighbours": 5, "rel_floor": 0.0},
        {"resolution": value_resolution(losses)},
        {"neighbours": 0},
    ):
        assert loss_spikes(losses, **kwargs) == loss_spikes_reference(losses, **kwargs), kwargs


def test_loss_spikes_finds_a_spike_beside_missing_windows():
    losses = [1.0, None, 1.01, 0.99, 5.0, math.nan, 1.0, 1.02, 0.98]
    assert loss_spikes(losses) == loss_spikes_reference(losses) == [4]


@pytest.mark.parametrize("count", [0, 5, MAX_POINTS, MAX_POINTS + 1, 2 * MAX_POINTS + 7, 5000])
def test_verdict_points_on_columns_match_the_loop(count):
    windows = _random_windows(random.Random(count), count, p_special=0.1)
    table = WindowTable.from_windows(windows)
    for metric in ("acc", "loss"):
        assert _same(_points(table, metric), points_reference(windows, metric)), metric


def test_judge_gives_the_same_verdict_from_objects_and_columns():
    windows = _random_windows(random.Random(5), 900, p_special=0.05)
    for skip in (set(), {"acc"}, {"acc", "loss"}):
        a = judge(windows, current_acc=0.3, target_acc=0.5, skip=skip)
        b = judge(WindowTable.from_windows(windows), current_acc=0.3, target_acc=0.5, skip=skip)
        assert _same(a, b)


def test_windows_built_from_columns_are_ordinary_windows():
    frame = pl.DataFrame(
        {"step": list(range(1, 301)), "loss": [1.0 / s for s in range(1, 301)], "acc": [0.2] * 300}
    )
    table = compute_window_table(frame, 50)
    windows = table.windows()
    assert table.windows() is windows  # built once
    plain = [Window(**{f.name: getattr(w, f.name) for f in dataclasses.fields(w)}) for w in windows]
    assert windows == plain
    assert [hash(w) for w in windows] == [hash(w) for w in plain]
    assert [repr(w) for w in windows] == [repr(w) for w in plain]
    assert dataclasses.asdict(windows[0]) == dataclasses.asdict(plain[0])
    assert dataclasses.replace(windows[1], n=3).n == 3
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
        windows[0].n = 1  # type: ignore[misc]
    assert WindowTable.from_windows(windows).frame.equals(table.frame)
    assert table.tail(2).windows() == windows[-2:]
    assert compute_windows(frame, 50) == windows
    assert compute_window_table(frame.clear(), 50).windows() == []


def _read_logs() -> list[str]:
    return sorted(p for p, e in load_expectations().items() if e.expect == "read")


@pytest.mark.skipif(not WILD.is_dir(), reason="the real-log corpus shared/wild is absent")
def test_the_stages_on_columns_match_the_loop_on_real_logs():
    """Every corpus log that reads (132 small files), at its auto window and at one step a window (the most
    windows, so the most local peaks and ties)."""
    checked = 0
    for item in _read_logs():
        try:
            log = load_log(WILD / item)
        except DiagError:
            continue
        frame, _ = resolve_restarts(log.metrics)
        frame, _ = select_phase(frame, "auto", None, None)
        if frame.height == 0:
            continue
        frame, _ = screen_records(frame)
        for size in {choose_window(frame).size, 1}:
            table = compute_window_table(frame, size)
            windows = table.windows()
            losses = [w.loss for w in windows]
            resolution = value_resolution(losses)
            assert loss_spikes(table.array("loss"), resolution=resolution) == (
                loss_spikes_reference(losses, resolution=resolution)
            ), item
            for config in CONFIGS:
                assert _same(
                    compute_trends(table, config), compute_trends_reference(windows, config)
                ), item
            for metric in ("acc", "loss"):
                assert _same(_points(table, metric), points_reference(windows, metric)), item
            checked += 1
    assert checked >= 100


def test_fields_no_record_holds_give_what_their_null_columns_give():
    """The query leaves out the fields no record holds (an HF log: no accuracy, no weights, no
    walk); the windows are those of the full query over the all-null columns, bit for bit."""
    from dflash_diag.analysis.windows import _aggregate

    rng = random.Random(11)
    names = ["loss", "acc", "n_pred", "n_blocks", "tau_train", "lr", "tok_per_sec"]
    names += ["walk_tokens", "walk_steps"]
    full = {
        "step": sorted(rng.sample(range(2000), 900)),
        **{
            name: [rng.choice([*SPECIAL, 0.0, 1.0, rng.uniform(0, 9)]) for _ in range(900)]
            for name in names
        },
    }
    for trial in range(60):
        kept = {name for name in names if rng.random() < 0.5}
        columns = {
            name: values if name in kept or name == "step" else [None] * 900
            for name, values in full.items()
            if name == "step" or name in kept or rng.random() < 0.5  # absent, or all null
        }
        frame = pl.DataFrame(
            columns, schema={n: pl.Int64 if n == "step" else pl.Float64 for n in columns}
        )
        if trial % 2:
            frame = frame.sample(fraction=1.0, shuffle=True, seed=trial)  # the hashed group-by
        for size, start in ((7, 0), (50, 13)):
            assert _aggregate(frame, size, start).height > 0
            assert _aggregate(frame, size, start).equals(
                _aggregate(frame, size, start, elide_empty=False)
            ), (sorted(kept), frame.columns)

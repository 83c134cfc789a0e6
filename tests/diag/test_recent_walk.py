"""The walk the primary estimate reads: the latest walked records, not the whole last window
(docs/diagnostics.md, "The walk reads the latest walked records")."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from dflash_diag.analysis.recent_walk import RECENT_RECORDS, recent_walk
from dflash_diag.analysis.windows import compute_windows, ratio_se

from .logs import dumps
from .test_diagnosis import as_json

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _frame(ratios: dict[int, float], walk_steps: float = 20.0) -> pl.DataFrame:
    steps = sorted(ratios)
    return pl.DataFrame(
        {
            "step": steps,
            "walk_tokens": [ratios[s] * walk_steps for s in steps],
            "walk_steps": [walk_steps] * len(steps),
        }
    )


def test_a_rising_walk_is_read_from_its_latest_records():
    # a walk on every step rising 1.0 -> 1.5 over 50 steps: the whole window reads its middle
    frame = _frame({s: 1.0 + 0.01 * s for s in range(1, 51)})
    recent = recent_walk(frame, 50)
    assert (recent.n, recent.first_step, recent.last_step) == (RECENT_RECORDS, 43, 50)
    assert recent.tau == pytest.approx(1.0 + 0.01 * 46.5)
    # up_to_step: the latest records at or before it
    assert recent_walk(frame, 50, up_to_step=20).last_step == 20


def test_the_span_never_reaches_back_more_than_one_window():
    # a walk every 10 steps (the trainer's default) in 50-step windows: 5 records, read whole
    frame = _frame({s: 2.0 + 0.01 * (s % 20) for s in range(10, 201, 10)})
    recent = recent_walk(frame, 50)
    assert (recent.n, recent.first_step) == (5, 160)
    assert recent_walk(_frame({}), 50) is None
    assert recent_walk(pl.DataFrame({"step": [1, 2]}), 50) is None


def test_a_noisy_walk_reads_more_records_while_it_is_too_noisy_to_lead():
    # all-or-nothing records (tau 3.5 or 1.5): the latest 8 are too noisy, 21 within ±10%
    ratios = {s: (3.5 if s % 3 == 0 else 1.5) for s in range(1, 51)}
    recent = recent_walk(_frame(ratios), 50)
    assert recent.n == 21
    assert recent.se / recent.tau <= 0.10
    shorter = recent_walk(_frame(ratios), 50, min_records=recent.n - 1)
    assert shorter.n == recent.n  # the fewest adequate records, not one fewer
    # never adequate: the whole span, to be listed with its reason
    wild = {s: (20.0 if s % 10 == 0 else 1.0) for s in range(1, 21)}
    assert recent_walk(_frame(wild), 20).n == 20


def test_a_pipeline_run_cut_inside_its_second_epoch_reads_its_current_tau(tmp_path):
    """The case the default window lost: cosine-6e-4-s0 cut at its eval of step 40 (epoch 1.64),
    every eval hidden. The last window (steps 1-40) reached back to the run's first steps and its
    walk read 11% below the measured tau; the latest records read within 10%."""
    records = [json.loads(line) for line in (RUNS / "cosine-6e-4-s0" / "train.jsonl").open()]
    measured = next(r["tau"] for r in records if r.get("event") == "eval" and r["step"] == 40)
    kept = [r for r in records if r.get("event") != "eval" and r.get("step", 0) <= 40]
    path = tmp_path / "cut.jsonl"
    path.write_bytes(dumps(kept))
    a = as_json("converge", path, "-f", "json")["acceptance"]
    assert a["estimator"] == "walk"
    assert abs(a["tau"] / measured - 1) <= 0.10
    walk = a["estimates"][0]
    assert walk["basis"] == "walk_tokens / walk_steps, latest records, steps 33-40, 8 records"


def test_read_whole_it_is_the_window_walk():
    """Over a span the window holds whole, the walk and its standard error are the window's
    (:func:`~dflash_diag.analysis.windows.ratio_se`)."""
    frame = pl.DataFrame(
        {
            "step": list(range(1, 21)),
            "walk_steps": [float(10 + s * 7 % 13) for s in range(1, 21)],  # walks of unequal length
            "walk_tokens": [float(15 + s * 11 % 23) for s in range(1, 21)],
            "loss": [1.0] * 20,
            "acc": [0.5] * 20,
        }
    )
    (window,) = compute_windows(frame, 20)
    recent = recent_walk(frame, 20, min_records=20)
    assert recent.n == window.walk_n == 20
    assert recent.tau == pytest.approx(window.tau_walk)
    assert recent.se == pytest.approx(window.tau_walk_se)
    tokens, steps = frame["walk_tokens"].to_list(), frame["walk_steps"].to_list()
    assert recent.se == pytest.approx(ratio_se(tokens, steps))

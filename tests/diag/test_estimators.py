"""The estimator table and the single-job functions estimate_acceptance is composed of."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflash_diag import LogEvent
from dflash_diag.analysis.acceptance import (
    AcceptanceConfig,
    TauEstimate,
    calibration_at,
    measured_pick,
    mismatch_warnings,
    target_of,
    with_errors,
)
from dflash_diag.analysis.estimators import (
    BY_NAME,
    ESTIMATOR_ORDER,
    ESTIMATORS,
    Evidence,
    Walk,
    estimates_of,
    leading,
    ranking_text,
)

LISTS = {"acc_pos": pl.List(pl.Float64), "accept_pos": pl.List(pl.Float64)}


def _rows(acc_pos, accept_pos):
    return pl.DataFrame({"acc_pos": acc_pos, "accept_pos": accept_pos}, schema=LISTS)


def _eval(step, tau):
    return LogEvent("eval", 0, 0, step, {"step": step, "tau": tau, "n_prompts": 8})


def test_the_table_ranks_as_documented():
    """docs/diagnostics.md and README: measured > walk > harmonic > chain > linear; prefix never
    leads. The report's ranking line is the table's."""
    assert ESTIMATOR_ORDER == ("measured", "walk", "harmonic", "chain", "linear")
    assert ranking_text() == "measured > walk > harmonic > chain > linear"
    assert [e.name for e in ESTIMATORS][-1] == "prefix"
    assert not BY_NAME["prefix"].leads
    # every estimator that can lead has a per-window series (the forecast and sparkline read it)
    assert all(e.series is not None for e in ESTIMATORS if e.leads)
    # the cheap series are those that read no per-position lists
    assert {e.name for e in ESTIMATORS if e.leads and not e.reads_lists} == {
        "measured",
        "walk",
        "linear",
    }


def test_each_estimator_needs_its_evidence():
    empty = Evidence(_rows([], []), 16)
    assert estimates_of(empty) == []
    rows = _rows([[0.5, 0.5]], [[0.5, 0.4]])
    full = Evidence(rows, 3, acc=0.5, walk=Walk(2.0, se=0.01, n=5), measured=_eval(10, 1.5))
    assert [e.name for e in estimates_of(full)] == [e.name for e in ESTIMATORS]


def test_the_walk_is_one_value():
    rows = _rows([[0.5, 0.5]], [[0.5, 0.4]])
    judged = estimates_of(Evidence(rows, 3, walk=Walk(2.0, "w", se=0.5, n=2)))
    assert judged[0].held_back == "walk too thin to lead: 2 records, 3 needed"
    assert judged[0].basis == "w; walk too thin to lead: 2 records, 3 needed"
    assert leading(judged).name == "harmonic"
    adequate = estimates_of(Evidence(rows, 3, walk=Walk(2.0, "w", se=0.1, n=5)))
    assert adequate[0].basis == "w, 5 records"
    assert leading(adequate).name == "walk"
    in_sample = Walk(2.0, "w", se=0.1, n=5, in_sample="walk in-sample")
    assert estimates_of(Evidence(rows, 3, walk=in_sample))[0].held_back == "walk in-sample"
    # a caller that does not count records does not judge them
    assert leading(estimates_of(Evidence(rows, 3, walk=Walk(2.0)))).name == "walk"


def test_measured_pick_takes_the_latest_eval_and_its_age():
    evals = [_eval(10, 1.5), _eval(30, 1.7), _eval(50, 1.9)]
    event, age = measured_pick(evals, 40)
    assert (event.step, age) == (30, 10)
    assert measured_pick(evals, None)[1] is None
    assert measured_pick([], 40) == (None, None)


def test_errors_mismatch_and_calibration_each_alone():
    measured = TauEstimate("measured", 1.1, "eval")
    estimates = with_errors([measured, TauEstimate("harmonic", 3.0, "h")], 1.1)
    assert estimates[0].error is None
    assert estimates[1].error == pytest.approx(1.9)
    assert "(harmonic)" in mismatch_warnings(estimates, 1.1)[0]
    assert mismatch_warnings(estimates, 2.5) == []
    # linear and chain never raise the alarm: they read high in healthy runs
    assert mismatch_warnings([measured, TauEstimate("linear", 9.0, "l")], 1.1) == []
    calibration = calibration_at(_eval(10, 2.0), lambda step: [TauEstimate("chain", 2.5, "c")])
    assert (calibration.estimator, calibration.ratio) == ("chain", pytest.approx(0.8))
    assert calibration_at(_eval(10, 2.0), None) is None


def test_targets_keep_their_units():
    linear = TauEstimate("linear", 4.0, "l")
    harmonic = TauEstimate("harmonic", 2.0, "h")
    acc = target_of(AcceptanceConfig(), 0.135, harmonic, 16)
    assert (acc.kind, acc.target_tau, acc.progress) == ("acc", None, pytest.approx(0.5))
    assert target_of(AcceptanceConfig(), 0.2, linear, 16).target_tau == pytest.approx(5.05)
    tau = target_of(AcceptanceConfig(target_tau=3.0), 0.2, harmonic, 16)
    assert (tau.kind, tau.target_acc, tau.progress) == ("tau", None, pytest.approx(0.5))
    assert target_of(AcceptanceConfig(target_tau=4.0), 0.2, linear, 16).target_acc == 0.2


# -- issue 19's fresh audit (audit 4): each test fails on the mutation its docstring names ------


def _windows(*spans):
    """Stand-ins for analysis windows (the series read index, start, end and last_step)."""
    from types import SimpleNamespace

    return [
        SimpleNamespace(index=i, start=a, end=b, first_step=a, last_step=b, tau_walk=None, acc=None)
        for i, a, b in spans
    ]


def test_when_every_ranked_estimate_is_held_back_the_strongest_still_leads():
    """Bug guarded: no primary estimate at all when the walk is held back and nothing else
    exists (a noisy walk is still better than none)."""
    walk = TauEstimate("walk", 3.0, "walk", held_back="walk too thin to lead")
    prefix = TauEstimate("prefix", 4.0, "tau_train")
    assert leading([walk, prefix]) == walk
    assert leading([prefix]) is None  # the upper view never leads


def test_an_eval_at_a_windows_last_step_is_that_windows_measured_tau():
    """Bug guarded: the measured series takes evals strictly before a window's last step (the
    eval a trainer runs at the step it logs would fall to the next window)."""
    from dflash_diag.analysis.estimators import SeriesInput, estimator_series

    inp = SeriesInput(
        windows=_windows((0, 1, 10), (1, 11, 20)),
        frame=pl.DataFrame({"step": list(range(1, 21))}),
        load=lambda rows: rows,
        evals=[_eval(10, 2.0), _eval(20, 3.0)],
        block_size=16,
    )
    assert estimator_series("measured", inp) == [2.0, 3.0]


@given(
    evals=st.lists(st.tuples(st.integers(0, 60), st.floats(1.0, 9.0)), max_size=25),
    lasts=st.lists(st.integers(0, 70), min_size=1, max_size=20).map(sorted),
)
def test_the_measured_series_is_the_latest_eval_at_or_before_each_window(evals, lasts):
    """The bisection agrees with a scan of every eval per window, duplicate eval steps (the later
    record wins) and evals in any file order included."""
    from dflash_diag.analysis.estimators import SeriesInput, estimator_series, measurements

    events = [_eval(step, tau) for step, tau in evals]
    inp = SeriesInput(
        windows=_windows(*((i, last, last) for i, last in enumerate(lasts))),
        frame=pl.DataFrame({"step": [0]}),
        load=lambda rows: rows,
        evals=events,
        block_size=16,
    )
    latest = {e.step: e.fields["tau"] for e in measurements(events, lasts[-1])}
    expected = []
    for last in lasts:
        before = [tau for step, tau in sorted(latest.items()) if step <= last]
        expected.append(before[-1] if before else None)
    assert estimator_series("measured", inp) == expected


def test_list_series_of_windows_not_starting_at_index_0_stay_aligned():
    """Bug guarded: the list-based series groups records from the first window's start, so
    that windows whose first index is not 0 (``--from-step``, a gap) read their neighbours'."""
    from dflash_diag.analysis.estimators import SeriesInput, chain_tau, estimator_series

    steps = list(range(11, 31))
    frame = pl.DataFrame(
        {"step": steps, "acc_pos": [[0.5, 0.5] if s <= 20 else [0.9, 0.9] for s in steps]},
        schema={"step": pl.Int64, "acc_pos": pl.List(pl.Float64)},
    )
    inp = SeriesInput(
        windows=_windows((1, 11, 20), (2, 21, 30)),
        frame=frame,
        load=lambda rows: rows,
        evals=[],
        block_size=3,
    )
    assert estimator_series("chain", inp) == [chain_tau([0.5, 0.5]), chain_tau([0.9, 0.9])]


def test_n_blocks_weigh_positions_only_when_every_record_has_blocks():
    """Bug guarded: ``n_blocks`` used as the weight when only some records have blocks (a
    record of 0 blocks then vanishes from the mean instead of counting like the others)."""
    from dflash_diag.analysis.estimators import mean_positions

    rows = pl.DataFrame(
        {"acc_pos": [[1.0], [0.0]], "n_blocks": [0, 2]},
        schema={"acc_pos": pl.List(pl.Float64), "n_blocks": pl.Int64},
    )
    assert mean_positions(rows, "acc_pos") == [0.5]
    assert mean_positions(rows.with_columns(pl.Series("n_blocks", [1, 3])), "acc_pos") == [0.25]


def test_the_measured_tau_carries_its_se_between_prompts_when_the_eval_has_them():
    import math

    from dflash_diag.analysis.estimators import MEASURED, eval_se

    rows = _rows([[0.5, 0.5]], [[0.5, 0.4]])
    tokens, steps = [40, 30, 20, 39], [20, 20, 20, 30]
    fields = {"step": 10, "tau": 129 / 90, "n_prompts": 4}
    fields |= {"prompt_tokens": tokens, "prompt_steps": steps}
    ev = Evidence(rows, 3, measured=LogEvent("eval", 0, 0, 10, fields))
    measured = next(e for e in estimates_of(ev) if e.name == MEASURED)
    r = 129 / 90  # the ratio of sums; the delta-method SE, prompts as the draws
    resid = sum((t - r * s) ** 2 for t, s in zip(tokens, steps, strict=True))
    assert measured.se == pytest.approx(math.sqrt(resid / (4 * 3)) / (90 / 4))
    assert measured.se > 0.1
    # older logs (no per-prompt results) and lists that do not pair up: no SE
    assert eval_se({"tau": 1.5}) is None
    assert eval_se({"prompt_tokens": [1, 2], "prompt_steps": [1]}) is None
    assert eval_se({"prompt_tokens": [1, True], "prompt_steps": [1, 1]}) is None
    assert eval_se({"prompt_tokens": [3], "prompt_steps": [2]}) is None  # one prompt
    old = Evidence(rows, 3, measured=_eval(10, 1.5))
    assert next(e for e in estimates_of(old) if e.name == MEASURED).se is None


def test_the_64_prompt_evals_of_our_runs_have_an_se_of_at_most_4_percent():
    """Real material: the committed runs with a 64-prompt eval (tests/fixtures/runs_eval64*/)
    carry per-prompt results whose ratio is the eval's tau; past the first evals the SE between
    prompts is 2.2-3.7% of tau (an 8-prompt eval's: 8-11%)."""
    import json
    from pathlib import Path

    from dflash_diag.analysis.estimators import eval_se

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    logs = sorted(fixtures.glob("runs_eval64*/*/train.jsonl"))
    assert len(logs) >= 5
    ses = []
    for log in logs:
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("event") != "eval":
                continue
            assert rec["n_prompts"] == 64
            assert sum(rec["prompt_tokens"]) / sum(rec["prompt_steps"]) == pytest.approx(rec["tau"])
            if rec["step"] > 16:
                ses.append(eval_se(rec) / rec["tau"])
    assert len(ses) >= 26
    assert min(ses) > 0.02
    assert max(ses) < 0.04


def test_a_list_series_reads_its_lists_a_batch_of_whole_windows_at_a_time(monkeypatch):
    """Bug guarded: a tau target's list-based series read back every record's lists at once
    (1M records: 1 GB). Batches of whole windows give the same series, with the n_blocks
    weighting decided over every record as before (one record of the last window has none)."""
    import random

    from dflash_diag.analysis import estimators
    from dflash_diag.analysis.estimators import SeriesInput, estimator_series

    rng = random.Random(5)
    steps = list(range(1, 1001))
    frame = pl.DataFrame(
        {
            "step": steps,
            "acc_pos": [[rng.random() for _ in range(3)] for _ in steps],
            "n_blocks": [rng.randint(1, 9) if s != 995 else None for s in steps],
        },
        schema={"step": pl.Int64, "acc_pos": pl.List(pl.Float64), "n_blocks": pl.Int64},
    )
    windows = _windows(*((i, 10 * i + 1, 10 * i + 10) for i in range(100)))
    loaded: list[int] = []

    def load(rows):
        loaded.append(rows.height)
        return rows

    whole = estimator_series("chain", SeriesInput(windows, frame, load, [], 4))
    assert loaded == [1000]
    monkeypatch.setattr(estimators, "SERIES_BATCH_ROWS", 64)
    loaded.clear()
    assert estimator_series("chain", SeriesInput(windows, frame, load, [], 4)) == whole
    assert len(loaded) > 10
    assert all(64 <= n < 74 for n in loaded[:-1])
    assert sum(loaded) == 1000

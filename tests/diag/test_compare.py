"""Regimes, boundary explanations and two-run alignment (library level)."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare.report import (
    CompareConfig,
    RunConfig,
    align_runs,
    compare_regimes,
    explain_boundary,
    normalisation_factors,
    tokens_seen,
)
from dflash_diag.render.json import alignment_json, regime_comparison_json

SYNC = {"event": "run_start", "script": "sync", "world_size": 2, "config": {"token_budget": 8192}}
PIPE = {
    "event": "run_start",
    "script": "pipeline",
    "world_size": 1,
    "config": {"token_budget": 65536, "grad_accum": 4},
}


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None)


def story(seed: int = 0, legacy_loss: float = 1.57, acc_after: float = 0.151) -> pl.DataFrame:
    """The original analysis: a dp=2 sync phase to 15000 whose logged loss is half the
    pipeline's, then the pipeline with tok_per_sec and per-step token counts."""
    rng = random.Random(seed)
    rows = [
        {
            "step": s,
            "loss": legacy_loss + rng.gauss(0, 0.02),
            "acc": 0.150 + rng.gauss(0, 0.005),
            "run": 0,
        }
        for s in range(14800, 15000)
    ]
    rows += [
        {
            "step": s,
            "loss": 2 * 1.57 * (1 - 0.0001 * (s - 15000)) + rng.gauss(0, 0.02),
            "acc": acc_after + rng.gauss(0, 0.005),
            "tok_per_sec": 16000.0,
            "n_tokens": 65536 * 4,
            "n_pred": 30000 + (s % 7) * 100,
            "run": 1,
        }
        for s in range(15000, 15300)
    ]
    return _frame(rows)


def test_dp2_legacy_boundary_is_explained_as_normalisation():
    result = compare_regimes(story(), [SYNC, PIPE])
    assert result.split_on == "script"
    assert [r.name for r in result.regimes] == ["sync", "pipeline"]
    sync, pipe = result.regimes
    assert (sync.start_step, sync.end_step, sync.n) == (14800, 14999, 200)
    assert (pipe.start_step, pipe.end_step, pipe.n) == (15000, 15299, 300)
    assert sync.tokens_per_step == 8192 * 2  # budget x dp x accum(1), from the header
    assert sync.tokens_per_step_source.startswith("token_budget")
    assert pipe.tokens_per_step == 65536 * 4  # from n_tokens
    assert pipe.tokens_per_step_source == "n_tokens"
    assert sync.tok_per_sec is None
    assert pipe.tok_per_sec == 16000.0
    # robust trends per 1k steps: the pipeline's loss falls 2 * 1.57 * 1e-4 per step
    assert pipe.loss_trend == pytest.approx(-2 * 1.57 * 0.1, rel=0.15)
    assert abs(sync.loss_trend) < 0.1
    assert abs(pipe.acc_trend) < 0.02

    (b,) = result.boundaries
    assert b.step == 15000
    assert b.loss_ratio == pytest.approx(2 * 1.57 * (1 - 0.0001 * 25) / 1.57, rel=0.02)
    assert abs(b.acc_delta) < 0.01
    assert b.matched == "dp=2"
    assert b.n_before == 50
    assert b.n_after == 50
    assert b.explanation.startswith(f"loss x{b.loss_ratio:.2f} at step 15000 matches dp=2")
    assert "not a change in the model" in b.explanation


def test_json_has_the_contract_keys():
    d = regime_comparison_json(compare_regimes(story(), [SYNC, PIPE]))
    for regime in d["regimes"]:
        keys = ("name", "start_step", "end_step", "n", "tokens_per_step", "tok_per_sec", "loss")
        assert set(keys) | {"acc"} <= regime.keys()
    assert {"step", "loss_ratio", "acc_delta", "explanation"} <= d["boundaries"][0].keys()


def test_acc_moving_with_the_jump_is_not_called_a_normalisation_artefact():
    result = compare_regimes(story(acc_after=0.20), [SYNC, PIPE])
    (b,) = result.boundaries
    assert b.matched == "dp=2"
    assert b.acc_delta == pytest.approx(0.05, abs=0.01)
    assert "not a change in the model" not in b.explanation
    assert "the model changed as well" in b.explanation


def test_unmatched_ratio_says_so():
    # legacy loss x1.4 lower: no factor of the configs (2, 4, 8, ...) explains it
    result = compare_regimes(story(legacy_loss=3.14 / 1.4), [SYNC, PIPE])
    (b,) = result.boundaries
    assert b.matched is None
    assert "matches no normalisation factor" in b.explanation
    assert "dp=2 (x2)" in b.explanation  # says what it tried


def test_k_counts_steps_not_entries():
    rows = [{"step": s, "loss": 1.0, "acc": 0.1, "run": 0} for s in range(0, 1000, 10)]
    rows += [
        {"step": s, "loss": 2.0, "acc": 0.1, "tok_per_sec": 1.0, "run": 1}
        for s in range(1000, 2000, 10)
    ]
    result = compare_regimes(_frame(rows), [SYNC, PIPE], CompareConfig(k=50))
    (b,) = result.boundaries
    assert (b.n_before, b.n_after) == (5, 5)
    assert b.loss_ratio == pytest.approx(2.0)


def test_single_regime_log_has_no_boundary():
    rows = [
        {"step": s, "loss": 3.0 - s / 1000, "acc": 0.1 + s / 10000, "tok_per_sec": 1e4, "run": 0}
        for s in range(200)
    ]
    result = compare_regimes(_frame(rows), [PIPE])
    assert result.split_on is None
    assert len(result.regimes) == 1
    assert result.boundaries == []
    assert result.regimes[0].name == "pipeline"


def test_plain_restart_is_not_a_regime_change():
    rows = [{"step": s, "loss": 2.0, "acc": 0.1, "tok_per_sec": 1.0, "run": 0} for s in range(100)]
    rows += [
        {"step": s, "loss": 2.0, "acc": 0.1, "tok_per_sec": 1.0, "run": 1} for s in range(100, 200)
    ]
    result = compare_regimes(_frame(rows), [PIPE, dict(PIPE, resumed_from={"step": 99})])
    assert result.boundaries == []
    assert len(result.regimes) == 1


def test_field_signature_splits_headerless_logs():
    rows = [{"step": s, "loss": 1.5, "acc": 0.15} for s in range(100)]
    rows += [{"step": s, "loss": 3.0, "acc": 0.15, "tok_per_sec": 1e4} for s in range(100, 200)]
    result = compare_regimes(_frame(rows))
    assert result.split_on == "fields"
    assert [r.name for r in result.regimes] == ["legacy", "pipeline"]
    (b,) = result.boundaries
    assert b.step == 100
    assert b.loss_ratio == pytest.approx(2.0)
    assert b.matched is None  # no header, so no factor can be confirmed ...
    assert "close to x2" in b.explanation
    assert "no run_start header" in b.explanation
    assert "not a change in the model" in b.explanation  # ... but acc did not move

    rows = [dict(r, loss=3.0 / 1.4) if r["step"] < 100 else r for r in rows]
    (b,) = compare_regimes(_frame(rows)).boundaries
    assert b.loss_ratio == pytest.approx(1.4)
    assert "headers do not record" in b.explanation  # x1.43 is no whole factor


def test_config_change_splits_when_the_script_is_the_same():
    a = {"event": "run_start", "script": "pipeline", "world_size": 1, "config": {"grad_accum": 1}}
    b = {"event": "run_start", "script": "pipeline", "world_size": 1, "config": {"grad_accum": 4}}
    rows = [{"step": s, "loss": 2.0, "acc": 0.2, "tok_per_sec": 1.0, "run": 0} for s in range(60)]
    rows += [
        {"step": s, "loss": 0.5, "acc": 0.2, "tok_per_sec": 1.0, "run": 1} for s in range(60, 120)
    ]
    result = compare_regimes(_frame(rows), [a, b])
    assert result.split_on == "config"
    assert [r.name for r in result.regimes] == ["dp=1 accum=1", "dp=1 accum=4"]
    (bd,) = result.boundaries
    assert bd.loss_ratio == pytest.approx(0.25)
    assert bd.matched == "grad_accum=4"


def test_regime_returning_gets_a_numbered_name():
    rows = [{"step": s, "loss": 1.0, "acc": 0.1} for s in range(50)]
    rows += [{"step": s, "loss": 1.0, "acc": 0.1, "tok_per_sec": 1.0} for s in range(50, 100)]
    rows += [{"step": s, "loss": 1.0, "acc": 0.1} for s in range(100, 150)]
    result = compare_regimes(_frame(rows))
    assert [r.name for r in result.regimes] == ["legacy", "pipeline", "legacy #2"]
    assert all("no loss jump" in b.explanation for b in result.boundaries)


def test_nonfinite_values_are_left_out_of_the_means():
    rows = [{"step": s, "loss": 1.0, "acc": 0.1} for s in range(50)]
    rows[-1]["loss"] = math.nan
    rows += [{"step": s, "loss": 2.0, "acc": 0.1, "tok_per_sec": 1.0} for s in range(50, 100)]
    rows[-1]["loss"] = math.inf
    (b,) = compare_regimes(_frame(rows)).boundaries
    assert b.loss_ratio == pytest.approx(2.0)


def test_run_config_reads_aliases_and_ignores_junk():
    cfg = RunConfig.from_header(
        {
            "script": "sync",
            "config": {"gradient_accumulation_steps": 8, "max_tokens": 4096, "dp": True},
        }
    )
    assert cfg == RunConfig(script="sync", world_size=None, grad_accum=8, token_budget=4096)
    assert RunConfig.from_header({"world_size": "2"}).world_size is None


def test_normalisation_factors_simplest_first_with_products():
    f = dict(normalisation_factors(RunConfig.from_header(SYNC), RunConfig.from_header(PIPE)))
    assert f["dp=2"] == 2
    assert f["grad_accum=4"] == 4
    assert f["token budget 8192->65536"] == 8
    assert f["dp=2 x token budget 8192->65536"] == 16
    assert "dp=2 x grad_accum=4" not in f  # x8 is already named, by the simpler token budget
    assert next(iter(f)) == "dp=2"


def test_compare_config_validation():
    with pytest.raises(ValueError, match="--k"):
        CompareConfig(k=0)
    with pytest.raises(ValueError, match="tolerance"):
        CompareConfig(factor_tolerance=1.5)


# ---- two runs -------------------------------------------------------------------------------


def _run(tokens_per_step: int, steps: int) -> pl.DataFrame:
    """acc grows with tokens seen, the same curve for any batch size."""
    return _frame(
        [
            {
                "step": s,
                "loss": 3.0 - 1e-6 * s * tokens_per_step,
                "acc": 0.1 + 1e-7 * s * tokens_per_step,
                "n_tokens": tokens_per_step,
            }
            for s in range(1, steps + 1)
        ]
    )


def test_tokens_seen_counts_step_gaps():
    frame = _frame([{"step": s, "n_tokens": 100} for s in (10, 20, 30)])
    series, source = tokens_seen(frame)
    assert source == "n_tokens"
    assert series.to_list() == [0.0, 1000.0, 2000.0]
    series, source = tokens_seen(frame.drop("n_tokens"), tokens_per_step=100)
    assert (source, series.to_list()) == ("tokens_per_step", [0.0, 1000.0, 2000.0])
    with pytest.raises(ValueError, match="no n_tokens"):
        tokens_seen(frame.drop("n_tokens"))


def test_two_runs_align_on_tokens_seen():
    small, big = _run(1000, 400), _run(2000, 200)  # same tokens in total
    by_tokens = align_runs(small, big, x="tokens", window=50, names=("small", "big"))
    assert by_tokens.x == "tokens"
    assert by_tokens.width == 50 * 1000
    assert len(by_tokens.windows) == 8
    for w in by_tokens.windows:
        assert w.n_a == 50
        assert w.n_b == 25
        assert abs(w.acc_diff) < 0.003  # same curve on the token axis
    by_steps = align_runs(small, big, x="step", window=50)
    first = by_steps.windows[0]
    assert first.acc_diff > 0.002  # the big-batch run is ahead per step
    assert by_steps.windows[-1].n_b == 0
    assert by_steps.windows[-1].acc_b is None
    assert alignment_json(by_tokens)["runs"] == ["small", "big"]


def test_align_rejects_bad_arguments():
    run = _run(10, 10)
    with pytest.raises(ValueError, match="--x"):
        align_runs(run, run, x="time")
    with pytest.raises(ValueError, match="--window"):
        align_runs(run, run, window=0)
    with pytest.raises(ValueError, match="at least one"):
        align_runs(run, run.clear())


def test_degenerate_loss_ratios_do_not_crash():
    config = CompareConfig()
    for ratio in (0.0, -2.0, math.inf):
        text, matched = explain_boundary(100, ratio, 0.0, [("dp=2", 2.0)], config)
        assert "not comparable" in text
        assert matched is None
    text, _ = explain_boundary(100, None, 0.01, [], config)
    assert "not enough finite loss" in text


_value = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True, width=32), st.just(0.0)
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 30), _value, _value, st.booleans(), st.integers(-1, 2)),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 60),
)
def test_any_log_shape_gives_regimes_and_explanations(records, k):
    """Gaps, NaN/Inf/zero/None values, any header pattern: regimes cover every row, in order,
    and every boundary has an explanation; nothing raises."""
    step, rows = 0, []
    for gap, loss, acc, pipeline, run in records:
        step += gap
        row = {"step": step, "loss": loss, "acc": acc, "run": run}
        if pipeline:
            row["tok_per_sec"] = 1.0
        rows.append(row)
    frame = pl.DataFrame(
        rows,
        schema={
            "step": pl.Int64,
            "loss": pl.Float64,
            "acc": pl.Float64,
            "run": pl.Int32,
            "tok_per_sec": pl.Float64,
        },
    )
    result = compare_regimes(frame, [SYNC, PIPE, dict(SYNC, world_size=4)], CompareConfig(k=k))
    assert sum(r.n for r in result.regimes) == len(rows)
    assert [r.start_step for r in result.regimes] == sorted(r.start_step for r in result.regimes)
    assert len(result.boundaries) == len(result.regimes) - 1
    assert all(b.explanation for b in result.boundaries)


def test_per_token_loss_ratio_weights_by_n_pred():
    # after the switch, big batches have low loss and small ones high: the plain mean of batch
    # losses overstates the per-token loss
    rows = [{"step": s, "loss": 1.0, "acc": 0.1, "n_pred": 100} for s in range(50)]
    rows += [
        {
            "step": s,
            "loss": 1.0 if s % 2 else 3.0,
            "acc": 0.1,
            "n_pred": 300 if s % 2 else 100,
            "tok_per_sec": 1.0,
        }
        for s in range(50, 100)
    ]
    (b,) = compare_regimes(_frame(rows)).boundaries
    # one weighting rule in every command: n_pred where every row carries it (the plain mean of
    # the batch losses, (1 + 3) / 2 = 2.0, is what compare used to print)
    assert b.loss_ratio == pytest.approx((300 * 1.0 + 100 * 3.0) / 400)
    assert b.per_token_loss_ratio == pytest.approx((300 * 1.0 + 100 * 3.0) / 400)


def test_regime_spanning_two_headers_takes_the_last_header_in_force(tmp_path):
    """A pipeline regime logged under two headers (dp=1 budget 4096, then dp=2 budget 8192):
    its config and tokens per step come from the last header in force, and the boundary with
    the sync regime is explained by that config (dp=2), not by the first pipeline header's
    (which has no factor against sync)."""
    import json

    from typer.testing import CliRunner

    from dflash_diag.cli import app

    lines = [{"event": "run_start", "script": "sync", "world_size": 1, "token_budget": 4096}]
    lines += [{"step": s, "loss": 1.5 - s / 1e4, "acc": 0.3 + s / 1e5} for s in range(1, 101)]
    lines.append(
        {"event": "run_start", "script": "pipeline", "world_size": 1, "token_budget": 4096}
    )
    lines += [{"step": s, "loss": 3.0 - s / 1e4, "acc": 0.3 + s / 1e5} for s in range(101, 151)]
    lines.append(
        {"event": "run_start", "script": "pipeline", "world_size": 2, "token_budget": 8192}
    )
    lines += [{"step": s, "loss": 3.0 - s / 1e4, "acc": 0.3 + s / 1e5} for s in range(151, 301)]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = CliRunner().invoke(app, ["compare", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    sync, pipeline = data["regimes"]
    assert (pipeline["start_step"], pipeline["end_step"]) == (101, 300)
    assert pipeline["config"]["world_size"] == 2
    assert pipeline["config"]["token_budget"] == 8192
    assert pipeline["tokens_per_step"] == 16384.0  # 8192 x dp 2, from the last header
    assert sync["tokens_per_step"] == 4096.0
    (boundary,) = data["boundaries"]
    assert boundary["matched"] == "dp=2"
    assert "matches dp=2" in boundary["explanation"]


def test_acc_zero_on_one_side_only_is_an_accuracy_signal(tmp_path):
    """acc 0 before a boundary and 0.3 after: the accuracy moved, so a loss jump that no config
    factor explains is a real change in training, not 'no accuracy signal' (that is acc 0 on
    BOTH sides; audit survivor)."""
    import json

    from typer.testing import CliRunner

    from dflash_diag.cli import app

    lines = [{"event": "run_start", "script": "sync", "world_size": 1}]
    lines += [{"step": s, "loss": 2.0, "acc": 0.0} for s in range(1, 101)]
    lines.append({"event": "run_start", "script": "pipeline", "world_size": 1})
    lines += [{"step": s, "loss": 3.4, "acc": 0.3} for s in range(101, 201)]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = CliRunner().invoke(app, ["compare", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    (boundary,) = json.loads(result.stdout)["boundaries"]
    assert "no accuracy signal" not in boundary["explanation"]
    assert "looks like a real change in training" in boundary["explanation"]

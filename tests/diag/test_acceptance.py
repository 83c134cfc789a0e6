"""Acceptance-length estimators, target and progress, errors against a measured tau, mismatch."""

from __future__ import annotations

import polars as pl
import pytest

from dflash_diag import (
    AcceptanceConfig,
    LogEvent,
    chain_tau,
    estimate_acceptance,
    linear_tau,
    prefix_tau,
)
from dflash_diag.analysis.acceptance import mean_positions
from dflash_diag.analysis.estimators import Walk


def test_estimator_formulas():
    assert linear_tau(0.168, 16) == pytest.approx(3.52)
    assert chain_tau([0.5, 0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert prefix_tau([0.6, 0.3, 0.1]) == pytest.approx(2.0)


def _rows(acc_pos=None, accept_pos=None, n_blocks=None):
    return pl.DataFrame(
        {"acc_pos": acc_pos, "accept_pos": accept_pos, "n_blocks": n_blocks},
        schema={
            "acc_pos": pl.List(pl.Float64),
            "accept_pos": pl.List(pl.Float64),
            "n_blocks": pl.Float64,
        },
    )


def test_position_means_are_block_weighted():
    rows = _rows(acc_pos=[[0.2, 0.1], [0.6, 0.5]], n_blocks=[1.0, 3.0])
    assert mean_positions(rows, "acc_pos") == pytest.approx([0.5, 0.4])
    rows = _rows(acc_pos=[[0.2, 0.1], [0.6, 0.5]], n_blocks=[1.0, None])
    assert mean_positions(rows, "acc_pos") == pytest.approx([0.4, 0.3])


def _eval(step, tau):
    return LogEvent("eval", 0, 0, step, {"step": step, "tau": tau, "n_prompts": 8})


def test_linear_only_progress_is_acc_over_target():
    result = estimate_acceptance(0.1766, "last window", _rows([], []), [], AcceptanceConfig())
    assert result.estimator == "linear"
    assert result.tau == pytest.approx(1 + 15 * 0.1766)
    assert result.progress == pytest.approx(0.1766 / 0.27)
    assert result.vs_baseline == pytest.approx(1 + 15 * 0.1766 - 3.1)
    assert (result.block_size, result.block_size_source) == (16, "default")


def test_best_estimator_and_errors_against_measured():
    rows = _rows(acc_pos=[[0.5, 0.5]], accept_pos=[[0.5, 0.4]])
    result = estimate_acceptance(
        0.5,
        "w",
        rows,
        [_eval(90, 1.5), _eval(100, 1.8), _eval(200, 9.0)],
        AcceptanceConfig(block_size=3),
        up_to_step=150,
    )
    assert [e.name for e in result.estimates] == [
        "measured",
        "harmonic",
        "chain",
        "linear",
        "prefix",
    ]
    assert result.estimator == "measured"
    assert result.tau == 1.8
    assert result.measured_step == 100
    assert result.measured_age == 50
    errors = {e.name: e.error for e in result.estimates}
    assert errors["measured"] is None
    # harmonic: A = 1, 0.5, 0.4, 0 -> 1 / (0.5/1 + 0.1/2 + 0.4/3)
    assert errors["harmonic"] == pytest.approx(1 / (0.5 + 0.05 + 0.4 / 3) - 1.8)
    assert errors["prefix"] == pytest.approx(1.9 - 1.8)
    assert errors["chain"] == pytest.approx(1.75 - 1.8)
    assert errors["linear"] == pytest.approx(2.0 - 1.8)
    assert result.warnings == []


def test_tau_train_is_the_upper_view_never_primary_and_header_block_size():
    rows = _rows(accept_pos=[[0.5, 0.4]])
    result = estimate_acceptance(
        0.2, "w", rows, [], AcceptanceConfig(), header_block_size=8, tau_train=2.5
    )
    assert result.estimator == "harmonic"
    assert [e.name for e in result.estimates] == ["harmonic", "linear", "prefix"]
    prefix = result.estimates[-1]
    assert prefix.tau == 2.5
    assert prefix.upper_view
    assert "upper view" in prefix.basis
    assert (result.block_size, result.block_size_source) == (8, "header")
    # tau_train alone (no accuracy, no lists): no primary estimate at all
    alone = estimate_acceptance(None, "w", _rows(), [], AcceptanceConfig(), tau_train=6.0)
    assert alone.estimator is None
    assert alone.tau is None
    assert [e.name for e in alone.estimates] == ["prefix"]


def test_target_tau_sets_target_acc_through_linear_inverse_only_under_linear():
    result = estimate_acceptance(0.2, "w", _rows(), [], AcceptanceConfig(target_tau=4.0))
    assert result.target_acc == pytest.approx(0.2)
    assert result.progress == pytest.approx(1.0)
    measured = estimate_acceptance(
        0.2, "w", _rows(), [_eval(10, 2.5)], AcceptanceConfig(target_tau=4.0)
    )
    assert measured.target_kind == "tau"
    assert measured.target_acc is None
    assert measured.progress == pytest.approx(1.5 / 3.0)


def test_accuracy_target_stays_in_accuracy_units():
    # The complaint: acc 0.51 with a measured tau 2.02 read "progress 25%" and
    # "target unreachable". In accuracy units it is 0.51 / 0.27, whatever the estimator.
    result = estimate_acceptance(0.5145, "w", _rows(), [_eval(10, 2.02)], AcceptanceConfig())
    assert result.target_kind == "acc"
    assert result.target_acc == 0.27
    assert result.progress == pytest.approx(0.5145 / 0.27)
    assert result.target_tau is None  # never converted through the linear formula here
    linear = estimate_acceptance(0.1766, "w", _rows(), [], AcceptanceConfig())
    assert linear.target_tau == pytest.approx(1 + 15 * 0.27)  # one scale under linear


def test_mismatch_warning_high_accuracy_low_measured_tau():
    leaky = _rows(accept_pos=[[0.95] * 15])
    result = estimate_acceptance(0.95, "w", leaky, [_eval(10, 1.1)], AcceptanceConfig())
    assert result.tau == 1.1
    assert result.warnings
    assert "mismatch" in result.warnings[0]
    # without walk or harmonic estimates there is nothing trustworthy to compare with
    assert (
        estimate_acceptance(0.95, "w", _rows(), [_eval(10, 1.1)], AcceptanceConfig()).warnings == []
    )


def test_config_validation():
    for bad in ({"block_size": 1}, {"target_acc": 0.0}, {"target_tau": 1.0}, {"baseline_tau": 0.5}):
        with pytest.raises(ValueError, match=next(iter(bad)).split("_")[-1]):
            AcceptanceConfig(**bad)


def test_mismatch_is_judged_against_walk_else_harmonic_not_the_upward_biased_prefix():
    # A healthy run of the bundled pipeline: tau_train (uniform anchors) and the linear formula
    # read far above the measured tau, the harmonic estimate close to it: no alarm.
    healthy = _rows(acc_pos=[[0.6, 0.45, 0.35, 0.3]], accept_pos=[[0.6, 0.5, 0.45, 0.42]])
    result = estimate_acceptance(
        0.5, "w", healthy, [_eval(10, 1.6)], AcceptanceConfig(block_size=5), tau_train=2.97
    )
    assert [e.name for e in result.estimates][:2] == ["measured", "harmonic"]
    assert result.estimates[-1].name == "prefix"
    assert result.warnings == []
    # A label-shift or anchor-leak drafter: near-perfect per position in training, tau ~1 served.
    leaky = _rows(acc_pos=[[0.97, 0.96, 0.95, 0.95]], accept_pos=[[0.97, 0.94, 0.9, 0.87]])
    result = estimate_acceptance(0.96, "w", leaky, [_eval(10, 1.1)], AcceptanceConfig(block_size=5))
    assert result.warnings
    assert "harmonic" in result.warnings[0]
    # the walked tau, where logged, is the one compared
    walked = estimate_acceptance(
        0.96, "w", leaky, [_eval(10, 1.1)], AcceptanceConfig(block_size=5), walk=Walk(3.5)
    )
    assert walked.warnings
    assert "(walk)" in walked.warnings[0]


def test_only_the_first_b_minus_1_positions_count_toward_tau():
    """A block of B tokens drafts B - 1 positions: a longer list's tail (a bug in a logger, a
    hostile log) must not change the chain, harmonic or prefix estimates."""
    exact = _rows(acc_pos=[[0.9, 0.8, 0.7]], accept_pos=[[0.9, 0.7, 0.5]])
    longer = _rows(acc_pos=[[0.9, 0.8, 0.7, 1.0, 1.0, 1.0]], accept_pos=[[0.9, 0.7, 0.5, 0.5, 0.5]])
    config = AcceptanceConfig(block_size=4)
    want = estimate_acceptance(0.8, "w", exact, [], config)
    got = estimate_acceptance(0.8, "w", longer, [], config)
    assert {e.name: e.tau for e in got.estimates} == pytest.approx(
        {e.name: e.tau for e in want.estimates}
    )
    assert mean_positions(longer, "acc_pos", 3) == pytest.approx([0.9, 0.8, 0.7])


def test_per_window_chain_series_uses_b_minus_1_positions(tmp_path):
    """The per-window tau series (the ETA's points) cuts the lists the same way."""
    import json

    from dflash_diag import load_log
    from dflash_diag.analysis.diagnosis import DiagnosisConfig
    from dflash_diag.converge.report import build_converge_report

    def log(extra):
        lines = [json.dumps({"event": "run_start", "block_size": 4})]
        lines += [
            json.dumps(
                {"step": s, "loss": 3 - s / 100, "acc": 0.5, "acc_pos": [0.9, 0.8, 0.7, *extra]}
            )
            for s in range(1, 201)
        ]
        path = tmp_path / f"log{len(extra)}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        config = DiagnosisConfig(acceptance=AcceptanceConfig(block_size=4, target_tau=3.0))
        return build_converge_report(load_log(path), config)  # a tau target: the series

    exact, longer = log([]), log([1.0] * 20)
    assert longer.tau_series == pytest.approx(exact.tau_series)
    assert longer.acceptance.tau == pytest.approx(exact.acceptance.tau)

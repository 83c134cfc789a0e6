"""The original analysis (docs/design.md) reproduced end to end, as the issue requires."""

from __future__ import annotations

import math

import pytest

from dflash_diag import ConvergeConfig, build_converge_report, parse_records
from dflash_diag.render.json import converge_json

from .logs import ORIGINAL_ARROWS, ORIGINAL_MEANS, dumps, original_analysis


@pytest.fixture(scope="module")
def report():
    return build_converge_report(parse_records(dumps(original_analysis())), ConvergeConfig())


def test_pipeline_phase_is_selected(report):
    assert report.selection.phase == "pipeline"
    assert report.selection.selected == 350
    assert report.windows[0].window.start == 15000


def test_window_means_and_arrows(report):
    windows = converge_json(report)["windows"]
    assert [w["start"] for w in windows] == [15000 + 50 * k for k in range(7)]
    assert [w["n"] for w in windows] == [50] * 7
    assert [w["acc"] for w in windows] == pytest.approx(ORIGINAL_MEANS, abs=1e-12)
    assert tuple(w["trend"] for w in windows) == ORIGINAL_ARROWS


def test_linear_tau_and_progress(report):
    acceptance = converge_json(report)["acceptance"]
    acc = ORIGINAL_MEANS[-1]
    assert acceptance["estimator"] == "linear"
    assert acceptance["acc"] == pytest.approx(acc)
    assert acceptance["tau"] == pytest.approx(1 + 15 * acc)
    assert acceptance["progress"] == pytest.approx(acc / 0.27)
    assert acceptance["target_tau"] == pytest.approx(1 + 15 * 0.27)
    assert acceptance["baseline_tau"] == 3.1


def test_schedule_still_warming_up(report):
    lr = converge_json(report)["lr"]
    assert lr["current"] == pytest.approx(2.43e-4)
    assert lr["peak"] == 6e-4
    assert lr["peak_source"] == "header"
    assert lr["phase"] == "warmup"
    assert lr["fraction_of_peak"] == pytest.approx(2.43e-4 / 6e-4)


def test_verdict_converging_with_eta(report):
    verdict = converge_json(report)["verdict"]
    assert verdict["status"] == "converging"
    assert verdict["p_value"] < 0.01
    assert verdict["slope_per_1k_steps"] > 0
    # The ETA is the forecast's (a saturating curve), not the straight line's: later than the
    # line says, and the same number in the verdict and the forecast object.
    slope_per_step = verdict["slope_per_1k_steps"] / 1000
    target = converge_json(report)["forecast"]["target"]
    assert target["metric"] == "acc"
    assert target["eta_step"] is not None
    assert verdict["eta_steps"] == target["eta_step"] - report.last_step
    assert verdict["eta_steps"] > (0.27 - ORIGINAL_MEANS[-1]) / slope_per_step
    assert math.isclose(report.verdict.seconds_per_step, 4.1, rel_tol=1e-6)

"""The forecast (issue 22): the plan, the curve fits, the interval, the ETA, and the CLI/JSON.

Pure functions are tested on seeded synthetic curves (edge cases); the forecast itself on a real
completed public run of the corpus (``shared/wild/...``) and on the committed sample log.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.curve_families import Progress, fit_family
from dflash_diag.analysis.forecast import MIN_POINTS, Series, Timeline, forecast_series
from dflash_diag.analysis.plan import RunPlan, matched_kind, plan_of, schedule_lr
from dflash_diag.analysis.schedule import ScheduleHeader
from dflash_diag.analysis.target_eta import eta_to
from dflash_diag.cli import app

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs" / "train.jsonl"
#: A completed public HF Trainer run of the corpus (48 logged losses, linear decay, 2445 steps).
REAL_RUN = (
    ROOT
    / "shared"
    / "wild"
    / "Jaypee34__Sentiment-Analysis-for-Customer-Feedback"
    / "trainer_state.json"
)
runner = CliRunner()


def cli(*args, columns: int = 100):
    return runner.invoke(
        app, [str(a) for a in args], env={"COLUMNS": str(columns), "NO_COLOR": "1"}
    )


def progress(steps) -> Progress:
    steps = np.asarray(steps, dtype=float)
    return Progress(step=steps, s1=steps.copy(), s2=np.zeros_like(steps), scale=float(steps[-1]))


# ------------------------------------------------------------------------------------------
# the curve fits


def test_power_law_fit_recovers_its_parameters():
    rng = np.random.default_rng(0)
    x = np.linspace(100, 2000, 40)
    p = progress(x)
    truth = 1.0 + 2.0 * (x / x[-1]) ** -0.5
    fit = fit_family("power-steps", p, truth + rng.normal(0, 0.005, x.size), np.ones(x.size))
    assert fit.c == pytest.approx(1.0, abs=0.05)
    assert fit.b == pytest.approx(0.5, rel=0.1)
    assert fit.predict(p) == pytest.approx(truth, abs=0.02)


def test_two_spikes_at_the_end_do_not_bend_the_curve():
    # a noisy per-step accuracy (oriented: lower is better) whose newest two records are high
    # by chance: least squares, the recency weights giving them the most say, bends the curve
    # to them and sends its asymptote off; Huber's refits keep it near the truth
    rng = np.random.default_rng(3)
    x = np.arange(5.0, 31.0)
    truth = -(0.3 - 0.25 * (x / x[-1]) ** -1.0)
    z = truth + rng.normal(0, 0.01, x.size)
    z[-2:] -= 0.15
    w = np.power(0.5, (x[-1] - x) / (0.35 * (x[-1] - x[0])))
    end = progress(np.array([80.0]))
    end = Progress(end.step, end.s1, end.s2, scale=float(x[-1]))
    fit = fit_family("power-lr", progress(x), z, w)
    assert float(fit.predict(end)[0]) == pytest.approx(-0.3 + 0.25 * (30 / 80), abs=0.03)


def test_a_curve_that_gets_worse_is_fitted_flat():
    # the families only improve (a >= 0): a rising loss is a constant, not a falling curve
    x = np.linspace(10, 500, 30)
    fit = fit_family("exp", progress(x), 1.0 + x / 1000.0, np.ones(x.size))
    assert fit.a == 0.0
    assert fit.c == pytest.approx(float(np.mean(1.0 + x / 1000.0)))


def test_the_asymptote_stops_at_the_floor():
    # a straight falling prefix would send c below zero; a loss never goes there
    x = np.linspace(10, 300, 25)
    z = 2.0 - x / 200.0
    free = fit_family("power-steps", progress(x), z, np.ones(x.size))
    floored = fit_family("power-steps", progress(x), z, np.ones(x.size), floor=0.0)
    assert free.c < 0 <= floored.c
    assert float(floored.predict(progress([1e6]))[0]) >= 0.0


# ------------------------------------------------------------------------------------------
# the plan


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
@pytest.mark.parametrize("start", [0, 40])
def test_schedule_lr_is_the_pipeline_schedule(kind, start):
    from pipelines.schedule import Schedule, lr_at

    s = Schedule(
        peak_lr=6e-4, warmup_steps=10, total_steps=200, min_lr=6e-5, kind=kind, start_step=start
    )
    for step in (1, 5, 10, 11, 50, 120, 199, 200, 260):
        assert schedule_lr(
            step, kind=kind, peak=6e-4, floor=6e-5, warmup=10, end=200, start=start
        ) == pytest.approx(lr_at(step, s), rel=1e-12)


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
def test_the_schedule_shape_is_read_off_the_logged_lr(kind):
    steps = list(range(10, 400, 10))
    lrs = [schedule_lr(s, kind=kind, peak=5e-5, floor=0.0, warmup=30, end=1000) for s in steps]
    found, peak, warmup = matched_kind(steps, lrs, end=1000)
    assert (found, peak, warmup) == (kind, pytest.approx(5e-5), 30)


def test_plan_sources_and_flags():
    header = ScheduleHeader(
        kind="cosine", peak_lr=6e-4, warmup_steps=6, total_steps=150, min_lr=6e-5
    )
    plan = plan_of(header)
    assert (plan.end_step, plan.end_source, plan.kind, plan.kind_source) == (
        150,
        "header",
        "cosine",
        "header",
    )
    assert plan_of(header, end_step=300).end_source == "--end-step"
    unknown = plan_of(None)
    assert unknown.end_step is None
    assert not unknown.knows_lr
    assert plan_of(None, end_step=100, schedule="linear", peak_lr=1e-3).lr_at(100) == 0.0
    with pytest.raises(ValueError, match="--schedule"):
        plan_of(None, schedule="wsd")


# ------------------------------------------------------------------------------------------
# the forecast and its interval


def _series(x, y) -> Series:
    return Series(
        tuple(float(v) for v in x), tuple(float(v) for v in y), tuple(1 for _ in x), "test points"
    )


def test_not_enough_evidence_below_the_minimum():
    x = np.arange(1, MIN_POINTS) * 10.0
    timeline = Timeline(RunPlan(end_step=1000, end_source="header"), (), (), 1000)
    m = forecast_series(
        "loss",
        _series(x, 3.0 / np.sqrt(x)),
        timeline=timeline,
        target_step=1000,
        higher_is_better=False,
    )
    assert not m.available
    assert m.method == "not enough evidence"
    assert f"need {MIN_POINTS}" in m.reason


def test_a_saturating_curve_cut_at_30_percent_is_forecast_within_its_interval():
    rng = np.random.default_rng(1)
    end = 3000.0
    x = np.linspace(30, 0.3 * end, 30)

    def curve(s):
        return 0.6 - 0.4 * np.exp(-s / 600.0)  # an accuracy rising to 0.6

    timeline = Timeline(RunPlan(end_step=int(end), end_source="header"), (), (), end)
    m = forecast_series(
        "acc",
        _series(x, curve(x) + rng.normal(0, 0.003, x.size)),
        timeline=timeline,
        target_step=end,
        higher_is_better=True,
        best=1.0,
    )
    truth = float(curve(end))
    assert m.low <= truth <= m.high
    assert abs(m.value - truth) < abs(float(curve(x[-1])) - truth)  # better than "no change"
    assert m.path[0][0] == pytest.approx(x[-1])
    assert m.path[-1][0] == end


@pytest.mark.parametrize(
    ("metric", "higher", "bound", "values"),
    [
        # a loss with a log-likelihood term, logged below 0 and still falling
        ("loss", False, {"best": 0.0}, lambda x: 0.5 - x / 800.0),
        # an "accuracy" past 1 (a ratio some trainer logs under that name)
        ("acc", True, {"best": 1.0}, lambda x: 0.7 + x / 2000.0),
        # a tau below its worst, 1 (an estimate's bias)
        ("tau", True, {"worst": 1.0}, lambda x: 1.2 - x / 2000.0),
    ],
)
def test_a_bound_the_points_pass_is_no_bound(metric, higher, bound, values):
    """The value stays inside its own interval: the band was clipped at the bound the data had
    already passed while the median was not (a loss forecast -1.2 in the band 0.0-4.8)."""
    rng = np.random.default_rng(3)
    x = np.linspace(10, 1000, 40)
    timeline = Timeline(RunPlan(end_step=2000, end_source="header"), (), (), 2000)
    m = forecast_series(
        metric,
        _series(x, values(x) + rng.normal(0, 0.01, x.size)),
        timeline=timeline,
        target_step=2000,
        higher_is_better=higher,
        **bound,
    )
    assert m.available
    assert m.low <= m.value <= m.high
    assert all(low <= value <= high for _, value, low, high in m.path)


@pytest.mark.parametrize(
    "log",
    [
        "5697526__CIFAR-10-Network/training.log",
        (
            "Laksh-Mendpara__MLOps-Laksh-B23CS1037/HuggingFace-A/wandb/"
            "run-20260221_102153-bmkwwwfc/files/output.log"
        ),
    ],
)
def test_real_accuracies_in_percent_are_forecast_inside_their_interval(log):
    """Two real logs write their eval accuracy in percent: it was forecast at 85.26 in the band
    0.0-1.0 (the accuracy's bound clipped the band, not the value)."""
    path = Path(__file__).resolve().parents[2] / "shared" / "wild" / log
    result = CliRunner().invoke(app, ["converge", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    forecast = json.loads(result.stdout)["forecast"]["metrics"]["eval_acc"]
    assert forecast["value"] > 1.0
    assert forecast["low"] <= forecast["value"] <= forecast["high"]


# ------------------------------------------------------------------------------------------
# the ETA


def _forecast(values, *, end=1000):
    path = tuple(
        (s, v, v - 0.05, v + 0.05)
        for s, v in zip(np.linspace(500, end, len(values)), values, strict=True)
    )
    from dflash_diag.analysis.forecast import MetricForecast

    return MetricForecast(
        metric="tau",
        step=end,
        value=path[-1][1],
        low=path[-1][2],
        high=path[-1][3],
        method="test",
        higher_is_better=True,
        path=path,
    )


def test_eta_is_the_first_crossing_with_its_interval():
    eta = eta_to(
        _forecast([2.0, 2.5, 3.0, 3.5]),
        target=3.0,
        current=2.0,
        last_step=500,
        planned=True,
        seconds_per_step=2.0,
    )
    assert eta.within_run is True
    assert eta.eta_step == 833
    assert eta.eta_low_step < eta.eta_step < eta.eta_high_step
    assert eta.eta_hours == pytest.approx((833 - 500) * 2.0 / 3600.0, rel=1e-3)


def test_no_eta_past_the_planned_end():
    eta = eta_to(
        _forecast([2.0, 2.2, 2.4]),
        target=3.0,
        current=2.0,
        last_step=500,
        planned=True,
        seconds_per_step=1.0,
    )
    assert eta.within_run is False
    assert eta.eta_step is None
    assert eta.eta_hours is None
    assert eta.reason.startswith("not within this run: at the planned end tau 2.4 (2.35-2.45)")
    unplanned = eta_to(
        _forecast([2.0, 2.2, 2.4]),
        target=3.0,
        current=2.0,
        last_step=500,
        planned=False,
        seconds_per_step=1.0,
    )
    assert unplanned.within_run is None
    assert unplanned.eta_step is None


def test_a_target_already_met_is_reached_now():
    eta = eta_to(
        _forecast([2.0, 2.1]),
        target=1.5,
        current=2.0,
        last_step=500,
        planned=True,
        seconds_per_step=None,
    )
    assert eta.eta_step == 500
    assert eta.within_run is True
    assert eta.reason.startswith("target reached")


# ------------------------------------------------------------------------------------------
# a real curve


@pytest.mark.skipif(not REAL_RUN.is_file(), reason="the corpus run is merged into shared/wild/")
def test_a_real_run_cut_at_half_is_forecast_better_than_the_straight_line():
    state = json.loads(REAL_RUN.read_text())
    losses = [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]
    end = state["max_steps"]
    final = np.mean([v for s, v in losses if s >= 0.95 * end])
    cut = end // 2
    prefix = dict(state, log_history=[e for e in state["log_history"] if e.get("step", 0) <= cut])
    result = cli_json_of(prefix)
    fc = result["forecast"]
    assert (fc["end_step"], fc["end_source"]) == (end, "max_steps")
    loss = fc["metrics"]["loss"]
    assert loss["low"] <= final <= loss["high"]
    seen = [(s, v) for s, v in losses if s <= cut]
    xs, ys = np.array(seen, dtype=float).T
    slope = np.polyfit(xs, ys, 1)[0]
    line = ys[-1] + slope * (end - xs[-1])
    assert abs(loss["value"] - final) < abs(line - final)


#: A completed public Lightning run of the corpus (small LM pretraining, 20 epochs, the loss
#: logged every 50 steps): a curve still falling at 30% of its plan.
REAL_LIGHTNING = (
    ROOT
    / "shared"
    / "wild"
    / "0Xero7__slm_training"
    / "lightning_logs"
    / "version_9"
    / "metrics.csv"
)


@pytest.mark.skipif(
    not REAL_LIGHTNING.is_file(), reason="the corpus run is merged into shared/wild/"
)
def test_a_real_run_still_falling_at_30_percent_is_forecast_better_than_no_change(tmp_path):
    import csv

    with REAL_LIGHTNING.open() as handle:
        losses = [
            (int(r["step"]), float(r["train_loss_step"]))
            for r in csv.DictReader(handle)
            if r["train_loss_step"]
        ]
    first, end = losses[0][0], losses[-1][0]
    final = np.mean([v for s, v in losses if s >= end - 0.05 * (end - first)])
    cut = round(first + 0.3 * (end - first))
    prefix = tmp_path / "metrics.csv"
    lines = REAL_LIGHTNING.read_text().splitlines()
    step_col = lines[0].split(",").index("step")
    prefix.write_text(
        "\n".join([lines[0]] + [ln for ln in lines[1:] if int(ln.split(",")[step_col]) <= cut])
        + "\n"
    )
    result = cli(
        "converge",
        prefix,
        "-f",
        "json",
        "--phase",
        "all",
        "--field",
        "loss=train_loss_step",
        "--end-step",
        end,
    )
    assert result.exit_code == 0, result.output
    loss = json.loads(result.stdout)["forecast"]["metrics"]["loss"]
    seen = [v for s, v in losses if s <= cut]
    last = np.mean(seen[-3:])
    assert loss["low"] <= final <= loss["high"]
    assert abs(loss["value"] - final) < 0.6 * abs(last - final)


def cli_json_of(state: dict) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trainer_state.json"
        path.write_text(json.dumps(state))
        result = cli("converge", path, "-f", "json", "--phase", "all")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------------------
# the CLI and the JSON contract


FORECAST_KEYS = {"end_step", "end_source", "metrics", "target"}
METRIC_KEYS = {"value", "low", "high", "level", "method"}
TARGET_KEYS = {
    "metric",
    "target",
    "eta_step",
    "eta_low_step",
    "eta_high_step",
    "eta_hours",
    "within_run",
}


def test_sample_log_promises_no_eta_after_its_schedule_ended():
    result = cli("converge", SAMPLE, "--target-tau", "3", "-f", "text")
    assert result.exit_code == 0, result.output
    assert "ETA" not in result.stdout
    assert "target tau 3: not within this run" in " ".join(result.stdout.split())
    data = json.loads(cli("converge", SAMPLE, "--target-tau", "3", "-f", "json").stdout)
    fc = data["forecast"]
    assert set(fc) == FORECAST_KEYS
    assert (fc["end_step"], fc["end_source"]) == (410, "header")
    assert set(fc["metrics"]) >= {"loss", "acc", "tau"}
    assert all(set(m) == METRIC_KEYS and m["level"] == 0.8 for m in fc["metrics"].values())
    assert set(fc["target"]) == TARGET_KEYS
    assert fc["target"]["within_run"] is False
    assert fc["target"]["eta_step"] is None
    assert data["verdict"]["eta_steps"] is None


def test_fail_on_target_unreachable():
    assert (
        cli("converge", SAMPLE, "--target-tau", "3", "--fail-on", "target-unreachable").exit_code
        == 1
    )
    assert (
        cli("converge", SAMPLE, "--target-tau", "2", "--fail-on", "target-unreachable").exit_code
        == 0
    )


def test_target_loss_and_end_step():
    data = json.loads(
        cli("converge", SAMPLE, "--target-loss", "0.5", "--end-step", "5000", "-f", "json").stdout
    )
    target = data["forecast"]["target"]
    assert data["forecast"]["end_source"] == "--end-step"
    assert target["metric"] == "loss"
    assert target["target"] == 0.5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--end-step", "0"], "--end-step must be >= 1"),
        (["--schedule", "wsd"], "--schedule"),
        (["--target-loss", "nan"], "--target-loss must be a finite number"),
    ],
)
def test_bad_forecast_options_are_one_line_and_exit_2(args, message):
    result = cli("converge", SAMPLE, *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_without_a_plan_the_forecast_looks_ahead_and_says_so(tmp_path):
    lines = [
        json.dumps({"step": s, "loss": 2.0 + 3.0 / math.sqrt(s), "acc": 0.5 - 0.3 / math.sqrt(s)})
        for s in range(1, 601)
    ]
    path = tmp_path / "plain.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = json.loads(cli("converge", path, "-f", "json", "--target-acc", "0.495").stdout)
    assert data["forecast"]["end_step"] is None
    assert data["forecast"]["end_source"] is None
    assert data["forecast"]["target"]["within_run"] is None
    text = " ".join(cli("converge", path, "-f", "text").stdout.split())
    assert "at +599 steps (no planned end)" in text


@pytest.mark.parametrize(
    "command", [("converge", "-f", "text"), ("compare", "-f", "text"), ("watch", "--once")]
)
@pytest.mark.parametrize("columns", [80, 100])
def test_one_forecast_line_in_every_command_that_fits(command, columns):
    result = cli(command[0], SAMPLE, *command[1:], columns=columns)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns
    assert any("forecast" in line and "80%" in line for line in lines)
    text = " ".join(result.stdout.split())
    assert "tau 2.4" in text  # a forecast number stays whole across the wrap


def test_watch_plot_draws_the_band_after_the_data():
    from dflash_diag.watch import LiveLog, WatchConfig, build_view
    from dflash_diag.watch.render import _forecast_path

    live = LiveLog(SAMPLE, WatchConfig(plot=True))
    live.refresh()
    view = build_view(live)
    path = _forecast_path(view, "tau (measured)")
    assert path
    assert path[0][0] >= 400
    assert path[-1][0] == 410
    assert all(low <= value <= high for _, value, low, high in path)


def test_a_run_at_its_planned_end_is_not_forecast_as_if_it_went_on():
    """The sample log's last step is its schedule's end (410): the line says the run is there
    and that the band is the fit at the end; before the plan ends it says 'at the planned end'."""
    text = " ".join(cli("converge", SAMPLE, "-f", "text").stdout.split())
    assert "run at its planned end, step 410 (header); fitted there, 80%:" in text
    early = " ".join(cli("converge", SAMPLE, "--to-step", "300", "-f", "text").stdout.split())
    assert "at the planned end, step 410 (header), 80%:" in early


def test_an_eval_at_the_first_analysed_step_is_forecast_from():
    """Bug guarded (issue 19's fresh audit): the evals' range excludes its first step, so an
    eval at the first analysed step (``--from-step``, or a run evaluating at step 0) is lost."""
    from dflash_diag import LogEvent
    from dflash_diag.analysis.run_forecast import eval_series

    evals = [LogEvent("eval", 0, 0, s, {"step": s, "tau": 1.5 + s / 100}) for s in (10, 50, 100)]
    assert eval_series(evals, "tau", 10, 100).steps == (10.0, 50.0, 100.0)
    assert eval_series(evals, "tau", 11, 99).steps == (50.0,)


def test_the_tau_forecast_never_passes_the_block_size():
    """Bug guarded (issue 19's fresh audit): the run forecast does not hand B to the tau
    forecast, and a steep rise of the measured tau is extrapolated past B tokens a step (41
    tokens from blocks of 8 here), which no drafter can reach."""
    import polars as pl

    from dflash_diag import LogEvent
    from dflash_diag.analysis.run_forecast import forecast_run

    steps = list(range(10, 210, 10))
    frame = pl.DataFrame(
        {"step": steps, "loss": [3.0 - s / 100 for s in steps], "lr": [1e-3] * len(steps)}
    )
    evals = [LogEvent("eval", 0, 0, s, {"step": s, "tau": 1.0 + s / 40}) for s in steps]
    tau = forecast_run(frame, plan=plan_of(None, end_step=2000), evals=evals, block_size=8)
    forecast = tau.metrics["tau"]
    assert forecast.value is not None
    assert forecast.high is not None
    assert forecast.value <= forecast.high <= 8.0

"""Issue 18: a verdict that holds on any training log (validation, broken runs, drafter or not,
one answer in every command). Each case the issue lists is a test here; the real-log
expectations are in test_wild_verdicts.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.alerts import loss_spikes, value_resolution
from dflash_diag.analysis.alive import broken_reason, screen_records
from dflash_diag.analysis.diagnosis import diagnose
from dflash_diag.analysis.validation import EvalPoint, judge_series, tau_se
from dflash_diag.analysis.verdict import judge
from dflash_diag.analysis.windows import choose_window, compute_window_table
from dflash_diag.cli import app
from dflash_diag.read.jsonl import load_log
from tests.diag.logs import write

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _converge_json(path, *args):
    result = invoke("converge", path, "-f", "json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _trainer_state(path, history, **extra):
    path.mkdir(parents=True, exist_ok=True)
    state = {"log_history": history, "global_step": history[-1]["step"], **extra}
    (path / "trainer_state.json").write_text(json.dumps(state))
    return path


# -- validation ---------------------------------------------------------------------------------


def test_eval_loss_rising_while_train_loss_falls_is_overfitting(tmp_path):
    """The issue's run: eval loss 1.11 -> 2.75 while the train loss falls (was CONVERGING)."""
    history = []
    for step in range(10, 1010, 10):
        history.append(
            {
                "step": step,
                "loss": 2.0 * math.exp(-step / 400) + 0.05,
                "learning_rate": 1e-4,
                "epoch": step / 100,
            }
        )
        if step % 100 == 0:
            history.append(
                {
                    "step": step,
                    "eval_loss": 1.11 + 1.64 * (step - 100) / 900 if step > 100 else 1.3,
                    "epoch": step / 100,
                }
            )
    run = _trainer_state(tmp_path / "out", history, max_steps=1000)
    data = _converge_json(run)
    v = data["verdict"]
    assert v["status"] == "overfitting"
    assert v["best_step"] == 200
    loss = next(t for t in v["validation"] if t["field"] == "loss")
    assert loss["status"] == "worse"
    assert loss["best"] == pytest.approx(1.11 + 1.64 * 100 / 900)
    assert "best" in v["reason"]
    assert "step 200" in v["reason"]
    assert v["eta_steps"] is None
    assert invoke("converge", run, "--fail-on", "overfitting").exit_code == 1


def test_eval_loss_falling_with_the_train_loss_stays_converging(tmp_path):
    history = []
    for step in range(10, 1010, 10):
        history.append(
            {"step": step, "loss": 2.0 * math.exp(-step / 400) + 0.05, "learning_rate": 1e-4}
        )
        if step % 100 == 0:
            history.append({"step": step, "eval_loss": 2.0 * math.exp(-step / 500) + 0.3})
    data = _converge_json(_trainer_state(tmp_path / "out", history))
    assert data["verdict"]["status"] == "converging"
    assert data["verdict"]["validation"][0]["status"] == "improving"


def _drafter_with_evals(taus, hist_scale=2000):
    """A JSONL drafter log (our schema) whose loss keeps falling and whose measured tau is
    ``taus`` at evenly spaced evals; each eval's tau_hist holds ``hist_scale`` verify steps."""
    records = [
        {
            "event": "run_start",
            "schema": 1,
            "script": "pipeline",
            "block_size": 8,
            "schedule": None,
            "steps_per_epoch": 1000,
            "world_size": 1,
            "resumed_from": None,
            "config": {},
            "time": 0.0,
        }
    ]
    n_steps = 1000
    eval_steps = [int(n_steps * (i + 1) / len(taus)) for i in range(len(taus))]
    for step in range(1, n_steps + 1):
        records.append(
            {
                "step": step,
                "time": float(step),
                "epoch": step / 1000,
                "loss": 3.0 - step / 1000,
                "acc": 0.2 + step / 10000,
                "lr": 1e-4,
            }
        )
        if step in eval_steps:
            tau = taus[eval_steps.index(step)]
            # a histogram of verify-step lengths 1..8 with mean tau: mass on floor/ceil
            lo = int(tau)
            frac = tau - lo
            hist = [0] * 8
            hist[lo - 1] = round(hist_scale * (1 - frac))
            hist[lo] = round(hist_scale * frac)
            records.append(
                {
                    "event": "eval",
                    "step": step,
                    "time": float(step),
                    "tau": tau,
                    "tau_hist": hist,
                    "n_prompts": 8,
                    "new_tokens": 1000,
                    "temperature": 0,
                }
            )
    return records


def test_measured_tau_peaked_and_fell_beyond_its_interval(tmp_path):
    """The EAGLE-3 report: tau 3.28, 3.34, 3.34, 3.24, 3.18 while the loss kept falling."""
    log = write(tmp_path / "train.jsonl", _drafter_with_evals([3.28, 3.34, 3.34, 3.24, 3.18]))
    data = _converge_json(log)
    v = data["verdict"]
    assert v["status"] == "overfitting"
    assert v["best_step"] == 400  # the earliest of the two 3.34 evals
    assert "measured tau peaked at step 400" in v["reason"]
    tau = next(t for t in v["validation"] if t["field"] == "tau")
    assert tau["best_se"] is not None
    assert tau["latest_se"] is not None


def test_tau_wobble_within_its_interval_is_no_peak(tmp_path):
    # 20 verify steps per eval: the intervals are wide, 3.34 -> 3.30 tells nothing
    log = write(
        tmp_path / "train.jsonl", _drafter_with_evals([3.28, 3.34, 3.34, 3.32, 3.30], hist_scale=20)
    )
    assert _converge_json(log)["verdict"]["status"] == "converging"


def test_tau_standard_error_from_the_record():
    assert tau_se({"tau_se": 0.05}) == 0.05
    assert tau_se({"tau_ci": [3.0, 3.392]}) == pytest.approx(0.1)
    # 2 steps of length 1 and 2 of length 3: mean 2, sd sqrt(4/3), se sqrt(4/3)/2
    assert tau_se({"tau_hist": [2, 0, 2]}) == pytest.approx(math.sqrt(4 / 3) / 2)
    assert tau_se({"tau": 3.0}) is None


def test_validation_series_rules():
    falling = [EvalPoint(100 * i, 3.0 - 0.1 * i) for i in range(8)]
    acc = judge_series(falling, field="acc", label="eval acc", higher_is_better=True)
    assert acc.status == "worse"
    assert acc.best_step == 0
    loss = judge_series(falling, field="loss", label="eval loss", higher_is_better=False)
    assert loss.status == "improving"
    assert (
        judge_series(falling[:2], field="loss", label="eval loss", higher_is_better=False).status
        == "not enough data"
    )


# -- alive checks -------------------------------------------------------------------------------


def test_loss_exactly_zero_in_every_record_is_broken(tmp_path):
    log = write(tmp_path / "zero.jsonl", [{"step": s, "loss": 0.0} for s in range(1, 101)])
    data = _converge_json(log)
    assert data["verdict"]["status"] == "broken"
    assert "exactly 0.0 in all 100 records" in data["verdict"]["reason"]
    assert invoke("converge", log, "--fail-on", "broken").exit_code == 1


def test_loss_that_drops_to_exactly_zero_and_stays_is_broken():
    frame = pl.DataFrame({"step": list(range(10, 110, 10)), "loss": [122.1] + [0.0] * 9})
    assert "exactly 0.0 in the last 9 records (since step 20)" in broken_reason(frame)
    healthy = pl.DataFrame({"step": list(range(10)), "loss": [1.0 - 0.05 * i for i in range(10)]})
    assert broken_reason(healthy) is None
    # a loss that decays geometrically to 7e-12 and then underflows to 0.0 fitted perfectly
    fitted = pl.DataFrame(
        {"step": list(range(12)), "loss": [17.6 * 1e-2**i for i in range(7)] + [0.0] * 5}
    )
    assert broken_reason(fitted) is None


def test_constant_loss_and_constant_accuracy_are_broken():
    constant = pl.DataFrame({"step": list(range(20)), "loss": [2.3026] * 20, "acc": [0.1] * 20})
    assert "loss is constant (2.3026)" in broken_reason(constant)
    acc_only = pl.DataFrame({"step": list(range(20)), "acc": [0.5] * 20})
    assert "acc is constant (0.5)" in broken_reason(acc_only)


def test_constant_accuracy_beside_a_moving_loss_is_judged_on_the_loss(tmp_path):
    log = write(
        tmp_path / "acc.jsonl",
        [{"step": s, "loss": 3.0 - s / 500, "acc": 0.25} for s in range(1, 501)],
    )
    data = _converge_json(log)
    assert data["verdict"]["status"] == "converging"
    assert "Theil-Sen slope of loss" in data["verdict"]["reason"]


@pytest.mark.parametrize("bad", [37.0, -0.5])
def test_accuracy_out_of_range_is_left_out_and_counted(tmp_path, bad):
    records = [{"step": s, "loss": 3.0 - s / 500, "acc": 0.2 + s / 5000} for s in range(1, 301)]
    for r in records[-20:]:
        r["acc"] = bad
    log = write(tmp_path / "acc.jsonl", records)
    report = diagnose(load_log(str(log)))
    assert any("20 accuracy values outside [0, 1] left out" in n for n in report.notes)
    assert report.acceptance.tau is not None
    assert report.acceptance.tau < 16
    assert 0 <= report.acceptance.acc <= 1


def test_nonpositive_n_pred_gets_no_vote():
    """acc 0.55 where the per-token accuracy is 0.20: the n_pred 0 records must not vote."""
    rows = []
    for s in range(100):
        if s % 2:
            rows.append({"step": s, "loss": 2.0, "acc": 0.9, "n_pred": 0 if s % 4 == 1 else -5})
        else:
            rows.append({"step": s, "loss": 2.0 + s / 1000, "acc": 0.2, "n_pred": 1000})
    frame, screening = screen_records(pl.DataFrame(rows))
    assert screening.nonpositive_n_pred == 50
    assert frame.filter(pl.col("n_pred") <= 0)["acc"].null_count() == 50
    assert any("50 records with n_pred <= 0 left out" in n for n in screening.notes)
    from dflash_diag.analysis.windows import compute_windows

    (window, *_) = compute_windows(frame, 100)
    assert window.acc == pytest.approx(0.2)
    assert window.weighted


# -- one drafter detector -----------------------------------------------------------------------


def test_an_sft_run_is_no_drafter(tmp_path):
    """TRL SFT's mean_token_accuracy: no tau, no baseline, acceptance null, with the reason."""
    history = [
        {
            "step": s,
            "loss": 2.0 - s / 1000,
            "mean_token_accuracy": 0.5 + s / 4000,
            "learning_rate": 1e-4 * (1 - s / 1000),
            "epoch": s / 100,
        }
        for s in range(10, 1000, 10)
    ]
    run = _trainer_state(tmp_path / "sft", history, max_steps=1000)
    data = _converge_json(run)
    assert data["acceptance"] is None
    assert data["drafter"] == {"is_drafter": False, "reason": data["drafter"]["reason"]}
    assert data["drafter"]["reason"].startswith("no drafter evidence")
    text = invoke("converge", run, "-f", "text")
    assert text.exit_code == 0
    for absent in ("acceptance  ", "tau 1", "baseline", "B=", "target acc", "linear"):
        assert absent not in text.stdout, absent
    assert "not a drafter's log" in text.stdout


def test_a_drafter_preset_without_a_header_says_where_b_comes_from(tmp_path):
    """AngelSlim/EAGLE-3 style train/acc_0..6: chain tau, and B from the positions, not
    "B=8 (header)" when there is no header."""
    rows = []
    for s in range(1, 301):
        row = {"step": s, "lr": 1e-4}
        for k in range(7):
            row[f"train/acc_{k}"] = max(0.0, 0.7 - 0.08 * k + s / 3000)
            row[f"train/ploss_{k}"] = 2.0 - s / 300
        rows.append(row)
    log = write(tmp_path / "eagle.jsonl", rows)
    data = _converge_json(log)
    assert data["drafter"]["is_drafter"]
    assert data["acceptance"]["estimator"] == "chain"
    text = invoke("converge", log, "-f", "text").stdout
    assert "(header)" not in text
    assert "B=8 (7 acc positions + 1)" in text
    assert "run_start header" not in text  # no "run" line for a header the reader made up


# -- windows that fit the log -------------------------------------------------------------------


def test_auto_window_rule():
    dense = pl.DataFrame({"step": list(range(1, 1001))})
    assert choose_window(dense).size == 50  # every step logged: 50-record windows as before
    every_10 = pl.DataFrame({"step": list(range(10, 251, 10))})  # 25 records: 2 a window
    assert choose_window(every_10).size == 20
    sparse = pl.DataFrame({"step": list(range(500, 50001, 500))})  # HF logging_steps=500
    assert choose_window(sparse).size == 2500  # 5 records a window
    short = pl.DataFrame({"step": list(range(500, 15001, 500))})  # 30 records: 3 a window
    assert choose_window(short).size == 1500
    assert choose_window(sparse, 100).size == 100


@pytest.mark.parametrize(
    ("steps", "size", "settled"),
    [(1000, 50, True), (250, 50, True), (249, 24, False), (35, 3, False), (9, 1, False)],
)
def test_a_short_log_written_every_step_gets_ten_windows(steps, size, settled):
    """35 epochs logged at step = epoch (a real CIFAR-10 log) were one 50-step window and no
    verdict: a log written every step keeps 50-step windows while they are the verdict's 5, and
    gets 10 windows when they are not, as a sparser log gets up to 5 records a window."""
    choice = choose_window(pl.DataFrame({"step": list(range(1, steps + 1))}))
    assert (choice.size, choice.settled) == (size, settled)
    assert choice.basis.startswith(f"auto: {size} step")


def test_a_real_short_epoch_log_gets_a_verdict():
    """The real CIFAR-10 training.log: 35 epochs, loss 1.33 -> 0.572, test acc up to 85.2%."""
    report = json.loads(
        invoke(
            "converge", ROOT / "shared/wild/5697526__CIFAR-10-Network/training.log", "-f", "json"
        ).stdout
    )
    assert report["window"]["size"] == 3
    assert len(report["windows"]) == 12
    assert report["verdict"]["status"] == "converging"


def test_an_accuracy_at_its_ceiling_leaves_the_verdict_to_the_loss():
    """A classifier at 100% training accuracy still learns while its loss falls (a real MLflow
    run: loss 0.061 -> 0.0045, acc_step 1.0): acc flat at 1.0 said plateau."""
    records = [
        {"step": s, "loss": 0.06 * 0.75**s, "acc": 1.0 if s > 2 else 0.96875} for s in range(10)
    ]
    windows = compute_window_table(pl.DataFrame(records), 1)
    verdict = judge(windows, current_acc=1.0, target_acc=0.9)
    assert (verdict.status, verdict.metric) == ("converging", "loss")
    assert verdict.reason.endswith("acc is at its ceiling (1.0) in the newest window")
    assert verdict.eta_steps == 0  # the target accuracy is reached
    below = [{**r, "acc": min(r["acc"], 0.99)} for r in records]  # no ceiling: acc flat
    assert (
        judge(compute_window_table(pl.DataFrame(below), 1), current_acc=0.99, target_acc=0.9).metric
        == "acc"
    )


def test_watch_and_converge_judge_the_same_windows(tmp_path):
    """HF's logging_steps=500: converge said CONVERGING, watch --once "not enough data"."""
    history = [
        {
            "step": s,
            "loss": 3.0 * math.exp(-s / 30000) + 0.01 * math.sin(s),
            "learning_rate": 1e-4,
            "epoch": s / 5000,
        }
        for s in range(500, 100001, 500)
    ]
    run = _trainer_state(tmp_path / "hf", history, logging_steps=500)
    converge = _converge_json(run)
    watch = invoke("watch", run, "--once", "-f", "json")
    assert watch.exit_code == 0, watch.output
    frame = json.loads(watch.stdout)
    assert converge["window"]["size"] == 2500
    assert frame["verdict"]["status"] == converge["verdict"]["status"] == "converging"
    assert frame["verdict"]["reason"] == converge["verdict"]["reason"]  # the same 40 windows


def test_watch_judges_the_pruned_windows_too(tmp_path):
    """A long log: watch keeps 40 windows but judges all of them, as converge does."""
    records = [
        {"step": s, "loss": 3.0 - s / 20000, "acc": 0.1 + s / 40000 + 0.02 * math.sin(s / 7)}
        for s in range(1, 8001)
    ]
    log = write(tmp_path / "long.jsonl", records)
    converge = _converge_json(log)
    frame = json.loads(invoke("watch", log, "--once", "-f", "json").stdout)
    assert len(frame["windows"]) == 40
    assert len(converge["windows"]) == 160
    assert frame["verdict"] == converge["verdict"]


def test_watch_forecasts_from_the_whole_log_as_converge(tmp_path):
    """watch's forecast fitted its recent 40 windows (and looked ahead by their span, and saw
    none of the evals before them): another forecast than converge's on the same log."""
    records: list[dict[str, object]] = []
    for s in range(1, 8001):
        records.append(
            {
                "step": s,
                "loss": 1.0 + 2.0 * math.exp(-s / 2500) + 0.02 * math.sin(s / 7),
                "acc": 0.6 - 0.4 * math.exp(-s / 2500),
                "lr": 1e-4,
            }
        )
        if s % 400 == 0:  # every eval but the last before watch's windows
            records.append({"event": "eval", "step": s, "loss": 1.1 + 2.0 * math.exp(-s / 2500)})
    log = write(tmp_path / "long.jsonl", records)
    converge = _converge_json(log)
    frame = json.loads(invoke("watch", log, "--once", "-f", "json").stdout)
    assert len(frame["windows"]) == 40 < len(converge["windows"])
    assert set(converge["forecast"]["metrics"]) >= {"loss", "acc", "eval_loss"}
    assert frame["forecast"] == converge["forecast"]


def test_watch_finds_the_spikes_of_its_pruned_windows_as_converge():
    """A real Whisper trainer_state at --window 20 (watch keeps the newest 40 windows): converge listed
    7 loss spikes, watch none, all 7 being in windows watch had pruned. Both show the newest two
    and count the rest in one line."""
    log = ROOT / "shared/wild/Merlinmy__Whisper_small_hi/trainer_state.json"
    converge = _converge_json(log, "--window", "20")
    frame = json.loads(invoke("watch", log, "--once", "-f", "json", "--window", "20").stdout)
    spikes = [a for a in converge["alerts"] if a["kind"] == "loss_spike"]
    assert len(spikes) == 7
    assert len(frame["windows"]) < len(converge["windows"])
    assert [a for a in frame["alerts"] if a["kind"] != "stall"] == converge["alerts"]
    for command in (("converge",), ("watch", "--once")):
        out = invoke(*command, log, "--window", "20").stdout
        lines = [line for line in out.splitlines() if "spike" in line]
        assert len(lines) == 3, command
        assert "5 earlier loss spikes, steps 1385 to 2725" in lines[0]
        assert "steps 3645-3664" in lines[-1]


def test_watch_reads_the_lr_phase_off_pruned_records_as_converge(tmp_path):
    """The lr logged only in the first quarter (then dropped from the records): the phase is
    inferred from the last lrs logged, which watch had pruned (it said no phase, converge
    decay)."""
    records = [
        {"step": s, "loss": 3.0 - s / 4000, **({"lr": 1e-4 * (1 - s / 4000)} if s <= 2000 else {})}
        for s in range(1, 8001)
    ]
    log = write(tmp_path / "lr.jsonl", records)
    converge = _converge_json(log)
    frame = json.loads(invoke("watch", log, "--once", "-f", "json").stdout)
    assert converge["lr"]["phase"] == "decay"
    assert frame["lr"] == converge["lr"]


@pytest.mark.parametrize(
    ("log", "args"),
    [
        (ROOT / "shared/wild/xueh88401-web__qwen2.5-7b-medical-finetune/trainer_log.jsonl", ()),
        (ROOT / "shared/wild/Velihh__ML_text/trainer_state.json", ("--window", "20")),
    ],
    ids=["llama_factory", "trainer_state_window_20"],
)
def test_watch_forecasts_a_real_log_as_converge(log, args):
    """LLaMA-Factory's log (135 windows, 13 evals): watch said loss 1.566 at +1,990 steps and
    'not enough evidence yet' for the eval loss, converge 1.43 at +6,740 and 1.578. An HF
    trainer_state at --window 20: the lr of the pruned windows belongs to the forecast too."""
    converge = _converge_json(log, *args)
    frame = json.loads(invoke("watch", log, "--once", "-f", "json", *args).stdout)
    assert "eval_loss" in converge["forecast"]["metrics"]
    assert frame["forecast"] == converge["forecast"]


@pytest.mark.parametrize(
    "log",
    [
        ROOT / "tests/fixtures/formats/speculators_jsonl/metrics.jsonl",
        ROOT / "tests/fixtures/formats/torchspec/runs",
    ],
    ids=["speculators_jsonl", "torchspec_tfevents"],
)
def test_watch_forecasts_tau_only_where_converge_does(log):
    """A list-based primary estimator (chain) and no tau target: converge does not fit tau (its
    series would cost a second pass over the lists); watch computed the series for its
    sparkline and fitted it too, a forecast converge never gives."""
    converge = _converge_json(log)
    frame = json.loads(invoke("watch", log, "--once", "-f", "json").stdout)
    assert converge["acceptance"]["estimator"] == "chain"
    assert "tau" not in converge["forecast"]["metrics"]
    assert frame["forecast"] == converge["forecast"]


def test_the_final_eval_belongs_to_the_run_at_any_window():
    """An HF trainer_state (a LoRA run on IMDB): its last eval comes after the last training
    record. The auto window kept it (3 evals, "flat"); a given --window and compare's regime
    (one size for every regime) dropped it: 2 evals, "not enough data", a verdict unlike
    converge's on the same records."""
    log = ROOT / "shared/wild/Tashu014__lora-imdb-distilbert/trainer_state.json"
    auto = _converge_json(log)["verdict"]
    assert [v["n_evals"] for v in auto["validation"]] == [3]
    assert _converge_json(log, "--window", "20")["verdict"]["validation"] == auto["validation"]
    compare = json.loads(invoke("compare", log, log, "-f", "json").stdout)
    assert [r["diagnosis"]["verdict"] for r in compare["regimes"]] == [auto, auto]


# -- block size, wording, spikes ----------------------------------------------------------------


def _header(block_size):
    return {
        "event": "run_start",
        "schema": 1,
        "script": "pipeline",
        "block_size": block_size,
        "schedule": None,
        "steps_per_epoch": 1000,
        "world_size": 1,
        "resumed_from": None,
        "config": {},
        "time": 0.0,
    }


def test_a_block_size_change_is_a_regime_boundary_and_a_note(tmp_path):
    records = [_header(16)]
    records += [
        {"step": s, "loss": 3.0 - s / 1000, "acc": 0.2 + s / 10000, "tok_per_sec": 1e4}
        for s in range(1, 301)
    ]
    records.append(_header(8))
    records += [
        {"step": s, "loss": 2.5 - s / 2000, "acc": 0.35 + s / 10000, "tok_per_sec": 1e4}
        for s in range(301, 601)
    ]
    log = write(tmp_path / "b.jsonl", records)
    report = diagnose(load_log(str(log)))
    assert any("block size changes at step 301: B=16 -> B=8" in n for n in report.notes)
    compare = invoke("compare", log, "-f", "json")
    assert compare.exit_code == 0, compare.output
    data = json.loads(compare.stdout)
    assert [b["step"] for b in data["boundaries"]] == [301]
    assert data["split_on"] == "config"


def test_spikes_respect_the_data_resolution():
    losses = [0.0002] * 10 + [0.0003] + [0.0002] * 5
    assert value_resolution(losses) == pytest.approx(1e-4)
    assert loss_spikes(losses, resolution=value_resolution(losses)) == []
    assert loss_spikes(losses) == [10]  # without it, one unit of the last decimal is a spike
    real = [2.01, 2.02, 2.0, 2.01, 2.02, 5.0, 2.01, 2.0, 2.02, 2.01, 2.0]
    assert loss_spikes(real, resolution=value_resolution(real)) == [5]


def test_no_spike_alert_below_the_logs_rounding(tmp_path):
    """Losses written to 4 decimals: one window at 0.0003 among 0.0002 ones is no spike."""
    records = [
        {"step": s, "loss": 0.0003 if 500 <= s < 550 else 0.0002, "acc": 0.5 + s / 1e5}
        for s in range(1, 1001)
    ]
    data = _converge_json(write(tmp_path / "rounded.jsonl", records))
    assert not [a for a in data["alerts"] if a["kind"] == "loss_spike"]
    records = [
        {
            "step": s,
            "loss": 0.0020 if 500 <= s < 550 else 0.0002 + (s % 7) * 1e-5,
            "acc": 0.5 + s / 1e5,
        }
        for s in range(1, 1001)
    ]
    data = _converge_json(write(tmp_path / "spike.jsonl", records))
    assert [a["step"] for a in data["alerts"] if a["kind"] == "loss_spike"] == [501]


def test_the_final_eval_after_the_last_record_counts(tmp_path):
    """HF evaluates at max_steps, after the last logged step: that eval is the run's last."""
    history = [
        {"step": s, "loss": 2.0 - s / 1000, "learning_rate": 1e-4} for s in range(10, 1000, 10)
    ]
    history += [{"step": s, "eval_loss": 1.5 - s / 2000} for s in (200, 400, 600, 800, 1000)]
    data = _converge_json(_trainer_state(tmp_path / "hf", history, max_steps=1000))
    (loss,) = [t for t in data["verdict"]["validation"] if t["field"] == "loss"]
    assert loss["latest_step"] == 1000
    assert loss["n_evals"] == 5


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5"])
def test_a_bad_window_is_one_line_and_exit_2(tmp_path, value):
    log = write(tmp_path / "t.jsonl", [{"step": s, "loss": 1.0 / s} for s in range(1, 20)])
    for command in ("converge", "compare", "watch"):
        result = invoke(
            command, log, "--window", value, *(["--once"] if command == "watch" else [])
        )
        assert result.exit_code == 2, (command, result.output)
        assert "--window must be" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert invoke("converge", log, "--window", "AUTO").exit_code == 0


@pytest.mark.parametrize(("spikes", "lines"), [(0, 0), (1, 1), (3, 3), (4, 3), (9, 3)])
def test_loss_spikes_past_the_newest_two_are_told_in_one_line(spikes, lines):
    """Three spikes are shown as three lines (a count would save none); more, as the count of the
    older ones and the newest two. Other alerts stay, the diverging one only where asked."""
    from dflash_diag.analysis.alerts import Alert
    from dflash_diag.render.converge_rows import alert_messages

    alerts = [Alert("loss_spike", f"loss spike at {100 * i}", 100 * i) for i in range(spikes)]
    alerts.append(Alert("diverging", "diverging: loss rose"))
    shown = alert_messages(alerts)
    assert len(shown) == lines
    if spikes > 3:
        assert (
            shown[0] == f"{spikes - 2} earlier loss spikes, steps 0 to {100 * (spikes - 3)} "
            "(-f json lists every one)"
        )
        assert shown[1:] == [a.message for a in alerts[spikes - 2 : spikes]]
    assert alert_messages(alerts, diverging=True)[-1] == "diverging: loss rose"

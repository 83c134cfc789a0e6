"""One diagnosis, one answer (issue 9) and estimators ranked by evidence (issue 10, item 2).

Each complaint of the issue is reproduced through the CLI on the committed sample log, on the same
log with its eval records removed, and on seed-style logs, and checked fixed.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.analysis import defaults
from dflash_diag.analysis.acceptance import harmonic_tau, prefix_tau
from dflash_diag.cli import app

from .logs import dumps, original_analysis

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs" / "train.jsonl"


def cli(*args, columns: int = 200):
    result = runner.invoke(
        app, [str(a) for a in args], env={"COLUMNS": str(columns), "NO_COLOR": "1"}
    )
    assert result.exit_code in (0, 1), result.output
    return result


def as_json(*args) -> dict:
    return json.loads(cli(*args).stdout)


def _evals(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "eval":
            out.append(record)
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    """The sample log, the same log without its eval records, and a seed-style original analysis."""
    root = tmp_path_factory.mktemp("logs")
    no_eval = root / "no_eval.jsonl"
    no_eval.write_text(
        "".join(
            line + "\n"
            for line in SAMPLE.read_text().splitlines()
            if not re.search(r'"event": *"eval"', line)
        )
    )
    seed = root / "seed.jsonl"
    seed.write_bytes(dumps(r for r in original_analysis() if r.get("event") != "run_start"))
    return {"sample": SAMPLE, "no_eval": no_eval, "seed": seed}


# ------------------------------------------------------------------------------------------
# the three commands agree


def _compare_last_regime(path: Path) -> tuple[dict, dict]:
    data = as_json("compare", path, "-f", "json")
    last = data["regimes"][-1]["diagnosis"]
    return last["acceptance"], last["verdict"]


@pytest.mark.parametrize("which", ["sample", "no_eval"])
def test_converge_watch_and_compare_report_the_same_answer(logs, which):
    path = logs[which]
    converge = as_json("converge", path, "-f", "json")
    watch = as_json("watch", path, "-f", "json")
    acceptance, verdict = _compare_last_regime(path)
    views = [
        (converge["acceptance"], converge["verdict"]),
        (watch["acceptance"], watch["verdict"]),
        (acceptance, verdict),
    ]
    keys = ("acc", "tau", "estimator", "target_kind", "progress")
    first = {k: views[0][0][k] for k in keys} | {
        "status": views[0][1]["status"],
        "eta_steps": views[0][1]["eta_steps"],
    }
    for a, v in views[1:]:
        assert {k: a[k] for k in keys} | {
            "status": v["status"],
            "eta_steps": v["eta_steps"],
        } == first
    # Without evals the walk outranks the harmonic estimate where its evidence is adequate; a
    # walk held back says why in its basis, and one that leads is within the threshold.
    walk = next((e for e in converge["acceptance"]["estimates"] if e["name"] == "walk"), None)
    walk_leads = walk is not None and "to lead" not in walk["basis"]
    if walk_leads:
        assert walk["se"] is not None
        assert walk["se"] / walk["tau"] <= defaults.WALK_MAX_REL_SE
    assert first["estimator"] == (
        "measured" if which == "sample" else "walk" if walk_leads else "harmonic"
    )
    # and with a tau target, in its own units
    tau_target = [
        as_json(cmd, path, "-f", "json", "--target-tau", "2.5") for cmd in ("converge", "watch")
    ]
    assert tau_target[0]["acceptance"]["progress"] == tau_target[1]["acceptance"]["progress"]
    assert tau_target[0]["verdict"]["eta_steps"] == tau_target[1]["verdict"]["eta_steps"]


def test_the_sample_log_loss_is_weighted_the_same_way_in_compare(logs):
    # compare used to print the plain mean (2.4623) for steps 151-200 where converge and watch
    # weight by n_pred (2.4599); the boundary line used the plain mean too
    converge = as_json("converge", logs["sample"], "-f", "json")
    first = converge["windows"][0]
    assert (first["start"], first["end"]) == (151, 200)
    boundary = as_json("compare", logs["sample"], "-f", "json")["boundaries"][0]
    assert boundary["loss_after"] == pytest.approx(first["loss"])
    text = cli("compare", logs["sample"]).stdout
    assert f"-> {first['loss']:.4f}" in text


# ------------------------------------------------------------------------------------------
# targets in their own units


def test_accuracy_target_reads_as_a_share_of_the_target_accuracy(logs):
    data = as_json("converge", logs["sample"], "-f", "json")
    a = data["acceptance"]
    assert a["target_kind"] == "acc"
    assert a["target_acc"] == 0.27
    assert a["progress"] == pytest.approx(a["acc"] / 0.27)
    assert a["target_tau"] is None  # never mapped through the linear formula beside a measured tau
    text = cli("converge", logs["sample"]).stdout
    assert f"acc {a['acc']:.4f} = {100 * a['progress']:.0f}% of target acc 0.27" in text
    assert "would need acc" not in text
    assert "progress 25%" not in text
    half = as_json("converge", logs["sample"], "-f", "json", "--target-acc", "0.5")["acceptance"]
    assert half["progress"] == pytest.approx(a["acc"] / 0.5)


def test_tau_target_is_progress_of_the_primary_estimate_with_its_own_eta(logs):
    data = as_json("converge", logs["sample"], "-f", "json", "--target-tau", "2.5")
    a, v = data["acceptance"], data["verdict"]
    measured = _evals(logs["sample"])[-1]["tau"]
    assert a["estimator"] == "measured"
    assert a["tau"] == pytest.approx(measured)
    assert a["progress"] == pytest.approx((measured - 1) / 1.5)
    assert a["target_acc"] is None  # not "(acc 0.1)" beside acc 0.51
    # the ETA is read off the forecast of the measured tau (the eval points)
    assert data["forecast"]["target"]["metric"] == "tau"
    assert "tau" in v["eta_reason"]
    text = cli("converge", logs["sample"], "--target-tau", "2.5").stdout
    assert "(acc 0.1)" not in text
    assert "target tau 2.50" in text


def test_no_eta_sentence_without_a_verdict_that_supports_one(logs):
    data = as_json(
        "converge", logs["sample"], "-f", "json", "--window", "200", "--target-acc", "0.9"
    )
    v = data["verdict"]
    assert v["status"] == "not enough data"
    assert v["eta_steps"] is None
    # the ETA is the forecast's: acc 0.9 is beyond this run
    assert v["eta_reason"].startswith("not within this run")
    text = cli("converge", logs["sample"], "--window", "200", "--target-acc", "0.9").stdout
    assert "ETA" not in text
    assert "would need" not in text
    assert "2 windows with acc" in text


def test_an_eval_older_than_the_last_window_shows_its_age(logs):
    data = as_json("converge", logs["sample"], "-f", "json")
    a = data["acceptance"]
    last_eval = _evals(logs["sample"])[-1]["step"]
    assert a["measured_step"] == last_eval
    assert a["measured_age_steps"] == 410 - last_eval
    assert f"{410 - last_eval} steps old" in cli("converge", logs["sample"]).stdout


def test_baseline_is_shown_with_its_source(logs):
    assert (
        "baseline 3.10 (default: the original analysis' reference drafter)"
        in cli("converge", logs["sample"]).stdout
    )
    data = as_json("converge", logs["sample"], "-f", "json", "--baseline-tau", "2.5")
    assert data["acceptance"]["baseline_source"] == "--baseline-tau"


# ------------------------------------------------------------------------------------------
# estimators ranked by evidence


def test_without_evals_the_primary_tau_is_within_15_percent_of_the_removed_measurement(logs):
    measured = _evals(logs["sample"])[-1]["tau"]
    data = as_json("converge", logs["no_eval"], "-f", "json")
    a = data["acceptance"]
    assert a["estimator"] in ("walk", "harmonic")
    assert abs(a["tau"] - measured) / measured < 0.15
    assert a["progress"] == pytest.approx(
        a["acc"] / 0.27
    )  # never "progress 124% · ETA 0" by prefix
    names = [e["name"] for e in a["estimates"]]
    assert names[-1] == "prefix"
    assert a["estimator"] != "prefix"
    prefix = a["estimates"][-1]
    assert prefix["upper_view"]
    assert "upper view" in prefix["basis"]


def test_every_estimate_shows_its_error_and_the_ratio_at_the_last_eval(logs):
    data = as_json("converge", logs["sample"], "-f", "json")
    a = data["acceptance"]
    measured = a["tau"]
    for e in a["estimates"][1:]:
        assert e["error"] == pytest.approx(e["tau"] - measured)
    c = a["calibration"]
    assert c["estimator"] == "harmonic"
    assert c["step"] == a["measured_step"]
    assert c["ratio"] == pytest.approx(c["measured"] / c["estimate"])
    text = cli("converge", logs["sample"]).stdout
    assert f"measured/harmonic at the last eval (step {c['step']})" in text
    assert "ranked measured > walk > harmonic > chain > linear" in text


def _constant_step_log(seed: int = 3, steps: int = 300, block: int = 8) -> tuple[bytes, float]:
    """A log whose accepted length is constant within each decoding step: per training step,
    decoding steps of random lengths, every anchor inside one seeing that step's length. Its
    accept_pos is the anchors' survival curve; the eval records the decoding tau."""
    rng = random.Random(seed)
    lengths = [rng.choice([1, 1, 2, 3, 3, 5, 8]) for _ in range(4000)]
    anchors = sum(lengths)
    survival = [sum(s for s in lengths if s - 1 >= k) / anchors for k in range(1, block)]
    tau = sum(lengths) / len(lengths)
    records = [
        {
            "event": "run_start",
            "schema": 1,
            "script": "pipeline",
            "block_size": block,
            "schedule": {"kind": "constant", "peak_lr": 1e-3},
        }
    ]
    for step in range(1, steps + 1):
        records.append(
            {
                "step": step,
                "time": float(step),
                "loss": 2.0 - step / 1000,
                "acc": 0.3 + step / 3000,
                "lr": 1e-3,
                "tok_per_sec": 1000.0,
                "n_tokens": 1000,
                "n_blocks": 10,
                "n_pred": 100,
                "accept_pos": survival,
                "acc_pos": survival,
            }
        )
    records.append({"event": "eval", "step": steps, "tau": tau, "n_prompts": 4})
    return dumps(records), tau


def test_harmonic_is_exact_when_the_accepted_length_is_constant_within_a_step(tmp_path):
    data, tau = _constant_step_log()
    path = tmp_path / "constant.jsonl"
    path.write_bytes(data)
    with_eval = as_json("converge", path, "-f", "json")["acceptance"]
    harmonic = next(e for e in with_eval["estimates"] if e["name"] == "harmonic")
    assert harmonic["error"] == pytest.approx(0.0, abs=1e-9)
    path.write_bytes(
        b"\n".join(line for line in data.splitlines() if b'"eval"' not in line) + b"\n"
    )
    without = as_json("converge", path, "-f", "json")["acceptance"]
    assert without["estimator"] == "harmonic"
    assert without["tau"] == pytest.approx(tau, rel=1e-12)


def test_harmonic_reads_low_and_prefix_high_on_correlated_runs():
    # Positions a drafter gets right come in runs (a Markov chain of right/wrong). From each
    # anchor the accepted length is the right run after it (capped at B-1); decoding walks from
    # the first position, step 1 + accepted. Anchors inside a run see only its remainder, so the
    # anchors' steps are shorter than decoding's: the harmonic estimate reads low, prefix high.
    block, n = 16, 20000
    rng = random.Random(7)
    right, state = [], True
    for _ in range(n):
        right.append(state)
        state = rng.random() < (0.9 if state else 0.5)
    accepted, run = [0] * n, 0
    for j in range(n - 1, -1, -1):
        accepted[j] = min(run, block - 1)
        run = run + 1 if right[j] else 0
    anchors = accepted[: n - block]
    survival = [sum(1 for a in anchors if a >= k) / len(anchors) for k in range(1, block)]
    i = steps = tokens = 0
    while i < n - block:
        step = 1 + accepted[i]
        steps, tokens, i = steps + 1, tokens + step, i + step
    walked = tokens / steps
    assert harmonic_tau(survival, block) < 0.8 * walked < walked < prefix_tau(survival)


def test_walked_tau_is_primary_over_harmonic_and_a_ratio_of_sums(tmp_path):
    data, _ = _constant_step_log(steps=100)
    lines = data.decode().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        if "step" in record and "event" not in record:
            # two walks per window with different sizes: ratio of sums, not mean of ratios
            if record["step"] % 2:
                record |= {"walk_tokens": 30, "walk_steps": 10, "walk_hist": [10]}
            else:
                record |= {"walk_tokens": 10, "walk_steps": 10, "walk_hist": [10]}
        if record.get("event") != "eval":
            out.append(json.dumps(record))
    path = tmp_path / "walk.jsonl"
    path.write_text("\n".join(out) + "\n")
    a = as_json("converge", path, "-f", "json")["acceptance"]
    assert a["estimator"] == "walk"
    assert a["tau"] == pytest.approx(40 / 20)
    assert [e["name"] for e in a["estimates"]][:2] == ["walk", "harmonic"]


# ------------------------------------------------------------------------------------------
# same numbers everywhere: the peak lr, one tau and one lr per frame, the plot


def test_one_peak_lr_rule_in_converge_and_watch(logs):
    converge = as_json("converge", logs["seed"], "-f", "json")["lr"]
    watch = as_json("watch", logs["seed"], "-f", "json")["lr"]
    assert converge == watch
    # the largest lr seen while the lr still rises is no peak: not "100% of peak (max seen) · warmup"
    assert converge["phase"] == "warmup"
    assert converge["peak"] is None
    assert "peak lr unknown while warming up" in cli("converge", logs["seed"]).stdout
    given = as_json("converge", logs["seed"], "-f", "json", "--peak-lr", "6e-4")["lr"]
    assert given == as_json("watch", logs["seed"], "-f", "json", "--peak-lr", "6e-4")["lr"]
    assert given["peak_source"] == "--peak-lr"
    assert given["fraction_of_peak"] == pytest.approx(2.43e-4 / 6e-4)


def test_a_watch_frame_shows_one_tau_and_one_lr(logs):
    text = cli("watch", "--once", logs["sample"]).stdout
    data = as_json("converge", logs["sample"], "-f", "json")
    tau, lr = data["acceptance"]["tau"], data["lr"]["current"]
    taus = set(re.findall(r"tau \(?\w*\)? *[▁-█ ]* (\d\.\d\d)", text)) | set(
        re.findall(r"tau (\d\.\d\d) \(", text)
    )
    assert taus == {f"{tau:.2f}"}
    assert "tau (measured)" in text
    assert "tau (prefix)" not in text
    lrs = set(re.findall(r"\d\.\d\de-0\d", text))
    assert lrs <= {f"{lr:.2e}", f"{data['lr']['peak']:.2e}"}


def test_watch_plot_panels_are_loss_acc_and_tau(logs):
    text = cli("watch", "--once", "--plot", logs["sample"], columns=150).stdout
    title_line = next(
        line
        for line in text.splitlines()
        if "loss" in line and "acc" in line and "tau" in line and not line.startswith("forecast")
    )
    assert title_line.split() == ["loss", "acc", "tau", "(measured)"]


# ------------------------------------------------------------------------------------------
# output that fits


COMMANDS = [
    ("converge", "-f", "text"),
    ("converge", "-f", "rich"),
    ("compare", "-f", "text"),
    ("compare", "-f", "rich"),
    ("watch", "--once"),
]


@pytest.mark.parametrize("columns", [80, 100, 200])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
@pytest.mark.parametrize("which", ["sample", "no_eval"])
def test_output_fits_the_terminal_and_never_cuts_a_number(logs, columns, command, which):
    result = cli(command[0], logs[which], *command[1:], columns=columns)
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns
    assert "…" not in result.stdout
    data = as_json("converge", logs[which], "-f", "json")
    whole = [f"{data['acceptance']['acc']:.4f}", f"{data['acceptance']['tau']:.2f}"]
    if command[0] != "compare":
        whole += [f"{w['acc']:.4f}" for w in data["windows"]]
    for number in whole:
        assert number in result.stdout, number


def test_window_labels_end_at_the_data_and_plurals(logs):
    text = cli("converge", logs["sample"]).stdout
    assert "401-410" in text
    assert "401-450" not in text
    assert "steps 401-410, 10 entries" in text
    assert "1 restart: at step 276 (after 290)" in text
    wide = cli("converge", logs["sample"], "--window", "500").stdout
    assert "1 window of 500 steps" in wide
    assert "1 windows" not in wide
    compare = cli("compare", logs["sample"]).stdout
    assert "restart at step 276 (after 290)" in compare
    assert "restarts at steps 276" not in compare
    assert "tokens per step (x3.72)" in compare
    assert "x3.72 (x3.72)" not in compare
    assert "401-450" not in cli("watch", "--once", logs["sample"]).stdout


def test_boolean_flags_usage_errors_and_version():
    for command in ("converge", "compare", "watch"):
        text = cli(command, "--help", columns=200).stdout
        assert "--noise-aware" in text
        assert "--no-noise-aware" in text
        assert not re.search(r"--noise-aware\s+--no-noise-aware\s+<bool>", text)
        assert "<bool>" not in text  # no flag, --help included, looks like it takes a value
    root = cli("--help", columns=200).stdout
    assert "--version" in root
    assert "<bool>" not in root
    bad = runner.invoke(app, ["converge", str(SAMPLE), "-f", "yaml"])
    assert bad.exit_code == 2
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("dflash-diag: error: ")
    assert "'yaml' is not one of" in bad.stderr
    assert "╭" not in bad.stderr
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0
    assert re.fullmatch(r"dflash-diag \S+\n", version.stdout)


def test_compare_writes_csv(logs):
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(cli("compare", logs["sample"], "-f", "csv").stdout)))
    converge = as_json("converge", logs["sample"], "-f", "json")["acceptance"]
    assert [r["regime"] for r in rows] == ["sync", "pipeline"]
    assert float(rows[-1]["tau"]) == pytest.approx(converge["tau"])
    assert rows[-1]["estimator"] == converge["estimator"]


def test_json_gains_the_loss_trend_and_the_restart_step_it_rewound_from(logs):
    data = as_json("converge", logs["sample"], "-f", "json")
    assert data["windows"][1]["loss_trend"] == "up"
    assert data["windows"][1]["loss_delta"] < 0
    assert data["restart_details"] == [{"step": 276, "after": 290}]
    assert data["restarts"] == [276]


def test_watch_keeps_an_eval_older_than_its_history(tmp_path):
    # converge and watch agree even when the last eval is older than the windows watch keeps
    records = [
        {
            "event": "run_start",
            "schema": 1,
            "script": "pipeline",
            "block_size": 16,
            "schedule": {"kind": "constant", "peak_lr": 1e-3},
        }
    ]
    for step in range(1, 3001):
        records.append(
            {
                "step": step,
                "time": float(step),
                "loss": 3.0 - step / 2000,
                "acc": 0.1 + step / 10000,
                "lr": 1e-3,
                "tok_per_sec": 1000.0,
                "n_tokens": 1000,
                "n_pred": 100,
            }
        )
        if step == 500:
            records.append({"event": "eval", "step": 500, "tau": 1.7, "n_prompts": 4})
    path = tmp_path / "long.jsonl"
    path.write_bytes(dumps(records))
    converge = as_json("converge", path, "-f", "json")["acceptance"]
    watch = as_json("watch", path, "-f", "json", "--history", "10")["acceptance"]
    assert converge["estimator"] == watch["estimator"] == "measured"
    assert converge["tau"] == watch["tau"] == 1.7
    assert watch["measured_age_steps"] == 2500


def test_calibration_numerator_is_the_measured_tau_of_the_eval(tmp_path):
    """The ratio at the last eval is that eval's tau over the estimate of the window holding
    it, each pinned to its own source (not only ``ratio == measured / estimate``: a ratio of
    the wrong two numbers passes that)."""
    block, survival = 4, [0.6, 0.3, 0.1]
    records = [{"event": "run_start", "schema": 1, "script": "pipeline", "block_size": block}]
    for step in range(1, 301):
        accept = survival if step <= 200 else [0.8, 0.6, 0.4]  # the estimate moves on after 200
        records.append(
            {
                "step": step,
                "loss": 2.0 - step / 1000,
                "acc": 0.4,
                "acc_pos": [0.6, 0.5, 0.3],
                "accept_pos": accept,
            }
        )
        if step in (100, 180):
            records.append(
                {"event": "eval", "step": step, "tau": 1.5 if step == 100 else 1.7, "n_prompts": 8}
            )
    path = tmp_path / "calibrated.jsonl"
    path.write_bytes(dumps(records))
    a = as_json("converge", path, "-f", "json", "--window", "50")["acceptance"]
    c = a["calibration"]
    assert (c["estimator"], c["step"]) == ("harmonic", 180)
    assert c["measured"] == pytest.approx(1.7)  # the eval's tau, not the latest estimate
    assert c["estimate"] == pytest.approx(harmonic_tau(survival, block))  # the window of step 180
    assert c["ratio"] == pytest.approx(1.7 / harmonic_tau(survival, block))
    assert a["tau"] == pytest.approx(1.7)
    assert a["measured_step"] == 180

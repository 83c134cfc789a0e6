"""`dflash-diag converge` through typer's CliRunner: formats, JSON contract, exit codes, inputs."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

from .logs import ORIGINAL_MEANS, dumps, original_analysis, write
from .make_sample_log import generate

runner = CliRunner()

# The original contract's keys keep their names; issues 9 and 18 added the others (docs/diagnostics.md).
JSON_KEYS = {
    "format_version",
    "windows",
    "lr",
    "acceptance",
    "verdict",
    "restarts",
    "skipped_lines",
    "nonfinite",
    "restart_details",
    "alerts",
    "drafter",
    "window",
    "forecast",
    "notes",
}
WINDOW_KEYS = {"start", "end", "n", "loss", "acc", "acc_delta", "trend", "loss_delta", "loss_trend"}
LR_KEYS = {"current", "peak", "peak_source", "fraction_of_peak", "phase"}
ACCEPTANCE_KEYS = {
    "acc",
    "tau",
    "estimator",
    "block_size",
    "target_acc",
    "target_tau",
    "progress",
    "baseline_tau",
    "target_kind",
    "baseline_source",
    "measured_step",
    "measured_age_steps",
    "estimates",
    "calibration",
    "warnings",
}
VERDICT_KEYS = {
    "status",
    "slope_per_1k_steps",
    "p_value",
    "eta_steps",
    "eta_hours",
    "eta_reason",
    "reason",
    "n_windows",
    "best_step",
    "validation",
}
ESTIMATE_KEYS = {"name", "tau", "basis", "error", "se", "upper_view", "held_back"}


def invoke(*args, input=None):
    return runner.invoke(app, ["converge", *map(str, args)], input=input)


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(generate(seed=1))
    return path


def test_json_contract_keys_exactly(sample):
    result = invoke(sample, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == JSON_KEYS
    assert all(set(w) == WINDOW_KEYS for w in data["windows"])
    assert set(data["lr"]) == LR_KEYS
    assert set(data["acceptance"]) == ACCEPTANCE_KEYS
    assert set(data["verdict"]) == VERDICT_KEYS
    assert all(set(e) == ESTIMATE_KEYS for e in data["acceptance"]["estimates"])
    assert data["restart_details"] == [
        {"step": 15602, "after": data["restart_details"][0]["after"]}
    ]
    assert data["restart_details"][0]["after"] > 15602
    assert data["windows"][0]["trend"] is None
    assert {w["trend"] for w in data["windows"][1:]} <= {"up", "down", "flat"}
    assert data["restarts"] == [15602]
    assert data["skipped_lines"] == 0  # the torn last line is not a skipped line
    assert data["nonfinite"] == 1  # the NaN grad_norm
    assert data["acceptance"]["estimator"] == "measured"
    assert data["lr"]["peak_source"] == "header"
    assert data["lr"]["phase"] == "warmup"
    assert data["verdict"]["status"] in {"converging", "plateau", "diverging", "not enough data"}


def test_plain_text_when_not_a_terminal(sample):
    result = invoke(sample)
    assert result.exit_code == 0
    out = result.stdout
    assert "\x1b" not in out
    assert "╭" not in out
    for label in ("steps", "schedule", "acceptance", "verdict", "restarts", "nonfinite"):
        assert label in out
    assert "15602 (after 15740)" in out


def test_rich_format_renders_table_and_panel(sample):
    result = invoke(sample, "--format", "rich")
    assert result.exit_code == 0
    assert "summary" in result.stdout
    assert "verdict" in result.stdout


def test_markdown_and_csv(tmp_path):
    log = write(tmp_path / "a.jsonl", original_analysis())
    md = invoke(log, "--format", "markdown")
    assert md.exit_code == 0
    assert "| steps |" in md.stdout
    assert "| 15000-15049 | 50 |" in md.stdout
    out = invoke(log, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [float(r["acc"]) for r in rows] == pytest.approx(ORIGINAL_MEANS)
    assert [r["trend"] for r in rows] == ["", "up", "flat", "up", "flat", "flat", "up"]


def test_options_reach_the_analysis(tmp_path):
    log = write(tmp_path / "a.jsonl", original_analysis())
    data = json.loads(
        invoke(
            log,
            "-f",
            "json",
            "--window",
            "100",
            "--from-step",
            "15100",
            "--target-tau",
            "6",
            "--block-size",
            "11",
        ).stdout
    )
    assert [w["start"] for w in data["windows"]] == [15100, 15200, 15300]
    assert data["acceptance"]["block_size"] == 11
    assert data["acceptance"]["target_tau"] == 6
    every = json.loads(invoke(log, "-f", "json", "--phase", "all").stdout)
    assert every["windows"][0]["start"] == 14000


def test_fail_on_exit_codes(tmp_path):
    rising = write(tmp_path / "a.jsonl", original_analysis())
    assert invoke(rising, "--fail-on", "diverging", "--fail-on", "plateau").exit_code == 0
    falling = [dict(r, acc=0.3 - r["acc"]) if "acc" in r else r for r in original_analysis()]
    log = write(tmp_path / "b.jsonl", falling)
    result = invoke(log, "--fail-on", "diverging", "-f", "json")
    assert result.exit_code == 1
    assert (
        json.loads(result.stdout)["verdict"]["status"] == "diverging"
    )  # the report is still printed
    assert invoke(log, "--fail-on", "plateau").exit_code == 0


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, [], "no such file"),
        (b"", [], "empty log"),
        (b'{"loss": 1.0}\n', [], "no record has a 'step'"),
        (dumps([{"step": 1, "acc": 0.1}]), ["--phase", "pipeline"], "nothing selected"),
        (dumps([{"step": 1, "acc": 0.1}]), ["--from-step", "10"], "nothing selected"),
        (dumps([{"step": 1, "acc": 0.1}]), ["--target-acc", "2"], "target accuracy"),
        (dumps([{"step": 1, "acc": 0.1}]), ["--field", "acc"], "NEW=OLD"),
        (b'{"step": 1}\nbad\n{"step": 2}\n', ["--strict"], "malformed line 2"),
    ],
)
def test_input_errors_exit_2_with_one_line(tmp_path, content, args, message):
    path = tmp_path / "log.jsonl"
    if content is not None:
        path.write_bytes(content)
    result = invoke(path, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_stdin_and_gz(tmp_path):
    data = dumps(original_analysis())
    from_stdin = invoke("-", "-f", "json", input=data)
    assert from_stdin.exit_code == 0
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(data))
    from_gz = invoke(gz, "-f", "json")
    assert json.loads(from_gz.stdout) == json.loads(from_stdin.stdout)


def test_field_mapping_reads_another_trainers_log(tmp_path):
    records = [
        {"global_step": s, "train/acc": 0.1 + 0.001 * s, "train/loss": 2.0} for s in range(200)
    ]
    log = write(tmp_path / "other.jsonl", records)
    # No flags: train/acc and train/loss are in the alias table (anyone's names: no preset is
    # detected from them) and the reader takes global_step as the step; said on stderr.
    detected = invoke(log)
    assert detected.exit_code == 0, detected.output
    assert "read as JSONL, no preset" in detected.stderr
    result = invoke(
        log,
        "-f",
        "json",
        "--field",
        "step=global_step",
        "--field",
        "acc=train/acc",
        "--field",
        "loss=train/loss",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verdict"]["status"] == "converging"  # a short log: 10 windows of 20 steps
    assert data["windows"][-1]["loss"] == 2.0


def test_skipped_lines_are_reported(tmp_path):
    log = write(tmp_path / "a.jsonl", original_analysis(), tail=b"")
    lines = log.read_bytes().split(b"\n")
    lines[200] = b"{broken"
    log.write_bytes(b"\n".join(lines))
    data = json.loads(invoke(log, "-f", "json").stdout)
    assert data["skipped_lines"] == 1
    text = invoke(log).stdout
    assert "1 malformed line skipped: line 201" in text


def test_auto_format_is_plain_with_no_color_or_without_a_terminal(monkeypatch):
    from rich.console import Console

    from dflash_diag.cli.common import OutputFormat, use_rich

    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert use_rich(OutputFormat.AUTO, terminal)
    assert not use_rich(OutputFormat.AUTO, Console(file=io.StringIO(), force_terminal=False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_rich(OutputFormat.AUTO, terminal)
    assert use_rich(OutputFormat.RICH, terminal)


def test_nonfinite_values_get_a_column_and_a_count(tmp_path):
    records = original_analysis(legacy=False)
    records[5]["loss"] = float("nan")
    records[60]["acc"] = float("inf")
    log = write(tmp_path / "a.jsonl", records)
    text = invoke(log).stdout
    header = next(line for line in text.splitlines() if line.startswith("steps"))
    assert header.endswith("NaN/Inf")
    assert "nonfinite   2 NaN/Inf values: acc 1, loss 1" in text
    assert json.loads(invoke(log, "-f", "json").stdout)["nonfinite"] == 2


def test_one_step_windows_say_step_and_do_not_suggest_a_smaller_window(tmp_path):
    """`-w 1` on a 4-step run: '4 windows of 1 step', and no '(try a smaller --window)'."""
    records = [{"step": s, "loss": 40.0 - s, "acc": 0.01 * s, "lr": 6e-4} for s in range(1, 5)]
    path = write(tmp_path / "short.jsonl", records)
    text = " ".join(invoke(path, "-w", "1", "-f", "text").stdout.split())
    assert "4 windows of 1 step" in text, text
    assert "of 1 steps" not in text, text
    assert "4 windows with acc; need 5" in text, text
    assert "smaller --window" not in text, text
    wide = " ".join(invoke(path, "-w", "2", "-f", "text").stdout.split())
    assert "2 windows of 2 steps" in wide, wide
    assert "(try a smaller --window)" in wide, wide


def test_markdown_continuations_are_sub_items(sample):
    """The estimator lines are sub-items of the acceptance item, the primary's '*' escaped, not
    top-level bullets of their own nor a nested list opened by the '*'."""
    md = invoke(sample, "--format", "markdown").stdout.splitlines()
    first = next(i for i, line in enumerate(md) if line.startswith("- **acceptance**: "))
    subs = md[first + 1 : first + 4]
    assert all(line.startswith("  - ") for line in subs), subs
    assert any(line.startswith("  - \\* measured") for line in subs), subs
    assert not any(line.startswith("-   ") for line in md)


def test_a_run_past_its_schedules_end_says_so(tmp_path):
    """A resume that continued a 4-step schedule to step 8: 'past the schedule's end (step 4)',
    not '200% of the run'."""
    head = {
        "event": "run_start",
        "schema": 1,
        "script": "pipeline",
        "block_size": 16,
        "schedule": {
            "kind": "cosine",
            "peak_lr": 6e-4,
            "warmup_steps": 1,
            "total_steps": 4,
            "min_lr": 6e-5,
        },
    }
    records = [head] + [
        {"step": s, "loss": 9.0, "acc": 0.0, "lr": 6e-5, "tok_per_sec": 1e3} for s in range(5, 9)
    ]
    text = " ".join(
        invoke(write(tmp_path / "past.jsonl", records), "-w", "1", "-f", "text").stdout.split()
    )
    assert "past the schedule's end (step 4)" in text, text
    assert "200%" not in text, text


SAMPLE_LOG = (
    __import__("pathlib").Path(__file__).resolve().parents[2] / "sample_logs" / "train.jsonl"
)


@pytest.mark.parametrize("fmt", ["text", "rich"])
@pytest.mark.parametrize("columns", range(60, 121, 4))
def test_wrapping_keeps_a_comparison_whole(fmt, columns):
    """'p = 0.0242' and '(< 0.05)' never break across lines, plain or rich, at any width."""
    result = runner.invoke(
        app, ["converge", str(SAMPLE_LOG), "-f", fmt], env={"COLUMNS": str(columns)}
    )
    assert result.exit_code == 0, result.output
    lines = [line.strip(" │") for line in result.stdout.splitlines()]
    for line in lines:
        assert not line.endswith(("(<", " p =", " p", " =")), (columns, line)
        assert not line.startswith(("0.05)", "= ", "0.0")), (columns, line)
    joined = "\n".join(lines)
    assert "Mann-Kendall" in joined, joined
    assert "(< 0.05)" in joined, joined


@pytest.mark.parametrize("columns", [80, 100])
def test_rich_continuations_stay_under_the_estimator_column(columns):
    """In the rich summary a wrapped estimator line continues under the estimator names (as in
    plain text), not at the edge of the value column."""
    result = runner.invoke(
        app, ["converge", str(SAMPLE_LOG), "-f", "rich"], env={"COLUMNS": str(columns)}
    )
    lines = [line.rstrip(" │") for line in result.stdout.splitlines()]
    walk = next(i for i, line in enumerate(lines) if "  walk  " in line)
    column = lines[walk].index("walk")
    following = lines[walk + 1 :]
    end = next(i for i, line in enumerate(following) if "calibration" in line or "target" in line)
    for line in following[:end]:  # estimator lines, their continuations, the ranking note
        assert len(line) - len(line.lstrip(" │")) >= column - 2, (columns, line)
        body = line.lstrip(" │")
        assert body.startswith(("harmonic", "chain", "linear", "prefix", "(* primary")) or (
            line.index(body) == column
        ), (columns, line)
    assert all(len(line) <= columns for line in result.stdout.splitlines())


@pytest.mark.parametrize("columns", [80, 100])
def test_one_step_windows_are_labelled_by_their_step(tmp_path, columns):
    """A window of one step is '5', not '5-5', in converge's tables and compare's aligned windows."""
    records = [{"step": s, "loss": 5.0 - s * 0.5, "acc": 0.1 * s, "lr": 6e-4} for s in range(1, 6)]
    path = write(tmp_path / "short.jsonl", records)
    env = {"COLUMNS": str(columns)}
    text = runner.invoke(app, ["converge", str(path), "-w", "1", "-f", "text"], env=env).stdout
    labels = [line.split()[0] for line in text.splitlines() if line[:1].isdigit()]
    assert labels == ["1", "2", "3", "4", "5"], text
    markdown = runner.invoke(
        app, ["converge", str(path), "-w", "2", "-f", "markdown"], env=env
    ).stdout
    assert "| 5 | 1 |" in markdown, markdown
    assert "| 1-2 | 2 |" in markdown, markdown
    assert "5-5" not in markdown.split("**accuracy**")[0], markdown
    compare = runner.invoke(
        app, ["compare", str(path), str(path), "-w", "2", "-f", "text"], env=env
    ).stdout
    rows = [
        line.split()[0]
        for line in compare.splitlines()
        if line.startswith("  ") and line.split()[0][:1].isdigit()
    ]
    assert rows[-3:] == ["1-2", "3-4", "5"], compare
    one = runner.invoke(
        app, ["compare", str(path), str(path), "-w", "1", "-f", "text"], env=env
    ).stdout
    assert "two runs, windows of 1 step" in one.splitlines(), one


def _markdown_notes(*args) -> list[str]:
    result = invoke(*args, "--format", "markdown")
    assert result.exit_code == 0, result.output
    return [
        line.removeprefix("- **note**: ")
        for line in result.stdout.splitlines()
        if line.startswith("- **note**: ")
    ]


@pytest.mark.parametrize(
    "log",
    [
        # a real public log (shared/wild) whose accuracy is written in percent: the values left
        # out and "not a drafter's log" are notes of every format, JSON's too
        "shared/wild/Ipiano__MNistClassifier/logs/250-epochs_4294967296-data_100-minibatch/train.log",
        "sample_logs/train.jsonl",
    ],
)
def test_json_notes_are_the_reports_note_lines(log):
    path = Path(__file__).resolve().parents[2] / log
    if not path.is_file():
        pytest.skip(f"{log} is absent")
    result = invoke(path, "--format", "json")
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    assert notes == _markdown_notes(path)
    if "Ipiano" in log:
        assert notes[0].startswith("250 accuracy values outside [0, 1] left out")
        assert notes[1].startswith("not a drafter's log")

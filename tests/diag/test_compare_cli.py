"""`dflash-diag compare` end to end through typer's CliRunner, on log files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

from .make_sample_log import generate

runner = CliRunner()


def header(script: str, world_size: int, **config) -> str:
    return (
        json.dumps(
            {
                "event": "run_start",
                "schema": 1,
                "script": script,
                "time": 0.0,
                "config": config,
                "schedule": {"kind": "cosine", "peak_lr": 6e-4, "warmup_steps": 20000},
                "block_size": 16,
                "world_size": world_size,
                "resumed_from": None,
            }
        )
        + "\n"
    )


def write_story(path: Path, seed: int = 0) -> Path:
    """A dp=2 lock-step phase whose logged loss is half the pipeline's, then the pipeline."""
    rng = random.Random(seed)
    text = header("sync", 2, token_budget=8192)
    for s in range(14800, 15000):
        rec = {"step": s, "time": float(s), "loss": 1.57 + rng.gauss(0, 0.02), "acc": 0.150}
        text += json.dumps(rec) + "\n"
    text += header("pipeline", 1, token_budget=65536, grad_accum=4)
    for s in range(15000, 15200):
        rec = {
            "step": s,
            "time": float(s),
            "loss": 3.12 + rng.gauss(0, 0.03),
            "acc": 0.151 + rng.gauss(0, 0.003),
            "tok_per_sec": 16000.0,
            "n_tokens": 262144,
            "n_pred": 30000,
        }
        text += json.dumps(rec) + "\n"
    path.write_text(text)
    return path


def write_run(path: Path, tokens_per_step: int, steps: int, with_tokens: bool = True) -> Path:
    text = header("pipeline", 1, token_budget=tokens_per_step)
    for s in range(1, steps + 1):
        seen = s * tokens_per_step
        rec = {"step": s, "loss": 3.0 - 1e-6 * seen, "acc": 0.1 + 1e-7 * seen, "tok_per_sec": 1e4}
        if with_tokens:
            rec["n_tokens"] = tokens_per_step
        text += json.dumps(rec) + "\n"
    path.write_text(text)
    return path


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["compare", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_dp2_boundary_json_contract(tmp_path):
    data = run_json(str(write_story(tmp_path / "story.jsonl")))
    assert [r["name"] for r in data["regimes"]] == ["sync", "pipeline"]
    for regime in data["regimes"]:
        for key in ("name", "start_step", "end_step", "n", "tokens_per_step", "tok_per_sec"):
            assert key in regime
        assert "loss" in regime
        assert "acc" in regime
    sync, pipe = data["regimes"]
    assert (sync["start_step"], sync["end_step"], sync["n"]) == (14800, 14999, 200)
    assert sync["tokens_per_step"] == 16384
    assert pipe["tokens_per_step"] == 262144
    assert pipe["tok_per_sec"] == 16000.0
    (b,) = data["boundaries"]
    assert set(b) >= {"step", "loss_ratio", "acc_delta", "explanation"}
    assert b["step"] == 15000
    assert b["loss_ratio"] == pytest.approx(3.12 / 1.57, rel=0.02)
    assert abs(b["acc_delta"]) < 0.01
    assert "matches dp=2" in b["explanation"]
    assert "not a change in the model" in b["explanation"]


def test_k_option_changes_the_compared_span(tmp_path):
    path = str(write_story(tmp_path / "story.jsonl"))
    (b,) = run_json(path, "--k", "10")["boundaries"]
    assert (b["n_before"], b["n_after"]) == (10, 10)


def test_plain_and_markdown_outputs(tmp_path):
    path = str(write_story(tmp_path / "story.jsonl"))
    plain = runner.invoke(app, ["compare", path])
    assert plain.exit_code == 0
    assert "\x1b[" not in plain.output
    assert "regimes (split on script)" in plain.output
    assert "at step 15000 matches dp=2" in plain.output
    md = runner.invoke(app, ["compare", path, "--format", "markdown"])
    assert md.exit_code == 0
    assert "| regime | steps |" in md.output
    assert "|---|" in md.output
    assert "- loss x" in md.output


def test_no_boundary_log(tmp_path):
    path = write_run(tmp_path / "one.jsonl", 1000, 300)
    data = run_json(str(path))
    assert len(data["regimes"]) == 1
    assert data["boundaries"] == []
    plain = runner.invoke(app, ["compare", str(path)])
    assert "no regime boundary" in plain.output


def test_two_runs_aligned_by_tokens(tmp_path):
    a = write_run(tmp_path / "small.jsonl", 1000, 400)
    b = write_run(tmp_path / "big.jsonl", 2000, 200)
    data = run_json(str(a), str(b), "--x", "tokens", "--window", "50")
    alignment = data["alignment"]
    assert alignment["x"] == "tokens"
    assert alignment["runs"] == ["small.jsonl", "big.jsonl"]
    windows = alignment["windows"]
    assert len(windows) == 8
    assert all(w["n_a"] == 50 and w["n_b"] == 25 for w in windows)
    assert all(abs(w["acc_diff"]) < 0.003 for w in windows)  # same curve per token
    by_step = run_json(str(a), str(b), "--x", "step", "--window", "50")["alignment"]["windows"]
    assert by_step[0]["acc_diff"] > 0.002  # the bigger batch is ahead per step
    assert [r["name"] for r in data["regimes"]] == ["small.jsonl: pipeline", "big.jsonl: pipeline"]


def test_tokens_from_the_header_budget_when_n_tokens_is_missing(tmp_path):
    a = write_run(tmp_path / "a.jsonl", 1000, 200, with_tokens=False)
    b = write_run(tmp_path / "b.jsonl", 2000, 100, with_tokens=False)
    alignment = run_json(str(a), str(b), "--x", "tokens")["alignment"]
    assert alignment["tokens_source"] == ["tokens_per_step", "tokens_per_step"]
    assert all(abs(w["acc_diff"]) < 0.003 for w in alignment["windows"])


def test_generated_sample_story_boundary_is_explained(tmp_path):
    # The original analysis' story (dp=2 lock-step phase, pipeline from step 15000), generated:
    # the committed sample_logs/ now holds a real run, whose switch has no normalisation jump.
    path = tmp_path / "story.jsonl"
    path.write_bytes(generate())
    data = run_json(str(path))
    assert [r["name"] for r in data["regimes"]] == ["legacy", "pipeline"]
    (b,) = data["boundaries"]
    assert 14990 <= b["step"] <= 15010
    assert b["loss_ratio"] == pytest.approx(2.0, rel=0.05)
    assert "not a change in the model" in b["explanation"]


def test_log_text_is_shown_literally(tmp_path):
    text = header("[bold red]evil\x1b[2J", 2) + json.dumps({"step": 1, "loss": 1.0, "acc": 0.1})
    text += "\n" + header("pipeline", 1) + json.dumps({"step": 2, "loss": 2.0, "acc": 0.1}) + "\n"
    path = tmp_path / "evil.jsonl"
    path.write_text(text)
    result = runner.invoke(app, ["compare", str(path)])
    assert result.exit_code == 0, result.output
    assert "[bold red]evil" in result.output
    assert "\x1b" not in result.output


def test_markdown_cells_use_the_one_escaper(tmp_path):
    """compare's markdown tables escape cells as converge's do (render.markdown.markdown_cell)."""
    from dflash_diag.render.markdown import markdown_cell

    script = "a|b\\c`d"
    text = header(script, 2) + json.dumps({"step": 1, "loss": 1.0, "acc": 0.1})
    text += "\n" + header("pipeline", 1) + json.dumps({"step": 2, "loss": 2.0, "acc": 0.1}) + "\n"
    path = tmp_path / "pipes.jsonl"
    path.write_text(text)
    result = runner.invoke(app, ["compare", str(path), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("| a"))
    assert row.startswith("| " + markdown_cell(script) + " | ")
    assert markdown_cell(script) == "a\\|b\\\\c\\`d"
    assert len(row.split(" | ")) == 9  # the pipe in the name did not add a column


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "no such file"),
        (["a", "b", "c"], "one log or two"),
        (["LOG", "--format", "yaml"], "'yaml' is not one of"),
        (["LOG", "--k", "0"], "--k"),
    ],
)
def test_errors_are_one_line_and_exit_2(tmp_path, args, message):
    log = str(write_story(tmp_path / "story.jsonl"))
    args = [log if a == "LOG" else str(tmp_path / a) if a.endswith(".jsonl") else a for a in args]
    result = runner.invoke(app, ["compare", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_tokens_axis_without_token_counts_is_an_error(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps({"step": s, "loss": 1.0, "acc": 0.1}) + "\n" for s in range(9)))
    result = runner.invoke(app, ["compare", str(a), str(a), "--x", "tokens"])
    assert result.exit_code == 2
    assert "cannot align on tokens" in result.output


def test_two_runs_name_the_run_of_each_boundary_and_note(tmp_path):
    """Both runs switch at step 15000: each boundary, restart and note says which run it is in."""
    a = write_story(tmp_path / "a.jsonl", seed=1)
    b = write_story(tmp_path / "b.jsonl", seed=2)
    with b.open("a") as f:  # run B crashed and restarted from step 15150
        for s in range(15150, 15170):
            f.write(
                json.dumps(
                    {
                        "step": s,
                        "time": float(s),
                        "loss": 3.1,
                        "acc": 0.15,
                        "tok_per_sec": 16000.0,
                        "n_tokens": 262144,
                        "n_pred": 30000,
                    }
                )
                + "\n"
            )
    data = run_json(str(a), str(b))
    assert [x["run"] for x in data["boundaries"]] == ["a.jsonl", "b.jsonl"]
    assert "b.jsonl: restart at step 15150 (after 15199)" in data["notes"]
    assert all(n.startswith(("a.jsonl: ", "b.jsonl: ")) for n in data["notes"]), data["notes"]
    one = run_json(str(a))
    assert [x["run"] for x in one["boundaries"]] == [None]
    text = runner.invoke(
        app, ["compare", str(a), str(b), "-f", "text"], env={"COLUMNS": "200"}
    ).output
    assert "a.jsonl: boundary at step 15000" in text
    assert "b.jsonl: boundary at step 15000" in text


def test_two_runs_windows_weight_loss_by_n_pred_and_end_at_the_data(tmp_path):
    """The aligned windows' loss is the n_pred-weighted mean (as converge's), and the last
    window's label ends at the last step logged, not at its nominal end."""
    text = header("pipeline", 1, token_budget=1024)
    for s in range(1, 121):  # light records lose 4.0, heavy ones 2.0: weighted mean 2.2
        heavy = s % 2 == 0
        text += (
            json.dumps(
                {
                    "step": s,
                    "loss": 2.0 if heavy else 4.0,
                    "acc": 0.2,
                    "n_pred": 900 if heavy else 100,
                    "tok_per_sec": 1e4,
                }
            )
            + "\n"
        )
    a = tmp_path / "a.jsonl"
    a.write_text(text)
    b = write_run(tmp_path / "b.jsonl", 1000, 100)
    windows = run_json(str(a), str(b))["alignment"]["windows"]
    assert windows[0]["loss_a"] == pytest.approx(2.2)
    converge = json.loads(runner.invoke(app, ["converge", str(a), "-f", "json"]).output)
    assert converge["windows"][0]["loss"] == pytest.approx(windows[0]["loss_a"])
    out = runner.invoke(
        app, ["compare", str(a), str(b), "-f", "text", "--window", "50"], env={"COLUMNS": "200"}
    ).output
    assert "101-120" in out, out
    assert "101-150" not in out, out


def test_a_wrapped_boundary_explanation_keeps_its_indent(tmp_path):
    """At 80 columns the explanation wraps under its own two-space indent, not at column 0."""
    path = write_story(tmp_path / "story.jsonl")
    out = runner.invoke(app, ["compare", str(path), "-f", "text"], env={"COLUMNS": "80"}).output
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  loss x"))
    explanation = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        explanation.append(line)
    assert len(explanation) >= 2, out  # it did wrap, and every wrapped line is indented
    assert "not a change in the model" in " ".join(explanation), out


def test_from_and_to_step_select_the_compared_records(tmp_path):
    """--from-step/--to-step (shared with converge and watch) keep one log's regimes within the
    range, and both runs' records; bad bounds are one-line usage errors."""
    story = str(write_story(tmp_path / "story.jsonl"))
    full = run_json(story)
    assert len(full["boundaries"]) == 1
    late = run_json(story, "--from-step", "15050", "--to-step", "15149")
    assert [(r["name"], r["start_step"], r["end_step"], r["n"]) for r in late["regimes"]] == [
        ("pipeline", 15050, 15149, 100)
    ]
    assert late["boundaries"] == []
    early = run_json(story, "--to-step", "14899")
    assert [(r["start_step"], r["end_step"]) for r in early["regimes"]] == [(14800, 14899)]
    a = write_run(tmp_path / "a.jsonl", 1000, 400)
    b = write_run(tmp_path / "b.jsonl", 1000, 400)
    windows = run_json(str(a), str(b), "--from-step", "101", "--to-step", "250")["alignment"][
        "windows"
    ]
    assert windows[0]["start"] == 101, windows
    assert windows[-1]["end"] == 251, windows
    assert sum(w["n_a"] for w in windows) == sum(w["n_b"] for w in windows) == 150
    for args, message in (
        (
            ["--from-step", "15100", "--to-step", "15000"],
            "--from-step 15100 is after --to-step 15000",
        ),
        (["--from-step", "99999"], "no records in steps 99999-"),
        (["--to-step", str(2**60)], "--to-step must be between"),
    ):
        result = runner.invoke(app, ["compare", story, *args])
        assert result.exit_code == 2, result.output
        assert message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("columns", [80, 100])
def test_plain_output_has_no_trailing_spaces_and_fits(tmp_path, columns):
    """Plain compare output (one log and two runs) carries no padding after its lines."""
    story = str(write_story(tmp_path / "story.jsonl"))
    for args in ([story], [story, story]):
        result = runner.invoke(app, ["compare", *args, "-f", "text"], env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0].startswith("regimes")
        assert all(line == line.rstrip() for line in lines), [
            ln for ln in lines if ln != ln.rstrip()
        ]
        assert all(len(line) <= columns for line in lines)
        # "loss 1.5693 -> 3.1201" and the like stay whole when the boundary line wraps
        assert not any(line.endswith(" ->") or line.lstrip().startswith("-> ") for line in lines), (
            lines
        )


@pytest.mark.parametrize("columns", [80, 100])
def test_a_jump_without_accuracy_signal_is_unexplained(tmp_path, columns):
    """acc 0 on both sides of a boundary (or no acc at all) is no evidence that the model did not
    change: a loss jump no config factor explains is called unexplained, not a likely unrecorded
    normalisation."""
    rows = [{"step": s, "loss": 2.0, "acc": 0.0} for s in range(1, 101)]
    rows += [{"step": s, "loss": 2.86, "acc": 0.0, "tok_per_sec": 1e4} for s in range(101, 201)]
    zero = tmp_path / "zero.jsonl"
    zero.write_text("".join(json.dumps(r) + "\n" for r in rows))
    none = tmp_path / "none.jsonl"
    none.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "acc"}) + "\n" for r in rows)
    )
    for path, why in ((zero, "acc is 0 on both sides"), (none, "no acc is logged around it")):
        (b,) = run_json(str(path))["boundaries"]
        assert b["matched"] is None, b
        assert "the loss jump is unexplained" in b["explanation"], b
        assert why in b["explanation"], b
        assert "headers do not record" not in b["explanation"], b
        out = runner.invoke(
            app, ["compare", str(path), "-f", "text"], env={"COLUMNS": str(columns)}
        )
        text = " ".join(out.stdout.split())
        assert "the loss jump is unexplained" in text, text
        assert "is likely" not in text, text
    rows = [dict(r, acc=0.15) for r in rows]  # a real, unchanged acc: the old reading stands
    steady = tmp_path / "steady.jsonl"
    steady.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (b,) = run_json(str(steady))["boundaries"]
    assert "headers do not record" in b["explanation"], b

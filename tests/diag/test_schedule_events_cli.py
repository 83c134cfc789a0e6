"""converge, compare and watch report an lr schedule restart at a resume, in every format."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.schedule_events import scheduled_lr
from dflash_diag.cli import app

from .logs import write

runner = CliRunner()
OLD = {"kind": "cosine", "peak_lr": 6e-4, "warmup_steps": 6, "total_steps": 150, "min_lr": 6e-5}
NEW = {
    "kind": "cosine",
    "peak_lr": 6e-4,
    "warmup_steps": 10,
    "total_steps": 300,
    "min_lr": 6e-5,
    "start_step": 150,
}
TEXT = "lr schedule restarted at step 151: 6.0e-05 -> 6.0e-05, warmup 10 steps"


def migration(mode: str | None = "restart", new: dict = NEW) -> list[dict]:
    """sync to 150, then the pipeline resumed from step 150 to 300, as dflash-train writes it."""
    recs: list[dict] = [
        {
            "event": "run_start",
            "schema": 1,
            "script": "sync",
            "time": 0.0,
            "config": {"token_budget": 1024},
            "schedule": OLD,
            "block_size": 16,
            "steps_per_epoch": 100.0,
            "world_size": 1,
            "resumed_from": None,
        }
    ]
    for k in range(1, 151):
        recs.append(
            {
                "step": k,
                "time": float(k),
                "epoch": k / 100,
                "loss": 4 - k / 100,
                "acc": 0.1 + k / 1000,
                "lr": scheduled_lr(OLD, k),
            }
        )
    header = {
        "event": "run_start",
        "schema": 1,
        "script": "pipeline",
        "time": 151.0,
        "config": {"token_budget": 1024, "grad_accum": 1},
        "schedule": new,
        "block_size": 16,
        "steps_per_epoch": 100.0,
        "world_size": 1,
        "resumed_from": {"path": "checkpoints/step-000150", "step": 150},
    }
    if mode is not None:
        header["resume_schedule"] = mode
    recs.append(header)
    for k in range(151, 301):
        acc = 0.25 + (k - 150) / 1000
        recs.append(
            {
                "step": k,
                "time": float(k),
                "epoch": k / 100,
                "loss": 2.5 - (k - 150) / 200,
                "acc": acc,
                "lr": scheduled_lr(new, k),
                "tok_per_sec": 4000.0,
                "n_tokens": 1024,
                "n_blocks": 64,
                "n_pred": 960,
                "acc_pos": [acc] * 15,
                "accept_pos": [acc ** (i + 1) for i in range(15)],
                "tau_train": 1 + sum(acc ** (i + 1) for i in range(15)),
                "grad_norm": 1.0,
                "stage_busy": {"drafter": 0.9},
                "queue_fill": {"features": 0.5},
            }
        )
    return recs


@pytest.fixture
def log(tmp_path):
    return write(tmp_path / "train.jsonl", migration())


@pytest.mark.parametrize("fmt", ["text", "rich", "markdown"])
def test_converge_shows_the_event(log, fmt):
    result = runner.invoke(app, ["converge", str(log), "-f", fmt], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert TEXT in " ".join(result.stdout.split())


def test_converge_json_has_the_additive_key(log, tmp_path):
    data = json.loads(runner.invoke(app, ["converge", str(log), "-f", "json"]).stdout)
    (event,) = data["schedule_events"]
    assert event == {
        "step": 151,
        "lr_before": pytest.approx(6e-5),
        "lr_after": pytest.approx(6e-5),
        "warmup_steps": 10,
        "source": "header",
        "text": TEXT,
    }
    plain = write(tmp_path / "plain.jsonl", migration(mode="continue", new=OLD))
    assert "schedule_events" not in json.loads(
        runner.invoke(app, ["converge", str(plain), "-f", "json"]).stdout
    )


@pytest.mark.parametrize("fmt", ["text", "rich", "markdown", "json"])
def test_compare_explains_the_boundary_by_it(log, fmt):
    result = runner.invoke(app, ["compare", str(log), "-f", fmt], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    if fmt == "json":
        data = json.loads(result.stdout)
        assert [e["step"] for e in data["schedule_events"]] == [151]
        (b,) = data["boundaries"]
        assert b["step"] == 151
        assert TEXT in b["explanation"]
        assert "part of the change is the new learning rate" in b["explanation"]
    else:
        assert TEXT in flat
        assert "part of the change is the new learning rate" in flat


def test_watch_shows_the_event(log):
    result = runner.invoke(app, ["watch", str(log), "--once"], env={"COLUMNS": "400"})
    assert TEXT in " ".join(result.stdout.split()), result.stdout


def test_an_older_log_shows_the_jump_it_can_see(tmp_path):
    # No resume_schedule in the header and a 300-step absolute schedule (the old trainer's way):
    # step 151 came back mid-decay instead of at the sync run's floor.
    absolute = {k: v for k, v in NEW.items() if k != "start_step"}
    path = write(tmp_path / "old.jsonl", migration(mode=None, new=absolute))
    data = json.loads(runner.invoke(app, ["converge", str(path), "-f", "json"]).stdout)
    (event,) = data["schedule_events"]
    assert event["source"] == "lr jump"
    assert event["warmup_steps"] == 0
    assert event["lr_after"] == pytest.approx(scheduled_lr(absolute, 151))
    assert not math.isclose(event["lr_after"], event["lr_before"])


def test_watch_json_has_the_additive_key(log):
    result = runner.invoke(app, ["watch", str(log), "--once", "-f", "json"])
    assert result.exit_code == 0, result.output
    (event,) = json.loads(result.stdout)["schedule_events"]
    assert event["step"] == 151
    assert event["text"] == TEXT

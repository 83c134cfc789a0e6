"""The append-only JSONL writer and the schema v1 records."""

import json
import math
import os

import pytest

from pipelines.log_records import (
    CheckpointRecord,
    EvalRecord,
    Metrics,
    NonFiniteRecord,
    RunStart,
    StopRecord,
    validate_record,
)
from pipelines.logwriter import JsonlLog


def _records():
    return [
        RunStart(
            script="pipeline",
            time=1.0,
            config={"seed": 0},
            block_size=16,
            schedule={
                "kind": "cosine",
                "peak_lr": 6e-4,
                "warmup_steps": 2,
                "total_steps": 50,
                "min_lr": 0.0,
            },
            steps_per_epoch=12.5,
            resumed_from={"path": "ck/step-000010", "step": 10},
        ),
        Metrics(step=1, time=2.0, epoch=0.1, loss=3.0, acc=0.1, lr=1e-4),
        Metrics(
            step=2,
            time=3.0,
            epoch=0.2,
            loss=float("nan"),
            acc=0.1,
            lr=2e-4,
            tok_per_sec=10.0,
            n_tokens=100,
            n_blocks=5,
            n_pred=75,
            acc_pos=[0.5, 0.2],
            accept_pos=[0.5, 0.1],
            tau_train=1.6,
            grad_norm=0.9,
            stage_busy={"loader": 0.1},
            queue_fill={"batches": 1.0},
        ),
        EvalRecord(step=2, time=4.0, tau=1.5, tau_hist=[1, 1], n_prompts=2, new_tokens=16),
        CheckpointRecord(step=2, time=5.0, path="ck/step-000002"),
        NonFiniteRecord(step=3, time=6.0, loss=float("inf"), grad_norm=None, consecutive=1),
        StopRecord(step=3, time=7.0, reason="signal"),
    ]


def test_every_record_is_one_valid_line_and_appends(tmp_path):
    path = tmp_path / "logs" / "train.jsonl"
    with JsonlLog(path) as log:
        for r in _records():
            log.write(r)
    with JsonlLog(path) as log:  # a second launch appends, never truncates
        log.write(StopRecord(step=9, time=8.0, reason="max_steps"))
    lines = path.read_text().splitlines()
    assert len(lines) == len(_records()) + 1
    decoded = [json.loads(line) for line in lines]
    kinds = [validate_record(d) for d in decoded]
    assert kinds == [
        "run_start",
        "metrics",
        "metrics",
        "eval",
        "checkpoint",
        "nonfinite",
        "stop",
        "stop",
    ]
    assert math.isnan(decoded[2]["loss"])
    assert decoded[5]["loss"] == math.inf
    assert set(decoded[1]) == {"step", "time", "epoch", "loss", "acc", "lr"}  # plain legacy record


def test_each_record_is_a_single_write(tmp_path, monkeypatch):
    calls = []
    real_write = os.write

    def spy(fd, data):
        calls.append(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spy)
    with JsonlLog(tmp_path / "t.jsonl") as log:
        log.write(_records()[2])
    assert len(calls) == 1
    assert calls[0].endswith(b"\n")
    assert calls[0].count(b"\n") == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"step": 1, "time": 1.0, "epoch": 0.0, "loss": 1.0, "acc": 0.1},  # no lr
        {"step": 1.5, "time": 1.0, "epoch": 0.0, "loss": 1.0, "acc": 0.1, "lr": 1e-4},  # float step
        {
            "step": 1,
            "time": 1.0,
            "epoch": 0.0,
            "loss": 1.0,
            "acc": 0.1,
            "lr": 1e-4,
            "tok_per_sec": 3.0,
        },
        {"event": "mystery", "step": 1},
        {"event": "stop", "step": 1, "time": 1.0, "reason": "bored"},
    ],
)
def test_validator_rejects_bad_records(bad):
    with pytest.raises(ValueError):
        validate_record(bad)

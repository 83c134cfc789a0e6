"""End-to-end runs of both training programs on the tiny fixture target (a few steps each)."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pipelines.async_pipeline import run_pipeline
from pipelines.checkpoints import step_dir
from pipelines.config import TrainConfig
from pipelines.csp import StopRequest
from pipelines.errors import TrainingError
from pipelines.log_records import validate_record
from pipelines.sync_trainer import run_sync

LEGACY = {"step", "time", "epoch", "loss", "acc", "lr"}


def read_log(path: str | Path) -> list[dict]:
    """Every record, each validated against schema v1."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    for r in records:
        validate_record(r)
    return records


def metrics_of(records: list[dict]) -> list[dict]:
    return [r for r in records if "event" not in r]


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("stage-")]


def test_sync_then_pipeline_migration_continues_the_step_count(make_cfg, tmp_path):
    sync = run_sync(make_cfg(TrainConfig, max_steps=3))
    assert (sync.step, sync.reason, sync.exit_code) == (3, "max_steps", 0)
    pipe = run_pipeline(
        make_cfg(max_steps=6, resume=str(step_dir(tmp_path / "ck", 3)), eval_every=3)
    )
    assert (pipe.step, pipe.reason, pipe.exit_code) == (6, "max_steps", 0)

    records = read_log(tmp_path / "train.jsonl")
    headers = [r for r in records if r.get("event") == "run_start"]
    assert [h["script"] for h in headers] == ["sync", "pipeline"]
    assert headers[0]["resumed_from"] is None
    assert headers[1]["resumed_from"] == {"path": str(step_dir(tmp_path / "ck", 3)), "step": 3}
    m = metrics_of(records)
    assert [r["step"] for r in m] == [1, 2, 3, 4, 5, 6]
    assert all(set(r) == LEGACY for r in m[:3])  # the old script's plain record
    for r in m[3:]:
        assert r["tok_per_sec"] > 0
        assert r["n_pred"] == r["n_blocks"] * 3
        assert r["tau_train"] == pytest.approx(1 + sum(r["accept_pos"]))
        assert set(r["stage_busy"]) == {"loader", "target0", "drafter"}
        assert set(r["queue_fill"]) == {"batches", "features"}
    evals = [r for r in records if r.get("event") == "eval"]
    assert [e["step"] for e in evals] == [6]
    assert 1.0 <= evals[0]["tau"] <= 4.0
    ckpts = [r["step"] for r in records if r.get("event") == "checkpoint"]
    assert ckpts == [3, 6]
    assert [r["reason"] for r in records if r.get("event") == "stop"] == ["max_steps", "max_steps"]
    state = json.loads((step_dir(tmp_path / "ck", 6) / "state.json").read_text())
    assert state["step"] == 6
    assert state["script"] == "pipeline"


def test_sync_and_pipeline_train_the_same_steps_on_the_same_seed_and_data(make_cfg, tmp_path):
    """One micro-batch per step and one target worker: the pipeline's read-ahead, its target
    stage and its reordering change nothing, so both programs log the same legacy fields (time
    aside) and save the same drafter, cursor and schedule."""
    common = {"max_steps": 4, "ckpt_every": 2, "torch_threads": 1}
    sync = make_cfg(
        TrainConfig, log=str(tmp_path / "s.jsonl"), ckpt_dir=str(tmp_path / "s"), **common
    )
    pipe = make_cfg(
        log=str(tmp_path / "p.jsonl"),
        ckpt_dir=str(tmp_path / "p"),
        grad_accum=1,
        target_devices=["cpu"],
        **common,
    )
    assert run_sync(sync).exit_code == run_pipeline(pipe).exit_code == 0

    a = metrics_of(read_log(tmp_path / "s.jsonl"))
    b = metrics_of(read_log(tmp_path / "p.jsonl"))
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        assert (rb["epoch"], rb["lr"]) == (ra["epoch"], ra["lr"]), ra["step"]
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5, abs=1e-6), ra["step"]
        assert rb["acc"] == pytest.approx(ra["acc"], abs=1e-6), ra["step"]
    assert len({r["loss"] for r in a}) == 4  # the steps trained on different batches
    for step in (2, 4):
        sa = json.loads((step_dir(tmp_path / "s", step) / "state.json").read_text())
        sb = json.loads((step_dir(tmp_path / "p", step) / "state.json").read_text())
        assert (sa["script"], sb["script"]) == ("sync", "pipeline")
        for key in ("step", "cursor", "schedule", "seed", "micro_batches"):
            assert sb[key] == sa[key], (step, key)
        wa = load_file(str(step_dir(tmp_path / "s", step) / "model.safetensors"))
        wb = load_file(str(step_dir(tmp_path / "p", step) / "model.safetensors"))
        assert sorted(wb) == sorted(wa)
        for name in wa:
            torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-6)


def test_periodic_checkpoints_are_named_by_step(make_cfg, tmp_path):
    run_pipeline(make_cfg(max_steps=5, ckpt_every=2))
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["step-000002", "step-000004", "step-000005"]


@pytest.mark.parametrize(
    ("stage", "devices"),
    [
        ("loader", ["cpu"]),
        ("target0", ["cpu"]),
        ("drafter", ["cpu"]),
        ("target1", ["cpu", "cpu"]),
    ],
)
def test_a_failure_in_any_stage_stops_the_run_with_that_error(make_cfg, tmp_path, stage, devices):
    def inject(name: str, i: int, item=None) -> None:
        if name == stage and i == 3:
            raise RuntimeError(f"injected failure in {name}")

    t0 = time.monotonic()
    res = run_pipeline(make_cfg(max_steps=50, target_devices=devices), inject=inject)
    assert time.monotonic() - t0 < 30
    assert (res.reason, res.exit_code) == ("error", 1)
    assert f"stage '{stage}' failed" in res.error
    assert "injected failure" in res.error
    assert stage_threads() == []
    last = read_log(tmp_path / "train.jsonl")[-1]
    assert last["event"] == "stop"
    assert last["reason"] == "error"
    assert stage in last["error"]


def _poison(from_item: int, to_item: int):
    """Make the target features of drafter items [from_item, to_item) NaN (a real NaN path)."""

    def inject(name: str, i: int, item=None) -> None:
        if name == "drafter" and from_item <= i < to_item:
            item.features = torch.full_like(item.features, math.nan)

    return inject


def test_a_nonfinite_step_is_skipped_and_logged(make_cfg, tmp_path):
    res = run_pipeline(make_cfg(max_steps=4), inject=_poison(2, 3))  # step 2's first micro-batch
    assert (res.reason, res.exit_code) == ("max_steps", 0)
    records = read_log(tmp_path / "train.jsonl")
    bad = [r for r in records if r.get("event") == "nonfinite"]
    assert [(r["step"], r["consecutive"]) for r in bad] == [(2, 1)]
    assert [r["step"] for r in metrics_of(records)] == [1, 3, 4]
    assert all(math.isfinite(r["loss"]) for r in metrics_of(records))
    weights = load_file(str(step_dir(tmp_path / "ck", 4) / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())  # the update was skipped


def test_too_many_nonfinite_steps_in_a_row_stop_the_run(make_cfg, tmp_path):
    res = run_pipeline(make_cfg(max_steps=50, max_nonfinite=3), inject=_poison(2, 10_000))
    assert (res.reason, res.exit_code, res.step) == ("nonfinite", 1, 4)
    records = read_log(tmp_path / "train.jsonl")
    assert [r["consecutive"] for r in records if r.get("event") == "nonfinite"] == [1, 2, 3]
    assert records[-1]["event"] == "stop"
    assert records[-1]["reason"] == "nonfinite"


def test_resumed_pipeline_matches_an_uninterrupted_one(make_cfg, tmp_path):
    """Stop mid-run (the loader has read ahead), resume: same losses and weights as one run."""
    common = {"max_steps": 7, "total_steps": 7, "channel_capacity": 4}
    full = make_cfg(log=str(tmp_path / "full.jsonl"), ckpt_dir=str(tmp_path / "full"), **common)
    assert run_pipeline(full).step == 7

    stop = StopRequest()

    def stop_during_step_3(name: str, i: int, item=None) -> None:
        if name == "drafter" and i == 4:  # first micro-batch of step 3 (grad_accum 2)
            stop.set()

    part = make_cfg(log=str(tmp_path / "part.jsonl"), ckpt_dir=str(tmp_path / "part"), **common)
    first = run_pipeline(part, stop=stop, inject=stop_during_step_3)
    assert (first.step, first.reason) == (3, "signal")
    resumed = make_cfg(
        log=str(tmp_path / "part.jsonl"),
        ckpt_dir=str(tmp_path / "part"),
        resume=str(step_dir(tmp_path / "part", 3)),
        **common,
    )
    assert run_pipeline(resumed).step == 7

    a = {r["step"]: r for r in metrics_of(read_log(tmp_path / "full.jsonl"))}
    b = {r["step"]: r for r in metrics_of(read_log(tmp_path / "part.jsonl"))}
    assert sorted(a) == sorted(b) == list(range(1, 8))
    for s in range(1, 8):
        assert b[s]["loss"] == pytest.approx(a[s]["loss"], rel=1e-5, abs=1e-6), s
        assert (b[s]["n_tokens"], b[s]["n_blocks"], b[s]["acc"]) == (
            a[s]["n_tokens"],
            a[s]["n_blocks"],
            a[s]["acc"],
        )
    wa = load_file(str(step_dir(tmp_path / "full", 7) / "model.safetensors"))
    wb = load_file(str(step_dir(tmp_path / "part", 7) / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-6)


def test_resume_refuses_a_finished_run(make_cfg, tmp_path):
    run_sync(make_cfg(TrainConfig, max_steps=2))
    with pytest.raises(TrainingError, match="leaves nothing to do"):
        run_pipeline(make_cfg(max_steps=2, resume=str(step_dir(tmp_path / "ck", 2))))


def test_logs_read_back_by_dflash_diag(make_cfg, tmp_path):
    from dflash_diag import build_converge_report, load_log

    run_sync(make_cfg(TrainConfig, max_steps=3))
    run_pipeline(make_cfg(max_steps=6, resume=str(step_dir(tmp_path / "ck", 3)), eval_every=3))
    log = load_log(tmp_path / "train.jsonl")
    assert log.issues.malformed == 0
    assert log.issues.torn_tail == []
    assert log.metrics["step"].to_list() == [1, 2, 3, 4, 5, 6]
    assert [e.fields["script"] for e in log.run_starts] == ["sync", "pipeline"]
    assert [e.step for e in log.evals] == [6]
    report = build_converge_report(log)
    assert report.verdict.status


def test_bfloat16_target_trains_a_float32_drafter(make_cfg, tmp_path):
    res = run_pipeline(make_cfg(max_steps=2, dtype="bfloat16", eval_every=2))
    assert (res.reason, res.exit_code) == ("max_steps", 0)
    weights = load_file(str(step_dir(tmp_path / "ck", 2) / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}
    records = read_log(tmp_path / "train.jsonl")
    assert all(math.isfinite(r["loss"]) for r in metrics_of(records))

"""Slow checks (``pytest -m slow``): the defaults converge on the bundled target, and the sample
log recipe produces a log the diagnostics read. Minutes on a 2-core CPU."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.async_pipeline import run_pipeline
from pipelines.config import PipelineConfig, TrainConfig
from pipelines.sync_trainer import run_sync

from .test_programs import metrics_of, read_log

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _mean(records, key, sl):
    return statistics.fmean(r[key] for r in records[sl])


def test_sync_defaults_converge(tmp_path):
    res = run_sync(
        TrainConfig(
            max_steps=100,
            log=str(tmp_path / "t.jsonl"),
            ckpt_dir=str(tmp_path / "ck"),
            progress=False,
        )
    )
    assert res.exit_code == 0
    m = metrics_of(read_log(tmp_path / "t.jsonl"))
    assert _mean(m, "loss", slice(-20, None)) < 0.5 * _mean(m, "loss", slice(0, 20))
    assert _mean(m, "acc", slice(-20, None)) > _mean(m, "acc", slice(0, 20)) + 0.1


def test_pipeline_defaults_converge_and_eval_tau_exceeds_one(tmp_path):
    res = run_pipeline(
        PipelineConfig(
            max_steps=40,
            eval_every=40,
            log=str(tmp_path / "t.jsonl"),
            ckpt_dir=str(tmp_path / "ck"),
            progress=False,
        )
    )
    assert res.exit_code == 0
    records = read_log(tmp_path / "t.jsonl")
    m = metrics_of(records)
    assert _mean(m, "loss", slice(-10, None)) < 0.5 * _mean(m, "loss", slice(0, 10))
    assert _mean(m, "acc", slice(-10, None)) > _mean(m, "acc", slice(0, 10)) + 0.1
    assert _mean(m, "tau_train", slice(-10, None)) > _mean(m, "tau_train", slice(0, 10)) + 0.3
    evals = [r for r in records if r.get("event") == "eval"]
    assert evals
    assert evals[-1]["tau"] > 1.0


def test_sample_log_recipe_is_read_by_the_diagnostics(tmp_path):
    out = tmp_path / "train.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.real_sample_log",
            "--out",
            str(out),
            "--sync-steps",
            "3",
            "--pipeline-steps",
            "7",
            "--ckpt-every",
            "2",
            "--eval-every",
            "7",
            "--crash-after",
            "4",
        ],
        cwd=ROOT,
        check=True,
    )
    records = [json.loads(x) for x in out.read_text().splitlines()]
    headers = [r for r in records if r.get("event") == "run_start"]
    assert [h["script"] for h in headers] == ["sync", "pipeline", "pipeline"]
    steps = [r["step"] for r in records if "event" not in r]
    assert steps[:3] == [1, 2, 3]
    assert steps[-1] == 10
    assert len(steps) > len(set(steps))  # the crashed segment's steps were logged again

    from dflash_diag import build_converge_report, load_log

    log = load_log(out)
    report = build_converge_report(log)
    assert report.verdict.status
    assert log.issues.malformed == 0

"""The dflash-train command line: flags, one-line errors, exit codes, SIGTERM checkpointing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.checkpoints import step_dir
from pipelines.cli import main
from pipelines.config import TrainConfig
from pipelines.log_records import validate_record
from pipelines.sync_trainer import run_sync

ROOT = Path(__file__).resolve().parents[2]


def write_toml(path: Path, tiny_assets, tmp_path: Path, **extra) -> Path:
    target, data = tiny_assets
    values = dict(
        target=target,
        data=data,
        token_budget=128,
        log=str(tmp_path / "train.jsonl"),
        ckpt_dir=str(tmp_path / "ck"),
        ckpt_every=0,
        progress=False,
        eval_prompts=2,
        eval_new_tokens=4,
        **extra,
    )
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    lines += ["[drafter]", "block_size = 4", "num_anchors = 8"]
    path.write_text("\n".join(lines) + "\n")
    return path


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("dflash-train: error: ")
    return err[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["pipeline", "--max-steps", "0"], "max_steps must be an integer >= 1"),
        (["pipeline", "--grad-accum", "x"], "--grad-accum"),
        (["sync", "--bogus"], "--bogus"),
        (["sync", "--device", "gpu"], "bad device"),
        (["sync", "--config", "/nonexistent/run.toml"], "config file not found"),
        (["pipeline", "--target-devices", ","], "empty device list"),
        (["eval", "--drafter", "/nonexistent/ck"], "no checkpoint directory"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(capsys, tmp_path, argv, needle):
    assert main([*argv, "--log", str(tmp_path / "l.jsonl")] if argv[0] != "eval" else argv) == 2
    assert needle in one_error_line(capsys)
    assert not (tmp_path / "l.jsonl").exists()  # nothing started


def test_unloadable_target_is_one_line_before_any_log(capsys, tmp_path, tiny_assets):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["sync", "--config", str(cfg), "--target", str(tmp_path / "nowhere")]) == 2
    assert "cannot load target model" in one_error_line(capsys)
    assert not (tmp_path / "train.jsonl").exists()


def test_missing_gpu_is_one_line(capsys, tmp_path, tiny_assets):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["pipeline", "--config", str(cfg), "--target-devices", "cuda:1"]) == 2
    assert "CUDA is not available" in one_error_line(capsys)


def test_data_of_another_target_is_one_line(capsys, tmp_path, tiny_assets):
    from dflash.data import DEFAULT_DATA_DIR

    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["sync", "--config", str(cfg), "--data", str(DEFAULT_DATA_DIR)]) == 2
    assert "not made for target" in one_error_line(capsys)


def test_help_lists_the_programs(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("sync", "pipeline", "eval"))


def test_runs_and_eval_through_the_cli(capsys, tmp_path, tiny_assets):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["sync", "--config", str(cfg)]) == 0
    assert (
        main(
            [
                "pipeline",
                "--config",
                str(cfg),
                "--max-steps",
                "3",
                "--grad-accum",
                "2",
                "--eval-every",
                "0",
                "--resume",
                str(step_dir(tmp_path / "ck", 2)),
            ]
        )
        == 0
    )
    target, data = tiny_assets
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "--drafter",
                str(step_dir(tmp_path / "ck", 3)),
                "--target",
                target,
                "--data",
                data,
                "--prompts",
                "2",
                "--new-tokens",
                "4",
                "--log",
                str(tmp_path / "train.jsonl"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "step 3: tau = " in out
    assert "accepted" in out
    records = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [validate_record(r) for r in records][-1] == "eval"
    assert records[-1]["step"] == 3
    assert records[-1]["n_prompts"] == 2


@pytest.mark.parametrize("program", ["sync", "pipeline"])
def test_sigterm_finishes_the_step_checkpoints_and_exits(tmp_path, tiny_assets, program):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=100_000)
    extra = ["--grad-accum", "2", "--eval-every", "0"] if program == "pipeline" else []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", program, "--config", str(cfg), *extra],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "train.jsonl"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if (
                log.exists()
                and sum('"step"' in x and '"event"' not in x for x in log.read_text().splitlines())
                >= 2
            ):
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        else:
            pytest.fail("no metrics within 90 s")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + signal.SIGTERM, proc.stderr.read()
    records = [json.loads(x) for x in log.read_text().splitlines()]
    for r in records:
        validate_record(r)
    ckpt, stop = records[-2], records[-1]
    last_metric = [r for r in records if "event" not in r][-1]
    assert stop == {**stop, "event": "stop", "reason": "signal", "step": last_metric["step"]}
    assert ckpt["event"] == "checkpoint"
    assert ckpt["step"] == stop["step"]
    state = json.loads((Path(ckpt["path"]) / "state.json").read_text())
    assert state["step"] == stop["step"]
    assert state["script"] == program


def test_eval_record_from_a_sync_checkpoint_fits_the_schema(tmp_path, tiny_assets):
    target, data = tiny_assets
    run_sync(
        TrainConfig(
            target=target,
            data=data,
            max_steps=1,
            token_budget=128,
            log=str(tmp_path / "t.jsonl"),
            ckpt_dir=str(tmp_path / "ck"),
            progress=False,
            drafter={"block_size": 4, "num_anchors": 8},
        )
    )
    from pipelines.evaluate import EvalRequest, eval_record, evaluate_checkpoint

    report = evaluate_checkpoint(
        EvalRequest(
            drafter=str(step_dir(tmp_path / "ck", 1)),
            target=target,
            data=data,
            prompts=1,
            new_tokens=3,
        )
    )
    rec = eval_record(report)
    assert validate_record(rec.to_json()) == "eval"
    assert sum(rec.tau_hist) >= 1

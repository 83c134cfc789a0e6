"""Progress off a terminal, the closing summary and the failure line, through the CLI."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dflash import StepMetrics
from pipelines.checkpoints import step_dir
from pipelines.cli import main
from pipelines.progress import (
    BAR,
    LINES,
    OFF,
    RunSummary,
    StepProgress,
    format_duration,
    progress_mode,
    window_stats,
)

from .test_cli import write_toml

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"^dflash-train: step (\d+)/(\d+) \(\d+%\)  loss [\d.]+  acc [\d.]+  "
    r"tau~ [\d.]+  [\d,]+ tok/s  ETA \d+:\d\d:\d\d$"
)


def metrics(n_correct: int, tokens: int = 100) -> StepMetrics:
    """4 blocks of size 4 (12 predictions), loss 2.0, ``n_correct`` correct at position 1."""
    return StepMetrics(
        block_size=4,
        loss_sum=24.0,
        weight_sum=12.0,
        n_correct=n_correct,
        n_pred=12,
        n_blocks=4,
        n_tokens=tokens,
        correct_pos=[n_correct, 0, 0],
        accept_pos=[n_correct, 0, 0],
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lines_every_n_steps_or_t_seconds_whichever_first():
    clock, out = Clock(), io.StringIO()
    with StepProgress(10, 30, None, every_steps=5, every_seconds=60, clock=clock, stream=out) as p:
        assert p.mode == LINES  # a StringIO is no terminal
        for k in range(11, 31):
            clock.t += 1.0 if k < 20 else 100.0  # from step 20 on, each step takes 100 s
            p.update(k, metrics(2), 0.5)
    steps = [int(LINE.match(x).group(1)) for x in out.getvalue().splitlines()]
    # the first step; every 5 steps; then every step once 60 s pass between them; the last.
    assert steps == [11, 16, *range(20, 31)]


def test_window_numbers_and_eta():
    stats = window_stats(
        [(1, 10.0, 0.5, metrics(2)), (2, 12.0, 0.5, metrics(4)), (3, 14.0, 1.0, metrics(0))]
    )
    assert (stats.loss, stats.acc) == (2.0, 6 / 36)
    # harmonic estimate: half the blocks advance 2 tokens, half 1; decoding averages 1 / (1/2 + 1/4)
    assert stats.tau == pytest.approx(1 / ((1 - 6 / 12) / 1 + (6 / 12) / 2))
    assert stats.tok_per_sec == pytest.approx(300 / 2.0)  # tokens over the steps' own seconds
    assert stats.seconds_per_step == pytest.approx(2.0)  # wall time between step ends
    assert format_duration(3723) == "1:02:03"
    assert format_duration(float("nan")) == "?"


def test_bar_on_a_terminal_nothing_when_disabled():
    assert progress_mode(None, isatty=True) == BAR
    assert progress_mode(None, isatty=False) == LINES
    assert progress_mode(True, isatty=False) == BAR
    assert progress_mode(False, isatty=True) == OFF
    out = io.StringIO()
    with StepProgress(0, 3, False, stream=out) as p:
        p.update(1, metrics(1), 0.1)
    assert out.getvalue() == ""
    assert p.final_window().steps == 1


def test_summary_lines():
    clock = Clock()
    p = StepProgress(100, 104, False, clock=clock, started_at=-5.0)
    for k in (101, 102):
        clock.t += 2
        p.update(k, metrics(3), 1.0)
    s = RunSummary.of(
        "sync",
        p,
        start_step=100,
        step=102,
        max_steps=104,
        reason="signal",
        checkpoint="ck/step-000102",
        log="logs/my run.jsonl",
    )
    assert s.lines() == [
        "dflash-train: sync stopped by a signal at step 102/104: 2 steps in 0:00:09, 100 tok/s",
        "  final window (steps 101-102): loss 2.000  acc 0.250  tau~ 1.60",
        "  checkpoint: ck/step-000102",
        "  log:        logs/my run.jsonl",
        "  diagnose:   dflash-diag converge 'logs/my run.jsonl'",
    ]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("program", ["sync", "pipeline"])
def test_progress_lines_and_summary_off_a_terminal(tmp_path, tiny_assets, program):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path)
    cfg.write_text(cfg.read_text().replace("progress = false\n", ""))  # the default: auto
    extra = ["--grad-accum", "1", "--eval-every", "0"] if program == "pipeline" else []
    run = cli(
        program,
        "--config",
        str(cfg),
        "--max-steps",
        "5",
        "--ckpt-every",
        "4",
        "--progress-every",
        "2",
        "--progress-seconds",
        "0",
        *extra,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""
    err = run.stderr.splitlines()
    lines = [x for x in err if x.startswith("dflash-train: step ")]
    assert all(LINE.match(x) for x in lines), lines
    assert [int(LINE.match(x).group(1)) for x in lines] == [1, 3, 5]
    log = str(tmp_path / "train.jsonl")
    tail = err[-5:]
    assert re.match(
        rf"dflash-train: {program} finished at step 5/5: 5 steps in \d:\d\d:\d\d, "
        r"[\d,]+ tok/s$",
        tail[0],
    ), tail
    assert re.match(r"  final window \(steps 1-5\): loss [\d.]+  acc [\d.]+  tau~ [\d.]+$", tail[1])
    assert tail[2:] == [
        f"  checkpoint: {step_dir(tmp_path / 'ck', 5)}",
        f"  log:        {log}",
        f"  diagnose:   dflash-diag converge {log}",
    ]
    recs = [json.loads(x) for x in Path(log).read_text().splitlines()]
    assert [r["step"] for r in recs if r.get("event") == "checkpoint"] == [4, 5]


def test_silenced_progress_keeps_the_summary(tmp_path, tiny_assets, capsys):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path)  # progress = false
    assert main(["sync", "--config", str(cfg), "--max-steps", "2", "--progress-every", "1"]) == 0
    err = capsys.readouterr().err
    assert not any(x.startswith("dflash-train: step ") for x in err.splitlines())
    assert "dflash-train: sync finished at step 2/2" in err


def test_a_failure_ends_with_one_line_naming_the_last_good_checkpoint(tmp_path, tiny_assets):
    """A checkpoint save that fails mid-run (a real file-size limit: the disk is "full" for
    files past it) ends the run with one line naming the checkpoint it resumed from."""
    import resource

    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path)
    assert main(["sync", "--config", str(cfg), "--max-steps", "2"]) == 0
    good = step_dir(tmp_path / "ck", 2)
    # Room for the log to grow by a header and a few records, not for the drafter's weights.
    limit = (tmp_path / "train.jsonl").stat().st_size + 8192
    if (good / "model.safetensors").stat().st_size <= limit:
        pytest.skip("the test drafter's weights are smaller than the log's headroom")

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failing write, not a killed process

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "sync",
            "--config",
            str(cfg),
            "--max-steps",
            "5",
            "--resume",
            str(good),
            "--ckpt-every",
            "3",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=full_disk,
    )
    assert run.returncode == 1, run.stderr
    err = run.stderr.splitlines()
    assert "Traceback" not in run.stderr
    assert err[-1].startswith("dflash-train: error: ")
    assert err[-1].endswith(f"; last good checkpoint: {good}"), err[-1]
    assert any(x.startswith("dflash-train: sync failed at step 3/5: 1 step in") for x in err), err

"""dflash-train faults of the third reliability round: each a real command on real files, ending
in one line and the right exit code (docs/reliability.md, Training)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash.data import Dataset, save_dataset
from pipelines.async_pipeline import run_pipeline
from pipelines.cli import main
from pipelines.config import TrainConfig
from pipelines.run_lock import LOCK_FILE
from pipelines.sync_trainer import run_sync
from tests.pipelines.test_cli import one_error_line, write_toml

from .test_programs import read_log


@pytest.fixture(scope="module")
def block4_checkpoint(sync_checkpoint) -> Path:
    """A step-2 lock-step checkpoint of a block-4, one-layer drafter."""
    return sync_checkpoint


# -- resume with another drafter shape -----------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--block-size", "8"], "block_size 8 (the checkpoint's is 4)"),
        (["--block-size", "16"], "block_size 16 (the checkpoint's is 4)"),  # 16 is the default
        (["--draft-layers", "2"], "num_draft_layers 2 (the checkpoint's is 1)"),
    ],
)
def test_resume_with_another_drafter_shape_is_refused_naming_it(
    flags, needle, block4_checkpoint, tiny_assets, tmp_path, capsys
):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=3)
    code = main(["sync", "--config", str(cfg), "--resume", str(block4_checkpoint), *flags])
    assert code == 2
    line = one_error_line(capsys)
    assert needle in line
    assert "keeps its checkpoint's drafter" in line
    assert not (tmp_path / "train.jsonl").exists()


def test_resume_without_shape_flags_logs_the_checkpoints_drafter(
    block4_checkpoint, tiny_assets, tmp_path, capsys
):
    """No flag and no [drafter] table: the run resumes, and its header records the drafter it
    trains (block 4), not the built-in defaults (block 16)."""
    target, data = tiny_assets
    log = tmp_path / "r.jsonl"
    code = main(
        [
            "sync",
            "--target",
            target,
            "--data",
            data,
            "--token-budget",
            "128",
            "--max-steps",
            "3",
            "--no-progress",
            "--log",
            str(log),
            "--ckpt-dir",
            str(tmp_path / "ck"),
            "--resume",
            str(block4_checkpoint),
        ]
    )
    assert code == 0, capsys.readouterr().err
    header = read_log(log)[0]
    assert header["block_size"] == 4
    assert header["config"]["drafter"]["block_size"] == 4
    assert header["config"]["drafter"]["num_draft_layers"] == 1


# -- a target's declared size, before it is built ------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_hidden_layers", 10**6),
        ("vocab_size", 10**9),
        ("hidden_size", 10**7),
    ],
)
def test_a_target_declaring_an_impossible_size_is_refused_before_it_is_built(
    key, value, tiny_assets, tmp_path, capsys
):
    target, _ = tiny_assets
    big = tmp_path / "big"
    shutil.copytree(target, big)
    config = json.loads((big / "config.json").read_text())
    config[key] = value
    config.pop("layer_types", None)  # else transformers refuses 10^6 layers for 4 layer types
    (big / "config.json").write_text(json.dumps(config))
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["sync", "--config", str(cfg), "--target", str(big)]) == 2
    line = one_error_line(capsys)  # and no loading report before it
    assert f"{key} {value:,}" in line
    assert "GiB of weights on cpu" in line
    assert "\x1b" not in line


def test_weights_that_do_not_match_the_config_are_one_line_without_the_load_report(
    tiny_assets, tmp_path
):
    """A vocabulary that fits memory but not the weights: transformers' loading report (a
    table with ANSI codes) is held back, its mismatch named on the one line."""
    target, _ = tiny_assets
    bad = tmp_path / "bad"
    shutil.copytree(target, bad)
    config = json.loads((bad / "config.json").read_text())
    config["vocab_size"] *= 2
    (bad / "config.json").write_text(json.dumps(config))
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    # A real process: transformers' log handler keeps the stderr it found when first used, which
    # in-process capture does not see.
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "sync", "--config", str(cfg), "--target", str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("dflash-train: error: "), lines
    assert "weights do not match config.json" in lines[0]
    assert "embed_tokens" in lines[0]


# -- one run per checkpoint directory and log ----------------------------------------------------

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode())
print("held", flush=True)
time.sleep(60)
"""


def _holder(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("what", ["ckpt_dir", "log"])
def test_a_second_run_on_a_locked_checkpoint_dir_or_log_is_refused_naming_the_pid(
    what, tiny_assets, tmp_path, capsys
):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    (tmp_path / "ck").mkdir()
    locked = tmp_path / "ck" / LOCK_FILE if what == "ckpt_dir" else tmp_path / "train.jsonl"
    proc = _holder(locked)
    try:
        assert main(["sync", "--config", str(cfg)]) == 2
        line = one_error_line(capsys)
    finally:
        proc.kill()
        proc.wait()
    assert f"in use by another run (pid {proc.pid})" in line
    assert ("checkpoint directory" if what == "ckpt_dir" else "log") in line
    assert not list((tmp_path / "ck").glob("step-*"))


def test_two_runs_on_one_checkpoint_dir_cannot_both_proceed(tiny_assets, tmp_path):
    """The attack itself, in two real processes: while the first trains, a second on the same
    --ckpt-dir and log (another seed) is refused; every checkpoint is the first run's."""
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=100_000)
    cmd = [sys.executable, "-m", "pipelines.cli", "sync", "--config", str(cfg), "--ckpt-every", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([*cmd, "--seed", "0"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while not list((tmp_path / "ck").glob("step-*")):  # training, its locks held
            assert first.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.2)
        second = subprocess.run(
            [*cmd, "--seed", "1"], capture_output=True, text=True, env=env, timeout=240, check=False
        )
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    assert second.returncode == 2, second.stderr
    assert f"in use by another run (pid {first.pid})" in second.stderr
    seeds = {
        json.loads((d / "state.json").read_text())["seed"] for d in (tmp_path / "ck").glob("step-*")
    }
    assert seeds == {0}
    assert sum(r.get("event") == "run_start" for r in read_log(tmp_path / "train.jsonl")) == 1


def test_a_lock_left_by_a_dead_run_is_taken_over(make_cfg, tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (ck / LOCK_FILE).write_text(f"{dead.pid}\n")
    res = run_sync(make_cfg(TrainConfig, max_steps=2))
    assert res.exit_code == 0
    assert not (ck / LOCK_FILE).exists()  # released and removed at the end
    fd = os.open(tmp_path / "train.jsonl", os.O_RDONLY)  # the log is free again
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_a_lock_file_replaced_before_it_is_locked_is_locked_again(tmp_path, monkeypatch):
    """A holder removing the lock file between our open and our flock (the end of its run):
    the lock taken must be on the file now at the path, not on the removed one."""
    from pipelines import run_lock

    real = fcntl.flock
    calls = []

    def flock(fd, op):
        if not calls:  # the first attempt: the file is replaced under us
            (tmp_path / LOCK_FILE).unlink()
            (tmp_path / LOCK_FILE).write_text("")
        calls.append(fd)
        return real(fd, op)

    monkeypatch.setattr(run_lock.fcntl, "flock", flock)
    (tmp_path / LOCK_FILE).write_text("")
    with run_lock.acquire_run_lock(tmp_path, tmp_path / "t.jsonl") as lock:
        assert os.fstat(lock.fds[0]).st_ino == (tmp_path / LOCK_FILE).stat().st_ino
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())


# -- an unwritable checkpoint directory, found before training -----------------------------------


def test_an_unwritable_checkpoint_dir_is_refused_before_the_target_loads(
    tiny_assets, tmp_path, capsys
):
    """/sys refuses new entries even to root (a chmod 0555 directory would not stop root)."""
    if not Path("/sys").is_dir() or (os.access("/sys", os.W_OK) and _can_create_in("/sys")):
        pytest.skip("no unwritable directory here")
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["sync", "--config", str(cfg), "--ckpt-dir", "/sys"]) == 2
    assert "cannot write checkpoints to /sys" in one_error_line(capsys)
    assert not (tmp_path / "train.jsonl").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_checkpoint_dir_is_refused_up_front(tiny_assets, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    try:
        assert main(["sync", "--config", str(cfg), "--ckpt-dir", str(ro)]) == 2
    finally:
        ro.chmod(0o755)
    assert "cannot write checkpoints to" in one_error_line(capsys)


def _can_create_in(directory: str) -> bool:
    try:
        os.mkdir(Path(directory) / f".dflash-probe-{os.getpid()}")
    except OSError:
        return False
    os.rmdir(Path(directory) / f".dflash-probe-{os.getpid()}")
    return True


# -- data that cannot train ----------------------------------------------------------------------


def _data(directory: Path, examples) -> str:
    save_dataset(directory, Dataset.from_examples(examples, {"pad_token_id": 0}), [[5, 6, 7]])
    return str(directory)


def test_an_empty_dataset_file_and_a_dataset_of_no_examples_are_one_line(
    tiny_assets, tmp_path, capsys
):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    empty_file = tmp_path / "zero-bytes"
    empty_file.mkdir()
    (empty_file / "train.safetensors").write_bytes(b"")
    shutil.copy(Path(tiny_assets[1]) / "eval_prompts.jsonl", empty_file)
    assert main(["sync", "--config", str(cfg), "--data", str(empty_file)]) == 2
    assert "is damaged or not a dataset" in one_error_line(capsys)
    none = _data(tmp_path / "none", [])
    assert main(["sync", "--config", str(cfg), "--data", none]) == 2
    assert "holds no examples" in one_error_line(capsys)


def test_data_whose_responses_hold_no_block_is_refused_up_front(tiny_assets, tmp_path, capsys):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    short = _data(tmp_path / "short", [([5, 6, 7], [8])] * 40)
    assert main(["sync", "--config", str(cfg), "--data", short]) == 2
    line = one_error_line(capsys)
    assert "the longest response is 1 token" in line
    assert "needs 4 (block_size)" in line
    assert not (tmp_path / "train.jsonl").exists()


@pytest.mark.parametrize("program", ["sync", "pipeline"])
def test_a_run_whose_every_step_was_skipped_fails(program, make_cfg, tmp_path, monkeypatch):
    """The same data with the up-front refusal switched off: every loss is NaN, every update
    skipped (fewer steps than max_nonfinite), and the run must fail, without a checkpoint."""
    from pipelines import run_setup

    monkeypatch.setattr(run_setup, "check_blocks_fit", lambda *a: None)
    short = _data(tmp_path / "short", [([5, 6, 7], [8])] * 40)
    if program == "sync":
        res = run_sync(make_cfg(TrainConfig, max_steps=3, data=short))
    else:
        res = run_pipeline(make_cfg(max_steps=3, data=short))
    assert res.exit_code == 1
    assert res.reason == "nonfinite"
    assert "every step of this launch (3) was skipped" in res.error
    assert not list((tmp_path / "ck").glob("step-*"))
    stop = read_log(tmp_path / "train.jsonl")[-1]
    assert stop["event"] == "stop"
    assert "nothing was trained" in stop["error"]


# -- overlong names and values -------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", ["--log", "--target", "--ckpt-dir", "--data", "--resume", "--config"]
)
def test_a_300_byte_file_name_is_one_short_line(flag, tiny_assets, tmp_path, capsys):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    name = str(tmp_path / ("n" * 300))
    argv = (
        ["sync", flag, name] if flag == "--config" else ["sync", "--config", str(cfg), flag, name]
    )
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert len(line) < 400
    assert "(3" in line
    assert "chars)" in line


@pytest.mark.parametrize("where", ["device", "target", "a key"])
def test_a_100_mb_string_in_the_toml_is_one_short_line(where, tmp_path, capsys):
    huge = "y" * 100_000_000
    toml = tmp_path / "big.toml"
    toml.write_text(f"{huge} = 1\n" if where == "a key" else f'{where} = "{huge}"\n')
    assert main(["sync", "--config", str(toml)]) == 2
    line = one_error_line(capsys)
    assert len(line) < 600
    assert ",000,00" in line
    assert "chars)" in line

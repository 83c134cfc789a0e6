"""Tests that notice the faults a mutation audit found unguarded.

* resuming from a PERIODIC checkpoint (written mid-run while the loader reads ahead) must
  reproduce an uninterrupted run: a checkpoint storing the loader's read-ahead position as the
  data cursor skips batches;
* with several target workers, micro-batches finish out of order; the drafter must still train
  them in the loader's order and skip none (the reorder buffer);
* an overwrite of a checkpoint directory that fails part-way must leave the OLD checkpoint
  loadable (a save writing straight into the final directory leaves a torn one).

Each was checked by applying the fault to the code and seeing the test fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dflash.checkpoint import MODEL_FILE, clean_checkpoint_leftovers, load_checkpoint, load_drafter
from pipelines.async_pipeline import run_pipeline
from pipelines.checkpoints import step_dir
from pipelines.config import TrainConfig
from pipelines.sync_trainer import run_sync
from tests.pipelines.test_programs import metrics_of, read_log

ROOT = Path(__file__).resolve().parents[2]


def _per_step(path: Path) -> dict[int, dict]:
    return {r["step"]: r for r in metrics_of(read_log(path))}


def _same_steps(a: dict[int, dict], b: dict[int, dict], steps: range, fields: tuple[str, ...]):
    for s in steps:
        assert b[s]["loss"] == pytest.approx(a[s]["loss"], rel=1e-5, abs=1e-6), s
        for f in fields:
            assert b[s][f] == a[s][f], (s, f)


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a / MODEL_FILE)), load_file(str(b / MODEL_FILE))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("program", ["pipeline", "sync"])
def test_resume_from_a_periodic_checkpoint_matches_an_uninterrupted_run(
    make_cfg, tmp_path, program
):
    """Step 4's checkpoint is written mid-run (the pipeline's loader has read up to
    channel_capacity micro-batches ahead); resuming from it must give steps 5..7 exactly as the
    uninterrupted run had them: same tokens, same losses, same final weights."""
    cls, run, fields = (
        (None, run_pipeline, ("n_tokens", "n_blocks", "acc"))
        if program == "pipeline"
        else (TrainConfig, run_sync, ("acc",))
    )
    common = {"max_steps": 7, "total_steps": 7, "ckpt_every": 2, "torch_threads": 1}
    if program == "pipeline":
        common["channel_capacity"] = 4
    mk = (lambda **kw: make_cfg(**kw)) if cls is None else (lambda **kw: make_cfg(cls, **kw))
    full = mk(log=str(tmp_path / "full.jsonl"), ckpt_dir=str(tmp_path / "full"), **common)
    assert run(full).step == 7
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == [
        "step-000002",
        "step-000004",
        "step-000006",
        "step-000007",
    ]

    resumed = mk(
        log=str(tmp_path / "part.jsonl"),
        ckpt_dir=str(tmp_path / "part"),
        resume=str(step_dir(tmp_path / "full", 4)),
        **common,
    )
    assert run(resumed).step == 7
    a, b = _per_step(tmp_path / "full.jsonl"), _per_step(tmp_path / "part.jsonl")
    assert sorted(b) == [5, 6, 7]
    _same_steps(a, b, range(5, 8), fields)
    if program == "sync":  # the legacy record has no n_tokens: compare the epoch position
        assert [b[s]["epoch"] for s in range(5, 8)] == [a[s]["epoch"] for s in range(5, 8)]
    _same_weights(step_dir(tmp_path / "full", 7), step_dir(tmp_path / "part", 7))


def test_several_target_workers_train_every_micro_batch_in_order(make_cfg, tmp_path):
    """Every other micro-batch is slowed in the target stage (the test hook runs before the
    forward), so with several workers the next one overtakes it; the per-step tokens, losses and
    final weights must still equal a single worker's (which cannot reorder anything)."""

    def slow_even(name: str, i: int, item=None) -> None:
        if name.startswith("target") and item.seq % 2 == 0:
            time.sleep(0.03)

    runs = {}
    for workers in (1, 2, 3):
        cfg = make_cfg(
            log=str(tmp_path / f"w{workers}.jsonl"),
            ckpt_dir=str(tmp_path / f"w{workers}"),
            max_steps=4,
            grad_accum=3,
            torch_threads=1,
            target_devices=["cpu"] * workers,
        )
        res = run_pipeline(cfg, inject=slow_even)
        assert (res.step, res.reason) == (4, "max_steps")
        runs[workers] = _per_step(tmp_path / f"w{workers}.jsonl")
        assert sorted(runs[workers]) == [1, 2, 3, 4]
    for workers in (2, 3):
        _same_steps(runs[1], runs[workers], range(1, 5), ("n_tokens", "n_blocks", "n_pred", "acc"))
        assert [runs[workers][s]["epoch"] for s in range(1, 5)] == [
            runs[1][s]["epoch"] for s in range(1, 5)
        ]
        _same_weights(step_dir(tmp_path / "w1", 4), step_dir(tmp_path / f"w{workers}", 4))


# -- atomic checkpoints --------------------------------------------------------------------------


@pytest.fixture
def old_checkpoint(make_cfg, tmp_path) -> Path:
    """A real step-2 checkpoint of the lock-step trainer."""
    assert run_sync(make_cfg(TrainConfig, max_steps=2)).exit_code == 0
    return step_dir(tmp_path / "ck", 2)


# The child overwrites the checkpoint with changed weights and optimizer state, under a real
# file-size limit (setrlimit RLIMIT_FSIZE: a longer write fails with EFBIG, as on a full disk)
# between the sizes of model.safetensors and optimizer.safetensors: the weights are written, the
# optimizer state is not. Written in place, that would leave new weights beside old state.
OVERWRITE = """
import resource, sys, torch
from dflash.checkpoint import load_checkpoint, load_drafter
from pipelines.checkpoints import save_training_checkpoint
path, limit = sys.argv[1], int(sys.argv[2])
drafter = load_drafter(path)
opt = torch.optim.AdamW(drafter.parameters(), betas=(0.9, 0.95))
state = load_checkpoint(path, drafter, opt).state
with torch.no_grad():
    for p in drafter.parameters():
        p.add_(1.0)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    save_training_checkpoint(path.rsplit("/", 1)[0], 2, drafter, opt, {**state, "step": 2})
except OSError as e:
    print("save failed:", e)
    sys.exit(3)
"""


def test_an_overwrite_that_fails_part_way_leaves_the_old_checkpoint_loadable(old_checkpoint):
    before = {f: (old_checkpoint / f).read_bytes() for f in os.listdir(old_checkpoint)}
    model = len(before[MODEL_FILE])
    opt = len(before["optimizer.safetensors"])
    assert model < opt  # AdamW keeps two moments per weight
    proc = subprocess.run(
        [sys.executable, "-c", OVERWRITE, str(old_checkpoint), str((model + opt) // 2)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, proc.stderr
    assert "File too large" in proc.stdout, proc.stderr
    after = {f: (old_checkpoint / f).read_bytes() for f in os.listdir(old_checkpoint)}
    assert after == before  # every file of the old checkpoint, byte for byte
    drafter = load_drafter(old_checkpoint)
    opt_ = torch.optim.AdamW(drafter.parameters(), betas=(0.9, 0.95))
    assert load_checkpoint(old_checkpoint, drafter, opt_).state["step"] == 2
    assert sorted(p.name for p in old_checkpoint.parent.iterdir()) == ["step-000002"]


KILL_LOOP = """
import sys, torch
from dflash.checkpoint import load_drafter
from pipelines.checkpoints import save_training_checkpoint
path = sys.argv[1]
drafter = load_drafter(path)
print("ready", flush=True)
while True:
    save_training_checkpoint(path.rsplit("/", 1)[0], 2, drafter, None, {"step": 2, "cursor": None})
"""


@pytest.mark.slow
def test_sigkill_during_overwrites_never_leaves_an_unloadable_checkpoint(old_checkpoint):
    """SIGKILL a process that does nothing but overwrite one checkpoint, at several moments;
    after the next start's tidy-up the checkpoint always loads."""
    for delay in (0.05, 0.13, 0.21, 0.37, 0.5, 0.71):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILL_LOOP, str(old_checkpoint)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
        clean_checkpoint_leftovers(old_checkpoint.parent)
        assert load_checkpoint(old_checkpoint, load_drafter(old_checkpoint)).state["step"] == 2
        assert [p.name for p in old_checkpoint.parent.iterdir()] == ["step-000002"]


def test_checkpoint_json_written_by_a_save_is_what_resume_validates(old_checkpoint):
    """The writer and the validator agree (a field added to one must be added to the other)."""
    from pipelines.checkpoint_state import validate_training_state

    state = json.loads((old_checkpoint / "state.json").read_text())
    state.pop("format")
    assert validate_training_state(state, old_checkpoint) is state
    assert set(state) == {
        "step",
        "cursor",
        "schedule",
        "script",
        "seed",
        "world_size",
        "micro_batches",
        "walk_held_out",
    }


# -- issue 19's fresh audit (audit 4): each test fails on the mutation its docstring names --------


@pytest.mark.parametrize("program", ["sync", "pipeline"])
def test_a_run_stopped_by_consecutive_skips_before_any_update_fails(
    program, make_cfg, tmp_path, monkeypatch
):
    """Bug guarded: the every-step-skipped check made only for a run that reached max_steps.

    A run whose NaN steps hit ``max_nonfinite`` before its first update trained nothing too:
    it must fail with that reason and leave no checkpoint of the untrained drafter (the check
    skipped, it saved one and named no error).
    """
    from pipelines import run_setup
    from tests.pipelines.test_train_faults import _data

    monkeypatch.setattr(run_setup, "check_blocks_fit", lambda *a: None)
    short = _data(tmp_path / "short", [([5, 6, 7], [8])] * 40)
    overrides = {"max_steps": 8, "max_nonfinite": 2, "data": short}
    if program == "sync":
        res = run_sync(make_cfg(TrainConfig, **overrides))
    else:
        res = run_pipeline(make_cfg(**overrides))
    assert res.exit_code == 1
    assert res.reason == "nonfinite"
    assert res.error is not None
    assert "was skipped" in res.error
    assert not list((tmp_path / "ck").glob("step-*"))


def test_the_pipeline_header_counts_optimizer_steps_per_epoch(make_cfg, tmp_path):
    """Bug guarded: the pipeline's ``run_start`` header counting micro-batches per epoch, not
    optimizer steps (each step takes ``grad_accum`` of them): twice the accumulation, half the
    steps per epoch, as the lock-step trainer (one micro-batch a step) states it."""
    headers = {}
    for accum in (1, 2):
        log = tmp_path / f"accum{accum}.jsonl"
        run_pipeline(make_cfg(max_steps=1, grad_accum=accum, log=str(log)))
        headers[accum] = next(r for r in read_log(log) if r.get("event") == "run_start")
    sync_log = tmp_path / "sync.jsonl"
    run_sync(make_cfg(TrainConfig, max_steps=1, log=str(sync_log)))
    sync = next(r for r in read_log(sync_log) if r.get("event") == "run_start")
    assert headers[1]["steps_per_epoch"] == sync["steps_per_epoch"]
    assert headers[2]["steps_per_epoch"] == pytest.approx(headers[1]["steps_per_epoch"] / 2)


def test_the_preflight_bounds_take_their_limits_themselves(tmp_path):
    """Bugs guarded: ``torch_threads`` equal to the CPU count refused (it is the most a machine
    usefully takes), and a file name of exactly NAME_MAX (255) bytes refused (the filesystem
    holds it)."""
    from pipelines.errors import TrainingError
    from pipelines.preflight import NAME_MAX, check_path_name, check_torch_threads

    check_torch_threads(4, cpus=4)
    check_torch_threads(0, cpus=4)
    with pytest.raises(TrainingError, match="this machine has 4 CPUs"):
        check_torch_threads(5, cpus=4)
    longest = tmp_path / ("n" * NAME_MAX)
    longest.write_text("")  # the filesystem takes it
    check_path_name(str(longest), "--log")
    with pytest.raises(TrainingError, match="has a name of 256 bytes"):
        check_path_name(str(tmp_path / ("n" * (NAME_MAX + 1))), "--log")

"""dflash-train under faults: damaged checkpoints, torn logs, bad paths and arguments, a full
disk, leftovers of killed saves, pickle targets, configs too big for the machine.

Every fault ends with ONE line on stderr naming the file and what to do (exit 2 before a run
starts, 1 when it fails mid-run), and nothing already written is lost. Each test drives the real
command (``pipelines.cli.main`` or a subprocess) against real files; faults are real too (a
truncated file, /dev/full, a file-size limit set with setrlimit, a dead process's leftovers).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dflash.checkpoint import CheckpointError, is_complete_checkpoint
from pipelines.checkpoint_state import validate_training_state
from pipelines.cli import main
from pipelines.config import TrainConfig
from pipelines.sync_trainer import run_sync
from tests.pipelines.test_cli import one_error_line, write_toml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoint(sync_checkpoint) -> Path:
    """A real step-2 checkpoint of the lock-step trainer (copied, then damaged, by each test)."""
    return sync_checkpoint


def _edit_json(name: str, **changes):
    def damage(ck: Path) -> None:
        d = json.loads((ck / name).read_text())
        d.update(changes)
        (ck / name).write_text(json.dumps(d))

    return damage


def _write(name: str, data: bytes):
    return lambda ck: (ck / name).write_bytes(data)


def _drop(name: str, key: str):
    def damage(ck: Path) -> None:
        d = json.loads((ck / name).read_text())
        del d[key]
        (ck / name).write_text(json.dumps(d))

    return damage


def _truncate(name: str, size: int):
    def damage(ck: Path) -> None:
        with open(ck / name, "r+b") as f:
            f.truncate(size)

    return damage


# One case per class of damage: a torn binary file, JSON of the wrong shape, a field of the wrong
# type or range, a cursor outside the data, a config that does not describe this drafter.
DAMAGES = {
    "truncated model.safetensors": (_truncate("model.safetensors", 1000), "model.safetensors"),
    "model.safetensors header only": (_truncate("model.safetensors", 8), "model.safetensors"),
    "truncated optimizer.safetensors": (
        _truncate("optimizer.safetensors", 100),
        "optimizer.safetensors",
    ),
    "config.json a list": (_write("config.json", b"[1, 2]"), "config.json"),
    "config.json not JSON": (_write("config.json", b"{"), "config.json"),
    "config.json deep nesting": (_write("config.json", b"[" * 100_000), "config.json"),
    "config.json bad format": (_edit_json("config.json", format=True), "config.json"),
    "config.json bad drafter field": (
        _edit_json("config.json", dflash_config={"block_size": 1}),
        "config.json",
    ),
    "state.json a list": (_write("state.json", b"[]"), "state.json"),
    "state.json not UTF-8": (_write("state.json", b"\xff{}"), "state.json"),
    "step true": (_edit_json("state.json", step=True), "'step'"),
    "no step": (_drop("state.json", "step"), "'step'"),
    "world_size two": (_edit_json("state.json", world_size="two"), "'world_size'"),
    "cursor of strings": (
        _edit_json("state.json", cursor={"epoch": "x", "position": 0}),
        "'cursor'",
    ),
    "cursor beyond the data": (
        _edit_json("state.json", cursor={"epoch": 0, "position": 10**9}),
        "cursor position",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_damaged_checkpoint_is_refused_in_one_line_naming_the_file(
    case, checkpoint, tiny_assets, tmp_path, capsys
):
    damage, needle = DAMAGES[case]
    ck = tmp_path / "step-000002"
    shutil.copytree(checkpoint, ck)
    damage(ck)
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=3)
    assert main(["sync", "--config", str(cfg), "--resume", str(ck)]) == 2
    line = one_error_line(capsys)
    assert needle in line, line
    assert str(ck) in line, line
    assert "cannot resume" in line
    assert not (tmp_path / "train.jsonl").exists()  # refused before the run started


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("step", True),
        ("step", -1),
        ("step", 1.0),
        ("step", "40"),
        ("step", None),
        ("cursor", []),
        ("cursor", {"epoch": 0}),
        ("cursor", {"epoch": -1, "position": 0}),
        ("cursor", {"epoch": 0, "position": False}),
        ("cursor", {"epoch": 0, "position": 1, "x": 2}),
        ("schedule", {}),
        ("schedule", None),
        (
            "schedule",
            {"peak_lr": 1e-3, "warmup_steps": 5, "total_steps": 2, "min_lr": 0.0, "kind": "cosine"},
        ),
        (
            "schedule",
            {
                "peak_lr": float("nan"),
                "warmup_steps": 0,
                "total_steps": 2,
                "min_lr": 0.0,
                "kind": "cosine",
            },
        ),
        (
            "schedule",
            {
                "peak_lr": 6e-4,
                "warmup_steps": 2,
                "total_steps": 50,
                "min_lr": 0.0,
                "kind": "cosine",
                "start_step": "40",
            },
        ),
        (
            "schedule",
            {
                "peak_lr": 6e-4,
                "warmup_steps": 2,
                "total_steps": 50,
                "min_lr": 0.0,
                "kind": "cosine",
                "start_step": 40,
                "extra": 1,
            },
        ),
        ("script", "train"),
        ("script", 1),
        ("seed", -1),
        ("seed", 2**32),
        ("seed", True),
        ("world_size", "two"),
        ("world_size", 0),
        ("micro_batches", 0),
        ("micro_batches", 2.5),
        ("grad_accum", False),
    ],
)
def test_state_validator_rejects_every_bad_field(field, value):
    good = {
        "step": 40,
        "cursor": {"epoch": 1, "position": 12},
        "script": "sync",
        "seed": 7,
        "schedule": {
            "peak_lr": 6e-4,
            "warmup_steps": 2,
            "total_steps": 50,
            "min_lr": 0.0,
            "kind": "cosine",
        },
        "world_size": 2,
        "micro_batches": 4,
        "future": [1],
    }
    assert validate_training_state(dict(good), "ck") == good  # unknown keys are kept
    # a schedule restarted at a resume carries its start step, and resuming from it again is fine
    restarted = {**good, "schedule": {**good["schedule"], "start_step": 40}}
    assert validate_training_state(dict(restarted), "ck") == restarted
    with pytest.raises(CheckpointError, match=f"state.json: '{field}' must be") as e:
        validate_training_state({**good, field: value}, "ck")
    assert "\n" not in str(e.value)


# -- logs ----------------------------------------------------------------------------------------

TORN = '{"step":25,"time":179602'


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_resumed_run_starts_a_fresh_line_after_a_torn_record(checkpoint, make_cfg, tmp_path):
    from dflash_diag import load_log

    log = tmp_path / "train.jsonl"
    log.write_text('{"step":24,"time":1.0,"loss":2.0,"acc":0.1}\n' + TORN)
    res = run_sync(make_cfg(TrainConfig, max_steps=3, resume=str(checkpoint)))
    assert res.exit_code == 0
    lines = _lines(log)
    assert lines[1] == TORN  # kept as it was, on its own line
    assert json.loads(lines[2])["event"] == "run_start"
    assert all(json.loads(x) for x in lines[2:])
    parsed = load_log(log)
    assert parsed.issues.malformed == 1  # the torn fragment, and only it
    assert [e.fields["script"] for e in parsed.run_starts] == ["sync"]


def test_a_full_disk_mid_run_is_one_line_and_the_next_run_starts_a_fresh_line(
    tiny_assets, tmp_path, checkpoint
):
    """A real file-size limit (setrlimit RLIMIT_FSIZE: writes past it fail with EFBIG, as on a
    full disk) hits the log after a few records; the run ends with one line, exit 1; a resumed
    run's header then starts on a fresh line."""
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=10_000)
    limit = 6000  # the header (about 1.5 kB) and a few dozen metrics records
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, "
        f"({limit}, resource.RLIM_INFINITY)); from pipelines.cli import main; "
        f"sys.exit(main(['sync', '--config', {str(cfg)!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    # The closing summary (steps done, final window, where things are), then the one error line.
    assert "cannot write to log" in err[-1]
    assert "Traceback" not in proc.stderr
    assert [x for x in err if x.startswith("dflash-train: error")] == [err[-1]]
    assert err[0].startswith("dflash-train: sync failed at step ")
    assert str(tmp_path / "train.jsonl") in err[-1]
    log = tmp_path / "train.jsonl"
    assert log.stat().st_size == limit
    assert not log.read_bytes().endswith(b"\n")
    assert (
        main(["sync", "--config", str(cfg), "--resume", str(checkpoint), "--max-steps", "3"]) == 0
    )
    lines = _lines(log)
    starts = [i for i, x in enumerate(lines) if '"run_start"' in x]
    assert len(starts) == 2
    assert json.loads(lines[starts[1]])["script"] == "sync"
    assert all(json.loads(x) for x in lines[starts[1] :])


WRITE_PAST_LIMIT = """
import resource, sys
from pipelines.logwriter import JsonlLog, LogWriteError
path, limit = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
log = JsonlLog(path)
try:
    for i in range(1000):
        log.write({"step": i, "time": 1.5, "loss": 2.0, "acc": 0.25})
except LogWriteError as e:
    print(e)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
log.write({"event": "stop", "step": 0, "time": 2.0, "reason": "error"})
"""


def test_a_write_failing_mid_line_is_followed_by_a_fresh_line_in_the_same_process(tmp_path):
    """The disk fills up in the middle of a record (a real file-size limit), space comes back:
    the writer's next record must not continue the torn line."""
    log = tmp_path / "train.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", WRITE_PAST_LIMIT, str(log), "1000"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"cannot write to log {log}: File too large" in proc.stdout
    lines = _lines(log)
    assert len(lines[-2]) < len(lines[0])  # the torn record, alone on its line
    assert json.loads(lines[-1])["event"] == "stop"
    assert all(json.loads(x)["loss"] == 2.0 for x in lines[:-2])


# -- paths and arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--log", "{tmp}"], "is a directory"),
        (["--log", "/proc/dflash-test/train.jsonl"], "cannot write log /proc/dflash-test"),
        (["--log", "{toml}/x.jsonl"], "a parent is not a directory"),
        (["--log", "/dev/full"], "No space left on device"),
        (["--config", "{tmp}"], "is a directory"),
        (["--ckpt-dir", "{toml}"], "is a file"),
        (["--seed", "99999999999999999999"], "seed must be below 2**32"),
        (["--seed", "-1"], "seed must be an integer >= 0"),
    ],
)
def test_path_and_argument_errors_are_one_line(flags, needle, tiny_assets, tmp_path, capsys):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    flags = [f.format(tmp=tmp_path, toml=cfg) for f in flags]
    if flags[:2] == ["--log", "/dev/full"] and not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    assert main(["sync", "--config", str(cfg), *flags]) == 2
    assert needle in one_error_line(capsys)
    assert not (tmp_path / "train.jsonl").exists()


def test_a_thread_count_beyond_the_machine_is_refused_before_torch_sees_it(
    tiny_assets, tmp_path, capsys
):
    """torch.set_num_threads(100000) segfaults; the run must stop first, in one line."""
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2, torch_threads=100_000)
    before = torch.get_num_threads()
    assert main(["pipeline", "--config", str(cfg)]) == 2
    assert f"this machine has {os.cpu_count()} CPUs" in one_error_line(capsys)
    assert torch.get_num_threads() == before


def test_a_config_too_big_for_the_machine_is_refused_with_the_estimate(
    tiny_assets, tmp_path, capsys
):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["pipeline", "--config", str(cfg), "--token-budget", str(10**9)]) == 2
    line = one_error_line(capsys)
    assert "token_budget 1000000000 needs about" in line
    assert "GiB is available" in line
    assert "check_memory = false" in line
    assert not (tmp_path / "train.jsonl").exists()


# -- leftovers of killed saves, pickle targets ---------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_leftovers_of_killed_saves_are_cleaned_and_an_interrupted_overwrite_is_restored(
    checkpoint, make_cfg, tmp_path, capsys
):
    """What SIGKILL leaves during checkpoint writes (a dead process's ``.NAME.tmp-PID-*``
    directories; an old checkpoint moved aside to ``.NAME.old-PID-*`` by an overwrite killed
    between its two renames) is tidied at the next start, in one line."""
    ck = tmp_path / "ck"
    ck.mkdir()
    pid = _dead_pid()
    partial = ck / f".step-000004.tmp-{pid}-0123abcd"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\0" * 100)
    shutil.copytree(checkpoint, ck / f".step-000002.old-{pid}-89abcdef")  # step-000002 missing
    live = ck / f".step-000006.tmp-{os.getpid()}-00000000"  # a save in progress: left alone
    live.mkdir()

    res = run_sync(make_cfg(TrainConfig, max_steps=3, resume=str(ck / "step-000002")))
    assert res.exit_code == 0
    note = [x for x in capsys.readouterr().err.splitlines() if "leftover" in x]
    assert len(note) == 1
    assert "removed 1 leftover temporary checkpoint directory" in note[0]
    assert "restored step-000002" in note[0]
    assert sorted(p.name for p in ck.iterdir()) == [live.name, "step-000002", "step-000003"]
    assert is_complete_checkpoint(ck / "step-000002")


def test_a_pickle_only_target_is_refused_safetensors_only(tiny_assets, tmp_path, capsys):
    target, _ = tiny_assets
    pickled = tmp_path / "target"
    pickled.mkdir()
    for f in Path(target).iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, pickled / f.name)
    from safetensors.torch import load_file

    torch.save(load_file(str(Path(target) / "model.safetensors")), pickled / "pytorch_model.bin")
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, max_steps=2)
    assert main(["sync", "--config", str(cfg), "--target", str(pickled)]) == 2
    line = one_error_line(capsys)
    assert "pytorch_model.bin" in line
    assert "safetensors only" in line


def test_the_memory_estimate_follows_its_formula_and_refuses_by_device():
    from dflash import DFlashConfig
    from pipelines.errors import TrainingError
    from pipelines.memory import DataShape, TargetShape, check_fits, estimate_training_memory

    dcfg = DFlashConfig(
        block_size=16,
        num_draft_layers=1,
        num_anchors=8,
        hidden_size=256,
        intermediate_size=640,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=4096,
        num_target_layers=6,
        target_layer_ids=(3,),
        mask_token_id=1,
    )
    tgt = TargetShape(
        hidden_size=256, intermediate_size=640, num_layers=6, num_heads=4, dtype_bytes=4
    )
    data = DataShape(mean_length=131.3, mean_anchors=50.0)
    small, big = (estimate_training_memory(dcfg, tgt, data, n) for n in (1024, 300_000))
    # Below the logits cap every term is linear in the budget; the cap bounds the logits.
    assert big.parts["drafter attention"] == pytest.approx(
        small.parts["drafter attention"] * 300_000 / 1024, rel=1e-6
    )
    assert big.parts["logits"] == 12 * 2**27
    assert 20 * 2**30 < big.total < 40 * 2**30  # 25 GiB: the issue's 300k budget
    # Targets on other devices carry their own forward; the drafter device the rest.
    split = estimate_training_memory(
        dcfg,
        tgt,
        data,
        4096,
        device="cuda:0",
        target_devices=["cuda:1", "cuda:2"],
        queued_batches=6,
    )
    assert set(split.by_device) == {"cuda:0", "cuda:1", "cuda:2"}
    assert (
        split.by_device["cuda:1"] == split.by_device["cuda:2"] == split.parts["target forward"] / 2
    )
    check_fits(small, 1024, available={"cpu": small.total})  # exactly enough is enough
    with pytest.raises(
        TrainingError,
        match=r"token_budget 300000 needs about 2\d\.\d GiB on cpu "
        r"\(estimate; largest term: drafter attention",
    ):
        check_fits(big, 300_000, available={"cpu": 8 * 2**30})

"""Scale-out: resuming under another world size, per-rank logs read back by dflash-diag, the
launch environment and device placement. (Two ranks reproducing one: test_data_parallel.py.)"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from dflash_diag.cli import app as diag_app
from pipelines.async_pipeline import run_pipeline
from pipelines.checkpoints import step_dir
from pipelines.cli import main
from pipelines.distributed import init_data_parallel, launch_env_problem, rank_devices
from pipelines.errors import TrainingError

from .test_data_parallel import torchrun
from .test_programs import metrics_of, read_log

FULL_ENV = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_two_rank_checkpoint_resumes_on_one_rank_exactly(make_cfg, tiny_assets, tmp_path, capfd):
    """2 ranks x 2 micro-batches for 2 steps, then 1 rank x 4 for step 3 == 1 rank x 4 for 3 steps:
    the cursor counts the examples of all ranks, so nothing is remapped by hand."""
    target, data = tiny_assets
    toml = tmp_path / "dp.toml"
    toml.write_text(
        "\n".join(
            [
                f'target = "{target}"',
                f'data = "{data}"',
                "token_budget = 128",
                "max_steps = 2",
                "total_steps = 3",
                "ckpt_every = 0",
                "eval_every = 0",
                "progress = false",
                "log_all_ranks = true",
                "grad_accum = 2",
                f'log = "{tmp_path / "logs" / "train.jsonl"}"',
                f'ckpt_dir = "{tmp_path / "two"}"',
                "walk_holdout = 0",  # all 48 examples: the 3 steps stay inside epoch 0 (see
                "[drafter]",
                "block_size = 4",
                "num_anchors = 8",  # test_data_parallel)
            ]
        )
        + "\n"
    )
    torchrun("pipeline", toml)
    state = json.loads((step_dir(tmp_path / "two", 2) / "state.json").read_text())
    assert (state["world_size"], state["micro_batches"]) == (2, 2)

    capfd.readouterr()
    resumed = run_pipeline(
        make_cfg(
            max_steps=3,
            total_steps=3,
            grad_accum=4,
            resume=str(step_dir(tmp_path / "two", 2)),
            log=str(tmp_path / "logs" / "train.jsonl"),
            ckpt_dir=str(tmp_path / "resumed"),
        )
    )
    assert resumed.exit_code == 0
    note = capfd.readouterr().err
    assert "2 ranks x 2 micro-batches resumed as 1 x 4" in note
    assert "is unchanged" in note
    straight = run_pipeline(
        make_cfg(
            max_steps=3,
            total_steps=3,
            grad_accum=4,
            walk_holdout=0,
            log=str(tmp_path / "one.jsonl"),
            ckpt_dir=str(tmp_path / "one"),
        )
    )
    assert straight.exit_code == 0

    a = metrics_of(read_log(tmp_path / "one.jsonl"))
    b = metrics_of(read_log(tmp_path / "logs" / "train.jsonl"))  # 2-rank steps 1-2, then step 3
    assert [r["step"] for r in b] == [1, 2, 3]
    for ra, rb in zip(a, b):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5)
        assert rb["n_tokens"] == ra["n_tokens"]
        assert rb["n_pred"] == ra["n_pred"]
    wa = load_file(str(step_dir(tmp_path / "one", 3) / "model.safetensors"))
    wb = load_file(str(step_dir(tmp_path / "resumed", 3) / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-6)

    # The rank logs of the torchrun launch, read back by dflash-diag through a quoted glob.
    res = CliRunner().invoke(
        diag_app,
        [
            "converge",
            str(tmp_path / "logs" / "train.jsonl"),
            str(tmp_path / "logs" / "train.rank*.jsonl"),
            "--window",
            "1",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    ranks = json.loads(res.stdout)["ranks"]
    assert [r["rank"] for r in ranks["per_rank"]] == [0, 1]
    assert ranks["last_step"] == 2
    assert ranks["slowest"] in (0, 1)
    assert ranks["skew"] >= 1.0
    text = CliRunner().invoke(
        diag_app, ["compare", str(tmp_path / "logs" / "train.rank*.jsonl"), "--format", "text"]
    )
    assert text.exit_code == 0, text.output
    assert "sets the pace" in text.stdout
    assert "fastest/slowest" in text.stdout


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "0"}, "RANK set but WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT missing"),
        ({**FULL_ENV, "RANK": "2"}, "inconsistent distributed environment: RANK=2 WORLD_SIZE=2"),
        ({**FULL_ENV, "MASTER_PORT": "x"}, "must be integers"),
    ],
)
def test_a_partial_launch_environment_is_one_line(env, message, make_cfg, monkeypatch, capsys):
    assert launch_env_problem({}) is None
    assert launch_env_problem(FULL_ENV) is None
    assert message in launch_env_problem(env)
    with pytest.raises(TrainingError, match="torchrun|inconsistent|integers"):
        init_data_parallel("cpu", env=env)
    for k in FULL_ENV:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = make_cfg()
    code = main(
        [
            "pipeline",
            "--target",
            cfg.target,
            "--data",
            cfg.data,
            "--max-steps",
            "1",
            "--log",
            cfg.log,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert message in err


def test_ranks_of_a_node_take_consecutive_device_slices():
    three_feed_one = ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert rank_devices(three_feed_one, 0) == three_feed_one
    assert rank_devices(three_feed_one, 1) == ["cuda:4", "cuda:5", "cuda:6", "cuda:7"]
    assert rank_devices(["cuda"], 3) == ["cuda:3"]
    assert rank_devices(["cuda:0", "cuda:0"], 2) == ["cuda:2", "cuda:2"]
    assert rank_devices(["cpu", "cpu"], 5) == ["cpu", "cpu"]


def test_schema_accepts_rank_fields_only_whole():
    from pipelines.log_records import Metrics, RunStart, validate_record
    from pipelines.logwriter import rank_log_path

    assert rank_log_path("logs/train.jsonl", 3).as_posix() == "logs/train.rank3.jsonl"
    assert rank_log_path("run", 0).as_posix() == "run.rank0.jsonl"
    sched = {"kind": "cosine", "peak_lr": 1.0, "warmup_steps": 0, "total_steps": 1, "min_lr": 0.0}
    head = RunStart(
        script="sync",
        time=0.0,
        config={},
        schedule=sched,
        block_size=4,
        steps_per_epoch=None,
        world_size=2,
    )
    assert "rank" not in head.to_json()  # the global log's header is unchanged
    validate_record({**head.to_json(), "rank": 1})
    with pytest.raises(ValueError, match="outside world_size"):
        validate_record({**head.to_json(), "rank": 2})
    rec = Metrics(
        step=1,
        time=0.0,
        epoch=0.0,
        loss=1.0,
        acc=0.5,
        lr=1e-3,
        tok_per_sec=10.0,
        n_tokens=5,
        n_blocks=1,
        n_pred=3,
        acc_pos=[0.5] * 3,
        accept_pos=[0.5] * 3,
        tau_train=2.0,
        grad_norm=1.0,
        stage_busy={},
        queue_fill={},
        step_time=0.5,
        sync_wait=0.1,
    ).to_json()
    assert validate_record(rec) == "metrics"
    with pytest.raises(ValueError, match="come together"):
        validate_record({k: v for k, v in rec.items() if k != "sync_wait"})
    legacy = {k: rec[k] for k in ("step", "time", "epoch", "loss", "acc", "lr")}
    with pytest.raises(ValueError, match="come together"):
        validate_record({**legacy, "step_time": 0.5, "sync_wait": 0.1})

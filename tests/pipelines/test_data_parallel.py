"""Two data-parallel ranks (torchrun, gloo on CPU, drafter in DDP) reproduce one rank with twice
the batches, and with ``log_all_ranks`` each rank logs its own share of every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pipelines.async_pipeline import run_pipeline
from pipelines.checkpoints import step_dir

from .test_programs import metrics_of, read_log

ROOT = Path(__file__).resolve().parents[2]


def torchrun(program: str, toml: Path, *flags: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "pipelines.cli",
        program,
        "--config",
        str(toml),
        *flags,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize(("program", "flags"), [("pipeline", ["--grad-accum", "2"]), ("sync", [])])
def test_two_ranks_match_one_rank_with_double_accumulation(
    make_cfg, tiny_assets, tmp_path, program, flags
):
    target, data = tiny_assets
    toml = tmp_path / "dp.toml"
    # torchrun's own options swallow --log (an ambiguous prefix of its --log-dir): --log-file.
    toml.write_text(
        "\n".join(
            [
                f'target = "{target}"',
                f'data = "{data}"',
                "token_budget = 128",
                "max_steps = 3",
                "ckpt_every = 0",
                "eval_every = 0",
                "progress = false",
                "log_all_ranks = true",
                f'ckpt_dir = "{tmp_path / "two"}"',
                # All 48 fixture examples train: 3 steps x 4 batches fill epoch 0 exactly, so one rank
                # and two ranks (which drop an epoch's odd last batch) see the same batches.
                "walk_holdout = 0",
                "[drafter]",
                "block_size = 4",
                "num_anchors = 8",
            ]
        )
        + "\n"
    )
    torchrun(program, toml, *flags, "--log-file", str(tmp_path / "two.jsonl"))
    # One rank, one process: each step takes the two batches the two ranks shared.
    one = run_pipeline(
        make_cfg(
            max_steps=3,
            grad_accum=2 if program == "sync" else 4,
            walk_holdout=0,
            log=str(tmp_path / "one.jsonl"),
            ckpt_dir=str(tmp_path / "one"),
        )
    )
    assert one.exit_code == 0

    two_log = read_log(tmp_path / "two.jsonl")
    header = next(r for r in two_log if r.get("event") == "run_start")
    assert header["world_size"] == 2
    assert header["script"] == program
    a = metrics_of(read_log(tmp_path / "one.jsonl"))
    b = metrics_of(two_log)
    assert [r["step"] for r in b] == [1, 2, 3]  # rank 0 alone writes
    for ra, rb in zip(a, b, strict=True):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5)
        assert rb["acc"] == pytest.approx(ra["acc"], abs=1e-9)
    wa = load_file(str(step_dir(tmp_path / "one", 3) / "model.safetensors"))
    wb = load_file(str(step_dir(tmp_path / "two", 3) / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-6)
    assert json.loads((step_dir(tmp_path / "two", 3) / "state.json").read_text())["step"] == 3

    # Per-rank logs (read_log validates every record): each rank's own header and metric sums,
    # which add up to the global step.
    ranks = [read_log(tmp_path / f"two.rank{r}.jsonl") for r in (0, 1)]
    for r, records in enumerate(ranks):
        head = records[0]
        assert head["event"] == "run_start"
        assert head["rank"] == r
        assert head["world_size"] == 2
        assert records[-1]["event"] == "stop"
        for rec in metrics_of(records):
            assert 0 <= rec["sync_wait"] <= rec["step_time"]
            own = rec["step_time"] - rec["sync_wait"]
            assert rec["tok_per_sec"] == pytest.approx(rec["n_tokens"] / own)
    for step, (g, r0, r1) in enumerate(zip(b, *map(metrics_of, ranks), strict=True), start=1):
        assert r0["step"] == r1["step"] == step
        # The gradient itself, before clipping: the same as one rank's with double accumulation.
        # (AdamW normalises a gradient's scale away and clipping caps it, so the weights above
        # stay equal under a wrong 1/world_size factor; the logged norm does not.)
        assert r0["grad_norm"] == r1["grad_norm"]
        assert r0["grad_norm"] == pytest.approx(a[step - 1]["grad_norm"], rel=1e-4)
        if program == "pipeline":
            assert g["grad_norm"] == pytest.approx(a[step - 1]["grad_norm"], rel=1e-4)
        n_pred = r0["n_pred"] + r1["n_pred"]
        assert g["acc"] == pytest.approx(
            (r0["acc"] * r0["n_pred"] + r1["acc"] * r1["n_pred"]) / n_pred
        )
        if program == "pipeline":
            assert g["n_tokens"] == r0["n_tokens"] + r1["n_tokens"]
            assert g["n_pred"] == n_pred

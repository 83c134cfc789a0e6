"""Fixtures: a tiny random Qwen3 target and a dataset it generated, built once per session.

Smaller than the bundled assets (so plumbing tests take well under a second per step) and
independent of them; the end-to-end convergence checks use the bundled assets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the training tests need it; the diagnostics do not

from dflash.data import Dataset, save_dataset
from pipelines.config import PipelineConfig, TrainConfig

VOCAB = 64
PAD = 0


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _make_target(directory: Path) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=PAD,
    )
    model = Qwen3ForCausalLM(cfg).eval()
    model.save_pretrained(directory)


@torch.no_grad()
def _make_data(target_dir: Path, directory: Path, n: int = 48) -> None:
    """Random prompts, responses = the target's greedy continuation (as the real data is made)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, VOCAB, (n + 4, 10), generator=gen)
    seq = prompts[:n]
    for _ in range(22):
        nxt = model(input_ids=seq).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    # Varied lengths (so token-budget packing has something to do).
    lengths = 24 + torch.randint(0, 9, (n,), generator=gen)
    examples = [(seq[i, :10].tolist(), seq[i, 10 : int(lengths[i])].tolist()) for i in range(n)]
    ds = Dataset.from_examples(examples, {"pad_token_id": PAD})
    save_dataset(directory, ds, [p.tolist() for p in prompts[n:]])


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("tiny")
    _make_target(root / "target")
    _make_data(root / "target", root / "data")
    return str(root / "target"), str(root / "data")


@pytest.fixture
def make_cfg(tiny_assets, tmp_path):
    """Config factory for short runs on the tiny assets, logging and checkpointing in tmp_path."""
    target, data = tiny_assets

    def make(cls=PipelineConfig, **overrides):
        base = {
            "target": target,
            "data": data,
            "max_steps": 4,
            "token_budget": 128,
            "seed": 0,
            "log": str(tmp_path / "train.jsonl"),
            "ckpt_dir": str(tmp_path / "ck"),
            "ckpt_every": 0,
            "eval_prompts": 2,
            "eval_new_tokens": 6,
            "progress": False,
            "drafter": {"block_size": 4, "num_anchors": 8},
        }
        if cls is PipelineConfig:
            base.update(grad_accum=2, eval_every=0)
        base.update(overrides)
        return cls(**base)

    return make


__all__ = ["PipelineConfig", "TrainConfig"]


@pytest.fixture(scope="session")
def sync_checkpoint(tiny_assets, tmp_path_factory) -> Path:
    """A real step-2 checkpoint of the lock-step trainer (block 4, one layer), built once; tests
    that damage a checkpoint copy it first, tests that resume from it write elsewhere."""
    from pipelines.checkpoints import step_dir
    from pipelines.sync_trainer import run_sync

    target, data = tiny_assets
    root = tmp_path_factory.mktemp("ck")
    res = run_sync(
        TrainConfig(
            target=target,
            data=data,
            max_steps=2,
            token_budget=128,
            log=str(root / "t.jsonl"),
            ckpt_dir=str(root / "ck"),
            ckpt_every=0,
            progress=False,
            drafter={"block_size": 4, "num_anchors": 8},
        )
    )
    assert res.exit_code == 0
    return step_dir(root / "ck", 2)

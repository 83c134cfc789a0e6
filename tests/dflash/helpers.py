"""Builders for the dflash tests: a tiny, seeded, randomly initialised Qwen3 target."""

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from dflash import DFlashConfig, DFlashDraftModel, TargetModel

VOCAB = 256


def make_target(seed: int = 0, layers: int = 6) -> TargetModel:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    model = Qwen3ForCausalLM(cfg)
    # A larger init than HF's 0.02 makes the random target's next-token distribution peaked, so
    # greedy continuations are not decided by float noise between near-tied logits.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    return TargetModel(model, name="tiny-random-qwen3")


def make_drafter(target: TargetModel, seed: int = 1, **kw) -> DFlashDraftModel:
    kw.setdefault("block_size", 8)
    kw.setdefault("num_draft_layers", 2)
    cfg = DFlashConfig.for_target(target.config, **kw)
    torch.manual_seed(seed)
    return DFlashDraftModel(cfg)


def make_batch(seed: int = 0, n: int = 3, t: int = 40, prompt: int = 6) -> dict:
    """Right-padded batch: row 1 is shorter; the first `prompt` tokens are unsupervised."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB - 1, (n, t), generator=g)
    attn = torch.ones(n, t, dtype=torch.long)
    attn[1, t - 12 :] = 0
    ids[attn == 0] = 0
    loss = attn.bool().clone()
    loss[:, :prompt] = False
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": loss}

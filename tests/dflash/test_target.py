"""TargetModel: local loading, features, other architectures, dtypes, DDP-wrapped drafters."""

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dflash import (
    DFlashConfig,
    DFlashDraftModel,
    TargetModel,
    compute_loss_and_metrics,
    spec_generate,
)

from .helpers import VOCAB, make_batch, make_drafter

BUNDLED = Path(__file__).resolve().parents[2] / "pipelines" / "assets" / "tiny_target"


def test_features_are_the_chosen_hidden_states_concatenated(target):
    ids = make_batch()["input_ids"]
    hs = target.model(ids, output_hidden_states=True).hidden_states
    out = target.forward(ids, [1, 3])
    torch.testing.assert_close(out.features, torch.cat([hs[2], hs[4]], dim=-1))
    assert out.logits.shape == (*ids.shape, VOCAB)
    no_logits = target.forward(ids, [1, 3], logits=False)
    assert no_logits.logits is None
    torch.testing.assert_close(no_logits.features, out.features)
    with pytest.raises(ValueError, match="outside"):
        target.forward(ids, [6])


def test_frozen_and_shared_modules(target):
    assert not any(p.requires_grad for p in target.model.parameters())
    assert target.embed_tokens.weight.shape == (VOCAB, 64)
    assert target.lm_head.weight.shape == (VOCAB, 64)


def test_from_pretrained_local_directory(target, tmp_path):
    target.model.save_pretrained(tmp_path / "t")
    again = TargetModel.from_pretrained(str(tmp_path / "t"), device="cpu", dtype="float32")
    ids = make_batch()["input_ids"]
    torch.testing.assert_close(again.forward(ids, [2]).features, target.forward(ids, [2]).features)
    with pytest.raises(ValueError, match="cannot load"):
        TargetModel.from_pretrained(str(tmp_path / "missing"))


def test_a_llama_target_trains_and_decodes_losslessly():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    target = TargetModel(model)
    drafter = DFlashDraftModel(
        DFlashConfig.for_target(target.config, block_size=4, num_draft_layers=2, num_anchors=4)
    )
    assert drafter.config.target_layer_ids == (1, 2)
    out = compute_loss_and_metrics(drafter, target, make_batch(), torch.Generator().manual_seed(0))
    out.loss.backward()
    prompt = make_batch()["input_ids"][0, :6]
    ids = prompt.tolist()
    for _ in range(12):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert spec_generate(target, drafter, prompt, 12).tokens == ids[6:]


def test_bfloat16_objective_and_decoding(target):
    t16 = TargetModel(type(target.model)(target.config).to(torch.bfloat16))
    t16.model.load_state_dict(target.model.state_dict())
    drafter = make_drafter(t16).to(torch.bfloat16)
    out = compute_loss_and_metrics(drafter, t16, make_batch(), torch.Generator().manual_seed(0))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert drafter.fc.weight.grad.dtype == torch.bfloat16
    assert len(spec_generate(t16, drafter, make_batch()["input_ids"][0, :5], 6).tokens) == 6


def test_ddp_wrapped_drafter_gives_the_same_gradients(target, tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    wrapped = None
    try:
        plain = make_drafter(target)
        wrapped = DDP(make_drafter(target))
        grads = []
        for d in (plain, wrapped):
            out = compute_loss_and_metrics(
                d, target, make_batch(), torch.Generator().manual_seed(0)
            )
            out.loss.backward()
            grads.append([p.grad.clone() for p in d.parameters()])
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b)
    finally:
        # DDP's reducer holds the process group: freed after destroy_process_group, gloo's
        # destructor can wait forever on its threads (seen once in a CI run), so free it first
        del wrapped
        dist.destroy_process_group()


@pytest.mark.skipif(not (BUNDLED / "config.json").is_file(), reason="bundled target not built")
def test_bundled_tiny_target():
    target = TargetModel.from_pretrained(str(BUNDLED))
    cfg = DFlashConfig.for_target(target.config, block_size=8, num_anchors=2)
    pad = target.config.pad_token_id
    assert cfg.mask_token_id == (pad if pad is not None else cfg.vocab_size - 1)
    drafter = DFlashDraftModel(cfg)
    batch = make_batch(t=24)
    out = compute_loss_and_metrics(drafter, target, batch, torch.Generator().manual_seed(0))
    # Row 1 has only 6 supervised tokens, fewer than B-1 = 7: no block fits there.
    assert out.metrics.n_blocks == 4
    assert torch.isfinite(out.loss)
    prompt = batch["input_ids"][0, :6]
    ids = prompt.tolist()
    with torch.no_grad():
        for _ in range(8):
            ids.append(int(target.model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert spec_generate(target, drafter, prompt, 8).tokens == ids[6:]

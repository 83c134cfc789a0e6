"""Checkpoints: bit-exact round trip, atomic replacement, torn directories refused."""

import os

import pytest
import torch

from dflash import compute_loss_and_metrics
from dflash.checkpoint import (
    STATE_FILE,
    capture_rng,
    is_complete_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    load_drafter,
    restore_rng,
    save_checkpoint,
)

from .helpers import make_batch, make_drafter


def trained(target, steps=2):
    drafter = make_drafter(target, num_anchors=4)
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for s in range(steps):
        out = compute_loss_and_metrics(
            drafter, target, make_batch(seed=s), torch.Generator().manual_seed(s)
        )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return drafter, opt


def test_round_trip_is_bit_exact(target, tmp_path):
    drafter, opt = trained(target)
    gen = torch.Generator().manual_seed(5)
    gen.manual_seed(5)
    torch.rand(3, generator=gen)
    rng = capture_rng({"anchors": gen})
    state = {"step": 2, "cursor": {"epoch": 0, "index": 17}, "schedule": {"peak_lr": 6e-4}}
    path = save_checkpoint(tmp_path / "step_2", drafter, opt, state=state, rng=rng)
    assert sorted(os.listdir(tmp_path)) == ["step_2"]  # no temporary left behind
    assert sorted(os.listdir(path)) == [
        "config.json",
        "model.safetensors",
        "optimizer.safetensors",
        "rng.safetensors",
        "state.json",
    ]

    drafter2 = make_drafter(target, seed=99, num_anchors=4)
    opt2 = torch.optim.AdamW(drafter2.parameters(), lr=5.0)
    loaded = load_checkpoint(path, drafter2, opt2)
    assert loaded.state == state
    for (k, a), (_, b) in zip(
        drafter.state_dict().items(), drafter2.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k
    sd1, sd2 = opt.state_dict(), opt2.state_dict()
    assert sd1["param_groups"] == sd2["param_groups"]
    assert sd2["param_groups"][0]["lr"] == 1e-3
    for i, st in sd1["state"].items():
        for name, v in st.items():
            assert torch.equal(v, sd2["state"][i][name]), (i, name)
    # Both continue identically: same next step.
    gen2 = torch.Generator()
    restore_rng(loaded.rng, {"anchors": gen2})
    assert torch.equal(torch.rand(4, generator=gen2), torch.rand(4, generator=gen))
    for d, o in ((drafter, opt), (drafter2, opt2)):
        out = compute_loss_and_metrics(
            d, target, make_batch(seed=7), torch.Generator().manual_seed(7)
        )
        o.zero_grad()
        out.loss.backward()
        o.step()
    for a, b in zip(drafter.parameters(), drafter2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoint_holds_only_the_drafter(target, tmp_path):
    from safetensors import safe_open

    drafter, _ = trained(target, steps=0)
    path = save_checkpoint(tmp_path / "c", drafter, state={"step": 0})
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert keys == set(drafter.state_dict())
    assert not any("embed" in k or "lm_head" in k for k in keys)
    again = load_drafter(path)
    assert again.config == drafter.config


def test_torn_checkpoint_is_never_loaded(target, tmp_path):
    drafter, opt = trained(target, steps=1)
    good = save_checkpoint(tmp_path / "step_1", drafter, opt, state={"step": 1})
    torn = save_checkpoint(tmp_path / "step_2", drafter, opt, state={"step": 2})
    (torn / STATE_FILE).unlink()  # as if killed before the marker was written
    assert not is_complete_checkpoint(torn)
    with pytest.raises(ValueError, match="incomplete"):
        load_checkpoint(torn, drafter)
    # A leftover temporary directory is ignored too.
    (tmp_path / ".step_3.tmp-1-abc").mkdir()
    assert latest_checkpoint(tmp_path) == good


def test_overwrite_replaces_atomically(target, tmp_path):
    drafter, _ = trained(target, steps=0)
    save_checkpoint(tmp_path / "last", drafter, state={"step": 1})
    save_checkpoint(tmp_path / "last", drafter, state={"step": 2})
    assert load_checkpoint(tmp_path / "last").state["step"] == 2
    assert os.listdir(tmp_path) == ["last"]


def test_mismatched_config_names_the_field(target, tmp_path):
    drafter, _ = trained(target, steps=0)
    path = save_checkpoint(tmp_path / "c", drafter, state={"step": 0})
    other = make_drafter(target, block_size=16)
    with pytest.raises(ValueError, match="block_size"):
        load_checkpoint(path, other)
    with pytest.raises(ValueError, match="no optimizer"):
        load_checkpoint(path, drafter, torch.optim.AdamW(drafter.parameters()))

"""dflash.data: storage round trip, token-budget batches, exact masks, resume, sharding."""

from __future__ import annotations

import json

import pytest
import torch

from dflash.data import (
    DEFAULT_DATA_DIR,
    Cursor,
    Dataset,
    TokenBudgetLoader,
    load_dataset,
    load_eval_prompts,
    save_dataset,
)

PAD = 1


def synthetic(n: int = 97, seed: int = 0) -> Dataset:
    """Examples of varied prompt/response lengths whose tokens encode (example, part, offset)."""
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for i in range(n):
        p = int(torch.randint(3, 20, (1,), generator=gen))
        r = int(torch.randint(1, 30, (1,), generator=gen))
        # Prompt tokens are even, response tokens odd and >= 3 (the pad id is 1), so a test can
        # check the loss mask against the content itself.
        examples.append(
            ([2 * (i * 50 + k) + 2 for k in range(p)], [2 * (i * 50 + k) + 3 for k in range(r)])
        )
    return Dataset.from_examples(examples, {"pad_token_id": PAD})


def test_round_trip(tmp_path):
    ds = synthetic()
    prompts = [[5, 6, 7], [8]]
    save_dataset(tmp_path, ds, prompts)
    back = load_dataset(tmp_path)
    assert len(back) == len(ds)
    assert back.meta == ds.meta
    for i in (0, 13, len(ds) - 1):
        assert torch.equal(back[i].input_ids, ds[i].input_ids)
        assert back[i].response_start == ds[i].response_start
    assert load_eval_prompts(tmp_path) == prompts
    assert load_eval_prompts(tmp_path, n=1) == prompts[:1]


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no dataset"):
        load_dataset(tmp_path)


@pytest.mark.parametrize("budget", [64, 200, 1000])
def test_batches_respect_budget_and_masks_are_exact(budget):
    ds = synthetic()
    loader = TokenBudgetLoader(ds, budget, seed=3)
    for _ in range(25):
        b = loader.next_batch()
        n, t = b["input_ids"].shape
        assert n * t <= budget
        assert b["input_ids"].dtype == torch.long
        assert b["attention_mask"].dtype == torch.long
        assert b["loss_mask"].dtype == torch.bool
        real = b["attention_mask"].bool()
        # Right padding: real tokens are a prefix of each row, padding holds the pad id.
        lengths = real.sum(1)
        assert torch.equal(real, torch.arange(t)[None, :] < lengths[:, None])
        assert bool((b["input_ids"][~real] == PAD).all())
        # Responses are exactly the odd tokens; prompts even; no loss on padding.
        odd = (b["input_ids"] % 2 == 1) & real
        assert torch.equal(b["loss_mask"], odd)
        assert int(lengths.max()) == t  # no all-padding column


def test_budget_smaller_than_longest_example_is_rejected():
    with pytest.raises(ValueError, match="longest example"):
        TokenBudgetLoader(synthetic(), 10)


def test_epoch_covers_every_example_once():
    ds = synthetic()
    loader = TokenBudgetLoader(ds, 128, seed=1)
    seen = [i for batch in loader.epoch_indices(0) for i in batch]
    assert sorted(seen) == list(range(len(ds)))
    # A different epoch is a different order.
    assert seen != [i for batch in loader.epoch_indices(1) for i in batch]


def test_cursor_resumes_to_the_same_next_batch():
    ds = synthetic()
    a = TokenBudgetLoader(ds, 150, seed=7)
    for _ in range(40):  # crosses at least one epoch boundary
        a.next_batch()
    state = json.loads(json.dumps(a.state_dict()))  # as a checkpoint stores it
    b = TokenBudgetLoader(ds, 150, seed=7, cursor=Cursor.from_json(state))
    for _ in range(30):
        x, y = a.next_batch(), b.next_batch()
        for key in x:
            assert torch.equal(x[key], y[key])
    assert a.state_dict() == b.state_dict()
    assert a.state_dict()["epoch"] >= 1


def test_cursor_is_budget_independent():
    """Resuming under another budget continues with exactly the examples not yet consumed."""
    ds = synthetic()
    a = TokenBudgetLoader(ds, 150, seed=7)
    consumed = [i for _ in range(3) for i in a.next_indices()]
    b = TokenBudgetLoader(ds, 400, seed=7, cursor=Cursor.from_json(a.state_dict()))
    rest = []
    while b.cursor.position < len(ds):
        rest.extend(b.next_indices())
    assert b.cursor.epoch == 0
    assert sorted(consumed + rest) == list(range(len(ds)))


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_are_disjoint_and_cover(world_size):
    ds = synthetic()
    shards = [
        TokenBudgetLoader(
            ds, 128, seed=2, rank=r, world_size=world_size, even_batches=False
        ).epoch_indices(0)
        for r in range(world_size)
    ]
    flat = [[i for b in s for i in b] for s in shards]
    for r in range(world_size):
        for q in range(r + 1, world_size):
            assert not set(flat[r]) & set(flat[q])
    assert sorted(i for f in flat for i in f) == list(range(len(ds)))


def test_even_batches_give_every_rank_the_same_count():
    ds = synthetic()
    for seed in range(4):
        loaders = [TokenBudgetLoader(ds, 100, seed=seed, rank=r, world_size=3) for r in range(3)]
        assert len({ld.batches_per_epoch() for ld in loaders}) == 1
        # and stepping them together crosses the epoch boundary on the same step
        for _ in range(loaders[0].batches_per_epoch() + 1):
            for ld in loaders:
                ld.next_batch()
        assert len({json.dumps(ld.state_dict()) for ld in loaders}) == 1
        assert loaders[0].state_dict()["epoch"] == 1


def test_bad_arguments():
    ds = synthetic()
    with pytest.raises(ValueError, match="bad rank 2 for world_size 2"):
        TokenBudgetLoader(ds, 128, rank=2, world_size=2)
    with pytest.raises(ValueError, match="cursor epoch and position must be >= 0"):
        Cursor(epoch=-1)


@pytest.mark.skipif(
    not (DEFAULT_DATA_DIR / "train.safetensors").is_file(), reason="bundled data not generated"
)
def test_bundled_data_loads():
    ds = load_dataset()
    assert len(ds) >= 1000
    assert ds.meta["pad_token_id"] != ds.meta["mask_token_id"]
    assert len(load_eval_prompts()) >= 16
    batch = TokenBudgetLoader(ds, 2048).next_batch()
    assert bool(batch["loss_mask"].any())

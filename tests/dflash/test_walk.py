"""The walked tau: the pure walk, and its exact agreement with measured greedy decoding."""

import pytest
import torch

from dflash import (
    DFlashConfig,
    DFlashDraftModel,
    TargetModel,
    compute_loss_and_metrics,
    evaluate_tau,
    walk_accepted,
    walk_batch,
)
from dflash.data import DEFAULT_DATA_DIR, DEFAULT_TARGET_DIR, collate, load_dataset
from dflash.walk import WalkResult


def test_walk_steps_by_one_plus_the_accepted_prefix():
    # B = 4. Anchor 0 accepts 2 -> gain 3, lands on 3; accepts 0 -> 4; accepts 3 -> gain 4 -> 8.
    # Indices the walk skips hold 3s: reading one would change the result.
    accepted = [2, 3, 3, 0, 3, 3, 3, 3, 1, 1, 1]
    r = walk_accepted(accepted, horizon=11, block_size=4)
    # produced: 1 -> 4 -> 5 -> 9 -> 11 (gain capped at H - produced = 2 at index 8).
    assert (r.tokens, r.steps, r.hist) == (10, 4, [1, 1, 1, 1])
    assert r.tau == 2.5


def test_walk_caps_the_last_step_at_the_horizon_and_stops_without_predictions():
    r = walk_accepted([3, 3, 3], horizon=3, block_size=4)
    assert (r.tokens, r.steps, r.hist) == (2, 1, [0, 1, 0, 0])
    assert walk_accepted([], horizon=5, block_size=4).steps == 0
    assert walk_accepted([0, 0], horizon=1, block_size=4).steps == 0
    with pytest.raises(ValueError, match=r"accepted\[0\] = 4 outside 0\.\.3"):
        walk_accepted([4], horizon=5, block_size=4)


def test_walks_add_and_render_the_log_fields():
    a = walk_accepted([0, 1, 0, 0], 5, 3)
    b = walk_accepted([2, 0, 0], 4, 3)
    s = a + b
    assert s.tokens == a.tokens + b.tokens
    assert s.steps == a.steps + b.steps
    assert s.to_log_dict() == {
        "walk_tokens": s.tokens,
        "walk_steps": s.steps,
        "walk_hist": [x + y for x, y in zip(a.hist, b.hist, strict=True)],
    }
    assert sum(s.hist) == s.steps
    assert sum((k + 1) * c for k, c in enumerate(s.hist)) == s.tokens
    assert WalkResult(3).tau != WalkResult(3).tau  # NaN before any step


@pytest.fixture(scope="module")
def bundled():
    torch.set_num_threads(1)
    target = TargetModel.from_pretrained(str(DEFAULT_TARGET_DIR))
    data = load_dataset(DEFAULT_DATA_DIR)
    # Four examples whose response runs the full generation budget (no early end-of-text).
    full = max(n - int(data.response_starts[i]) for i, n in enumerate(data.lengths))
    rows = [i for i in range(len(data)) if data.lengths[i] - int(data.response_starts[i]) == full]
    batch = collate([data[i] for i in rows[:4]], data.pad_token_id)
    cfg = DFlashConfig.for_target(target.config, block_size=8, num_draft_layers=1, num_anchors=32)
    torch.manual_seed(0)
    drafter = DFlashDraftModel(cfg)
    feats = target.forward(
        batch["input_ids"], cfg.target_layer_ids, batch["attention_mask"], logits=False
    ).features
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    for i in range(25):  # partly trained: a spread of acceptance lengths
        out = compute_loss_and_metrics(
            drafter, target, batch, torch.Generator().manual_seed(i), features=feats
        )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return target, drafter, batch, feats, full


@pytest.mark.parametrize("horizon", [None, 24])
def test_walked_tau_equals_measured_tau_on_target_greedy_data(bundled, horizon):
    """The bundled data is the bundled target's greedy output: walking the teacher-forced
    predictions must reproduce real speculative decoding's acceptance histogram exactly, over
    the same sequences and the same horizon (default: the response length)."""
    target, drafter, batch, feats, full = bundled
    walk = walk_batch(drafter, target, batch, feats, horizon=horizon)
    starts = batch["loss_mask"].int().argmax(1).tolist()
    prompts = [batch["input_ids"][r, :s] for r, s in enumerate(starts)]
    measured = evaluate_tau(target, drafter, prompts, max_new_tokens=horizon or full)
    assert walk.hist == measured.tau_hist
    assert walk.steps == measured.n_steps
    assert walk.tau == measured.tau
    assert 1.2 < walk.tau < drafter.config.block_size - 1  # a non-trivial case
    assert drafter.training  # mode restored


def test_walk_of_the_first_rows_only(bundled):
    target, drafter, batch, feats, full = bundled
    one = walk_batch(drafter, target, batch, feats, max_seqs=1)
    two = walk_batch(drafter, target, batch, feats, max_seqs=2)
    assert one.tokens == full - 1
    assert two.tokens == 2 * (full - 1)
    first = {k: v[:1] for k, v in batch.items()}
    assert walk_batch(drafter, target, first, feats[:1]).hist == one.hist


def test_lazy_lm_head_gives_the_dense_accepted_prefix():
    # The walk computes position k's logits only for blocks still correct through k-1; the
    # accepted prefix must equal the dense argmax's. Labels copy the dense prediction at most
    # positions so that long prefixes (and every prefix length) occur.
    from dflash.walk import _accepted_lengths, accepted_prefix

    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(8, 11, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(11, 8, generator=g))
    hidden = torch.randn(300, 5, 8, generator=g)
    with torch.no_grad():
        dense = head(hidden).argmax(-1)
        labels = torch.where(torch.rand(300, 5, generator=g) < 0.8, dense, (dense + 1) % 11)
        ok = torch.rand(300, 5, generator=g) < 0.95
        lazy = _accepted_lengths(head, hidden, labels, ok)
    expected = accepted_prefix((dense == labels) & ok)
    assert torch.equal(lazy, expected)
    assert set(expected.tolist()) == set(range(6))  # every prefix length 0..5 was exercised

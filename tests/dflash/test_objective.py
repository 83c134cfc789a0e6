"""The objective: anchors, no-leak masking, same-position labels, decayed loss, overfitting."""

import pytest
import torch
import torch.nn.functional as F

from dflash import compute_loss_and_metrics, objective, sample_anchors
from dflash.objective import draft_block_logits, valid_anchor_mask

from .helpers import VOCAB, make_batch, make_drafter


def features_of(target, drafter, ids, attn=None):
    return target.forward(ids, drafter.config.target_layer_ids, attn, logits=False).features


def test_valid_anchors_need_a_fully_supervised_block():
    lm = torch.tensor([[0, 0, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    # B = 3: the block of anchor a supervises a+1, a+2; the anchor is a response token (the
    # first is the token the target emitted at prefill), never the last prompt token (1).
    assert valid_anchor_mask(lm, 3).nonzero()[:, 1].tolist() == [2, 3]
    assert valid_anchor_mask(lm, 6).sum() == 0


def test_sample_anchors_is_seeded_capped_and_valid():
    b = make_batch()
    lm = b["loss_mask"]
    s1 = sample_anchors(lm, 8, 5, torch.Generator().manual_seed(3))
    s2 = sample_anchors(lm, 8, 5, torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(s1, s2, strict=True))
    seq, anc = s1
    assert torch.bincount(seq).tolist() == [5, 5, 5]
    assert valid_anchor_mask(lm, 8)[seq, anc].all()
    # Asking for more than fits caps at the number of valid positions.
    seq, anc = sample_anchors(lm, 8, 1000, torch.Generator().manual_seed(0))
    assert len(anc) == int(valid_anchor_mask(lm, 8).sum())


def reference_block(target, drafter, ids_row, feats_row, a):
    """One block computed alone, the slow obvious way: context = features of 0..a-1 only, no
    mask, no packing; returns logits [B-1, V] and labels x_{a+1} .. x_{a+B-1}."""
    cfg = drafter.config
    B = cfg.block_size
    block = torch.tensor([[int(ids_row[a])] + [cfg.mask_token_id] * (B - 1)])
    h = drafter(
        target.embed_tokens(block),
        torch.arange(a, a + B)[None],
        ctx_features=feats_row[None, :a],
        ctx_positions=torch.arange(a)[None],
    )
    return target.lm_head(h[0, 1:]), ids_row[a + 1 : a + B]


@torch.no_grad()
def reference_loss(target, drafter, batch, seq, anc):
    feats = features_of(target, drafter, batch["input_ids"], batch["attention_mask"])
    w = torch.tensor(drafter.config.loss_weights())
    num = den = 0.0
    n_correct = 0
    for n, a in zip(seq.tolist(), anc.tolist(), strict=True):
        logits, labels = reference_block(target, drafter, batch["input_ids"][n], feats[n], a)
        ce = F.cross_entropy(logits, labels, reduction="none")
        num += float((w * ce).sum())
        den += float(w.sum())
        n_correct += int((logits.argmax(-1) == labels).sum())
    return num / den, n_correct


LAYOUTS = ["per_block", "per_sequence"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_packed_objective_matches_one_block_at_a_time(target, layout):
    torch.manual_seed(0)
    drafter = make_drafter(target)
    batch = make_batch()
    seq, anc = sample_anchors(batch["loss_mask"], 8, 4, torch.Generator().manual_seed(1))
    seq, anc = seq[1:], anc[1:]  # sequences with different block counts
    with torch.no_grad():
        out = compute_loss_and_metrics(
            drafter, target, batch, None, anchors=(seq, anc), layout=layout
        )
    ref, ref_correct = reference_loss(target, drafter, batch, seq, anc)
    assert float(out.loss) == pytest.approx(ref, abs=1e-5)
    assert out.metrics.loss == pytest.approx(ref, abs=1e-5)
    assert out.metrics.n_correct == ref_correct
    assert out.metrics.n_blocks == len(anc)
    assert out.metrics.n_pred == 7 * len(anc)


@pytest.mark.parametrize("shift", [1, -1])
def test_a_shifted_label_is_caught(target, monkeypatch, shift):
    """Mutation check for the test above: shift the objective's labels by one and the packed
    loss no longer matches the one-block-at-a-time reference."""
    drafter = make_drafter(target)
    batch = make_batch()
    seq, anc = sample_anchors(batch["loss_mask"], 8, 4, torch.Generator().manual_seed(1))
    keep = anc + 8 < batch["input_ids"].shape[1]
    seq, anc = seq[keep], anc[keep]
    good = objective.block_labels

    def shifted(input_ids, seq_idx, anchors, block_size):
        return good(input_ids, seq_idx, anchors + shift, block_size)

    monkeypatch.setattr(objective, "block_labels", shifted)
    with torch.no_grad():
        out = compute_loss_and_metrics(drafter, target, batch, None, anchors=(seq, anc))
    ref, _ = reference_loss(target, drafter, batch, seq, anc)
    assert abs(float(out.loss) - ref) > 1e-2


def block_logits(target, drafter, ids, feats, seq, anc, layout):
    with torch.no_grad():
        return draft_block_logits(drafter, target, ids, feats, seq, anc, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_leak_from_context_at_or_after_the_anchor(target, layout):
    drafter = make_drafter(target)
    b = make_batch()
    ids = b["input_ids"]
    seq = torch.tensor([0, 0, 2])
    anc = torch.tensor([12, 25, 12])
    feats = features_of(target, drafter, ids)
    base = block_logits(target, drafter, ids, feats, seq, anc, layout)
    # Re-draw every token of sequence 0 from position 12 (the first block's anchor) on, and
    # recompute the target features from the changed text; the block keeps its anchor token.
    g = torch.Generator().manual_seed(9)
    ids2 = ids.clone()
    ids2[0, 12:] = torch.randint(0, VOCAB - 1, (ids.shape[1] - 12,), generator=g)
    feats2 = features_of(target, drafter, ids2)
    assert not torch.allclose(feats2[0, 12], feats[0, 12])  # the anchor's own state changed
    out = block_logits(target, drafter, ids, feats2, seq, anc, layout)
    torch.testing.assert_close(out[0], base[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(out[2], base[2], rtol=0, atol=1e-6)  # other sequence
    # The block anchored later does see positions 12..24: the check is sensitive.
    assert not torch.allclose(out[1], base[1], atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_leak_between_blocks(target, layout):
    drafter = make_drafter(target)
    ids = make_batch()["input_ids"]
    seq = torch.tensor([0, 0, 0])
    anc = torch.tensor([10, 11, 20])
    feats = features_of(target, drafter, ids)
    base = block_logits(target, drafter, ids, feats, seq, anc, layout)
    for j in range(3):
        ids2 = ids.clone()
        ids2[0, anc[j]] = (ids[0, anc[j]] + 1) % (VOCAB - 1)  # block j's input token only
        out = block_logits(target, drafter, ids2, feats, seq, anc, layout)
        for i in range(3):
            if i != j:
                torch.testing.assert_close(out[i], base[i], rtol=0, atol=1e-6)
        assert not torch.allclose(out[j], base[j], atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_leaky_mask_is_caught(target, monkeypatch, layout):
    """Mutation check: a context visible up to AND including the anchor fails the no-leak test."""
    monkeypatch.setattr(objective, "context_visibility", lambda pos, anc: pos[None] <= anc[:, None])
    with pytest.raises(AssertionError):
        test_no_leak_from_context_at_or_after_the_anchor(target, layout)


def test_both_layouts_give_the_same_loss_and_gradients(target):
    b = make_batch()
    seq, anc = sample_anchors(b["loss_mask"], 8, 5, torch.Generator().manual_seed(4))
    seq, anc = seq[2:], anc[2:]
    grads, losses = [], []
    for layout in LAYOUTS:
        drafter = make_drafter(target)
        out = compute_loss_and_metrics(drafter, target, b, None, anchors=(seq, anc), layout=layout)
        out.loss.backward()
        losses.append(float(out.loss))
        grads.append([p.grad for p in drafter.parameters()])
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    for a, g in zip(*grads, strict=True):
        torch.testing.assert_close(a, g, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="layout"):
        compute_loss_and_metrics(drafter, target, b, None, anchors=(seq, anc), layout="diagonal")


def test_decay_weights_enter_the_loss(target):
    b = make_batch()
    seq, anc = sample_anchors(b["loss_mask"], 8, 3, torch.Generator().manual_seed(2))
    outs = {}
    for gamma in (None, 2.0):
        drafter = make_drafter(target, loss_decay_gamma=gamma)
        with torch.no_grad():
            logits = draft_block_logits(
                drafter,
                target,
                b["input_ids"],
                features_of(target, drafter, b["input_ids"]),
                seq,
                anc,
            )
            out = compute_loss_and_metrics(drafter, target, b, None, anchors=(seq, anc))
        labels = objective.block_labels(b["input_ids"], seq, anc, 8)
        ce = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none")
        ce = ce.view(len(anc), 7).mean(0)  # per-position mean CE
        w = torch.ones(7) if gamma is None else torch.exp(-torch.arange(7) / gamma)
        assert float(out.loss) == pytest.approx(float((w * ce).sum() / w.sum()), abs=1e-5)
        outs[gamma] = float(out.loss)
    assert outs[None] != pytest.approx(outs[2.0], abs=1e-4)


def test_empty_batch_gives_zero_loss_with_a_graph(target):
    drafter = make_drafter(target)
    b = make_batch()
    b["loss_mask"][:] = False
    out = compute_loss_and_metrics(drafter, target, b, torch.Generator().manual_seed(0))
    out.loss.backward()
    assert out.metrics.n_blocks == 0
    assert float(out.loss) == 0.0


def test_overfitting_one_batch_lowers_loss_and_raises_tau(target):
    drafter = make_drafter(target, num_anchors=8)
    b = make_batch()
    feats = features_of(target, drafter, b["input_ids"], b["attention_mask"])
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    history = []
    for _ in range(40):
        out = compute_loss_and_metrics(
            drafter, target, b, torch.Generator().manual_seed(0), features=feats
        )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        history.append(out.metrics)
    first, last = history[0], history[-1]
    print(
        f"loss {first.loss:.3f} -> {last.loss:.3f}, tau_train {first.tau_train:.2f} -> {last.tau_train:.2f}"
    )
    assert last.loss < 0.9 * first.loss
    assert first.tau_train < 1.5
    assert last.tau_train > 3.0


def test_chunked_logits_give_the_same_loss_metrics_and_gradients(target):
    b = make_batch()
    seq, anc = sample_anchors(b["loss_mask"], 8, 5, torch.Generator().manual_seed(6))
    results = []
    for budget in (1 << 27, 3 * 7 * VOCAB):  # everything at once; chunks of 3 blocks
        drafter = make_drafter(target)
        out = compute_loss_and_metrics(
            drafter, target, b, None, anchors=(seq, anc), logits_budget=budget
        )
        out.loss.backward()
        results.append((out, [p.grad for p in drafter.parameters()]))
    (whole, g1), (chunked, g2) = results
    assert float(whole.loss) == pytest.approx(float(chunked.loss), abs=1e-5)
    assert whole.metrics.n_correct == chunked.metrics.n_correct
    assert whole.metrics.accept_pos == chunked.metrics.accept_pos
    for a, g in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, g, atol=1e-5, rtol=1e-4)

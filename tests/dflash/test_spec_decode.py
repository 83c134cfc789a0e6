"""Speculative decoding: lossless greedy output, oracle tau = B, train/serve agreement, sampling."""

import pytest
import torch

from dflash import compute_loss_and_metrics, evaluate_tau, spec_generate
from dflash.objective import draft_block_logits
from dflash.spec_decode import GreedyOracleDrafter, speculative_accept

from .helpers import VOCAB, make_drafter


def prompts(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(0, VOCAB - 1, (int(torch.randint(3, 12, (), generator=g)),), generator=g)
        for _ in range(n)
    ]


@torch.no_grad()
def plain_greedy(target, prompt, n):
    """The target's own greedy generation, recomputing the whole sequence each token."""
    ids = prompt.tolist()
    for _ in range(n):
        ids.append(int(target.model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


class PartialOracle(GreedyOracleDrafter):
    """The oracle with its first wrong draft at a position that cycles over the steps, so every
    acceptance length 1..B (and every cache roll-back size) occurs."""

    def start_session(self, target):
        inner = super().start_session(target)
        B = self.block_size
        step = {"i": 0}

        class Session:
            def observe(self, tokens, features, start):
                inner.observe(tokens, features, start)

            def draft_logits(self, anchor, position):
                logits = inner.draft_logits(anchor, position)
                k = step["i"] % B
                step["i"] += 1
                if k < B - 1:
                    logits[k] = logits[k].roll(1)  # a wrong token at position k + 1
                return logits

        return Session()


@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_greedy_is_lossless_with_an_untrained_drafter(target, block_size):
    drafter = make_drafter(target, block_size=block_size)
    for p in prompts():
        assert spec_generate(target, drafter, p, 24).tokens == plain_greedy(target, p, 24)


def test_greedy_matches_hf_generate(target):
    drafter = make_drafter(target)
    p = prompts(1)[0]
    hf = target.model.generate(
        p[None],
        max_new_tokens=20,
        do_sample=False,
        min_new_tokens=20,
        attention_mask=torch.ones(1, len(p), dtype=torch.long),
    )
    assert spec_generate(target, drafter, p, 20).tokens == hf[0, len(p) :].tolist()


@pytest.mark.parametrize("block_size", [4, 8])
def test_oracle_reaches_tau_B(target, block_size):
    oracle = GreedyOracleDrafter(target, block_size)
    for p in prompts(2):
        out = spec_generate(target, oracle, p, 1 + 3 * block_size)
        assert out.tokens == plain_greedy(target, p, 1 + 3 * block_size)
        assert out.accept_lengths == [block_size] * 3
    res = evaluate_tau(target, oracle, prompts(2), 1 + 3 * block_size)
    assert res.tau == block_size
    assert res.tau_hist[-1] == 6
    assert sum(res.tau_hist[:-1]) == 0


def test_every_acceptance_length_is_lossless(target):
    B = 5
    oracle = PartialOracle(target, B)
    for p in prompts(2, seed=1):
        out = spec_generate(target, oracle, p, 40)
        assert out.tokens == plain_greedy(target, p, 40)
        assert set(out.accept_lengths[:B]) == set(range(1, B + 1))


def test_stop_tokens_and_budget(target):
    oracle = GreedyOracleDrafter(target, 4)
    p = prompts(1)[0]
    ref = plain_greedy(target, p, 30)
    stop = ref[9]
    out = spec_generate(target, oracle, p, 30, stop_token_ids=[stop])
    assert out.tokens == ref[: ref.index(stop) + 1]
    assert len(spec_generate(target, oracle, p, 7).tokens) == 7
    assert spec_generate(target, oracle, p, 0).tokens == []
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        spec_generate(target, oracle, p, 5, temperature=-1.0)


def test_serving_acceptance_equals_the_training_prefix_metric(target):
    """Train/serve agreement: at every verify step, the acceptance length equals 1 + the correct
    prefix the training objective scores for a block anchored at the same position of the same
    (target-greedy) sequence. A shifted label or a leaky mask in either path breaks this."""
    B = 6
    torch.manual_seed(0)
    prompt = prompts(1, seed=3)[0]
    seq = torch.tensor(prompt.tolist() + plain_greedy(target, prompt, 40))[None]
    batch = {
        "input_ids": seq,
        "attention_mask": torch.ones_like(seq),
        "loss_mask": torch.arange(seq.shape[1])[None] >= len(prompt) - 1,
    }
    batch["loss_mask"][0, len(prompt) - 1] = False
    drafter = make_drafter(target, block_size=B, num_anchors=64)
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    for i in range(30):  # partly trained: some blocks accepted, some not
        out = compute_loss_and_metrics(drafter, target, batch, torch.Generator().manual_seed(i))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    drafter.eval()
    res = spec_generate(target, drafter, prompt, 40)
    assert res.tokens == seq[0, len(prompt) :].tolist()
    anchors, pos = [], len(prompt)
    for n in res.accept_lengths:
        anchors.append(pos)
        pos += n
    anchors = torch.tensor([a for a in anchors if a + B <= seq.shape[1]])
    feats = target.forward(seq, drafter.config.target_layer_ids, logits=False).features
    with torch.no_grad():
        logits = draft_block_logits(drafter, target, seq, feats, torch.zeros_like(anchors), anchors)
    labels = seq[0, anchors[:, None] + torch.arange(1, B)]
    prefix = (logits.argmax(-1) == labels).long().cumprod(1).sum(1) + 1
    assert prefix.tolist() == res.accept_lengths[: len(anchors)]
    assert 1 < sum(res.accept_lengths) / len(res.accept_lengths) < B  # a non-trivial case


def test_accept_reject_rule_samples_the_target_distribution():
    """Monte Carlo over a 4-token vocabulary: the emitted first token follows p, not q."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.7]])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    n = 20000
    drafts = torch.multinomial(q[0], n, replacement=True, generator=g)
    for d in drafts.tolist():
        k, extra = speculative_accept(p, q, torch.tensor([d]), g)
        counts[d if k == 1 else extra] += 1
    torch.testing.assert_close(counts / n, p[0], atol=0.015, rtol=0)


def test_sampling_runs_and_records_an_eval(target):
    drafter = make_drafter(target, block_size=4)
    res = evaluate_tau(target, drafter, prompts(2), 12, temperature=0.7, seed=1)
    again = evaluate_tau(target, drafter, prompts(2), 12, temperature=0.7, seed=1)
    assert res == again  # seeded
    d = res.to_log_dict(step=5)
    assert d["event"] == "eval"
    assert d["step"] == 5
    assert d["n_prompts"] == 2
    assert d["new_tokens"] == 24
    assert len(d["tau_hist"]) == 4
    assert d["temperature"] == 0.7
    assert sum((i + 1) * c for i, c in enumerate(d["tau_hist"])) / sum(d["tau_hist"]) == d["tau"]


@pytest.mark.slow
def test_sampled_tokens_follow_the_target_distribution(target):
    """End to end (slow): the second generated token, which comes from a verify step (accepted
    draft or residual draw), has the target's exact marginal, computed by enumerating the first."""
    T, n = 0.5, 1500
    prompt = torch.tensor([5, 17, 42, 9])
    with torch.no_grad():
        p1 = torch.softmax(target.model(prompt[None]).logits[0, -1] / T, -1)
        seqs = torch.cat([prompt.expand(VOCAB, 4), torch.arange(VOCAB)[:, None]], 1)
        p2 = (p1[:, None] * torch.softmax(target.model(seqs).logits[:, -1] / T, -1)).sum(0)
    oracle = GreedyOracleDrafter(target, 3)  # q = a point mass: both accept and reject happen
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(VOCAB)
    for _ in range(n):
        counts[spec_generate(target, oracle, prompt, 2, temperature=T, generator=g).tokens[1]] += 1
    tv = 0.5 * (counts / n - p2).abs().sum()
    tv_wrong = 0.5 * (counts / n - p1).abs().sum()  # what a misaligned rule would produce
    assert tv < 0.1 < tv_wrong

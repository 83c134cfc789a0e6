"""Lossless speculative decoding with a block drafter, and the measured acceptance length tau.

One step (batch of one sequence, KV caches on both sides):

    anchor = last committed token, at position p (the target has cached 0..p-1)
    draft  = drafter(anchor, context = target features of 0..p-1)     B-1 tokens, one pass
    verify = target([anchor, draft]) at positions p..p+B-1             one pass
    keep the longest accepted prefix (n tokens) plus one token of the target's own (the bonus),
    roll the target cache back to p+n, append the features of p..p+n to the drafter's context.

tau = tokens gained per verify step = n + 1, between 1 and B. Greedy decoding is lossless: the
output equals the target's own greedy generation token for token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .model import DFlashDraftModel, unwrap_drafter
from .target import TargetModel


class DraftSession(Protocol):
    """Per-sequence drafting state."""

    def observe(self, tokens: torch.Tensor, features: torch.Tensor, start: int) -> None:
        """Committed tokens [n] at positions start..start+n-1 with their target features [n, K*H]."""

    def draft_logits(self, anchor: int, position: int) -> torch.Tensor:
        """Logits [B-1, V] for the B-1 tokens after ``anchor`` (at ``position``)."""


class DFlashSession:
    """A DFlashDraftModel's decoding state: its context keys/values, grown as tokens commit."""

    def __init__(self, drafter: DFlashDraftModel, target: TargetModel) -> None:
        self.drafter, self.target = drafter, target
        self.ctx_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def observe(self, tokens: torch.Tensor, features: torch.Tensor, start: int) -> None:
        pos = torch.arange(start, start + features.shape[0], device=features.device)[None]
        new = self.drafter.context_kv(features[None].to(self._dtype), pos)
        if self.ctx_kv is None:
            self.ctx_kv = new
        else:
            self.ctx_kv = [
                (torch.cat([k, k2], dim=2), torch.cat([v, v2], dim=2))
                for (k, v), (k2, v2) in zip(self.ctx_kv, new, strict=True)
            ]

    @property
    def _dtype(self) -> torch.dtype:
        return self.drafter.fc.weight.dtype

    def draft_logits(self, anchor: int, position: int) -> torch.Tensor:
        cfg = self.drafter.config
        B = cfg.block_size
        device = self.drafter.fc.weight.device
        ids = torch.full((1, B), cfg.mask_token_id, dtype=torch.long, device=device)
        ids[0, 0] = anchor
        pos = torch.arange(position, position + B, device=device)[None]
        # The context holds exactly the positions before the anchor: nothing to mask.
        h = self.drafter(self.target.embed_tokens(ids).to(self._dtype), pos, ctx_kv=self.ctx_kv)
        return self.target.lm_head(h[0, 1:].to(self.target.dtype)).float()


class GreedyOracleDrafter:
    """A drafter that proposes the target's own greedy continuation (so greedy tau reaches B).

    An upper-bound and test device: it reruns the target without a cache, slowly.
    """

    def __init__(
        self, target: TargetModel, block_size: int, target_layer_ids: Sequence[int] = (0,)
    ):
        self.target, self.block_size = target, block_size
        self.target_layer_ids = tuple(target_layer_ids)

    def start_session(self, target: TargetModel) -> DraftSession:
        return _OracleSession(target, self.block_size)


class _OracleSession:
    def __init__(self, target: TargetModel, block_size: int) -> None:
        self.target, self.block_size = target, block_size
        self.tokens: list[int] = []

    def observe(self, tokens: torch.Tensor, features: torch.Tensor, start: int) -> None:
        self.tokens = self.tokens[:start] + tokens.tolist()

    def draft_logits(self, anchor: int, position: int) -> torch.Tensor:
        seq = [*self.tokens[:position], anchor]
        out = torch.full((self.block_size - 1, self.target.config.vocab_size), -1e4)
        for k in range(self.block_size - 1):
            ids = torch.tensor([seq], device=self.target.device)
            nxt = int(self.target.model(ids).logits[0, -1].argmax())
            out[k, nxt] = 0.0
            seq.append(nxt)
        return out


def start_session(drafter: Any, target: TargetModel) -> DraftSession:
    """A drafting session for a DFlashDraftModel or any object with ``start_session(target)``."""
    if hasattr(drafter, "start_session"):
        return drafter.start_session(target)
    return DFlashSession(unwrap_drafter(drafter), target)


def _block_size(drafter: Any) -> int:
    d = unwrap_drafter(drafter) if isinstance(drafter, torch.nn.Module) else drafter
    return d.config.block_size if hasattr(d, "config") else d.block_size


def _layer_ids(drafter: Any) -> tuple[int, ...]:
    d = unwrap_drafter(drafter) if isinstance(drafter, torch.nn.Module) else drafter
    return d.config.target_layer_ids if hasattr(d, "config") else d.target_layer_ids


def _sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def speculative_accept(
    p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, generator: torch.Generator | None
) -> tuple[int, int]:
    """Speculative sampling's accept/reject rule over one block.

    Args:
        p: [B, V] target probabilities; row k is the distribution of the token after k drafts.
        q: [B-1, V] drafter probabilities the drafts were sampled from.
        draft: [B-1] drafted tokens.
    Returns:
        (n accepted drafts, the extra token), whose joint distribution is exactly the target's.
    """
    p, q, draft = p.cpu(), q.cpu(), draft.cpu()
    for k in range(draft.shape[0]):
        x = int(draft[k])
        # Accept x with probability min(1, p(x) / q(x)) ...
        u = float(torch.rand((), generator=generator))
        if u * float(q[k, x]) <= float(p[k, x]):
            continue
        # ... else emit a token from the residual max(0, p - q), renormalised: together the two
        # branches sample exactly from p (Leviathan et al. 2023; Chen et al. 2023).
        residual = (p[k] - q[k]).clamp_min(0)
        total = float(residual.sum())
        extra = _sample(residual / total if total > 0 else p[k], generator)
        return k, extra
    # Every draft accepted: the bonus token comes from the target's next distribution.
    return draft.shape[0], _sample(p[-1], generator)


@dataclass
class SpecOutput:
    """tokens: the generated tokens (prompt excluded); accept_lengths: per verify step, the
    tokens it added to the output: n + 1, cut at ``max_new_tokens`` or a stop token."""

    tokens: list[int]
    accept_lengths: list[int]


@torch.no_grad()
def spec_generate(
    target: TargetModel,
    drafter: Any,
    input_ids: torch.Tensor | Sequence[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    stop_token_ids: Iterable[int] | None = None,
    generator: torch.Generator | None = None,
) -> SpecOutput:
    """Generates up to ``max_new_tokens`` after one prompt with speculative decoding.

    Args:
        target: the target model (verifies, and decides every emitted token's distribution).
        drafter: a DFlashDraftModel (or an object with ``start_session``, ``block_size`` and
            ``target_layer_ids``).
        input_ids: the prompt, [P] or [1, P].
        max_new_tokens: generation budget (the output may stop earlier at a stop token).
        temperature: 0 for greedy (lossless: identical to the target's greedy output); > 0 samples
            with the speculative accept/reject rule (the output follows the target's distribution).
        stop_token_ids: generation ends after emitting one of these.
        generator: CPU generator for sampling.
    Returns:
        SpecOutput with the new tokens and each verify step's acceptance length (1..B).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    B = _block_size(drafter)
    layer_ids = _layer_ids(drafter)
    stops = set(stop_token_ids or ())
    prompt = torch.as_tensor(input_ids, dtype=torch.long, device=target.device).reshape(-1)
    if prompt.numel() == 0:
        raise ValueError("the prompt must hold at least one token")
    if max_new_tokens <= 0:
        return SpecOutput([], [])
    greedy = temperature == 0

    def pick(logits: torch.Tensor) -> int:
        if greedy:
            return int(logits.argmax())
        return _sample(torch.softmax(logits.float() / temperature, -1), generator)

    session = start_session(drafter, target)
    out = target.forward(prompt[None], layer_ids, use_cache=True)
    cache = out.cache
    session.observe(prompt, out.features[0], 0)
    tokens = [pick(out.logits[0, -1])]
    accept_lengths: list[int] = []
    pos = prompt.numel()  # position of the anchor (the last committed token)
    while len(tokens) < max_new_tokens and tokens[-1] not in stops:
        anchor = tokens[-1]
        q_logits = session.draft_logits(anchor, pos)  # [B-1, V]
        if greedy:
            draft = q_logits.argmax(-1)
        else:
            q = torch.softmax(q_logits.float() / temperature, -1).cpu()
            draft = torch.multinomial(q, 1, generator=generator)[:, 0]
        block = torch.cat([torch.tensor([anchor]), draft.cpu()]).to(target.device)
        assert cache.get_seq_length() == pos
        v = target.forward(block[None], layer_ids, cache=cache)
        p_logits = v.logits[0]  # row k: the target's next-token logits after block[:k+1]
        if greedy:
            tgt = p_logits.argmax(-1).cpu()
            # Accept the longest prefix of drafts that equals the target's own greedy choice.
            match = (draft.cpu() == tgt[:-1]).to(torch.int64)
            n = int(match.cumprod(0).sum())
            extra = int(tgt[n])
        else:
            p = torch.softmax(p_logits.float() / temperature, -1)
            n, extra = speculative_accept(p, q, draft, generator)
        # The target cached all B block positions; keep the anchor and the n accepted drafts.
        rejected = B - (n + 1)
        if rejected:
            cache.crop(-rejected)  # transformers 5: a negative count removes that many tokens
        session.observe(block[: n + 1], v.features[0, : n + 1], pos)
        new = [*draft[:n].tolist(), extra]
        gained = 0
        for t in new:
            tokens.append(int(t))
            gained += 1
            if t in stops or len(tokens) >= max_new_tokens:
                break
        # The step's acceptance length is what it added to the output: tokens past the budget
        # or a stop token are never served, so they do not count (the walked tau, which only
        # knows the response up to the horizon, counts the same way).
        accept_lengths.append(gained)
        pos += n + 1
    return SpecOutput(tokens=tokens[:max_new_tokens], accept_lengths=accept_lengths)


@dataclass
class TauResult:
    """Measured acceptance over a set of prompts (the schema v1 eval record).

    tau: mean acceptance length, total accepted-plus-bonus tokens / verify steps.
    tau_hist: counts of steps by acceptance length 1..B (index 0 is length 1).
    """

    tau: float
    tau_hist: list[int]
    n_prompts: int
    new_tokens: int
    temperature: float
    n_steps: int = 0
    per_prompt_tau: list[float] = field(default_factory=list)

    def to_log_dict(self, step: int | None = None) -> dict[str, Any]:
        """{"event": "eval", "step", "tau", "tau_hist", "n_prompts", "new_tokens", "temperature"}."""
        return {
            "event": "eval",
            "step": step,
            "tau": self.tau,
            "tau_hist": list(self.tau_hist),
            "n_prompts": self.n_prompts,
            "new_tokens": self.new_tokens,
            "temperature": self.temperature,
        }


@torch.no_grad()
def evaluate_tau(
    target: TargetModel,
    drafter: Any,
    prompts: Sequence[torch.Tensor | Sequence[int]],
    max_new_tokens: int,
    temperature: float = 0.0,
    stop_token_ids: Iterable[int] | None = None,
    seed: int = 0,
) -> TauResult:
    """Real speculative decoding on held-out prompts: the measured tau.

    Args:
        prompts: token id sequences.
        max_new_tokens: per prompt.
        temperature: 0 = greedy; sampling is seeded by ``seed``.
    Returns:
        TauResult (``to_log_dict(step)`` gives the eval record).
    """
    B = _block_size(drafter)
    was_training = getattr(drafter, "training", False)
    if hasattr(drafter, "eval"):
        drafter.eval()
    generator = torch.Generator().manual_seed(seed)
    hist = [0] * B
    new_tokens = 0
    per_prompt = []
    try:
        for prompt in prompts:
            out = spec_generate(
                target, drafter, prompt, max_new_tokens, temperature, stop_token_ids, generator
            )
            for n in out.accept_lengths:
                hist[n - 1] += 1
            new_tokens += len(out.tokens)
            if out.accept_lengths:
                per_prompt.append(sum(out.accept_lengths) / len(out.accept_lengths))
    finally:
        if was_training:
            drafter.train()
    steps = sum(hist)
    tau = sum((i + 1) * c for i, c in enumerate(hist)) / steps if steps else float("nan")
    return TauResult(
        tau=tau,
        tau_hist=hist,
        n_prompts=len(prompts),
        new_tokens=new_tokens,
        temperature=float(temperature),
        n_steps=steps,
        per_prompt_tau=per_prompt,
    )

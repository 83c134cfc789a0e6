"""DFlashDraftModel: Qwen3-style decoder layers with the target's context injected as keys/values.

Shapes: N sequences, T context positions, M blocks, B block size, H hidden size, h / g query /
key-value heads, d head size, K target layers read (features are K*H wide).

Every draft layer attends, from the B block positions, to
    keys/values = [ proj(context features) ; proj(block hidden) ]
("KV injection"): the context comes from the target's hidden states through `fc` + RMSNorm, is the
same tensor for every layer, and gets each layer's own k/v projections. Inside the block attention
is non-causal. The drafter owns no embedding or lm_head: callers embed the block with the target's
frozen embedding and read logits through the target's frozen lm_head, so the checkpoint holds
only the drafter's own weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    apply_rotary_pos_emb,
)

from .config import DFlashConfig

# Per-layer context keys/values: a list (one entry per draft layer) of (k, v), each [M, g, Tc, d].
ContextKV = list[tuple[torch.Tensor, torch.Tensor]]


def _qwen3_config(cfg: DFlashConfig) -> Qwen3Config:
    """The Qwen3Config the transformers building blocks expect, carrying the drafter's sizes."""
    return Qwen3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_draft_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=cfg.max_position_embeddings,
        hidden_act=cfg.hidden_act,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
    )


class DFlashAttention(nn.Module):
    """Qwen3 attention (q/k RMSNorm, RoPE, GQA) whose keys/values are [context ; block]."""

    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.h, self.g, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        H = cfg.hidden_size
        self.q_proj = nn.Linear(H, self.h * self.d, bias=False)
        self.k_proj = nn.Linear(H, self.g * self.d, bias=False)
        self.v_proj = nn.Linear(H, self.g * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, H, bias=False)
        self.q_norm = Qwen3RMSNorm(self.d, eps=cfg.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.d, eps=cfg.rms_norm_eps)

    def _kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [M, S, H] -> rotated keys and values [M, g, S, d]."""
        M, S, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(M, S, self.g, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(M, S, self.g, self.d).transpose(1, 2)
        # apply_rotary_pos_emb rotates a (q, k) pair; the context has keys only.
        _, k = apply_rotary_pos_emb(k, k, cos, sin)
        return k, v

    def context_kv(self, ctx: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Keys/values of the (already projected and normed) context, [N, g, Tc, d] each."""
        return self._kv(ctx, cos, sin)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx_k: torch.Tensor,
        ctx_v: torch.Tensor,
        attn_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """x [R, S, H] block hidden (R rows of S block positions); ctx_k/ctx_v [R, g, Tc, d];
        attn_mask [R, 1, S, Tc+S] bool over [context ; blocks] (True = visible) or None (all
        visible). Returns [R, S, H]."""
        R, S, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(R, S, self.h, self.d)).transpose(1, 2)
        q, _ = apply_rotary_pos_emb(q, q, cos, sin)
        k_blk, v_blk = self._kv(x, cos, sin)
        k = torch.cat([ctx_k, k_blk], dim=2)
        v = torch.cat([ctx_v, v_blk], dim=2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, enable_gqa=self.h != self.g
        )
        return self.o_proj(out.transpose(1, 2).reshape(R, S, self.h * self.d))


class DFlashDecoderLayer(nn.Module):
    """Pre-norm Qwen3 decoder layer (SwiGLU MLP) with context-injected, non-causal attention."""

    def __init__(self, cfg: DFlashConfig, qcfg: Qwen3Config) -> None:
        super().__init__()
        self.self_attn = DFlashAttention(cfg)
        self.mlp = Qwen3MLP(qcfg)
        self.input_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, x, cos, sin, ctx_k, ctx_v, attn_mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx_k, ctx_v, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(nn.Module):
    """The DFlash drafter: predicts B-1 tokens after an anchor in one forward pass.

    Args:
        config: a resolved DFlashConfig (see ``DFlashConfig.for_target``).

    Raises:
        ValueError: when the config's sizes are unset.
    """

    def __init__(self, config: DFlashConfig) -> None:
        super().__init__()
        config.require_resolved()
        self.config = config
        qcfg = _qwen3_config(config)
        H = config.hidden_size
        self.fc = nn.Linear(config.num_context_features, H, bias=False)
        self.hidden_norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(
            DFlashDecoderLayer(config, qcfg) for _ in range(config.num_draft_layers)
        )
        self.norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(qcfg)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        # HF's initializer_range for Qwen3; RMSNorm weights stay at one.
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> ContextKV:
        """Per-layer keys/values of target context features.

        Args:
            features: [N, Tc, K*H] concatenated target hidden states.
            positions: [N, Tc] (or [1, Tc]) their positions, for RoPE.
        """
        ctx = self.hidden_norm(self.fc(features))
        cos, sin = self.rotary_emb(ctx, positions)
        return [layer.self_attn.context_kv(ctx, cos, sin) for layer in self.layers]

    def forward(
        self,
        block_embeds: torch.Tensor,
        block_positions: torch.Tensor,
        ctx_features: torch.Tensor | None = None,
        ctx_positions: torch.Tensor | None = None,
        ctx_mask: torch.Tensor | None = None,
        seq_idx: torch.Tensor | None = None,
        ctx_kv: ContextKV | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states of the block positions (final-normed; apply the target's lm_head).

        The context comes either as target features (projected here, in this call, so that a
        DDP wrapper sees every parameter used in its forward) or as precomputed keys/values
        (the decoding cache). Two layouts:

        * one block per row: block_embeds [M, B, H]; ``ctx_mask`` [M, Tc] says which context
          positions each block sees, and every block position sees its whole block;
        * several blocks per row (all blocks of a sequence): block_embeds [N, S, H] with an
          explicit ``attn_mask`` [N, 1, S, Tc+S] over [context ; block positions].

        Args:
            block_embeds: [R, S, H] target embeddings of the blocks [x_a, MASK, ..., MASK].
            block_positions: [R, S] their positions (a..a+B-1 per block).
            ctx_features: [N, Tc, K*H] target features of the context.
            ctx_positions: [N, Tc] or [1, Tc] their positions.
            ctx_mask: [R, Tc] bool, True where the row's block may see the context position.
                Training passes (position < anchor): a block never sees its anchor's own state.
            seq_idx: [R] the context row of each block row (a gather); None when N == R.
            ctx_kv: precomputed per-layer context keys/values ([R, g, Tc, d] each) instead of
                ctx_features.
            attn_mask: [R, 1, S, Tc+S] bool, the full mask (instead of ctx_mask).
        Returns:
            [R, S, H].
        """
        if ctx_kv is None:
            if ctx_features is None or ctx_positions is None:
                raise ValueError("pass ctx_features and ctx_positions, or ctx_kv")
            ctx_kv = self.context_kv(ctx_features, ctx_positions)
        if seq_idx is not None:
            # Each block reads its own sequence's context (a gather: [N, ...] -> [M, ...]).
            ctx_kv = [(k[seq_idx], v[seq_idx]) for k, v in ctx_kv]
        x = block_embeds
        R, S, _ = x.shape
        if ctx_mask is not None:
            if attn_mask is not None:
                raise ValueError("pass ctx_mask or attn_mask, not both")
            Tc = ctx_kv[0][0].shape[2]
            # Context visibility per block; every block position sees its whole block.
            own = torch.ones(R, S, dtype=torch.bool, device=x.device)
            attn_mask = torch.cat([ctx_mask[:, :Tc], own], dim=1)[:, None, None, :]
            attn_mask = attn_mask.expand(R, 1, S, Tc + S)
        cos, sin = self.rotary_emb(x, block_positions)
        for layer, (k, v) in zip(self.layers, ctx_kv, strict=True):
            x = layer(x, cos, sin, k, v, attn_mask)
        return self.norm(x)


def unwrap_drafter(model: nn.Module) -> DFlashDraftModel:
    """The DFlashDraftModel inside a DDP / torch.compile wrapper (or the model itself)."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return getattr(model, "_orig_mod", model)

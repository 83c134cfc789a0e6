"""DFlashConfig: the drafter's hyper-parameters plus the sizes it copies from its target.

A config is built in two steps: the user-facing knobs (block size, draft depth, decay, anchors) and
then the sizes, which must match the target because the drafter shares the target's frozen
embedding and lm_head and reads its hidden states. `DFlashConfig.for_target(hf_config, ...)` does
both; `DFlashConfig(**json)` rebuilds a saved one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

# Paper defaults for the loss decay exp(-(k-1)/gamma): gamma grows with the block so the tail of a
# long block still gets some weight.
_GAMMA_BY_BLOCK = {16: 7.0, 10: 5.0, 8: 4.0}
AUTO = "auto"


def default_gamma(block_size: int) -> float:
    """Paper value of gamma for B in {16, 10, 8}; 7 * B / 16 for any other block size."""
    return _GAMMA_BY_BLOCK.get(block_size, 7.0 * block_size / 16.0)


def default_target_layer_ids(num_target_layers: int, num_layers: int) -> tuple[int, ...]:
    """Target layer ids spread evenly from layer 1 to L-3 (one layer: L // 2).

    Args:
        num_target_layers: L, the number of decoder layers of the target.
        num_layers: how many layers to read (K; equals the number of draft layers by default).
    Raises:
        ValueError: when the target is too shallow for K distinct layers in 1..L-3.
    """
    if num_layers < 1:
        raise ValueError(f"number of target layers to read must be >= 1, got {num_layers}")
    if num_layers == 1:
        return (num_target_layers // 2,)
    lo, hi = 1, num_target_layers - 3
    if hi - lo + 1 < num_layers:
        raise ValueError(
            f"target has {num_target_layers} layers: cannot spread {num_layers} distinct ids over "
            f"layers {lo}..{hi}; pass target_layer_ids explicitly"
        )
    ids = [round(lo + i * (hi - lo) / (num_layers - 1)) for i in range(num_layers)]
    return tuple(ids)


@dataclass
class DFlashConfig:
    """Hyper-parameters of a DFlash drafter.

    The size fields (``hidden_size`` ... ``max_position_embeddings``) are copied from the target by
    :meth:`for_target`; a config with them unset cannot build a model.
    """

    block_size: int = 16
    """B: tokens per drafted block, the anchor plus B-1 predicted positions."""
    num_draft_layers: int = 1
    """Decoder layers of the drafter (1 is the CPU default; 5 for real targets)."""
    target_layer_ids: tuple[int, ...] | None = None
    """Target layers whose hidden states (HF ``hidden_states[id + 1]``) form the context."""
    mask_token_id: int | None = None
    """Token id embedded at the B-1 predicted positions. Targets rarely have a mask token: any id
    works because the drafter learns its embedding's role; `for_target` picks the pad id, else the
    last vocabulary id. Must be in [0, vocab_size)."""
    loss_decay_gamma: float | str | None = AUTO
    """gamma of w_k = exp(-(k-1)/gamma); "auto" = paper value for B (7 for 16, 5 for 10, 4 for 8);
    None switches decay off (all positions weigh 1)."""
    num_anchors: int = 512
    """Blocks sampled per sequence (capped by the number of valid anchor positions)."""

    # Sizes copied from the target.
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    vocab_size: int | None = None
    num_target_layers: int | None = None
    max_position_embeddings: int = 40960
    hidden_act: str = "silu"
    target_name: str = field(default="", compare=False)
    """Where the target came from (path or hub id); informative, not checked on load."""

    def __post_init__(self) -> None:
        if isinstance(self.target_layer_ids, list):
            self.target_layer_ids = tuple(self.target_layer_ids)
        # bool is an int in Python; a config saying `"block_size": true` is a damaged one.
        for name in (
            "block_size",
            "num_draft_layers",
            "num_anchors",
            "mask_token_id",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "vocab_size",
            "num_target_layers",
            "max_position_embeddings",
        ):
            if isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be an int, got {getattr(self, name)!r}")  # noqa: TRY004 - a damaged file
        if not isinstance(self.max_position_embeddings, int) or self.max_position_embeddings < 1:
            raise ValueError(
                f"max_position_embeddings must be an int >= 1, got {self.max_position_embeddings!r}"
            )
        for name in ("rms_norm_eps", "rope_theta"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or v <= 0
            ):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name in ("hidden_act", "target_name"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")  # noqa: TRY004 - a damaged file
        if self.target_layer_ids is not None and (
            not isinstance(self.target_layer_ids, tuple)
            or not all(type(i) is int for i in self.target_layer_ids)
        ):
            raise ValueError(
                f"target_layer_ids must be a list of ints, got {self.target_layer_ids!r}"
            )
        if not isinstance(self.block_size, int) or self.block_size < 2:
            raise ValueError(f"block_size must be an int >= 2, got {self.block_size!r}")
        if not isinstance(self.num_draft_layers, int) or self.num_draft_layers < 1:
            raise ValueError(f"num_draft_layers must be an int >= 1, got {self.num_draft_layers!r}")
        if not isinstance(self.num_anchors, int) or self.num_anchors < 1:
            raise ValueError(f"num_anchors must be an int >= 1, got {self.num_anchors!r}")
        if self.loss_decay_gamma == AUTO:
            self.loss_decay_gamma = default_gamma(self.block_size)
        if self.loss_decay_gamma is not None:
            g = self.loss_decay_gamma
            if isinstance(g, (str, bool)) or not (
                isinstance(g, (int, float)) and math.isfinite(g) and g > 0
            ):
                raise ValueError(f"loss_decay_gamma must be > 0, None or 'auto', got {g!r}")
            self.loss_decay_gamma = float(g)
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "vocab_size",
            "num_target_layers",
        ):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        heads, kv_heads = self.num_attention_heads, self.num_key_value_heads
        if heads and kv_heads and heads % kv_heads:
            raise ValueError(
                f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})"
            )
        if self.mask_token_id is not None:
            if not isinstance(self.mask_token_id, int) or self.mask_token_id < 0:
                raise ValueError(f"mask_token_id must be an int >= 0, got {self.mask_token_id!r}")
            if self.vocab_size is not None and self.mask_token_id >= self.vocab_size:
                raise ValueError(
                    f"mask_token_id {self.mask_token_id} is outside the vocabulary [0, {self.vocab_size})"
                )
        if self.target_layer_ids is not None:
            ids = self.target_layer_ids
            if len(ids) == 0 or len(set(ids)) != len(ids):
                raise ValueError(f"target_layer_ids must be distinct and non-empty, got {ids}")
            if self.num_target_layers is not None:
                bad = [i for i in ids if not 0 <= i < self.num_target_layers]
                if bad:
                    raise ValueError(
                        f"target_layer_ids {bad} outside the target's layers 0..{self.num_target_layers - 1}"
                    )

    @property
    def is_resolved(self) -> bool:
        """True when every size is known, so a model can be built."""
        return None not in (
            self.hidden_size,
            self.intermediate_size,
            self.num_attention_heads,
            self.num_key_value_heads,
            self.head_dim,
            self.vocab_size,
            self.num_target_layers,
            self.target_layer_ids,
            self.mask_token_id,
        )

    def require_resolved(self) -> None:
        if not self.is_resolved:
            raise ValueError(
                "DFlashConfig has unset sizes: build it with DFlashConfig.for_target(...)"
            )

    @property
    def num_context_features(self) -> int:
        """Width of the concatenated target features: K * hidden_size."""
        self.require_resolved()
        return len(self.target_layer_ids) * self.hidden_size

    def loss_weights(self) -> list[float]:
        """w_k for block positions k = 1..B-1 (index 0 is k=1)."""
        return decay_weights(self.block_size, self.loss_decay_gamma)

    @classmethod
    def for_target(cls, target_config: Any, **overrides: Any) -> DFlashConfig:
        """A resolved config whose sizes come from a HF target config (Qwen3, Llama, ...).

        Args:
            target_config: the target's ``PretrainedConfig`` (``model.config``).
            **overrides: any DFlashConfig field (block_size, num_draft_layers, ...).
        """
        tc = target_config
        n_heads = tc.num_attention_heads
        head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // n_heads
        rope = getattr(tc, "rope_parameters", None) or {}
        rope_theta = rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0))
        vocab = tc.vocab_size
        num_draft_layers = overrides.get("num_draft_layers", cls.num_draft_layers)
        sizes: dict[str, Any] = {
            "hidden_size": tc.hidden_size,
            "intermediate_size": tc.intermediate_size,
            "num_attention_heads": n_heads,
            "num_key_value_heads": getattr(tc, "num_key_value_heads", None) or n_heads,
            "head_dim": head_dim,
            "rms_norm_eps": float(getattr(tc, "rms_norm_eps", 1e-6)),
            "rope_theta": float(rope_theta),
            "vocab_size": vocab,
            "num_target_layers": tc.num_hidden_layers,
            "max_position_embeddings": getattr(tc, "max_position_embeddings", 40960),
            "hidden_act": getattr(tc, "hidden_act", "silu"),
            "target_name": getattr(tc, "_name_or_path", "") or "",
        }
        if overrides.get("target_layer_ids") is None:
            sizes["target_layer_ids"] = default_target_layer_ids(
                tc.num_hidden_layers, num_draft_layers
            )
        if overrides.get("mask_token_id") is None:
            pad = getattr(tc, "pad_token_id", None)
            sizes["mask_token_id"] = pad if isinstance(pad, int) and 0 <= pad < vocab else vocab - 1
        sizes.update(
            {k: v for k, v in overrides.items() if v is not None or k == "loss_decay_gamma"}
        )
        return cls(**sizes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["target_layer_ids"] is not None:
            d["target_layer_ids"] = list(d["target_layer_ids"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DFlashConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown DFlashConfig fields: {unknown}")
        return cls(**d)

    def mismatches(self, other: DFlashConfig) -> list[str]:
        """Names of the fields (other than target_name) whose values differ."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.compare and getattr(self, f.name) != getattr(other, f.name)
        ]


def decay_weights(block_size: int, gamma: float | None) -> list[float]:
    """w_k = exp(-(k-1)/gamma) for k = 1..B-1; all ones when gamma is None."""
    if gamma is None:
        return [1.0] * (block_size - 1)
    return [math.exp(-(k - 1) / gamma) for k in range(1, block_size)]

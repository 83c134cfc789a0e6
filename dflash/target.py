"""TargetModel: the frozen Hugging Face causal LM the drafter learns from and drafts for."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn


@dataclass
class TargetOutput:
    """One target forward.

    logits: [N, T, V] (None when not asked for).
    features: [N, T, K*H], hidden states of the chosen layers concatenated along the last dim.
    cache: the HF KV cache after this forward (None when no cache was used).
    """

    logits: torch.Tensor | None
    features: torch.Tensor
    cache: object | None = None


@contextlib.contextmanager
def _quiet_load_report() -> Iterator[list[str]]:
    """Hold back what transformers logs while loading (its loading report): the training
    programs speak in one line each. Yields the held-back lines, ANSI codes removed."""
    import logging

    from transformers.utils import logging as hf_logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage())
            lines.extend(" ".join(line.split()) for line in text.splitlines())

    root = hf_logging.get_logger()  # transformers' root logger; its handler writes stderr
    keep, saved = Keep(), root.handlers[:]
    root.handlers = [keep]
    try:
        yield lines
    finally:
        root.handlers = saved


class TargetModel:
    """Wraps any HF ``AutoModelForCausalLM``; frozen, eval mode, every forward under no_grad.

    Args:
        model: a loaded causal LM (e.g. ``Qwen3ForCausalLM``, ``LlamaForCausalLM``).
        name: where it came from (path or hub id), recorded in drafter configs.
    """

    def __init__(self, model: nn.Module, name: str = "") -> None:
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.name = name or getattr(model.config, "_name_or_path", "") or ""

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
    ) -> TargetModel:
        """Loads a causal LM from a local directory (no network needed) or a hub id.

        Weights are read from safetensors files only: a pickle (``pytorch_model.bin``) can run
        code when loaded, so a target offering nothing else is refused.

        Raises:
            ValueError: when the model cannot be found or loaded (one line), or has no
                safetensors weights.
        """
        from safetensors import SafetensorError
        from transformers import AutoModelForCausalLM

        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        # A local directory never touches the network; anything else is a hub id.
        local = Path(str(path_or_id)).is_dir()
        if local and not any(Path(path_or_id).glob("*.safetensors")):
            pickles = sorted(
                f.name
                for pattern in ("*.bin", "*.pt", "*.pth", "*.ckpt")
                for f in Path(path_or_id).glob(pattern)
            )
            if pickles:
                raise ValueError(
                    f"target model {path_or_id!r} holds only pickle weights "
                    f"({', '.join(pickles[:3])}): safetensors only (a pickle can run "
                    "code when loaded); convert it to model.safetensors first"
                )
        try:
            with _quiet_load_report() as report:
                model = AutoModelForCausalLM.from_pretrained(
                    str(path_or_id), dtype=dtype, local_files_only=local, use_safetensors=True
                )
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as e:
            # transformers' own report (a table with ANSI codes) was held back: name its first
            # mismatching weight instead, on the one line.
            mismatch = next((line for line in report if "MISMATCH" in line), None)
            detail = (
                f"weights do not match config.json: {mismatch}"
                if mismatch
                else " ".join(str(e).split())
            )
            raise ValueError(f"cannot load target model {path_or_id!r}: {detail[:300]}") from e
        return cls(model.to(device), name=str(path_or_id))

    @staticmethod
    def read_config(path_or_id: str):
        """The HF config of a target, read without building the model (cheap: config.json).

        Raises:
            ValueError: no config, or one transformers cannot read (one line).
        """
        from transformers import AutoConfig

        local = Path(str(path_or_id)).is_dir()
        try:
            return AutoConfig.from_pretrained(str(path_or_id), local_files_only=local)
        except Exception as e:
            detail = " ".join(str(e).split())[:300]
            raise ValueError(
                f"cannot load target model {path_or_id!r}: its config: {detail}"
            ) from e

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def embed_tokens(self) -> nn.Module:
        """The frozen input embedding (shared with the drafter)."""
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> nn.Module:
        """The frozen output projection (shared with the drafter)."""
        return self.model.get_output_embeddings()

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        layer_ids: Sequence[int],
        attention_mask: torch.Tensor | None = None,
        *,
        logits: bool = True,
        cache: object | None = None,
        use_cache: bool = False,
        position_ids: torch.Tensor | None = None,
    ) -> TargetOutput:
        """One forward pass returning logits and the concatenated hidden states of ``layer_ids``.

        Layer id i means the output of decoder layer i, which is HF ``hidden_states[i + 1]``
        (index 0 is the embedding output).

        Args:
            input_ids: [N, T] token ids.
            layer_ids: target layers to read (DFlashConfig.target_layer_ids).
            attention_mask: [N, T], 1 on real tokens (right padding is fine: causal attention
                means real positions never see the padding after them).
            logits: False skips the lm_head (training needs only the features).
            cache: an HF cache to extend (incremental decoding); with use_cache=True a new one is
                created when None.
            position_ids: [N, T] explicit positions (defaults to continuing the cache).
        """
        use_cache = use_cache or cache is not None
        kwargs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "output_hidden_states": True,
            "use_cache": use_cache,
            "position_ids": position_ids,
        }
        if cache is not None:
            kwargs["cache"] = cache
        if logits:
            out = self.model(**kwargs)
            lg = out.logits
        else:
            out = self.model.get_decoder()(**kwargs)
            lg = None
        hs = out.hidden_states
        n = len(hs) - 1
        bad = [i for i in layer_ids if not 0 <= i < n]
        if bad:
            raise ValueError(f"target layer ids {bad} outside 0..{n - 1}")
        features = torch.cat([hs[i + 1] for i in layer_ids], dim=-1)
        return TargetOutput(
            logits=lg, features=features, cache=getattr(out, "cache", None) if use_cache else None
        )

    __call__ = forward

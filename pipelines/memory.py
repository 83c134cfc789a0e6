"""How much memory a training config needs, estimated before the drafter is built.

A token budget of 300k tokens on the bundled target asks for far more memory than a laptop has;
without a check the machine swaps or the kernel kills the run without a word. The estimate is a
closed formula over the model sizes, the token budget, the data's lengths, the vocabulary and the
dtype; the run is refused (one line with the estimate and the memory available) when it exceeds
what the device has free, unless ``check_memory = false``.

Notation: budget ``n`` tokens per micro-batch, data of mean length ``T`` (padding included: a
batch holds about ``R = n / T`` rows), ``A`` blocks per sequence (``num_anchors``, capped by the
mean number of valid anchors), ``M = R * A`` blocks, block size ``B``, drafter width ``H``, MLP
width ``I``, ``h`` query and ``g`` key/value heads of size ``d``, ``L`` draft layers reading ``K``
target layers; the target has ``Lt`` layers, ``ht`` heads, width ``Ht``, MLP ``It`` and stores
``st`` bytes per value (the drafter's activations are float32, 4 bytes; under autocast some
are smaller, which the estimate ignores: it errs high). Per micro-batch in flight:

* target forward (no grad, the hidden states of every layer kept by HF's output_hidden_states):
  ``st * n * ((Lt + 1) * Ht + K * Ht + 3 * It + ht * T)``;
* drafter context (fc, norm, per-layer keys/values): ``4 * n * (K * H + 2 * H + 6 * L * g * d)``;
* drafter attention, per layer. Per-block layout (the CPU default: each block gets its own copy
  of its sequence's context): ``4 * M * (T + B) * (4 * g * d + 2 * h * d [h != g] + 2 * h * B + B)``.
  Per-sequence layout (the CUDA default: all ``S = A * B`` block positions of a sequence in one row
  against one context): ``4 * R * (T + S) * ((4 * g * d + 2 * h * d [h != g]) + S * (2 * h + 1))``;
* drafter block activations: ``4 * M * B * L * (8 * H + 4 * I)``;
* logits (lm_head, log-softmax, gradient): ``12 * min(M * (B - 1) * V, logits_budget)``;

(the coefficients count what forward saves for backward and the gradients backward adds),
plus the drafter's weights, gradients and AdamW moments (16 bytes a parameter) and,
in the pipeline, the target features waiting in the channels (``st * n * K * Ht`` per queued
micro-batch). The target's own weights are already loaded when the check runs, so they are
counted in what is available, not in the estimate. Calibrated against measured peaks on the
bundled target (``benchmarks/bench_memory_estimate.py``; figures in docs/reliability.md): the
measured peak is about 0.8x the estimate from 1k to 32k tokens and 2 to 8 anchors, so the
check errs on the safe side by about a quarter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dflash import DFlashConfig
from dflash.objective import DEFAULT_LOGITS_BUDGET

from .errors import TrainingError

GIB = 1024**3


@dataclass(frozen=True)
class DataShape:
    """What the estimate needs to know of the data: lengths in tokens."""

    mean_length: float
    """Mean example length (prompt + response)."""
    mean_anchors: float
    """Mean number of valid anchor positions per example (response length - B + 1, >= 0)."""


@dataclass(frozen=True)
class TargetShape:
    """The target's sizes (from its HF config) and bytes per value."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    dtype_bytes: int


@dataclass
class MemoryEstimate:
    """Bytes a run needs, per device (the drafter's device and each target worker's)."""

    by_device: dict[str, int] = field(default_factory=dict)
    parts: dict[str, int] = field(default_factory=dict)
    """Named terms (bytes), for the docs and the message."""

    def add(self, device: str, part: str, nbytes: float) -> None:
        key = _device_key(device)
        self.by_device[key] = self.by_device.get(key, 0) + int(nbytes)
        self.parts[part] = self.parts.get(part, 0) + int(nbytes)

    @property
    def total(self) -> int:
        return sum(self.by_device.values())


def _device_key(device: str) -> str:
    """CPU devices share the host's memory; "cuda" means cuda:0."""
    if device.startswith("cpu"):
        return "cpu"
    return "cuda:0" if device == "cuda" else device


def data_shape(lengths: list[int], response_starts: list[int], block_size: int) -> DataShape:
    """Mean length and mean valid anchors of a dataset (see :class:`DataShape`)."""
    n = max(1, len(lengths))
    anchors = [
        max(0, (t - s) - block_size + 1) for t, s in zip(lengths, response_starts, strict=True)
    ]
    return DataShape(mean_length=sum(lengths) / n, mean_anchors=sum(anchors) / n)


def estimate_training_memory(
    dcfg: DFlashConfig,
    target: TargetShape,
    data: DataShape,
    token_budget: int,
    *,
    device: str = "cpu",
    target_devices: list[str] | None = None,
    queued_batches: int = 0,
    drafter_params: int | None = None,
    logits_budget: int = DEFAULT_LOGITS_BUDGET,
) -> MemoryEstimate:
    """The formula of the module docstring, by device.

    Args:
        dcfg: the drafter's resolved config.
        target: the target's sizes.
        data: the data's lengths.
        token_budget: tokens per micro-batch.
        device: the drafter's device.
        target_devices: one entry per target worker (default: one on ``device``).
        queued_batches: micro-batches whose features wait in channels (pipeline read-ahead).
        drafter_params: parameter count (default: computed from the config's sizes).
    """
    dcfg.require_resolved()
    est = MemoryEstimate()
    n = float(token_budget)
    T = max(1.0, min(data.mean_length, n))
    B, H, inter = dcfg.block_size, dcfg.hidden_size, dcfg.intermediate_size
    h, g, d = dcfg.num_attention_heads, dcfg.num_key_value_heads, dcfg.head_dim
    L, K, V = dcfg.num_draft_layers, len(dcfg.target_layer_ids), dcfg.vocab_size
    st = target.dtype_bytes
    A = min(float(dcfg.num_anchors), data.mean_anchors)
    M = n / T * A

    for dev in target_devices or [device]:
        est.add(
            dev,
            "target forward",
            st
            * n
            * (
                (target.num_layers + 1) * target.hidden_size
                + K * target.hidden_size
                + 3 * target.intermediate_size
                + target.num_heads * T
            ),
        )
    est.add(device, "drafter context", 4 * n * (K * H + 2 * H + 6 * L * g * d))
    gqa = 2 * h * d if h != g else 0
    if _device_key(device) == "cpu":  # dflash.objective's "auto" layout: per_block on the CPU
        attention = 4 * L * M * (T + B) * (4 * g * d + gqa + 2 * h * B + B)
    else:  # per_sequence elsewhere
        S = A * B
        attention = 4 * L * (n / T) * (T + S) * ((4 * g * d + gqa) + S * (2 * h + 1))
    est.add(device, "drafter attention", attention)
    est.add(device, "drafter blocks", 4 * M * B * L * (8 * H + 4 * inter))
    est.add(device, "logits", 12 * min(M * (B - 1) * V, float(logits_budget)))
    if drafter_params is None:
        per_layer = H * (h * d + 2 * g * d) + h * d * H + 3 * H * inter
        drafter_params = K * H * H + L * per_layer
    est.add(device, "drafter weights and AdamW", 16 * drafter_params)
    if queued_batches:
        est.add(device, "queued features", queued_batches * st * n * K * target.hidden_size)
    return est


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> int | None:
    """What the cgroup (v2) memory limit leaves, when one is set."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def available_memory(device: str) -> int | None:
    """Bytes free for this run on ``device`` (None when it cannot be known).

    CPU: the kernel's MemAvailable, capped by a cgroup limit. CUDA: free memory of the device.
    """
    if _device_key(device) == "cpu":
        known = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
        if not known and hasattr(os, "sysconf"):
            try:
                known = [os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
            except (ValueError, OSError):
                known = []
        return min(known) if known else None
    try:
        import torch

        if torch.device(device).type == "cuda" and torch.cuda.is_available():
            return int(torch.cuda.mem_get_info(torch.device(_device_key(device)))[0])
    except (RuntimeError, ValueError):
        return None
    return None


def check_fits(
    est: MemoryEstimate, token_budget: int, available: dict[str, int | None] | None = None
) -> None:
    """Refuse a run whose estimate exceeds the free memory of any of its devices.

    Args:
        est: the estimate.
        token_budget: for the message.
        available: bytes free per device key (default: measured by :func:`available_memory`).

    Raises:
        TrainingError: one line with the estimate, the memory available and what to do.
    """
    for dev, need in est.by_device.items():
        free = (available or {}).get(dev) if available is not None else available_memory(dev)
        if free is None or need <= free:
            continue
        top = max(est.parts, key=est.parts.get)
        raise TrainingError(
            f"token_budget {token_budget} needs about {need / GIB:.1f} GiB on {dev} (estimate; "
            f"largest term: {top} {est.parts[top] / GIB:.1f} GiB) but {free / GIB:.1f} GiB is "
            f"available: lower token_budget or num_anchors, or set check_memory = false to try "
            f"anyway"
        )


def target_weight_bytes(config, dtype_bytes: int) -> int:
    """Bytes of a decoder-only target's weights, from the sizes its HF config declares.

    Embeddings ``V * Ht`` (twice when the lm_head is not tied), and per layer the attention
    projections ``Ht * (ht + 2 * gt) * d + ht * d * Ht`` and a gated MLP ``3 * Ht * It``
    (norms and biases are negligible). A mixture of experts holds more: this is a lower bound,
    which is what a refusal needs.

    Raises:
        ValueError: a size that is missing, not an integer or below 1.
    """

    def size(name: str, default: int | None = None) -> int:
        v = getattr(config, name, None)
        v = default if v is None else v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        return v

    H, V, L = size("hidden_size"), size("vocab_size"), size("num_hidden_layers")
    inter = size("intermediate_size", 4 * H)
    heads = size("num_attention_heads")
    kv = size("num_key_value_heads", heads)
    d = size("head_dim", max(1, H // heads))
    tied = bool(getattr(config, "tie_word_embeddings", True))
    per_layer = H * (heads + 2 * kv) * d + heads * d * H + 3 * H * inter
    return dtype_bytes * (V * H * (1 if tied else 2) + L * per_layer)


def check_target_fits(
    name: str,
    config,
    dtype_bytes: int,
    devices: list[str],
    available: dict[str, int | None] | None = None,
) -> None:
    """Refuse a target whose declared size cannot fit, before anything is built: a config.json
    declaring 10^6 layers would otherwise be built layer by layer for many minutes (ignoring
    signals) and 10^9 vocabulary entries fail only after a page of loading report.

    Args:
        name: the target as given (for the message).
        config: its HF config (read, not built).
        dtype_bytes: bytes per weight.
        devices: one entry per copy of the target (the drafter's device and each worker's).
        available: bytes free per device key (default: measured by :func:`available_memory`).

    Raises:
        TrainingError: one line with the declared sizes, the estimate and the memory free.
    """
    try:
        need = target_weight_bytes(config, dtype_bytes)
    except ValueError as e:
        raise TrainingError(f"target {name}: config.json: {e}") from None
    copies: dict[str, int] = {}
    for dev in devices:
        copies[_device_key(dev)] = copies.get(_device_key(dev), 0) + 1
    for dev, n in copies.items():
        free = (available or {}).get(dev) if available is not None else available_memory(dev)
        if free is None or need * n <= free:
            continue
        sizes = ", ".join(
            f"{k} {getattr(config, k, None):,}"
            for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")
            if isinstance(getattr(config, k, None), int)
        )
        raise TrainingError(
            f"target {name} declares {sizes}: about {need * n / GIB:,.1f} GiB of weights on {dev} "
            f"(estimate{f', {n} copies' if n > 1 else ''}) but {free / GIB:.1f} GiB is available: "
            f"check the target's config.json, or set check_memory = false to try anyway"
        )


def estimate_for_run(cfg, dcfg: DFlashConfig, target_config, dataset) -> MemoryEstimate:
    """The estimate of a training config (``TrainConfig`` or ``PipelineConfig``), its drafter
    config, the loaded target's HF config and the dataset."""
    import torch

    shape = TargetShape(
        hidden_size=target_config.hidden_size,
        intermediate_size=target_config.intermediate_size,
        num_layers=target_config.num_hidden_layers,
        num_heads=target_config.num_attention_heads,
        dtype_bytes=torch.empty(0, dtype=getattr(torch, cfg.dtype)).element_size(),
    )
    starts = dataset.response_starts.tolist()
    workers = list(getattr(cfg, "target_devices", None) or [cfg.device])
    queued = (cfg.channel_capacity + 2 * len(workers)) if hasattr(cfg, "channel_capacity") else 0
    return estimate_training_memory(
        dcfg,
        shape,
        data_shape(dataset.lengths, starts, dcfg.block_size),
        cfg.token_budget,
        device=cfg.device,
        target_devices=workers,
        queued_batches=queued,
    )

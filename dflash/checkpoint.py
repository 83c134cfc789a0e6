"""Atomic, pickle-free checkpoints of a drafter and its training state.

A checkpoint is a directory:

    model.safetensors      the drafter's own weights (never the target's embedding or lm_head)
    config.json            {"format": 1, "dflash_config": {...}, "target": {...}}
    optimizer.safetensors  optimizer tensors (state.<param index>.<name>); param groups and
                           non-tensor state as JSON in the file's metadata   (optional)
    rng.safetensors        RNG states as uint8 tensors                       (optional)
    state.json             step, data cursor, schedule, anything JSON: WRITTEN LAST

Every save writes a temporary directory next to the destination and renames it into place, so a
kill leaves either the old checkpoint or the new one, never half of one. ``state.json`` is the
completion marker: a directory without it is torn and never loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, safe_open, save_file
from torch import nn

from .config import DFlashConfig
from .model import DFlashDraftModel, unwrap_drafter

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
STATE_FILE = "state.json"  # the completion marker


@dataclass
class LoadedCheckpoint:
    """What :func:`load_checkpoint` read: the saved config, the JSON state and the RNG tensors."""

    path: Path
    config: DFlashConfig
    state: dict[str, Any]
    rng: dict[str, torch.Tensor]
    target: dict[str, Any]


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, allow_nan=True)
        f.flush()
        os.fsync(f.fileno())


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Flattens ``optimizer.state_dict()`` into safetensors keys plus JSON metadata."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, pstate in sd["state"].items():
        for name, value in pstate.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    meta = {"param_groups": json.dumps(sd["param_groups"]), "scalars": json.dumps(scalars)}
    return tensors, meta


def _optimizer_state_dict(path: Path, device: torch.device | str) -> dict[str, Any]:
    """Inverse of :func:`_optimizer_tensors`."""
    with safe_open(str(path), framework="pt", device=str(device)) as f:
        meta = f.metadata() or {}
        state: dict[int, dict[str, Any]] = {}
        for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = f.get_tensor(key)
    for idx, values in json.loads(meta.get("scalars", "{}")).items():
        state.setdefault(int(idx), {}).update(values)
    return {"state": state, "param_groups": json.loads(meta["param_groups"])}


def capture_rng(generators: Mapping[str, torch.Generator] | None = None) -> dict[str, torch.Tensor]:
    """RNG states worth checkpointing: torch's global CPU (and CUDA) generators plus named ones."""
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            rng[f"cuda.{i}"] = torch.cuda.get_rng_state(i)
    for name, g in (generators or {}).items():
        rng[f"gen.{name}"] = g.get_state()
    return rng


def restore_rng(rng: Mapping[str, torch.Tensor],
                generators: Mapping[str, torch.Generator] | None = None) -> None:
    """Puts back what :func:`capture_rng` saved (missing entries are left alone)."""
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    for key, value in rng.items():
        if key.startswith("cuda.") and torch.cuda.is_available():
            i = int(key.split(".", 1)[1])
            if i < torch.cuda.device_count():
                torch.cuda.set_rng_state(value, i)
    for name, g in (generators or {}).items():
        if f"gen.{name}" in rng:
            g.set_state(rng[f"gen.{name}"])


def save_checkpoint(path: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    state: Mapping[str, Any] | None = None,
                    rng: Mapping[str, torch.Tensor] | None = None,
                    target: Mapping[str, Any] | None = None) -> Path:
    """Writes a checkpoint atomically (temporary directory, then rename into place).

    Args:
        path: destination directory (replaced if it exists).
        model: the drafter (DDP-wrapped is fine).
        optimizer: saved when given (any torch optimizer whose state is tensors and JSON values).
        state: JSON-serialisable training state: step, data cursor, schedule, ...
        rng: RNG state tensors (see :func:`capture_rng`).
        target: identity of the target (e.g. {"name": ...}); defaults to the config's target_name.
    Returns:
        The checkpoint path.
    """
    drafter = unwrap_drafter(model)
    cfg: DFlashConfig = drafter.config
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        weights = {k: v.detach().cpu().contiguous() for k, v in drafter.state_dict().items()}
        save_file(weights, str(tmp / MODEL_FILE), metadata={"format": "pt"})
        _fsync_file(tmp / MODEL_FILE)
        _write_json(tmp / CONFIG_FILE, {
            "format": FORMAT_VERSION,
            "dflash_config": cfg.to_dict(),
            "target": dict(target) if target is not None else {"name": cfg.target_name},
        })
        if optimizer is not None:
            tensors, meta = _optimizer_tensors(optimizer)
            save_file(tensors, str(tmp / OPTIMIZER_FILE), metadata=meta)
            _fsync_file(tmp / OPTIMIZER_FILE)
        if rng:
            save_file({k: v.detach().cpu().contiguous() for k, v in rng.items()},
                      str(tmp / RNG_FILE))
            _fsync_file(tmp / RNG_FILE)
        # Last: its presence says every other file is complete.
        _write_json(tmp / STATE_FILE, {"format": FORMAT_VERSION, **dict(state or {})})
        if dest.exists():
            # os.replace cannot replace a non-empty directory: move the old one aside first.
            old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def is_complete_checkpoint(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a finished checkpoint (weights, config and the state marker)."""
    p = Path(path)
    return all((p / f).is_file() for f in (MODEL_FILE, CONFIG_FILE, STATE_FILE))


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The complete checkpoint under ``root`` (or ``root`` itself) with the highest step."""
    root = Path(root)
    if is_complete_checkpoint(root):
        return root
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for child in root.iterdir():
        if child.name.startswith(".") or not is_complete_checkpoint(child):
            continue
        try:
            step = int(json.loads((child / STATE_FILE).read_text()).get("step", -1))
        except (ValueError, OSError):
            continue
        if best is None or step > best[0]:
            best = (step, child)
    return best[1] if best else None


def read_checkpoint_config(path: str | os.PathLike) -> tuple[DFlashConfig, dict[str, Any]]:
    """(DFlashConfig, target identity) of a complete checkpoint.

    Raises:
        ValueError: torn or missing checkpoint, unknown format.
    """
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"no checkpoint at {p}")
    if not is_complete_checkpoint(p):
        raise ValueError(f"incomplete checkpoint at {p} (no {STATE_FILE}: the save was interrupted)")
    meta = json.loads((p / CONFIG_FILE).read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"checkpoint {p} has format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    return DFlashConfig.from_dict(meta["dflash_config"]), meta.get("target", {})


def load_checkpoint(path: str | os.PathLike, model: nn.Module | None = None,
                    optimizer: torch.optim.Optimizer | None = None,
                    map_location: torch.device | str = "cpu") -> LoadedCheckpoint:
    """Loads a checkpoint into ``model`` (and ``optimizer``) in place.

    Args:
        path: a checkpoint directory.
        model: the drafter to fill (DDP-wrapped is fine); its config must equal the saved one.
        optimizer: filled from optimizer.safetensors when given.
        map_location: device for the optimizer and RNG tensors.
    Returns:
        LoadedCheckpoint with the saved config, JSON state and RNG tensors
        (apply the latter with :func:`restore_rng`).
    Raises:
        ValueError: torn checkpoint, config mismatch (naming the fields), missing optimizer state.
    """
    p = Path(path)
    cfg, target = read_checkpoint_config(p)
    if model is not None:
        drafter = unwrap_drafter(model)
        diff = drafter.config.mismatches(cfg)
        if diff:
            detail = ", ".join(f"{f}: checkpoint {getattr(cfg, f)!r} vs model {getattr(drafter.config, f)!r}"
                               for f in diff)
            raise ValueError(f"checkpoint {p} does not match the model config ({detail})")
        weights = load_file(str(p / MODEL_FILE), device="cpu")
        drafter.load_state_dict(weights, strict=True)
    if optimizer is not None:
        if not (p / OPTIMIZER_FILE).is_file():
            raise ValueError(f"checkpoint {p} has no optimizer state")
        sd = _optimizer_state_dict(p / OPTIMIZER_FILE, map_location)
        # JSON has no tuples: give back the tuple-valued hyper-parameters (AdamW's betas) their type.
        for saved, live in zip(sd["param_groups"], optimizer.param_groups):
            for key, value in live.items():
                if isinstance(value, tuple) and isinstance(saved.get(key), list):
                    saved[key] = tuple(saved[key])
        optimizer.load_state_dict(sd)
    rng = load_file(str(p / RNG_FILE), device="cpu") if (p / RNG_FILE).is_file() else {}
    state = json.loads((p / STATE_FILE).read_text())
    state.pop("format", None)
    return LoadedCheckpoint(path=p, config=cfg, state=state, rng=rng, target=target)


def load_drafter(path: str | os.PathLike, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None) -> DFlashDraftModel:
    """A drafter built from a checkpoint's own config, with its weights (for evaluation)."""
    cfg, _ = read_checkpoint_config(path)
    model = DFlashDraftModel(cfg)
    load_checkpoint(path, model)
    model = model.to(device)
    return model.to(dtype) if dtype is not None else model

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
completion marker: a directory without it is torn and never loaded. Replacing an existing
checkpoint moves the old one aside (``.NAME.old-*``) for the instant between two renames; a kill in
that instant leaves the old one there, and :func:`clean_checkpoint_leftovers` (run by the training
programs at start) puts it back and removes the temporary directories of interrupted saves.

Reading is defensive: every file is checked (JSON shape, safetensors header, tensor names and
shapes), and anything wrong raises :class:`CheckpointError`, one line naming the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
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


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing, torn, damaged or malformed (one line).

    Attributes:
        path: the checkpoint directory.
        file: the file at fault (None when the directory itself is).
    """

    def __init__(self, path: str | os.PathLike, message: str, file: str | None = None) -> None:
        where = f"{Path(path) / file}" if file else f"{path}"
        super().__init__(" ".join(f"{where}: {message}".split()))
        self.path = Path(path)
        self.file = file


def _short(error: BaseException, limit: int = 200) -> str:
    """An exception's text on one line, cut to ``limit`` characters (torch's are paragraphs)."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _damaged(path: Path, file: str, error: BaseException) -> CheckpointError:
    """The error for a file that exists but cannot be parsed (torn copy, disk error, tampering)."""
    detail = _short(error)
    return CheckpointError(
        path,
        f"damaged or not a checkpoint file ({type(error).__name__}: "
        f"{detail}); use another checkpoint",
        file,
    )


def read_json_object(path: Path, file: str) -> dict[str, Any]:
    """``path / file`` parsed as a JSON object.

    Raises:
        CheckpointError: unreadable file, invalid JSON, or JSON that is not an object.
    """
    try:
        obj = json.loads((path / file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _damaged(path, file, e) from None
    if not isinstance(obj, dict):
        raise CheckpointError(
            path,
            f"must hold a JSON object, found {type(obj).__name__}; use another checkpoint",
            file,
        )
    return obj


def _load_tensors(path: Path, file: str) -> dict[str, torch.Tensor]:
    """A safetensors file of the checkpoint, on the CPU (a damaged file raises CheckpointError)."""
    try:
        return load_file(str(path / file), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise _damaged(path, file, e) from None


@dataclass
class LoadedCheckpoint:
    """What :func:`load_checkpoint` read: the saved config, the JSON state and the RNG tensors."""

    path: Path
    config: DFlashConfig
    state: dict[str, Any]
    rng: dict[str, torch.Tensor]
    target: dict[str, Any]


def _save_tensors(
    tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None
) -> None:
    """save_file, with its I/O failures (a full disk) raised as OSError like every other write."""
    try:
        save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as e:
        raise OSError(f"cannot write {path}: {' '.join(str(e).split())}") from None
    _fsync_file(path)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, allow_nan=True)
        f.flush()
        os.fsync(f.fileno())


def _optimizer_tensors(
    optimizer: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
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
    """Inverse of :func:`_optimizer_tensors`.

    Raises:
        CheckpointError: a damaged file, or names and metadata of another layout.
    """
    try:
        with safe_open(str(path / OPTIMIZER_FILE), framework="pt", device=str(device)) as f:
            meta = f.metadata() or {}
            state: dict[int, dict[str, Any]] = {}
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                _, idx, name = key.split(".", 2)
                state.setdefault(int(idx), {})[name] = f.get_tensor(key)
        scalars = json.loads(meta.get("scalars", "{}"))
        groups = json.loads(meta["param_groups"])
        if (
            not isinstance(scalars, dict)
            or not isinstance(groups, list)
            or not all(isinstance(g, dict) for g in groups)
        ):
            raise ValueError("metadata 'scalars'/'param_groups' of the wrong JSON type")
        for idx, values in scalars.items():
            if not isinstance(values, dict):
                raise ValueError(f"metadata scalars of parameter {idx} are not an object")  # noqa: TRY004
            state.setdefault(int(idx), {}).update(values)
    except (SafetensorError, OSError, ValueError, KeyError, RuntimeError, RecursionError) as e:
        raise _damaged(path, OPTIMIZER_FILE, e) from None
    return {"state": state, "param_groups": groups}


def capture_rng(generators: Mapping[str, torch.Generator] | None = None) -> dict[str, torch.Tensor]:
    """RNG states worth checkpointing: torch's global CPU (and CUDA) generators plus named ones."""
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            rng[f"cuda.{i}"] = torch.cuda.get_rng_state(i)
    for name, g in (generators or {}).items():
        rng[f"gen.{name}"] = g.get_state()
    return rng


def restore_rng(
    rng: Mapping[str, torch.Tensor], generators: Mapping[str, torch.Generator] | None = None
) -> None:
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


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    state: Mapping[str, Any] | None = None,
    rng: Mapping[str, torch.Tensor] | None = None,
    target: Mapping[str, Any] | None = None,
) -> Path:
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
        _save_tensors(weights, tmp / MODEL_FILE, metadata={"format": "pt"})
        _write_json(
            tmp / CONFIG_FILE,
            {
                "format": FORMAT_VERSION,
                "dflash_config": cfg.to_dict(),
                "target": dict(target) if target is not None else {"name": cfg.target_name},
            },
        )
        if optimizer is not None:
            tensors, meta = _optimizer_tensors(optimizer)
            _save_tensors(tensors, tmp / OPTIMIZER_FILE, metadata=meta)
        if rng:
            _save_tensors(
                {k: v.detach().cpu().contiguous() for k, v in rng.items()}, tmp / RNG_FILE
            )
        # Last: its presence says every other file is complete.
        _write_json(tmp / STATE_FILE, {"format": FORMAT_VERSION, **dict(state or {})})
        if dest.exists():
            # os.replace cannot replace a non-empty directory: move the old one aside first. A kill
            # between these two renames leaves it there; clean_checkpoint_leftovers puts it back.
            old = dest.parent / f".{dest.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-[0-9a-f]+$")


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (then its save may be in progress)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


@dataclass
class Leftovers:
    """What :func:`clean_checkpoint_leftovers` did in one directory."""

    removed: list[Path] = field(default_factory=list)
    """Temporary directories of interrupted saves, and superseded old copies, deleted."""
    restored: list[Path] = field(default_factory=list)
    """Checkpoints put back from their ``.NAME.old-*`` copy (a kill hit an overwrite)."""

    def __bool__(self) -> bool:
        return bool(self.removed or self.restored)

    def summary(self, root: str | os.PathLike) -> str:
        """One line for the user."""
        parts = []
        if self.removed:
            parts.append(
                f"removed {len(self.removed)} leftover temporary checkpoint "
                f"director{'y' if len(self.removed) == 1 else 'ies'} of interrupted saves"
            )
        if self.restored:
            names = ", ".join(p.name for p in self.restored)
            parts.append(f"restored {names} (its overwrite was interrupted)")
        return f"{root}: " + "; ".join(parts)


def clean_checkpoint_leftovers(root: str | os.PathLike) -> Leftovers:
    """Tidy what killed saves left in ``root`` (a directory of checkpoints).

    * ``.NAME.tmp-PID-*``: a save killed before its rename; never a checkpoint: deleted.
    * ``.NAME.old-PID-*``: the previous ``NAME`` moved aside by an overwrite. When ``NAME`` is
      missing or incomplete (the kill came between the two renames) it is renamed back, so the
      old checkpoint is loadable again; otherwise it is deleted.

    Entries of a process still running on this machine (a save in progress) are left alone.
    A missing ``root`` is fine (nothing to do). Errors deleting are ignored (tried next start).
    """
    done = Leftovers()
    root = Path(root)
    try:
        entries = sorted(root.iterdir()) if root.is_dir() else []
    except OSError:
        return done
    for entry in entries:
        m = _LEFTOVER.match(entry.name)
        if m is None or not entry.is_dir() or entry.is_symlink() or _pid_alive(int(m["pid"])):
            continue
        dest = root / m["name"]
        if (
            m["kind"] == "old"
            and is_complete_checkpoint(entry)
            and not is_complete_checkpoint(dest)
        ):
            try:
                if dest.exists():  # half of something under the final name: never loadable
                    shutil.rmtree(dest)
                os.replace(entry, dest)
            except OSError:
                continue
            done.restored.append(dest)
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            done.removed.append(entry)
    return done


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
        except (ValueError, OSError, AttributeError, TypeError, RecursionError):
            continue
        if best is None or step > best[0]:
            best = (step, child)
    return best[1] if best else None


def read_checkpoint_config(path: str | os.PathLike) -> tuple[DFlashConfig, dict[str, Any]]:
    """(DFlashConfig, target identity) of a complete checkpoint.

    Raises:
        CheckpointError: (a ValueError) torn or missing checkpoint, damaged or malformed
            config.json, unknown format; one line naming the file.
    """
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(p, "no checkpoint directory there")
    if not is_complete_checkpoint(p):
        missing = [f for f in (MODEL_FILE, CONFIG_FILE, STATE_FILE) if not (p / f).is_file()]
        raise CheckpointError(
            p,
            f"incomplete checkpoint (no {', '.join(missing)}: the save was "
            "interrupted or this is not a checkpoint); use another one",
        )
    meta = read_json_object(p, CONFIG_FILE)
    fmt = meta.get("format")
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise CheckpointError(
            p,
            f"format is {fmt!r}, expected {FORMAT_VERSION} (written by another version, or edited)",
            CONFIG_FILE,
        )
    dcfg, target = meta.get("dflash_config"), meta.get("target", {})
    if not isinstance(dcfg, dict):
        raise CheckpointError(
            p, f"'dflash_config' must be an object, got {dcfg!r:.60}", CONFIG_FILE
        )
    if not isinstance(target, dict):
        raise CheckpointError(p, f"'target' must be an object, got {target!r:.60}", CONFIG_FILE)
    try:
        cfg = DFlashConfig.from_dict(dcfg)
    except (TypeError, ValueError) as e:
        raise CheckpointError(p, f"bad 'dflash_config': {e}", CONFIG_FILE) from None
    if not cfg.is_resolved:
        raise CheckpointError(p, "'dflash_config' lacks the target's sizes", CONFIG_FILE)
    return cfg, target


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    map_location: torch.device | str = "cpu",
) -> LoadedCheckpoint:
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
        CheckpointError: (a ValueError) torn or damaged checkpoint, config mismatch (naming
            the fields), missing optimizer state; one line naming the file.
    """
    p = Path(path)
    cfg, target = read_checkpoint_config(p)
    if model is not None:
        drafter = unwrap_drafter(model)
        diff = drafter.config.mismatches(cfg)
        if diff:
            detail = ", ".join(
                f"{f}: checkpoint {getattr(cfg, f)!r} vs model {getattr(drafter.config, f)!r}"
                for f in diff
            )
            raise CheckpointError(p, f"does not match the model config ({detail})", CONFIG_FILE)
        weights = _load_tensors(p, MODEL_FILE)
        try:
            drafter.load_state_dict(weights, strict=True)
        except RuntimeError as e:  # missing, unexpected or misshapen tensors
            raise CheckpointError(
                p,
                f"does not hold this drafter's weights ({_short(e)}); use another checkpoint",
                MODEL_FILE,
            ) from None
    if optimizer is not None:
        if not (p / OPTIMIZER_FILE).is_file():
            raise CheckpointError(p, f"checkpoint has no optimizer state ({OPTIMIZER_FILE})")
        sd = _optimizer_state_dict(p, map_location)
        # JSON has no tuples: give back the tuple-valued hyper-parameters (AdamW's betas) their type.
        # Not strict: a different number of groups is load_state_dict's to report (below, as a
        # CheckpointError), not a traceback here.
        for saved, live in zip(sd["param_groups"], optimizer.param_groups, strict=False):
            for key, value in live.items():
                if isinstance(value, tuple) and isinstance(saved.get(key), list):
                    saved[key] = tuple(saved[key])
        params = [q for group in optimizer.param_groups for q in group["params"]]
        for idx, values in sd["state"].items():
            if not 0 <= idx < len(params):
                raise CheckpointError(
                    p,
                    f"holds state of parameter {idx}, the optimizer has {len(params)}",
                    OPTIMIZER_FILE,
                )
            for name, t in values.items():
                if isinstance(t, torch.Tensor) and t.dim() and t.shape != params[idx].shape:
                    raise CheckpointError(
                        p,
                        f"{name} of parameter {idx} has shape "
                        f"{tuple(t.shape)}, expected "
                        f"{tuple(params[idx].shape)}",
                        OPTIMIZER_FILE,
                    )
        try:
            optimizer.load_state_dict(sd)
        except (ValueError, KeyError, TypeError, RuntimeError) as e:
            raise CheckpointError(
                p,
                f"does not fit this optimizer ({_short(e)}); use another checkpoint",
                OPTIMIZER_FILE,
            ) from None
    rng = _load_tensors(p, RNG_FILE) if (p / RNG_FILE).is_file() else {}
    state = read_json_object(p, STATE_FILE)
    fmt = state.pop("format", FORMAT_VERSION)
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise CheckpointError(p, f"format is {fmt!r}, expected {FORMAT_VERSION}", STATE_FILE)
    return LoadedCheckpoint(path=p, config=cfg, state=state, rng=rng, target=target)


def load_drafter(
    path: str | os.PathLike, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> DFlashDraftModel:
    """A drafter built from a checkpoint's own config, with its weights (for evaluation)."""
    cfg, _ = read_checkpoint_config(path)
    model = DFlashDraftModel(cfg)
    load_checkpoint(path, model)
    model = model.to(device)
    return model.to(dtype) if dtype is not None else model

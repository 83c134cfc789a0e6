"""Typed configuration of the training programs: defaults < TOML file (``--config``) < flags.

Every field is validated in ``__post_init__`` (ValueError with a one-line message), so a bad
config or flag is reported before any model is loaded. The defaults run on a laptop CPU with the
bundled tiny target; a GPU run changes ``target``, ``device``, ``target_devices`` and the budget.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dflash_diag import logschema

from .schedule import KINDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project runs on 3.11; 3.10 needs the tomli backport
    import tomli as tomllib

#: Keyword meaning "the bundled tiny target / dataset" (resolved by dflash.data's defaults).
BUNDLED = "bundled"

#: Seeds are in [0, 2**32): the data order and anchor generators derive 64-bit torch seeds from
#: the seed (seed * 1_000_003 * 1_009 + ...), which must not overflow.
SEED_LIMIT = 2**32


#: CPU-sized drafter: one layer, the paper's block of 16, and 8 anchors per sequence (the bundled
#: data has 80-token responses; the paper's 512 anchors per multi-thousand-token sequence is a
#: similar density). Real targets: num_draft_layers 5, num_anchors 512.
CPU_DRAFTER: dict[str, Any] = {"block_size": 16, "num_draft_layers": 1, "num_anchors": 8}

#: Shapes of the lr decay (``schedule``) and what a resume does with the schedule (the log
#: header's ``resume_schedule``).
SCHEDULE_KINDS = KINDS
RESUME_SCHEDULE_MODES = logschema.RESUME_SCHEDULE_MODES
#: Where the walk's held-out sequences come from (``walk_source``).
WALK_SOURCES = logschema.WALK_HELD_OUT_SOURCES
#: How the eval-prompt file is split between the eval and the walk (``eval_split``).
EVAL_SPLITS = ("first", "seeded")


def default_of(cls: type, name: str) -> Any:
    """The default of config field ``name`` of ``cls`` (``drafter.X``: of the [drafter] table),
    the one place defaults are defined: the CLI's help shows these."""
    if name.startswith("drafter."):
        return CPU_DRAFTER.get(name.split(".", 1)[1])
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None:
        raise KeyError(f"{cls.__name__} has no field {name!r}")
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return f.default


@dataclass
class TrainConfig:
    """Settings shared by ``dflash-train sync`` and ``dflash-train pipeline``."""

    target: str = BUNDLED
    """Target model: a local HF directory or hub id; "bundled" = pipelines/assets/tiny_target."""
    data: str = BUNDLED
    """Training data directory (target-regenerated); "bundled" = pipelines/assets/tiny_data."""
    device: str = "cpu"
    """Device of the drafter (and of the target in the lock-step trainer)."""
    dtype: str = "float32"
    """Parameter dtype of target and drafter: float32 or bfloat16."""
    seed: int = 0
    """Seeds data order, anchor sampling and drafter initialisation."""
    max_steps: int = 200
    """Run until this optimizer step (absolute: a resumed run continues the count)."""
    token_budget: int = 1024
    """Tokens (padding included) per micro-batch: the lock-step trainer's whole step."""
    peak_lr: float = 6e-4
    """Peak learning rate (AdamW), reached at the end of warmup."""
    min_lr: float = 6e-5
    """Floor of the cosine decay, reached at ``total_steps``."""
    warmup_ratio: float = 0.04
    """Warmup length as a fraction of ``total_steps``."""
    total_steps: int | None = None
    """Length of the schedule; default ``max_steps``."""
    schedule: str = "cosine"
    """Shape of the lr decay after the warmup: cosine, linear (both to ``min_lr`` at
    ``total_steps``) or constant (the peak to the end)."""
    warmup_steps: int | None = None
    """Warmup length in steps; default ``warmup_ratio`` of the schedule's length."""
    epochs: float | None = None
    """Train until this many data epochs (absolute, like ``max_steps``, which it replaces: the
    run stops at step ceil(epochs * steps per epoch))."""
    resume_schedule: str = "continue"
    """What ``resume`` does with the lr schedule: ``continue`` the checkpoint's schedule at the
    step it reached, or ``restart`` this config's schedule (warmup included) from that step. The
    AdamW moments are carried over in both cases."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 disables)."""
    log: str = "logs/train.jsonl"
    """JSONL log, appended to (never truncated)."""
    log_every: int = 1
    """Write a metrics record every N optimizer steps."""
    log_all_ranks: bool = False
    """Every rank also writes ``<log stem>.rank{N}.jsonl`` beside ``log`` with its own throughput
    (rank 0 keeps writing the global log)."""
    ckpt_dir: str = "checkpoints"
    """Directory holding one ``step-NNNNNN/`` checkpoint per save."""
    ckpt_every: int = 50
    """Save every N optimizer steps (0: only at the end); always at the end of the run."""
    resume: str | None = None
    """Checkpoint directory to continue from (written by either program)."""
    eval_every: int = 0
    """Measure real tau on held-out prompts every N steps (0: never)."""
    eval_prompts: int = 8
    """Held-out prompts per eval."""
    eval_new_tokens: int | None = None
    """Tokens generated per prompt in an eval, the prefill token included: the horizon of the
    measured tau and of the walked tau (default: the longest training response, so the eval
    decodes as far as the drafter was trained to draft)."""
    walk_every: int = 10
    """Every N-th metrics record carries the walked tau (``walk_*`` fields; 0: never). It runs
    the drafter without gradients over every response anchor of ``walk_seqs`` sequences of the
    step's last micro-batch, reusing its target features."""
    walk_seqs: int = 4
    """Sequences walked per walked record (each costs one no-gradient drafter pass over its
    response; at 4, measured 1.6% of the step time on the bundled target and 0.3% on
    SmolLM2-135M with an untrained drafter, about 4% at most as acceptance grows)."""
    walk_holdout: int = 32
    """Examples held out of training at the run's start (seeded, at most an eighth of the data)
    for the walked tau to walk: an unbiased series in every epoch (0: none, the walk reads the
    step's own training batch, out of sample in the first epoch only). A resumed run keeps its
    checkpoint's split."""
    walk_source: str = "eval_prompts"
    """Where the held-out walk's ``walk_holdout`` sequences come from: ``eval_prompts`` (the data's
    eval-prompt file past the ``eval_prompts`` the eval measures, each with the target's greedy
    continuation, generated at the start: the eval's own population; held-out training examples
    when the file holds no more) or ``data`` (training examples held out: windows of the
    target's training text, measured up to 15% above the eval's tau late in a run)."""
    eval_split: str = "first"
    """Which prompts of the eval file the eval measures, with ``walk_source = eval_prompts``:
    ``first`` (its first ``eval_prompts``; the walk takes the next ones) or ``seeded`` (a draw
    seeded by the run's seed, the walk taking its own draw from the rest, both named in the
    header's ``walk_held_out``): with a fixed split every run's eval reads the same prompts, so
    whatever by which they differ from the walk's is the same in every run; a seeded split makes
    it differ between runs and vanish in expectation."""
    max_nonfinite: int = 5
    """Stop the run after this many non-finite steps in a row."""
    torch_threads: int = 0
    """torch intra-op threads for the whole process (0: automatic: torch's default in the
    lock-step trainer; the pipeline splits the cores between the stages computing on the CPU)."""
    check_memory: bool = True
    """Refuse to start when the estimated memory (pipelines.memory) exceeds what the device has
    available; false tries anyway."""
    progress: bool | None = None
    """Progress on stderr: a bar on a terminal, plain lines elsewhere (default); true forces
    the bar, false silences both (the closing summary stays)."""
    progress_every: int = 100
    """Off a terminal, a progress line after N optimizer steps or ``progress_seconds``,
    whichever comes first (0: by time only)."""
    progress_seconds: float = 30.0
    """See ``progress_every`` (0: by steps only)."""
    drafter: dict[str, Any] = field(default_factory=lambda: dict(CPU_DRAFTER))
    """DFlashConfig overrides ([drafter] table): block_size, num_draft_layers, num_anchors, ...
    A [drafter] table replaces these defaults as a whole."""

    def __post_init__(self) -> None:
        _positive_ints(
            self,
            "max_steps",
            "token_budget",
            "log_every",
            "eval_prompts",
            "max_nonfinite",
            "walk_seqs",
        )
        _non_negative_ints(
            self,
            "seed",
            "ckpt_every",
            "eval_every",
            "torch_threads",
            "walk_every",
            "progress_every",
            "walk_holdout",
        )
        if self.eval_new_tokens is not None:
            _positive_ints(self, "eval_new_tokens")
        if self.seed >= SEED_LIMIT:
            raise ValueError(f"seed must be below 2**32 = {SEED_LIMIT}, got {self.seed}")
        if self.total_steps is not None:
            _positive_ints(self, "total_steps")
        if self.warmup_steps is not None:
            _non_negative_ints(self, "warmup_steps")
            # With epochs, max_steps is known only once the data is loaded (the schedule checks).
            if self.epochs is None and self.warmup_steps > self.schedule_total_steps:
                raise ValueError(
                    f"warmup_steps ({self.warmup_steps}) exceeds the schedule's "
                    f"{self.schedule_total_steps} steps"
                )
        _one_of(self, "schedule", SCHEDULE_KINDS)
        _one_of(self, "resume_schedule", RESUME_SCHEDULE_MODES)
        _one_of(self, "eval_split", EVAL_SPLITS)
        _one_of(self, "walk_source", WALK_SOURCES)
        if self.epochs is not None:
            e = self.epochs
            if (
                isinstance(e, bool)
                or not isinstance(e, (int, float))
                or not math.isfinite(e)
                or e <= 0
            ):
                raise ValueError(f"epochs must be a finite number > 0, got {e!r}")
            self.epochs = float(e)
        for name in (
            "peak_lr",
            "min_lr",
            "weight_decay",
            "grad_clip",
            "warmup_ratio",
            "progress_seconds",
        ):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or v < 0
            ):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
            setattr(self, name, float(v))
        if self.peak_lr <= 0:
            raise ValueError(f"peak_lr must be > 0, got {self.peak_lr}")
        if self.min_lr > self.peak_lr:
            raise ValueError(f"min_lr ({self.min_lr}) must not exceed peak_lr ({self.peak_lr})")
        if not self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be < 1, got {self.warmup_ratio}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        for name in ("log_all_ranks", "check_memory"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")  # noqa: TRY004 - user input
        for name in ("target", "data", "device", "log", "ckpt_dir"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        _check_device(self.device, "device")
        if not isinstance(self.drafter, dict):
            raise ValueError(  # noqa: TRY004 - user input
                f"drafter must be a table of DFlashConfig fields, got {self.drafter!r}"
            )
        # Validate the drafter overrides now (cheap, no model), not after loading the target.
        from dflash.config import DFlashConfig

        try:
            DFlashConfig.from_dict(dict(self.drafter))
        except (TypeError, ValueError) as e:
            raise ValueError(f"[drafter]: {e}") from None

    @property
    def schedule_total_steps(self) -> int:
        return self.total_steps if self.total_steps is not None else self.max_steps

    def for_epochs(self, steps_per_epoch: float) -> TrainConfig:
        """This config with ``max_steps`` resolved from ``epochs`` (itself when none is set)."""
        if self.epochs is None:
            return self
        return dataclasses.replace(self, max_steps=max(1, math.ceil(self.epochs * steps_per_epoch)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (the ``config`` of the log header)."""
        return dataclasses.asdict(self)


@dataclass
class PipelineConfig(TrainConfig):
    """Settings of ``dflash-train pipeline`` (the CSP pipeline)."""

    grad_accum: int = 4
    """Micro-batches per optimizer step."""
    target_devices: list[str] | None = None
    """One target forward worker per entry (default: one on ``device``)."""
    channel_capacity: int = 4
    """Items each bounded channel holds (the read-ahead between stages)."""
    max_steps: int = 80
    eval_every: int = 20
    ckpt_every: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive_ints(self, "grad_accum", "channel_capacity")
        if self.target_devices is None:
            self.target_devices = [self.device]
        if isinstance(self.target_devices, str):
            self.target_devices = parse_device_list(self.target_devices)
        if not isinstance(self.target_devices, list) or not self.target_devices:
            raise ValueError(
                f"target_devices must be a non-empty list, got {self.target_devices!r}"
            )
        for d in self.target_devices:
            _check_device(d, "target_devices")


def parse_device_list(text: str) -> list[str]:
    """``"cuda:1,cuda:2"`` -> ``["cuda:1", "cuda:2"]``."""
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise ValueError(f"empty device list {text!r}")
    return devices


def _check_device(dev: Any, name: str) -> None:
    ok = isinstance(dev, str) and (
        dev in ("cpu", "cuda", "mps") or (dev.startswith("cuda:") and dev[5:].isdigit())
    )
    if not ok:
        raise ValueError(f"{name}: bad device {dev!r} (expected cpu, cuda or cuda:N)")


def _positive_ints(cfg: Any, *names: str) -> None:
    for name in names:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")


def _one_of(cfg: Any, name: str, choices: Sequence[str]) -> None:
    v = getattr(cfg, name)
    if v not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {v!r}")


def _non_negative_ints(cfg: Any, *names: str) -> None:
    for name in names:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")


C = TypeVar("C", bound=TrainConfig)


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file.

    Raises:
        ValueError: missing or unreadable file, a directory, or a TOML syntax error (one line,
            with the file name).
    """
    p = Path(path)
    try:
        with p.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"config file not found: {p}") from None
    except IsADirectoryError:
        raise ValueError(f"config file {p} is a directory: give a TOML file (--config)") from None
    except OSError as e:
        raise ValueError(f"cannot read config file {p}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"config file {p} is not UTF-8 text (TOML)") from None
    except RecursionError:
        raise ValueError(f"config file {p}: nested too deeply") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"config file {p}: {' '.join(str(e).split())}") from None


#: TOML tables holding one program's own settings; each program reads its table over the
#: top-level keys and ignores the other's, so one file serves both.
PROGRAM_SECTIONS = ("sync", "pipeline")


def build_config(
    cls: type[C], file: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> C:
    """Defaults, then the TOML file (top level, then the program's ``[sync]`` or ``[pipeline]``
    table), then flag overrides (``None`` values mean "not given").

    Raises:
        ValueError: unknown key, wrong type or out-of-range value (one line).
    """
    raw: dict[str, Any] = read_toml(file) if file is not None else {}
    section = "pipeline" if issubclass(cls, PipelineConfig) else "sync"
    values = {k: v for k, v in raw.items() if k not in PROGRAM_SECTIONS}
    own = raw.get(section, {})
    if not isinstance(own, dict):
        raise ValueError(f"[{section}] must be a table in {file}")  # noqa: TRY004 - user input
    values.update(own)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        where = f" in {file}" if file else ""
        hint = (
            " (pipeline-only keys belong in a [pipeline] table)"
            if section == "sync"
            and set(unknown) & {f.name for f in dataclasses.fields(PipelineConfig)}
            else ""
        )
        raise ValueError(f"unknown config key(s){where}: {', '.join(unknown)}{hint}")
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    # A flag wins over the file, also over the file's way of giving the same thing.
    if "epochs" in overrides:
        values.pop("max_steps", None)
    if "max_steps" in overrides:
        values.pop("epochs", None)
    for k, v in overrides.items():
        if k.startswith("drafter."):  # --block-size, --draft-layers: into the [drafter] table
            table = dict(values.get("drafter", CPU_DRAFTER))
            table[k.split(".", 1)[1]] = v
            values["drafter"] = table
            continue
        if k not in known:
            raise ValueError(f"unknown config key: {k}")
        values[k] = v
    if "epochs" in values and "max_steps" in values:
        raise ValueError(
            "max_steps and epochs both given: the run ends at one of them "
            "(a flag replaces the file's)"
        )
    try:
        return cls(**values)
    except TypeError as e:  # e.g. a table where a number belongs
        raise ValueError(str(e)) from None


def requested_drafter(
    cls: type[TrainConfig], file: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The drafter fields the user asked for: the file's ``[drafter]`` table (top level or the
    program's table) and ``--block-size`` / ``--draft-layers``, the built-in defaults left out.

    A resumed run keeps its checkpoint's drafter, so these are what it must agree with
    (:func:`pipelines.resume.check_resume_drafter`); a default is no request.
    """
    raw: dict[str, Any] = read_toml(file) if file is not None else {}
    section = "pipeline" if issubclass(cls, PipelineConfig) else "sync"
    table: dict[str, Any] = {}
    for where in (raw, raw.get(section)):
        if isinstance(where, dict) and isinstance(where.get("drafter"), dict):
            table = dict(where["drafter"])
    for k, v in (overrides or {}).items():
        if k.startswith("drafter.") and v is not None:
            table[k.split(".", 1)[1]] = v
    return table

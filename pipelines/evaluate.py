"""Real acceptance length of a drafter: speculative decoding on held-out prompts.

Used by the pipeline's periodic eval and by ``dflash-train eval``. The measurement itself is
:func:`dflash.evaluate_tau` (lossless greedy speculative decoding against the target); this module
turns it into the log's eval record and renders it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from .errors import TrainingError
from .log_schema import EvalRecord


def run_eval(drafter: torch.nn.Module, target, prompts: list[list[int]], new_tokens: int,
             step: int) -> EvalRecord:
    """Measure tau of ``drafter`` on ``prompts`` (greedy); the drafter's mode is restored."""
    from dflash import evaluate_tau

    res = evaluate_tau(target, drafter, prompts, max_new_tokens=new_tokens, temperature=0.0)
    return EvalRecord(step=step, time=time.time(), tau=res.tau, tau_hist=list(res.tau_hist),
                      n_prompts=res.n_prompts, new_tokens=res.new_tokens,
                      temperature=res.temperature)


@dataclass
class EvalRequest:
    """What ``dflash-train eval`` measures (validated before anything is loaded)."""

    drafter: str
    """Checkpoint directory."""
    target: str | None = None
    """Target model (default: the bundled tiny target)."""
    data: str | None = None
    """Directory with eval_prompts.jsonl (default: the bundled dataset)."""
    device: str = "cpu"
    prompts: int = 8
    new_tokens: int = 32

    def __post_init__(self) -> None:
        if self.prompts < 1:
            raise ValueError(f"--prompts must be >= 1, got {self.prompts}")
        if self.new_tokens < 1:
            raise ValueError(f"--new-tokens must be >= 1, got {self.new_tokens}")
        if not Path(self.drafter).is_dir():
            raise ValueError(f"--drafter: no checkpoint directory at {self.drafter}")


def evaluate_checkpoint(req: EvalRequest) -> EvalRecord:
    """Load a checkpoint and its target, and measure tau on the held-out prompts.

    Raises:
        TrainingError: unreadable checkpoint, target or prompts; drafter and target do not fit.
    """
    from dflash import TargetModel
    from dflash.checkpoint import STATE_FILE, load_drafter, read_json_object
    from dflash.data import load_eval_prompts

    from .config import BUNDLED
    from .training import resolve_data, resolve_target

    try:
        target = TargetModel.from_pretrained(resolve_target(req.target or BUNDLED),
                                             device=req.device)
        drafter = load_drafter(req.drafter, device=req.device, dtype=target.dtype)
        prompts = load_eval_prompts(resolve_data(req.data or BUNDLED), n=req.prompts)
        state = read_json_object(Path(req.drafter), STATE_FILE)
    except (OSError, ValueError, KeyError) as e:
        raise TrainingError(str(e)) from None
    cfg = drafter.config
    if cfg.hidden_size != target.config.hidden_size or cfg.vocab_size != target.config.vocab_size:
        raise TrainingError(f"checkpoint {req.drafter} was trained for another target "
                            f"(hidden {cfg.hidden_size}, vocab {cfg.vocab_size})")
    step = state.get("step", 0)
    return run_eval(drafter, target, prompts, req.new_tokens,
                    step=step if type(step) is int and step >= 0 else 0)


def render_eval(record: EvalRecord, console: Console | None = None) -> None:
    """Print tau and the histogram of acceptance lengths (tokens gained per verify step)."""
    console = console or Console()
    steps = sum(record.tau_hist)
    console.print(f"step {record.step}: tau = {record.tau:.3f} over {steps} verify steps "
                  f"({record.n_prompts} prompts, {record.new_tokens} new tokens, greedy)")
    table = Table("accepted", "steps", "share", "", box=None, pad_edge=False)
    peak = max(record.tau_hist) if steps else 0
    for length, count in enumerate(record.tau_hist, start=1):
        share = count / steps if steps else 0.0
        bar = "█" * round(30 * count / peak) if peak else ""
        table.add_row(str(length), str(count), f"{share:6.1%}", bar)
    console.print(table)

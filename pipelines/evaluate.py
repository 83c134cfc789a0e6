"""Real acceptance length of a drafter: speculative decoding on held-out prompts.

Used by the pipeline's periodic eval and by ``dflash-train eval``. The measurement itself is
:func:`dflash.evaluate_tau` (lossless greedy speculative decoding against the target); this module
turns it into the log's eval record and, for ``dflash-train eval``, into a prompt-by-prompt
:class:`~pipelines.eval_report.EvalReport` (interval over prompts, split by benchmark).

Prompt files are JSONL, one ``{"input_ids": [...]}`` per line, optionally with a
``"benchmark"`` name; lines without one belong to the set named after the file (the data
directory's own file: ``held-out``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .config import TrainConfig, default_of
from .errors import TrainingError
from .eval_report import EvalReport, PromptResult
from .log_records import EvalRecord

#: Set name of the data directory's own eval prompts.
HELD_OUT = "held-out"


def run_eval(
    drafter: torch.nn.Module, target, prompts: list[list[int]], new_tokens: int, step: int
) -> EvalRecord:
    """Measure tau of ``drafter`` on ``prompts`` (greedy); the drafter's mode is restored.

    Each prompt is decoded on its own (decoding is per prompt anyway, so this costs nothing) and
    its tokens and verify steps go into the record: the eval's standard error between prompts
    is then computed from the log, not guessed from the histogram."""
    results = measure_prompts(drafter, target, [(HELD_OUT, p) for p in prompts], new_tokens)
    return _record(step, results, temperature=0.0)


def _record(step: int, results: list[PromptResult], temperature: float) -> EvalRecord:
    """The eval record of per-prompt results (the histograms summed, tau as a ratio of sums)."""
    width = max((len(r.hist) for r in results), default=0)
    hist = [sum(r.hist[i] for r in results if i < len(r.hist)) for i in range(width)]
    steps = sum(hist)
    return EvalRecord(
        step=step,
        time=time.time(),
        tau=sum((i + 1) * c for i, c in enumerate(hist)) / steps if steps else float("nan"),
        tau_hist=hist,
        n_prompts=len(results),
        new_tokens=sum(r.new_tokens for r in results),
        temperature=temperature,
        prompt_tokens=[r.gained for r in results],
        prompt_steps=[r.steps for r in results],
    )


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
    prompts: int = default_of(TrainConfig, "eval_prompts")
    """Prompts taken from each prompt file (the first N)."""
    new_tokens: int | None = default_of(TrainConfig, "eval_new_tokens")
    """The horizon: tokens generated per prompt at most (None: the longest training response of
    ``data``, the pipeline's periodic-eval rule)."""
    prompt_files: list[str] = field(default_factory=list)
    """JSONL prompt sets (default: the data directory's eval prompts)."""

    def __post_init__(self) -> None:
        if self.prompts < 1:
            raise ValueError(f"--prompts must be >= 1, got {self.prompts}")
        if self.new_tokens is not None and self.new_tokens < 1:
            raise ValueError(f"--new-tokens must be >= 1, got {self.new_tokens}")
        if not Path(self.drafter).is_dir():
            raise ValueError(f"--drafter: no checkpoint directory at {self.drafter}")
        for f in self.prompt_files:
            if not Path(f).is_file():
                raise ValueError(f"--prompts-file: no file at {f}")


def load_prompt_sets(
    files: list[str | Path], n: int, default_name: str | None = None
) -> list[tuple[str, list[int]]]:
    """``(benchmark, token ids)`` of the first ``n`` prompts of each JSONL file.

    Raises:
        ValueError: unreadable file or a line without a list of token ids (one line).
    """
    out = []
    for f in files:
        p = Path(f)
        name = default_name or p.stem
        try:
            lines = [x for x in p.read_text().splitlines() if x.strip()]
        except OSError as e:
            raise ValueError(f"cannot read prompts {p}: {e}") from None
        for i, line in enumerate(lines[:n], start=1):
            try:
                rec = json.loads(line)
                ids = rec["input_ids"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f'{p} line {i}: expected {{"input_ids": [...]}}') from None
            if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
                raise ValueError(f"{p} line {i}: input_ids must be a non-empty list of token ids")
            out.append((str(rec.get("benchmark") or name), ids))
    return out


def measure_prompts(
    drafter: torch.nn.Module, target, prompts: list[tuple[str, list[int]]], new_tokens: int
) -> list[PromptResult]:
    """Decode each prompt on its own (greedy) and keep its histogram: the interval over prompts
    and the split by benchmark need them one by one."""
    from dflash import evaluate_tau

    out = []
    for benchmark, ids in prompts:
        res = evaluate_tau(target, drafter, [ids], max_new_tokens=new_tokens, temperature=0.0)
        out.append(
            PromptResult(benchmark=benchmark, hist=list(res.tau_hist), new_tokens=res.new_tokens)
        )
    return out


def eval_record(report: EvalReport) -> EvalRecord:
    """The log's eval record of a report (the same numbers a periodic eval writes)."""
    return _record(report.step, report.prompts, report.temperature)


def evaluate_checkpoint(req: EvalRequest) -> EvalReport:
    """Load a checkpoint and its target, and measure tau prompt by prompt.

    Raises:
        TrainingError: unreadable checkpoint, target or prompts; drafter and target do not fit.
    """
    from dflash.checkpoint import STATE_FILE, load_drafter, read_json_object
    from dflash.data import EVAL_FILE

    from .config import BUNDLED
    from .run_setup import load_target, resolve_data

    try:
        target = load_target(req.target or BUNDLED, req.device, torch.float32)
        drafter = load_drafter(req.drafter, device=req.device, dtype=target.dtype)
        if req.prompt_files:
            prompts = load_prompt_sets(req.prompt_files, req.prompts)
        else:
            prompts = load_prompt_sets(
                [Path(resolve_data(req.data or BUNDLED)) / EVAL_FILE],
                req.prompts,
                default_name=HELD_OUT,
            )
        state = read_json_object(Path(req.drafter), STATE_FILE)
        horizon = req.new_tokens
        if horizon is None:
            from dflash.data import load_dataset

            from .run_setup import longest_response

            horizon = longest_response(load_dataset(resolve_data(req.data or BUNDLED)))
    except (OSError, ValueError, KeyError) as e:
        raise TrainingError(str(e)) from None
    cfg = drafter.config
    if cfg.hidden_size != target.config.hidden_size or cfg.vocab_size != target.config.vocab_size:
        raise TrainingError(
            f"checkpoint {req.drafter} was trained for another target "
            f"(hidden {cfg.hidden_size}, vocab {cfg.vocab_size})"
        )
    step = state.get("step", 0)
    return EvalReport(
        step=step if type(step) is int and step >= 0 else 0,
        horizon=horizon,
        temperature=0.0,
        prompts=measure_prompts(drafter, target, prompts, horizon),
    )

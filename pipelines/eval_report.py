"""What ``dflash-train eval`` reports: tau with a confidence interval over prompts, the split by
benchmark, the histogram of accepted lengths; as text or JSON (pure: no torch, no model).

tau is a ratio of sums over the prompts (tokens gained / verify steps), so a prompt's weight is
its number of verify steps. Its uncertainty comes from which prompts were drawn: the interval is
a percentile bootstrap over prompts (seeded, so two renderings of one measurement agree).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

#: Coverage of the interval, bootstrap resamples and their seed.
CI_LEVEL = 0.95
RESAMPLES = 2000
SEED = 0


@dataclass(frozen=True)
class PromptResult:
    """One prompt decoded speculatively."""

    benchmark: str
    hist: list[int]
    """Verify steps by tokens gained, 1..B (index 0 is 1 token)."""
    new_tokens: int
    """Tokens generated (at most the horizon; fewer after a stop token)."""

    @property
    def steps(self) -> int:
        return sum(self.hist)

    @property
    def gained(self) -> int:
        return sum((i + 1) * c for i, c in enumerate(self.hist))


def ratio_tau(prompts: list[PromptResult]) -> float:
    """Tokens gained per verify step over all ``prompts`` (NaN without a verify step)."""
    steps = sum(p.steps for p in prompts)
    return sum(p.gained for p in prompts) / steps if steps else math.nan


def bootstrap_ci(
    prompts: list[PromptResult],
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`ratio_tau` over prompts; NaNs under 2 prompts."""
    if len(prompts) < 2:
        return math.nan, math.nan
    rng = random.Random(seed)
    pairs = [(p.gained, p.steps) for p in prompts]
    n = len(pairs)
    values = []
    for _ in range(resamples):
        gained = steps = 0
        for _ in range(n):
            g, s = pairs[rng.randrange(n)]
            gained += g
            steps += s
        if steps:
            values.append(gained / steps)
    if not values:
        return math.nan, math.nan
    values.sort()
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    return _quantile(values, lo_q), _quantile(values, hi_q)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between order statistics."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class TauSummary:
    """tau of a set of prompts, its interval, and what it was measured on."""

    name: str
    n_prompts: int
    tau: float
    ci: tuple[float, float]
    verify_steps: int
    new_tokens: int

    @classmethod
    def of(cls, name: str, prompts: list[PromptResult]) -> TauSummary:
        return cls(
            name=name,
            n_prompts=len(prompts),
            tau=ratio_tau(prompts),
            ci=bootstrap_ci(prompts),
            verify_steps=sum(p.steps for p in prompts),
            new_tokens=sum(p.new_tokens for p in prompts),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_prompts": self.n_prompts,
            "tau": _num(self.tau),
            "tau_ci": [_num(self.ci[0]), _num(self.ci[1])],
            "verify_steps": self.verify_steps,
            "new_tokens": self.new_tokens,
        }


@dataclass(frozen=True)
class EvalReport:
    """A checkpoint's measured acceptance, prompt by prompt."""

    step: int
    horizon: int
    """Tokens generated per prompt at most (``--new-tokens``)."""
    temperature: float
    prompts: list[PromptResult]
    overall: TauSummary = field(init=False)
    benchmarks: list[TauSummary] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overall", TauSummary.of("all", self.prompts))
        names = list(dict.fromkeys(p.benchmark for p in self.prompts))
        object.__setattr__(
            self,
            "benchmarks",
            [TauSummary.of(n, [p for p in self.prompts if p.benchmark == n]) for n in names],
        )

    @property
    def hist(self) -> list[int]:
        """Verify steps by tokens gained, over all prompts."""
        width = max((len(p.hist) for p in self.prompts), default=0)
        return [sum(p.hist[i] for p in self.prompts if i < len(p.hist)) for i in range(width)]

    def to_json(self) -> dict[str, Any]:
        """The ``-f json`` document (NaN as null)."""
        o = self.overall
        return {
            "step": self.step,
            "tau": _num(o.tau),
            "tau_ci": [_num(o.ci[0]), _num(o.ci[1])],
            "ci_level": CI_LEVEL,
            "n_prompts": o.n_prompts,
            "horizon": self.horizon,
            "new_tokens": o.new_tokens,
            "verify_steps": o.verify_steps,
            "temperature": self.temperature,
            "tau_hist": self.hist,
            "benchmarks": [b.to_json() for b in self.benchmarks],
            "prompts": [
                {
                    "benchmark": p.benchmark,
                    "tau": _num(ratio_tau([p])),
                    "verify_steps": p.steps,
                    "new_tokens": p.new_tokens,
                }
                for p in self.prompts
            ],
        }


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _ci_text(ci: tuple[float, float]) -> str:
    return f"{ci[0]:.2f}-{ci[1]:.2f}" if all(math.isfinite(c) for c in ci) else "n/a"


def render_text(report: EvalReport) -> list[str]:
    """The human report: tau and its interval, the horizon, the benchmarks, the histogram (only
    the lengths that occurred)."""
    o = report.overall
    mode = "greedy" if report.temperature == 0 else f"temperature {report.temperature:g}"
    ci = _ci_text(o.ci)
    interval = (
        f"{CI_LEVEL:.0%} CI {ci} over prompts" if ci != "n/a" else "no interval from one prompt"
    )
    out = [
        f"step {report.step}: tau = {o.tau:.3f} ({interval})",
        (
            f"{o.n_prompts} prompt{'' if o.n_prompts == 1 else 's'} x up to {report.horizon} new "
            f"token{'' if report.horizon == 1 else 's'} each (horizon {report.horizon}; "
            f"{o.new_tokens} generated, {o.verify_steps} verify step{'' if o.verify_steps == 1 else 's'}), "
            f"{mode}"
        ),
    ]
    if len(report.benchmarks) > 1:
        width = max(len("benchmark"), *(len(b.name) for b in report.benchmarks))
        out.append("")
        out.append(f"{'benchmark':<{width}}  prompts  tau     {CI_LEVEL:.0%} CI")
        for b in report.benchmarks:
            out.append(f"{b.name:<{width}}  {b.n_prompts:>7}  {b.tau:<6.3f}  {_ci_text(b.ci)}")
    hist = report.hist
    steps = sum(hist)
    shown = [(i + 1, c) for i, c in enumerate(hist) if c]
    if shown:
        peak = max(c for _, c in shown)
        out.append("")
        out.append("accepted  steps   share")
        for length, count in shown:
            bar = "█" * max(1, round(30 * count / peak))
            out.append(f"{length:>8}  {count:>5}  {count / steps:6.1%}  {bar}")
        hidden = len(hist) - len(shown)
        if hidden:
            out.append(f"({hidden} of the {len(hist)} lengths never occurred)")
    return out


def render_json(report: EvalReport) -> str:
    return json.dumps(report.to_json(), indent=2)

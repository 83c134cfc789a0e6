"""Per-rank throughput skew of a data-parallel run (the logs are read by
:mod:`dflash_diag.read.ranks`, which says how they are recognised).

What is computed, per rank over the steps that every rank logged (so ranks are compared on the
same steps; all of a rank's steps when the ranks share none):

* own tok/s: sum of ``n_tokens`` / sum of (``step_time`` - ``sync_wait``) when those fields are
  present (a token-weighted mean), else the mean of the ``tok_per_sec`` values;
* the mean step time and the fraction of it spent waiting for the others;
* across ranks: the slowest and fastest rank, ``skew`` = fastest / slowest own tok/s, and
  ``slowest_vs_median`` = median / slowest (how far the pace-setter is behind a typical rank).

Pure Python over decoded records (no polars, no torch): small files, one pass each.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dflash_diag.errors import DiagError
from dflash_diag.read.ranks import RankLog
from dflash_diag.read.ranks import finite_number as _finite


@dataclass(frozen=True)
class RankStats:
    """One rank's throughput over the compared steps."""

    rank: int
    path: str
    steps: int
    tok_per_sec: float | None
    step_time: float | None
    wait_fraction: float | None


@dataclass(frozen=True)
class RankSkew:
    """Throughput skew across ranks (see the module docstring for the definitions)."""

    ranks: list[RankStats]
    first_step: int | None
    last_step: int | None
    common_steps: bool
    slowest: int | None
    fastest: int | None
    skew: float | None
    slowest_vs_median: float | None


def _rank_stats(log: RankLog, steps: Sequence[int]) -> RankStats:
    records = [log.steps[s] for s in steps]
    tokens = own = total = wait = 0.0
    timed = bool(records)
    for r in records:
        n, t, w = (
            _finite(r.get("n_tokens")),
            _finite(r.get("step_time")),
            _finite(r.get("sync_wait")),
        )
        if n is None or t is None or w is None:
            timed = False
            break
        tokens, own, total, wait = tokens + n, own + (t - w), total + t, wait + w
    if timed and own > 0:
        tps: float | None = tokens / own
        step_time: float | None = total / len(records)
        wait_fraction: float | None = wait / total if total > 0 else None
    else:
        rates = [v for v in (_finite(r.get("tok_per_sec")) for r in records) if v is not None]
        tps = statistics.fmean(rates) if rates else None
        times = [v for v in (_finite(r.get("step_time")) for r in records) if v is not None]
        step_time = statistics.fmean(times) if times else None
        wait_fraction = None
    return RankStats(
        rank=log.rank,
        path=log.path,
        steps=len(records),
        tok_per_sec=tps,
        step_time=step_time,
        wait_fraction=wait_fraction,
    )


def rank_skew(
    logs: Sequence[RankLog], from_step: int | None = None, to_step: int | None = None
) -> RankSkew:
    """Compare the ranks' own throughput over the steps they all logged (within the bounds).

    Raises:
        DiagError: two logs claim the same rank.
    """
    seen: dict[int, str] = {}
    for log in logs:
        if log.rank in seen:
            raise DiagError(f"rank {log.rank} appears twice: {seen[log.rank]} and {log.path}")
        seen[log.rank] = log.path

    def in_range(step: int) -> bool:
        return (from_step is None or step >= from_step) and (to_step is None or step <= to_step)

    per_log = [sorted(s for s in log.steps if in_range(s)) for log in logs]
    common = sorted(set.intersection(*map(set, per_log))) if per_log else []
    use_common = bool(common)
    stats = sorted(
        (
            _rank_stats(log, common if use_common else own)
            for log, own in zip(logs, per_log, strict=True)
        ),
        key=lambda s: s.rank,
    )
    rated = [(s, s.tok_per_sec) for s in stats if s.tok_per_sec is not None and s.tok_per_sec > 0]
    slowest = min(rated, key=lambda sr: sr[1]) if rated else None
    fastest = max(rated, key=lambda sr: sr[1]) if rated else None
    skew = vs_median = None
    if slowest is not None and fastest is not None:
        skew = fastest[1] / slowest[1]
        vs_median = statistics.median(rate for _, rate in rated) / slowest[1]
    all_steps = common if use_common else sorted({s for steps in per_log for s in steps})
    return RankSkew(
        ranks=stats,
        first_step=all_steps[0] if all_steps else None,
        last_step=all_steps[-1] if all_steps else None,
        common_steps=use_common,
        slowest=slowest[0].rank if slowest else None,
        fastest=fastest[0].rank if fastest else None,
        skew=skew,
        slowest_vs_median=vs_median,
    )

"""Per-rank throughput skew of a data-parallel run, from its per-rank logs.

``dflash-train ... --log-all-ranks`` makes every rank write ``<log stem>.rank{N}.jsonl`` beside the
global log: the same schema v1 records, computed from that rank's own micro-batches, with
``tok_per_sec`` = its real tokens / (``step_time`` - ``sync_wait``): its OWN pace, the time spent
waiting for the other ranks at the gradient all-reduce taken out. In synchronous data
parallelism every step lasts as long as the slowest rank's, so the slowest rank sets the pace of
the whole run; the others' waiting is the price of the skew.

How a rank log is recognised (decided here, documented in docs/distributed.md): its file name ends
in ``.rank{N}.jsonl`` (optionally ``.gz``), or its ``run_start`` header has a ``rank`` field; the
header's ``rank`` wins when both are present. The global log (written by rank 0) is neither.

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

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_diag.errors import DiagError
from dflash_diag.read.json_line import decode_line, to_float
from dflash_diag.render.number_format import format_percent
from dflash_diag.render.safe_text import visible

_RANK_NAME = re.compile(r"\.rank(\d+)\.jsonl(\.gz)?$")


def rank_from_name(path: str) -> int | None:
    """``logs/train.rank3.jsonl`` -> 3; None for any other name (``-`` included)."""
    m = _RANK_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = to_float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class RankLog:
    """One rank's records: its rank and ``{step: metrics record}`` (later entries win)."""

    path: str
    rank: int
    steps: Mapping[int, Mapping[str, Any]]


def parse_rank_records(path: str, lines: Iterable[bytes | str]) -> RankLog | None:
    """The metrics of one log, or None when it is not a rank log (see the module docstring).

    Malformed lines (a torn last line) are skipped; a step logged again after a restart keeps its
    later record, as the diagnostics do everywhere.
    """
    rank = rank_from_name(path)
    steps: dict[int, Mapping[str, Any]] = {}
    for line in lines:
        try:
            rec = decode_line(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("event") == "run_start":
            r = rec.get("rank")
            if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
                rank = r
            continue
        step = rec.get("step")
        if "event" in rec or isinstance(step, bool) or not isinstance(step, int):
            continue
        steps[step] = rec
    return None if rank is None else RankLog(path=path, rank=rank, steps=steps)


def header_rank(first_line: bytes | str) -> int | None:
    """The ``rank`` of a ``run_start`` header line (None when the line is anything else)."""
    try:
        rec = decode_line(first_line)
    except ValueError:
        return None
    if isinstance(rec, dict) and rec.get("event") == "run_start":
        r = rec.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            return r
    return None


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
        n, t, w = _finite(r.get("n_tokens")), _finite(r.get("step_time")), _finite(r.get("sync_wait"))
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
    return RankStats(rank=log.rank, path=log.path, steps=len(records), tok_per_sec=tps,
                     step_time=step_time, wait_fraction=wait_fraction)


def rank_skew(logs: Sequence[RankLog], from_step: int | None = None,
              to_step: int | None = None) -> RankSkew:
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
    stats = sorted((_rank_stats(log, common if use_common else own)
                    for log, own in zip(logs, per_log)), key=lambda s: s.rank)
    rated = [s for s in stats if s.tok_per_sec is not None and s.tok_per_sec > 0]
    slowest = min(rated, key=lambda s: s.tok_per_sec) if rated else None
    fastest = max(rated, key=lambda s: s.tok_per_sec) if rated else None
    skew = vs_median = None
    if slowest is not None and fastest is not None:
        skew = fastest.tok_per_sec / slowest.tok_per_sec
        vs_median = statistics.median(s.tok_per_sec for s in rated) / slowest.tok_per_sec
    all_steps = common if use_common else sorted({s for steps in per_log for s in steps})
    return RankSkew(
        ranks=stats, first_step=all_steps[0] if all_steps else None,
        last_step=all_steps[-1] if all_steps else None, common_steps=use_common,
        slowest=slowest.rank if slowest else None, fastest=fastest.rank if fastest else None,
        skew=skew, slowest_vs_median=vs_median,
    )


def skew_lines(skew: RankSkew) -> list[tuple[str, str]]:
    """``(label, text)`` summary lines shared by every text format."""
    def rate(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f} tok/s"

    span = (f"steps {skew.first_step}-{skew.last_step}"
            + ("" if skew.common_steps else " (no step common to all ranks: each rank's own)")
            if skew.first_step is not None else "no steps")
    head = f"{len(skew.ranks)} rank logs · {span}"
    if skew.slowest is not None:
        slow = next(s for s in skew.ranks if s.rank == skew.slowest)
        head += (f" · slowest rank {skew.slowest} ({rate(slow.tok_per_sec)}) sets the pace"
                 f" · fastest/slowest {skew.skew:.2f}x · median/slowest {skew.slowest_vs_median:.2f}x")
    lines = [("ranks", head)]
    for s in skew.ranks:
        wait = f" · waits {format_percent(s.wait_fraction)} of its steps" if s.wait_fraction is not None else ""
        step = f" · step {s.step_time:.3g} s" if s.step_time is not None else ""
        text = f"  rank {s.rank}: {rate(s.tok_per_sec)}{step}{wait} ({s.steps} steps, {visible(s.path)})"
        lines.append(("", text))
    return lines

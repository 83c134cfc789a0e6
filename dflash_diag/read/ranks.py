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

The throughput skew computed from these logs is :mod:`dflash_diag.analysis.rank_skew`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_diag.read.bounded_json import decode_line, to_float

_RANK_NAME = re.compile(r"\.rank(\d+)\.jsonl(\.gz)?$")


def rank_from_name(path: str) -> int | None:
    """``logs/train.rank3.jsonl`` -> 3; None for any other name (``-`` included)."""
    m = _RANK_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (bools and non-numbers are None)."""
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

"""The eval records' steps and fields as numpy columns.

A log that evaluates every few steps holds 100,000 eval records, and the validation, the forecast
and the measured tau each read a field of every one: a Python test and conversion per record
(:func:`~dflash_diag.analysis.numbers.finite_number`) cost a second a field. Here each field is
one list of its raw values and one numpy conversion, the tests done on the whole column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dflash_diag.analysis.numbers import finite_number
from dflash_diag.read.records import LogEvent

#: The types a JSON number (or a missing field) decodes to, which one ``np.array`` call converts
#: as ``float()`` does (None to NaN); any other type (a bool, a string, a numpy scalar) takes the
#: per-value path.
_PLAIN = frozenset({float, int, type(None)})


def finite_values(raw: Sequence[object]) -> np.ndarray:
    """:func:`~dflash_diag.analysis.numbers.finite_number` of each value as a float64 column,
    NaN where it is None (not a finite int or float: a bool, a string, NaN, an int beyond the
    float range)."""
    values: np.ndarray | None = None
    if set(map(type, raw)) <= _PLAIN:
        try:
            values = np.array(raw, dtype=np.float64)
        except OverflowError:  # an int beyond the float range: finite_number refuses it
            values = None
    if values is None:
        values = np.array(
            [number if (number := finite_number(v)) is not None else np.nan for v in raw],
            dtype=np.float64,
        )
    values[~np.isfinite(values)] = np.nan
    return values


def eval_steps(evals: Sequence[LogEvent]) -> tuple[np.ndarray, np.ndarray]:
    """Each record's step as int64 (0 where it has none) and whether it has one."""
    raw = [e.step for e in evals]
    if None not in raw:  # the usual case: one conversion, no second pass
        return np.array(raw, dtype=np.int64), np.ones(len(raw), dtype=bool)
    has = np.array([s is not None for s in raw], dtype=bool)
    steps = np.array([0 if s is None else s for s in raw], dtype=np.int64)
    return steps, has


def field_values(evals: Sequence[LogEvent], name: str) -> np.ndarray:
    """Field ``name`` of each record, :func:`finite_values` (NaN where missing or not a finite
    number)."""
    return finite_values([e.fields.get(name) for e in evals])


def in_range(
    steps: np.ndarray, has: np.ndarray, up_to_step: int | None, from_step: int | None
) -> np.ndarray:
    """Which records have a step within the bounds (None: unbounded)."""
    keep = has.copy()
    if up_to_step is not None:
        keep &= steps <= up_to_step
    if from_step is not None:
        keep &= steps >= from_step
    return keep


def latest_per_step(steps: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The indices of the records ``keep`` selects, one per step (for a step recorded twice, the
    later record), in step order: what a dict keyed by step, filled in record order and read in
    sorted key order, keeps."""
    index = np.flatnonzero(keep)
    chosen = steps[index]
    if chosen.size > 1 and not bool((chosen[1:] > chosen[:-1]).all()):
        order = np.argsort(chosen, kind="stable")  # equal steps stay in record order
        index, chosen = index[order], chosen[order]
    last = np.ones(chosen.size, dtype=bool)
    last[:-1] = chosen[1:] != chosen[:-1]
    return index[last]

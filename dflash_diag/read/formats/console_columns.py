"""Console lines of a learnt shape read column-wise, not line by line.

A large console log is mostly a few line shapes repeated (``[step 50] avg_loss=0.0006
acc=0.9533`` a million times). :mod:`dflash_diag.read.formats.console` learns a shape from its
first line (which digit runs are the step and each value); here the lines of a shape whose
reading depends on nothing but the line itself (no tqdm count, no epoch offset: the parser's
state neither read nor moved) are read together: one anchored pattern per shape finds its lines
and their digit runs (polars), the runs become the step and the values as columns (numpy), and
the records of a block of lines are laid out as the long frame of scalars in line order, beside
the records of every other line, which the console parser reads one by one and in order as
before. Line numbers are the key of that interleaving, so no record can change places.

A value is computed from its digit runs only where the arithmetic is exact: a mantissa ``M`` of
at most 2^53 and a power of ten ``10^e`` with ``|e| <= 22`` are both exact doubles, so one IEEE
multiplication or division gives the correctly rounded number, the double that Python's
``float()`` gives for the same text. A line with a value outside that range (or a step of 2^53
or more, or two values whose equality decided the learnt parse and differ here) goes the line
by line way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from dflash_diag.read.formats.canonical import SCALAR_SCHEMA
from dflash_diag.read.records import STEP_LIMIT

#: Exact doubles 10^0 .. 10^22 (each from the exact integer: no ``pow`` rounding).
_POW10 = np.array([float(10**k) for k in range(23)])
#: 10^0 .. 10^18 as integers (a mantissa's integer part times ``10^len(fraction)`` is checked
#: against them before it is formed, so it cannot overflow an int64).
_POW10_INT = np.array([10**k for k in range(19)], dtype=np.int64)
_MANTISSA_LIMIT = 2**53
#: A number's text with its digit runs as ``\0``: sign, integer digits, point, fraction digits,
#: exponent (``_NUMBER``'s forms: ``1``, ``1.``, ``1.5``, ``.5``, each with ``e[-+]7``).
_NUMBER_FORM = re.compile(r"([-+]?)(\x00?)(\.?)(\x00?)(?:[eE]([-+]?)(\x00))?")


#: A plan's pattern takes what Python's ``str.strip`` takes of a line that is ASCII at its ends.
_SPACES_START = r"^[ \t\x0b\x0c\x1c-\x1f]*"
_SPACES_END = r"[ \t\x0b\x0c\x1c-\x1f]*$"


def pattern_text(text: str) -> str:
    """``text`` as a literal of polars' (Rust) regex syntax: letters and digits as themselves,
    every other character as ``\\x{..}`` (no escaping rule of either dialect to get wrong)."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


@dataclass(frozen=True)
class NumberPlan:
    """Where a value's number is in a line of its shape: a constant (``nan``, or text without
    ASCII digits), else the digit runs of its integer part, fraction and exponent."""

    constant: float | None = None
    negative: bool = False
    integer: int | None = None  # digit-run numbers (0: the line's first run)
    fraction: int | None = None
    exponent: int | None = None
    exponent_negative: bool = False

    def runs(self) -> tuple[int, ...]:
        return tuple(r for r in (self.integer, self.fraction, self.exponent) if r is not None)


def number_plan(span: Any, parts: Sequence[str]) -> NumberPlan | None:
    """A learnt value span (console's ``_Span``: a part index, or ``(head, first, end, tail)``)
    as a :class:`NumberPlan`, or None (a form this module does not compute)."""
    if isinstance(span, int):
        head, first, end, tail = "", span, span + 1, ""
    else:
        head, first, end, tail = span
    if first == end:  # no digit run: the same text, so the same value, on every line
        try:
            return NumberPlan(constant=float(head + tail))
        except ValueError:
            return None
    template = head
    runs = []
    for index in range(first, end):
        if index % 2:
            runs.append((index - 1) // 2)
            template += "\x00"
        else:
            template += parts[index]
    template += tail
    form = _NUMBER_FORM.fullmatch(template)
    if form is None:
        return None
    sign, integer, _, fraction, exponent_sign, exponent = form.groups()
    if not integer and not fraction:
        return None
    queue = iter(runs)
    return NumberPlan(
        negative=sign == "-",
        integer=next(queue) if integer else None,
        fraction=next(queue) if fraction else None,
        exponent=next(queue) if exponent else None,
        exponent_negative=exponent_sign == "-",
    )


@dataclass(frozen=True)
class ShapePlan:
    """A learnt shape read column-wise: the pattern of its lines and where their numbers are.

    Attributes:
        pattern: an anchored polars regex matching exactly the lines of the shape (its digit
            runs read as text in a key written as those digits), capturing ``captured``; before
            a strip too (ASCII spaces at the ends, as Python's strip takes them).
        captured: the digit runs (numbered from 0) the pattern captures, in order.
        step: the digit run of the step (None: the lines yield no record).
        names: the record's keys, in the general parse's order.
        values: where each key's number is.
        equal: pairs of numbers whose equality (or not) decided the learnt parse.
    """

    pattern: str
    captured: tuple[int, ...]
    step: int | None
    names: tuple[str, ...]
    values: tuple[NumberPlan, ...]
    equal: tuple[tuple[NumberPlan, NumberPlan, bool], ...]


def shape_plan(shape: Any, parts: Sequence[str]) -> ShapePlan | None:
    """The plan of a learnt console shape whose reading depends on the line alone, or None.

    ``shape`` is console's ``_Shape`` learnt from a line split into ``parts`` by its digit runs
    (even parts: text, odd: digits). The caller checks that no parser state is read or moved
    (no bar, no epoch counter) and that the plan reads the shape's first line as the general
    parse does.
    """
    values: list[NumberPlan] = []
    names: list[str] = []
    step = None
    if shape.pairs is not None:
        if not isinstance(shape.local, int):
            return None
        step = (shape.local - 1) // 2
        for name, span in shape.pairs:
            plan = number_plan(span, parts)
            if plan is None:
                return None
            names.append(name)
            values.append(plan)
    equal = []
    for first, second, same in shape.equal:
        a, b = number_plan(first, parts), number_plan(second, parts)
        if a is None or b is None:
            return None
        equal.append((a, b, same))
    fixed = {(index - 1) // 2: digits for index, digits in shape.fixed}
    needed = {r for plan in values for r in plan.runs()}
    needed.update(r for a, b, _ in equal for r in (*a.runs(), *b.runs()))
    if step is not None:
        needed.add(step)
    if needed & set(fixed):
        return None  # a run both read as text and as a number: not a shape learnt here
    pattern = [_SPACES_START, pattern_text(parts[0])]
    for run, index in enumerate(range(1, len(parts), 2)):
        if run in fixed:
            pattern.append(fixed[run])
        else:
            pattern.append("([0-9]+)" if run in needed else "[0-9]+")
        pattern.append(pattern_text(parts[index + 1]))
    pattern.append(_SPACES_END)
    return ShapePlan(
        pattern="".join(pattern),
        captured=tuple(sorted(needed)),
        step=step,
        names=tuple(names),
        values=tuple(values),
        equal=tuple(equal),
    )


@dataclass
class ShapeColumns:
    """The records a plan read from some lines: their line numbers (in the block), steps and
    a ``(lines, keys)`` array of values; ``slow`` the lines it matched but could not compute."""

    plan: ShapePlan
    lines: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    slow: np.ndarray


def read_shape(
    plan: ShapePlan, lines: pl.Series, at: np.ndarray
) -> tuple[np.ndarray, ShapeColumns]:
    """Match ``plan`` against ``lines`` (a block's lines numbered ``at``, cleaned or not: the
    pattern takes the spaces a strip takes): the numbers of the lines it does not match, and
    the columns of those it does."""
    if not plan.captured:
        matched = lines.str.contains(plan.pattern).to_numpy()
        columns = ShapeColumns(
            plan,
            at[matched],
            np.empty(0, np.int64),
            np.empty((int(matched.sum()), 0)),
            np.empty(0, np.int64),
        )
        return at[~matched], columns
    names = [f"r{run}" for run in plan.captured]
    # a fraction's length is its number's scale; other runs are read as integers alone
    places = {
        n.fraction
        for n in (*plan.values, *(x for a, b, _ in plan.equal for x in (a, b)))
        if n.fraction is not None
    }
    found = (
        lines.to_frame("line")
        .select(pl.col("line").str.extract_groups(plan.pattern).struct.rename_fields(names))
        .unnest("line")
    )
    matched = found[names[0]].is_not_null().to_numpy()
    groups = found.filter(pl.col(names[0]).is_not_null()).select(
        *(pl.col(c).cast(pl.Int64, strict=False).fill_null(-1).alias(c) for c in names),
        *(
            pl.col(c).str.len_bytes().cast(pl.Int64).alias("n" + c)
            for run, c in zip(plan.captured, names, strict=True)
            if run in places
        ),
    )
    runs = {
        run: (groups[c].to_numpy(), groups["n" + c].to_numpy() if run in places else None)
        for run, c in zip(plan.captured, names, strict=True)
    }
    n = groups.height
    ok = np.ones(n, dtype=bool)
    for digits, _ in runs.values():
        ok &= digits >= 0  # beyond an int64: not computed here
    if plan.step is None:
        steps = np.empty(0, np.int64)
    else:
        steps = runs[plan.step][0]
        ok &= steps < STEP_LIMIT
    values = np.empty((n, len(plan.values)))
    for j, number in enumerate(plan.values):
        values[:, j] = _number(number, runs, ok, n)
    for a, b, same in plan.equal:
        ok &= (_number(a, runs, ok, n) == _number(b, runs, ok, n)) == same
    hit = at[matched]
    columns = ShapeColumns(plan, hit[ok], steps[ok], values[ok], hit[~ok])
    return at[~matched], columns


def _number(
    plan: NumberPlan,
    runs: dict[int, tuple[np.ndarray, np.ndarray | None]],
    ok: np.ndarray,
    n: int,
) -> np.ndarray:
    """The plan's number on every line (``ok`` cleared where it is not exact here; every run
    is an int64 there already)."""
    if plan.constant is not None:
        return np.full(n, plan.constant)
    integer = runs[plan.integer][0] if plan.integer is not None else None
    fraction: np.ndarray | None = None
    places: np.ndarray | None = None
    if plan.fraction is not None:
        fraction, places = runs[plan.fraction]
    exponent = runs[plan.exponent][0] if plan.exponent is not None else None
    if fraction is not None and places is not None:
        # the integer part times 10^places below 10^18 (so no int64 overflow), then the
        # mantissa at most 2^53
        ok &= places <= 18
        places = np.minimum(places, 18)
        mantissa = fraction
        if integer is not None:
            ok &= integer < _POW10_INT[18 - places]
            mantissa = np.where(ok, integer, 0) * _POW10_INT[places] + fraction
    else:
        assert integer is not None  # a number has digits before or after its point
        mantissa = integer
    ok &= mantissa <= _MANTISSA_LIMIT
    value = mantissa.astype(np.float64)  # exact: at most 2^53
    if exponent is None and places is None:
        pass
    elif exponent is None:
        value /= _POW10[places]  # at most 10^18 here
    else:
        scale = np.minimum(exponent, 99) * (-1 if plan.exponent_negative else 1)
        if places is not None:
            scale = scale - places
        ok &= (scale >= -22) & (scale <= 22)
        power = _POW10[np.minimum(np.abs(scale), 22)]
        value = np.where(scale >= 0, value * power, value / power)
    return -value if plan.negative else value


def long_piece(
    base: int,
    shapes: Sequence[ShapeColumns],
    slow_lines: Sequence[int],
    slow_records: Sequence[tuple[int, dict[str, float]]],
    step_of: Callable[[int], int],
) -> tuple[pl.DataFrame, int]:
    """The long frame (``SCALAR_SCHEMA``) of one block's records, rows numbered from ``base``
    in line order, and the number of records: every shape's columns and the records the line
    parser read (``slow_records[i]`` from line ``slow_lines[i]``; ``step_of`` its step as the
    row collector stores it)."""
    records = [c for c in shapes if c.plan.step is not None and c.lines.size]
    if not slow_records and len(records) == 1:
        # one shape's records alone (a progress log's usual block): already in line order
        only = records[0]
        n, width = only.values.shape
        return _frame(
            np.repeat(np.arange(base, base + n, dtype=np.int64), width),
            np.repeat(only.steps, width),
            pl.Series(only.plan.names, dtype=pl.String).gather(np.tile(np.arange(width), n)),
            only.values.ravel(),
        ), n
    names: dict[str, int] = {}
    line_parts, step_parts, count_parts = [], [], []
    for columns in shapes:
        if columns.plan.step is None:
            continue
        line_parts.append(columns.lines)
        step_parts.append(columns.steps)
        count_parts.append(np.full(columns.lines.size, len(columns.plan.names), np.int64))
    slow_keys: list[int] = []
    slow_values: list[float] = []
    slow_counts = []
    for _, record in slow_records:
        slow_counts.append(len(record))
        slow_keys += [names.setdefault(k, len(names)) for k in record]
        slow_values += record.values()
    line_parts.append(np.asarray(slow_lines, dtype=np.int64))
    step_parts.append(np.array([step_of(s) for s, _ in slow_records], dtype=np.int64))
    count_parts.append(np.asarray(slow_counts, dtype=np.int64))
    lines = np.concatenate(line_parts)
    counts = np.concatenate(count_parts)
    order = np.argsort(lines, kind="stable")
    ordered_counts = counts[order]
    starts = np.empty_like(counts)
    starts[order] = np.cumsum(ordered_counts) - ordered_counts
    total = int(counts.sum())
    values = np.empty(total)
    keys = np.empty(total, dtype=np.int64)
    at = 0
    for columns in shapes:
        if columns.plan.step is None:
            continue
        n, width = columns.values.shape
        if n and width:
            where = starts[at : at + n, None] + np.arange(width)
            values[where] = columns.values
            keys[where] = [names.setdefault(k, len(names)) for k in columns.plan.names]
        at += n
    if slow_values:
        first = starts[at:]
        counted = np.asarray(slow_counts, dtype=np.int64)
        within = np.arange(len(slow_values)) - np.repeat(np.cumsum(counted) - counted, counted)
        where = np.repeat(first, counted) + within
        values[where] = slow_values
        keys[where] = slow_keys
    n_records = lines.size
    return _frame(
        np.repeat(np.arange(base, base + n_records, dtype=np.int64), ordered_counts),
        np.repeat(np.concatenate(step_parts)[order], ordered_counts),
        pl.Series(list(names), dtype=pl.String).gather(keys),
        values,
    ), n_records


def _frame(
    rows: np.ndarray, steps: np.ndarray, keys: pl.Series, values: np.ndarray
) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "row": rows,
            "step": steps,
            "key": keys,
            "value": values,
            "time": pl.Series(dtype=pl.Float64).extend_constant(None, values.size),
        },
        schema=SCALAR_SCHEMA,
    )

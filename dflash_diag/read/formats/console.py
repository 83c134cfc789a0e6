"""Console text: the progress lines trainers print when no tracker is configured.

Recognised lines (anything else is skipped, as console output mixes logs of every kind):

* ``step N: {...}``: a Python dict literal of metrics (SpecForge's console tracker), decoded
  with :func:`ast.literal_eval` (literals only: never executed);
* lines with a step and ``key: number`` or ``key=number`` pairs, e.g. SpecForge's
  ``Train - Step 120 [120/5000?], Loss: 1.2345, Acc: 0.4567`` or
  ``step=120 loss=1.23 acc=0.45``. A leading ``Train``/``Eval``/``Val`` word prefixes the keys
  (``train/loss``, ``eval/acc``) so train and eval lines at one step stay apart.

Carriage returns (progress bars) end lines too, and ANSI colour codes are removed.

Lines are parsed one by one with the parser's state (:class:`_Parser`), a line shape's reading
learnt once (:class:`_ShapeParser`); in blocks of :data:`COLUMN_MIN_BYTES` or more, the lines of
a shape that needs no state are read together, as columns (:mod:`.console_columns`).
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.formats.checks import step_value
from dflash_diag.read.records import STEP_LIMIT, ParseIssues

FORMAT = "console text"
#: Bytes read per chunk.
CHUNK_BYTES = 4 * 2**20
#: Longest line considered (a longer one is not a progress line).
_MAX_LINE = 64 * 2**10
#: Bytes looked at to tell a console log (its first progress line may follow a long preamble:
#: a config dump, warnings, a model summary).
DETECT_BYTES = 2**20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DICT_LINE = re.compile(r"(?i)\bstep\s*[:=]?\s*(\d+)\s*[:,-]?\s*(\{.*\})\s*$")
#: A bare dict literal line (HF Trainer's ``{'loss': 4.7, 'learning_rate': ..., 'epoch': 0.1}``).
_BARE_DICT = re.compile(r"(\{['\"].*\})\s*$")
_STEP = re.compile(
    r"(?i)\b(?:global[_ ]step|step|iter(?:ation)?)\b\s*[:=]?\s*\[?\s*(\d+)"
    r"(?:\s*/\s*(\d+))?"
)
#: A counter of batches within an epoch, the step when no step word is on the line.
_BATCH = re.compile(r"(?i)\bbatch(?:es)?\b\s*[:=]?\s*\[?\s*(\d+)(?:\s*/\s*(\d+))?")
_EPOCH = re.compile(r"(?i)\b(?:epoch|ep)\b\s*[:=]?\s*\[?\s*(\d+)(?:\s*/\s*(\d+))?")
#: A counter leading a line, closed by a bracket or a colon (not a date's ``2025-`` or a
#: time's ``12:30``).
_LEADING = re.compile(r"^[\[\(\s]*(\d+)\s*[\]\):](?!\d)()")
#: A tqdm bar's ``n/total`` count (``50/500 [00:10<01:30, 4.9it/s]``).
_BAR = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
_PAIR = re.compile(r"([A-Za-z_][\w/.()\-]*)\s*(?::|=)\s*(" + _NUMBER + r")(?![\w.])")
#: ``loss 4.2345`` (nanoGPT's ``iter 100: loss 4.2345, time 12.3ms``) and ``train loss 2.1,
#: val loss 2.3``: the metric words that are read without a ``:`` or ``=``.
_SPACED = re.compile(
    r"(?i)\b(?:(train(?:ing)?|val(?:id(?:ation)?)?|eval(?:uation)?|test)\s+)?"
    r"(loss|acc(?:uracy)?|lr|ppl|perplexity)\s*[:=]?\s*(" + _NUMBER + r")(?![\w.])"
)
_PREFIX = re.compile(r"(?i)^\W*(train(?:ing)?|eval(?:uation)?|val(?:id(?:ation)?)?|test)\b")
_STEP_KEYS = {"step", "global_step", "iter", "iteration", "batch", "ep", "epoch_step"}


#: A log record's head as rich's ``RichHandler`` prints it (``[16:10:05] INFO     ...``); its
#: long messages wrap onto lines indented to the message column.
_RICH_HEAD = re.compile(r"^\[?\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\]?\s+[A-Z]{4,8}\s")
_CONTINUATION = re.compile(r"^ {8,}\S")
#: ``trainer.py:220``: the source column of such a record, no metric.
_SOURCE = re.compile(r"\b[\w.-]+\.py:\d+\b")


def _clean(line: str) -> str:
    # the literals each pattern needs tested first: most lines hold neither
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if ".py:" in line:
        line = _SOURCE.sub("", line)
    return line.strip()


def logical_lines(lines):
    """Physical lines joined where a rich log record wrapped: indented lines after a record's
    head belong to it (its pairs would otherwise lose their step)."""
    pending = None
    for line in lines:
        plain = _ANSI.sub("", line) if "\x1b" in line else line
        if pending is not None and _CONTINUATION.match(plain):
            pending += " " + plain.strip()
            continue
        if pending is not None:
            yield pending
            pending = None
        if _RICH_HEAD.match(plain):
            pending = plain
        else:
            yield line
    if pending is not None:
        yield pending


def looks_like_console(head: bytes) -> bool:
    """Whether some of the first lines are progress lines (a step and numbers)."""
    text = head.decode("utf-8", "replace")
    parser = _Parser()
    return any(parser.parse(line) is not None for line in logical_lines(re.split(r"[\r\n]+", text)))


def _kind(word: str) -> str:
    word = word.lower()
    return "train" if word.startswith("train") else "test" if word == "test" else "eval"


def _dict_values(text: str) -> dict[str, float] | None:
    try:
        record = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(record, dict):
        return None
    values = {
        str(k): float(v)
        for k, v in record.items()
        if isinstance(v, float)
        or (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**1023)
    }
    return values or None


def _step_match(line: str) -> tuple[re.Match[str], bool] | None:
    """The step's match and whether it is an epoch-only log's (the epoch is the step), or None."""
    step_match = _STEP.search(line) or _BATCH.search(line)
    if step_match is not None:
        return step_match, False
    # an epoch-only log (``Epoch 1/35, Train Loss: 1.63``): the epoch is the step; else a
    # counter leading the line (``[ (3 ) Loss: 0.03, ...``, ``12: loss=...``)
    step_match = _EPOCH.search(line) or _LEADING.match(line)
    return None if step_match is None else (step_match, True)


def _no_span(start: int, end: int) -> None:
    return None


def _pairs(
    line: str,
    span: Callable[[int, int], Any],
    key_digits: Callable[[int, int], None] | None = None,
    decided: Callable[[Any, Any, bool], None] | None = None,
) -> dict[str, tuple[float, Any]]:
    """A progress line's metrics, each with ``span(start, end)`` of its number: the one reading
    of the rules for the general parse (spans unused) and the shape cache's learning, which is
    told the key texts (``key_digits``) and the equalities that decided a name (``decided``)."""
    pairs: dict[str, tuple[float, Any]] = {}
    for match in _PAIR.finditer(line):
        if key_digits is not None:
            key_digits(*match.span(1))
        key = match.group(1).lower()
        if key in _STEP_KEYS:
            continue
        pairs[key] = (float(match.group(2)), span(*match.span(2)))
    for match in _SPACED.finditer(line):
        kind, key, value = match.groups()
        name, number, at = key.lower(), float(value), span(*match.span(3))
        if kind:
            # "Train Loss: 1.6, Test Acc: 59.9": the qualifier belongs to the name
            if name in pairs:
                equal = pairs[name][0] == number
                if decided is not None:
                    decided(pairs[name][1], at, equal)
                if equal:
                    del pairs[name]
            pairs[f"{_kind(kind)}/{name}"] = (number, at)
        else:
            pairs.setdefault(name, (number, at))
    pairs.pop("epoch_step", None)
    prefix = _PREFIX.match(line) if pairs else None
    if prefix:
        kind = _kind(prefix.group(1))
        pairs = {k if "/" in k else f"{kind}/{k}": v for k, v in pairs.items()}
    return pairs


class _Parser:
    """Line by line, with what the lines before told: the training bar's count (HF's dict lines
    carry no step) and the epoch, so an epoch-local counter (``Step 10/6501`` from 1 again at
    every epoch) becomes a global step: ``epoch offset + counter``, the offset growing by the
    counter's total (``/6501``) or, without one, by the largest count of the epoch before."""

    def __init__(self) -> None:
        self.bar: dict[int, int] = {}  # bar total -> its last count
        self.n_dicts = 0
        self.epoch: int | None = None
        self.offset = 0
        self.last_local = -1
        self.epoch_max = 0
        self.epoch_total: int | None = None

    def _state(self) -> tuple:
        return (
            dict(self.bar),
            self.n_dicts,
            self.epoch,
            self.offset,
            self.last_local,
            self.epoch_max,
            self.epoch_total,
        )

    def _restore(self, state: tuple) -> None:
        (
            bar,
            self.n_dicts,
            self.epoch,
            self.offset,
            self.last_local,
            self.epoch_max,
            self.epoch_total,
        ) = state
        self.bar = dict(bar)

    def parse(self, line: str) -> tuple[int, dict[str, float]] | None:
        """The step and metrics of one line, or None (not a progress line)."""
        line = _clean(line)
        if not line or len(line) > _MAX_LINE:
            return None
        return self._parse_clean(line)

    def _parse_clean(self, line: str) -> tuple[int, dict[str, float]] | None:
        bar = _BAR.search(line)
        if bar:
            self.bar[int(bar.group(2))] = int(bar.group(1))
        match = _DICT_LINE.search(line)
        if match:
            values = _dict_values(match.group(2))
            if values:
                return int(match.group(1)), values
        bare = _BARE_DICT.search(line)
        if bare:
            values = _dict_values(bare.group(1))
            # a metrics dict, not a config dump: it names a loss or an accuracy
            if values and any("loss" in k or "acc" in k for k in values):
                # no step on the line: the training bar's count (the largest total), else the
                # lines' order
                self.n_dicts += 1
                step = self.bar[max(self.bar)] if self.bar else self.n_dicts
                return step, values
        found = _step_match(line)
        if found is None:
            return None
        step_match, by_epoch = found
        pairs = {key: number for key, (number, _) in _pairs(line, _no_span).items()}
        if not pairs:
            return None
        local = int(step_match.group(1))
        if by_epoch:
            return local, pairs
        total = int(step_match.group(2)) if step_match.group(2) else None
        return self._global_step(line, local, total), pairs

    def _global_step(self, line: str, local: int, total: int | None) -> int:
        epoch_match = _EPOCH.search(line)
        if epoch_match is None:
            return local
        return self._advance(int(epoch_match.group(1)), local, total)

    def _advance(self, epoch: int, local: int, total: int | None) -> int:
        if self.epoch is not None and epoch > self.epoch and local <= self.last_local:
            # a new epoch and the counter started again: it counts within the epoch
            self.offset += self.epoch_total or self.epoch_max
            self.epoch_max = 0
        if self.epoch is None or epoch != self.epoch:
            self.epoch = epoch
        self.last_local = local
        self.epoch_max = max(self.epoch_max, local)
        self.epoch_total = total
        return self.offset + local


# The shape cache. A log repeats a few line shapes millions of times (a tqdm bar's every update
# is a line): a line's shape is the line with its ASCII digit runs taken out. Every pattern above
# sees a digit only as ``\d``/``\w`` (never a count of digits or a digit literal), so which
# patterns match, and where, in digit-run terms, is the same for every line of one shape: the
# first line of a shape is parsed the general way once, with the spans of what it read, and the
# others read their numbers at those spans. What numbers decide (an epoch's counter starting
# again, two equal values) stays in the replayed state or in checked conditions.

_DIGITS = re.compile(r"([0-9]+)")
#: Shapes kept (a log of unique lines is parsed the general way once the cache is full).
MAX_SHAPES = 4096


class _Unsure(Exception):
    """A span ends within a digit run: the shape's parse is not the same for every line."""


#: A text span: a digit run's index in the split line, or (head, first part, end part, tail).
_Span = int | tuple[str, int, int, str]


def _text(parts: list[str], span: _Span) -> str:
    if span.__class__ is int:
        return parts[span]  # type: ignore[index]
    head, start, end, tail = span  # type: ignore[misc]
    return head + "".join(parts[start:end]) + tail


class _Shape:
    """What a line of one shape yields, in spans of its split parts (even: text, odd: digits)."""

    __slots__ = (
        "bar",
        "by_epoch",
        "checked",
        "epoch",
        "equal",
        "fixed",
        "local",
        "pairs",
        "slices",
        "total",
    )

    def __init__(self) -> None:
        #: digit runs read as text (in a key): the shape applies only where they are the same
        self.fixed: list[tuple[int, str]] = []
        #: (span, span, equal?): two values whose equality decided the parse
        self.equal: list[tuple[_Span, _Span, bool]] = []
        self.bar: tuple[_Span, _Span] | None = None
        self.pairs: list[tuple[str, _Span]] | None = None  # None: no record
        self.local: _Span = 0
        self.total: _Span | None = None
        self.epoch: _Span | None = None
        self.by_epoch = False
        #: the pairs' spans as slices of the parts, where every one is whole parts (the usual)
        self.slices: list[tuple[str, slice]] | None = None
        self.checked = False  # whether :meth:`applies` has anything to check

    def finish(self) -> _Shape:
        """The shape, with its spans made slices where they can be."""
        self.checked = bool(self.fixed or self.equal)
        if self.pairs is not None and all(
            at.__class__ is int or (at[0] == "" and at[3] == "")  # type: ignore[index]
            for _, at in self.pairs
        ):
            self.slices = [
                (key, slice(at, at + 1) if at.__class__ is int else slice(at[1], at[2]))  # type: ignore[index, operator]
                for key, at in self.pairs
            ]
        return self

    def applies(self, parts: list[str]) -> bool:
        """Whether a line of this shape parses as the learnt one."""
        for index, digits in self.fixed:
            if parts[index] != digits:
                return False
        for first, second, equal in self.equal:
            if (float(_text(parts, first)) == float(_text(parts, second))) != equal:
                return False
        return True

    def apply(self, parser: _Parser, parts: list[str]) -> tuple[int, dict[str, float]] | None:
        """The line's record, the parser's state moved on as the general parse moves it."""
        if self.bar is not None:
            count, total = self.bar
            parser.bar[int(_text(parts, total))] = int(_text(parts, count))
        if self.pairs is None:
            return None
        if self.slices is not None:
            join = "".join
            values = {key: float(join(parts[at])) for key, at in self.slices}
        else:
            values = {key: float(_text(parts, span)) for key, span in self.pairs}
        local = int(_text(parts, self.local))
        if self.by_epoch or self.epoch is None:
            return local, values
        total = None if self.total is None else int(_text(parts, self.total))
        return parser._advance(int(_text(parts, self.epoch)), local, total), values


def _learn(line: str, parts: list[str]) -> _Shape | None:
    """The shape of a cleaned line (split into ``parts``), or None: parse it the general way."""
    if _DICT_LINE.search(line) or _BARE_DICT.search(line):
        return None  # a dict literal's reading depends on its digits (``01`` is no literal)
    bounds = [0]
    for part in parts:
        bounds.append(bounds[-1] + len(part))

    def span(start: int, end: int) -> _Span:
        first = bisect.bisect_right(bounds, start) - 1
        last = bisect.bisect_left(bounds, end) - 1
        if (first % 2 and start != bounds[first]) or (last % 2 and end != bounds[last + 1]):
            raise _Unsure
        if first == last:
            return first if first % 2 else (line[start:end], 0, 0, "")
        head = tail = ""
        if first % 2 == 0:
            head, first = line[start : bounds[first + 1]], first + 1
        end_part = last + 1
        if last % 2 == 0:
            tail, end_part = line[bounds[last] : end], last
        return (
            first
            if not head and not tail and end_part == first + 1
            else (head, first, end_part, tail)
        )

    shape = _Shape()

    def fix(start: int, end: int) -> None:
        for index in range(1, len(parts), 2):
            if bounds[index] < end and bounds[index + 1] > start:
                shape.fixed.append((index, parts[index]))

    try:
        bar = _BAR.search(line)
        if bar:
            shape.bar = (span(*bar.span(1)), span(*bar.span(2)))
        found = _step_match(line)
        if found is None:
            return shape.finish()
        step_match, shape.by_epoch = found

        def decided(first: _Span, second: _Span, equal: bool) -> None:
            if first != second:
                shape.equal.append((first, second, equal))

        pairs = _pairs(line, span, fix, decided)
        if not pairs:
            return shape.finish()
        shape.pairs = [(key, at) for key, (_, at) in pairs.items()]
        shape.local = span(*step_match.span(1))
        if shape.by_epoch:
            return shape.finish()
        if step_match.group(2):
            shape.total = span(*step_match.span(2))
        epoch = _EPOCH.search(line)
        if epoch:
            shape.epoch = span(*epoch.span(1))
    except _Unsure:
        return None
    return shape.finish()


_UNSEEN = object()


class _ShapeParser(_Parser):
    """:class:`_Parser` with the shape cache: the same records and state, line for line."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: dict[tuple[str, ...], _Shape | None] = {}

    def parse(self, line: str) -> tuple[int, dict[str, float]] | None:
        # without an escape the ANSI pattern removes nothing, so the source test is exact
        line = _clean(line) if "\x1b" in line or ".py:" in line else line.strip()
        if not line or len(line) > _MAX_LINE:
            return None
        parts = _DIGITS.split(line)
        key = tuple(parts[::2])
        shape = self.shapes.get(key, _UNSEEN)
        if shape.__class__ is _Shape:
            if shape.checked and not shape.applies(parts):  # type: ignore[union-attr]
                return self._parse_clean(line)
            return shape.apply(self, parts)  # type: ignore[union-attr]
        if shape is _UNSEEN and len(self.shapes) < MAX_SHAPES:
            return self._first(key, line, parts)
        return self._parse_clean(line)

    def _first(self, key: tuple[str, ...], line: str, parts: list[str]):
        """A new shape: learnt, and kept only where its replay gives the general parse's record
        and state on this very line (a check on the learning, once a shape)."""
        shape = _learn(line, parts)
        before = self._state()
        replayed = shape.apply(self, parts) if shape is not None and shape.applies(parts) else None
        after = self._state()
        self._restore(before)
        parsed = self._parse_clean(line)
        if shape is not None and (repr(replayed) != repr(parsed) or after != self._state()):
            shape = None
        self.shapes[key] = shape
        return parsed


#: A W&B run's ``files/`` folder keeps the run's console as ``output.log``.
CONSOLE_FILES = ("output.log", "files/output.log")


def find_console_file(folder: Path) -> Path | None:
    """The console log a run folder keeps (W&B's ``files/output.log``), or None."""
    return next((folder / name for name in CONSOLE_FILES if (folder / name).is_file()), None)


# The column-wise reading (``console_columns``) of large blocks. Lines of a shape whose reading
# depends on the line alone are read together, per shape; every other line (a tqdm count, an
# epoch counter, a dict literal, colour codes, a shape seen once) goes through the parser one by
# one and in order, so the parser's state moves as it always did: the lines read together
# neither read it nor move it.

#: Blocks of fewer bytes are read line by line (the column-wise reading's fixed cost, and
#: numpy's import, are not worth it for the few thousand lines of most console logs). Either
#: way the records are the same.
COLUMN_MIN_BYTES = 2**18
#: After a block of which the columns read under :data:`_IDLE_SHARE` of the lines (tqdm bars,
#: epoch counters, dict literals: lines the parser reads anyway), this many blocks are read
#: line by line before the columns are tried again (their fixed cost would be spent for nothing).
_IDLE_BLOCKS = 3
_IDLE_SHARE = 0.1
#: A new shape is learnt for the column-wise reading once it occurs this often in a block.
_LEARN_COUNT = 2
#: A shape tried on the whole block before its lines' shapes are computed: it read at least
#: this share of the block before (the dominant shape of a progress log).
_LEADING_SHARE = 0.2
#: Characters Python's ``str.strip`` takes that are ASCII (a cleaned line with another
#: character at an end goes the line by line way: Unicode's whitespace lists differ).
_ASCII_SPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"
#: A line that may be a rich record's head (``[16:10:05] INFO``: digits, which Python's ``\d``
#: may find beyond ASCII, then a colon): its block's logical lines are joined in Python.
_MAYBE_HEAD = r"^\[?(?:[0-9]|[^\x00-\x7f]){1,2}:"


def _column_plan(lines: list[str]):
    """The shape of cleaned lines of one shape key as a ``console_columns.ShapePlan``, or None:
    its reading reads or moves the parser's state, or is not one the columns compute, or the
    plan does not read the first of ``lines`` it computes as the general parse does (none of
    them computed: not known, None)."""
    from dflash_diag.read.formats import console_columns

    line = lines[0]
    parts = _DIGITS.split(line)
    shape = _learn(line, parts)
    if shape is None or shape.bar is not None or (shape.epoch is not None and not shape.by_epoch):
        return None
    plan = console_columns.shape_plan(shape, parts)
    if plan is None:
        return None
    import numpy as np
    import polars as pl

    for line in lines:
        rest, columns = console_columns.read_shape(plan, pl.Series([line]), np.zeros(1, np.int64))
        if rest.size:
            return None  # the pattern misses a line of its own shape
        if columns.slow.size:
            continue  # a value beyond the exact reading: another line tells
        parser = _Parser()
        before = parser._state()
        parsed = parser._parse_clean(line)
        if parser._state() != before:
            return None
        replayed = (
            None
            if plan.step is None
            else (
                int(columns.steps[0]),
                dict(zip(plan.names, columns.values[0].tolist(), strict=True)),
            )
        )
        return plan if repr(replayed) == repr(parsed) else None
    return None


def _step_at(step: int) -> int:
    # the row collector's reading of an int step
    return step if -STEP_LIMIT < step < STEP_LIMIT else step_value(step)


class _ColumnReader:
    """Blocks of logical lines read column-wise where their shape allows, the rest by ``parser``."""

    def __init__(self, parser: _ShapeParser) -> None:
        self.parser = parser
        self.plans: dict[str, Any] = {}  # shape key (digit runs as "0") -> plan or None
        self.leading: list[Any] = []  # the plans tried on the whole next block first
        self.idle = 0  # blocks left to read line by line

    def wanted(self) -> bool:
        """Whether the next block is read column-wise (else line by line)."""
        if self.idle:
            self.idle -= 1
            return False
        return True

    def read(self, body: bytes, collector: RowCollector, issues: ParseIssues) -> None:
        """Read a block of whole lines (its bytes) into ``collector``."""
        import numpy as np
        import polars as pl

        from dflash_diag.read.formats import console_columns

        # decoded at once: ``\r`` and ``\n`` are ASCII, so no UTF-8 sequence spans them and
        # each line decodes as it would alone
        text = body.decode("utf-8", "replace")
        if "\r" in text:
            text = text.replace("\r", "\n")
        # the tests of a line that a block without such characters needs for none of its lines
        escapes, sources, ascii_only = "\x1b" in text, ".py:" in text, text.isascii()
        texts = pl.Series([text], dtype=pl.String).str.split("\n").explode()
        del text
        if escapes or texts.str.contains(_MAYBE_HEAD).any():
            texts = pl.Series(list(logical_lines(texts.to_list())), dtype=pl.String)
        # a line that may be too long after its cleaning: the parser tells (it says None)
        long = (texts.str.len_bytes() > _MAX_LINE).to_numpy()
        slow = [np.flatnonzero(long)]
        at = np.flatnonzero(~long) if slow[0].size else np.arange(texts.len())
        candidates = texts.gather(at) if slow[0].size else texts
        found = []
        leading = self.leading or self._probe(candidates)
        # the shapes that read most of the last block, on the lines as they are: a plan's
        # pattern takes the ASCII spaces a strip would take, and it matches no line with a
        # character the cleaning removes (no learnt shape has one) or Unicode space at an end
        for plan in leading:
            if not at.size:
                break
            rest, columns = console_columns.read_shape(plan, candidates, at)
            found.append(columns)
            if rest.size < at.size:
                candidates = candidates.gather(np.searchsorted(at, rest))
                at = rest
        if at.size:
            cleaned = candidates.str.strip_chars(_ASCII_SPACE)
            odd = pl.lit(False)
            if escapes:
                odd = odd | pl.col("line").str.contains("\x1b", literal=True)
            if sources:
                odd = odd | pl.col("line").str.contains(".py:", literal=True)
            if not ascii_only:
                # the ends of a line that Python's strip may take and polars' not
                odd = odd | pl.col("clean").str.contains(r"^[^\x00-\x7f]|[^\x00-\x7f]$")
            flags = pl.DataFrame({"line": candidates, "clean": cleaned}).select(
                # lines the cleaning changes beyond a strip, or whose strip is not surely
                # Python's: the parser reads them
                odd=odd,
                # no progress line whatever the state: empty, too long
                none=(pl.col("clean").str.len_bytes() == 0)
                | (pl.col("clean").str.len_chars() > _MAX_LINE),
            )
            odd_at, none_at = flags["odd"].to_numpy(), flags["none"].to_numpy()
            del flags
            slow.append(at[odd_at])
            keep = ~odd_at & ~none_at
            at = at[keep]
            candidates = cleaned.filter(keep)
        if at.size:
            groups = (
                pl.DataFrame(
                    {"key": candidates.str.replace_all("[0-9]+", "0"), "i": np.arange(at.size)}
                )
                .group_by("key", maintain_order=True)
                .agg(pl.col("i"))
            )
            for key, where in zip(groups["key"], groups["i"], strict=True):
                where = where.to_numpy()
                plan = self.plans.get(key, _UNSEEN)
                if plan is _UNSEEN:
                    if where.size < _LEARN_COUNT or len(self.plans) >= MAX_SHAPES:
                        slow.append(at[where])
                        continue
                    plan = self.plans[key] = _column_plan(candidates.gather(where[:4]).to_list())
                if plan is None:
                    slow.append(at[where])
                    continue
                rest, columns = console_columns.read_shape(
                    plan, candidates.gather(where), at[where]
                )
                found.append(columns)
                slow.append(rest)
        slow += [columns.slow for columns in found]
        # the lines the parser reads, in order: the state moves through them as it always did
        slow_at = np.sort(np.concatenate(slow))
        slow_lines, slow_records = [], []
        parse = self.parser.parse
        for i, line in zip(slow_at.tolist(), texts.gather(slow_at).to_list(), strict=True):
            parsed = parse(line)
            if parsed is not None:
                slow_lines.append(i)
                slow_records.append(parsed)
        piece, n_records = console_columns.long_piece(
            collector.n_records, found, slow_lines, slow_records, _step_at
        )
        collector.add_long(piece, n_records)
        issues.lines += n_records
        if sum(columns.lines.size for columns in found) < _IDLE_SHARE * texts.len():
            self.idle = _IDLE_BLOCKS
        best: dict[int, tuple[int, Any]] = {}
        for columns in found:
            n, _ = best.get(id(columns.plan), (0, None))
            best[id(columns.plan)] = (n + columns.lines.size, columns.plan)
        self.leading = [
            plan
            for n, plan in sorted(best.values(), key=lambda c: -c[0])
            if n >= _LEADING_SHARE * texts.len()
        ][:3]

    def read_lines(self, body: bytes, collector: RowCollector, issues: ParseIssues) -> None:
        """Read a block of whole lines by the parser alone into ``collector``."""
        from dflash_diag.read.formats import console_columns

        at, records = [], []
        parse = self.parser.parse
        texts = (raw.decode("utf-8", "replace") for raw in re.split(rb"[\r\n]", body))
        for i, text in enumerate(logical_lines(texts)):
            parsed = parse(text)
            if parsed is not None:
                at.append(i)
                records.append(parsed)
        piece, n_records = console_columns.long_piece(
            collector.n_records, [], at, records, _step_at
        )
        collector.add_long(piece, n_records)
        issues.lines += n_records

    def _probe(self, lines) -> list[Any]:
        """The plan of the first line's shape (learnt now if new), tried on the whole block
        when no shape read most of the last one (a log's first block: its lines' shapes are
        then computed only for those this plan does not read)."""
        if not lines.len():
            return []
        line = lines[0]
        if "\x1b" in line or ".py:" in line:
            return []
        clean = line.strip()
        if not clean or clean != line.strip(_ASCII_SPACE):
            return []
        key = _DIGITS.sub("0", clean)
        plan = self.plans.get(key, _UNSEEN)
        if plan is _UNSEEN:
            if len(self.plans) >= MAX_SHAPES:
                return []
            plan = _column_plan([clean])
            if plan is not None:
                # (a None may be this one line's doing: the shape's other lines will tell)
                self.plans[key] = plan
        return [] if plan is None else [plan]


def read_console(path: str | Path) -> Scalars:
    """Read the progress lines of a console log (or of the one a run folder keeps).

    Raises:
        DiagError: an unreadable file, or a folder without a console log.
    """
    path = Path(path)
    if path.is_dir():
        found = find_console_file(path)
        if found is None:
            raise DiagError(f"{path}: no console log ({', '.join(CONSOLE_FILES)}) in it")
        path = found
    collector = RowCollector()
    issues = ParseIssues()
    parser = _ShapeParser()
    columns: _ColumnReader | None = None
    try:
        with path.open("rb") as handle:
            pending = b""
            while True:
                block = handle.read(CHUNK_BYTES)
                buffer = pending + block
                if block:
                    cut = max(buffer.rfind(b"\n"), buffer.rfind(b"\r"))
                    body, pending = (b"", buffer) if cut < 0 else (buffer[:cut], buffer[cut + 1 :])
                    if len(pending) > _MAX_LINE:
                        pending = b""  # a runaway line: not a progress line
                    if cut < 0:
                        continue
                else:
                    body = buffer
                # a record wrapped across a block boundary loses only its own pairs
                if columns is None and len(body) >= COLUMN_MIN_BYTES:
                    columns = _ColumnReader(parser)
                if columns is not None and len(body) >= COLUMN_MIN_BYTES and columns.wanted():
                    columns.read(body, collector, issues)
                elif columns is not None:
                    # line by line, laid out as the columns' blocks are (the collector's
                    # pieces cut alike)
                    columns.read_lines(body, collector, issues)
                else:
                    texts = (raw.decode("utf-8", "replace") for raw in re.split(rb"[\r\n]", body))
                    parse, add = parser.parse, collector.add_numbers
                    for text in logical_lines(texts):
                        parsed = parse(text)
                        if parsed is not None:
                            issues.lines += 1
                            add(parsed[1], parsed[0])
                if not block:
                    break
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    return Scalars(frame=collector.frame(), format=FORMAT, issues=issues)

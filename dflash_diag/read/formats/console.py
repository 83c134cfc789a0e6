"""Console text: the progress lines trainers print when no tracker is configured.

Recognised lines (anything else is skipped, as console output mixes logs of every kind):

* ``step N: {...}``: a Python dict literal of metrics (SpecForge's console tracker), decoded
  with :func:`ast.literal_eval` (literals only: never executed);
* lines with a step and ``key: number`` or ``key=number`` pairs, e.g. SpecForge's
  ``Train - Step 120 [120/5000?], Loss: 1.2345, Acc: 0.4567`` or
  ``step=120 loss=1.23 acc=0.45``. A leading ``Train``/``Eval``/``Val`` word prefixes the keys
  (``train/loss``, ``eval/acc``) so train and eval lines at one step stay apart.

Carriage returns (progress bars) end lines too, and ANSI colour codes are removed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.records import ParseIssues

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


def logical_lines(lines):
    """Physical lines joined where a rich log record wrapped: indented lines after a record's
    head belong to it (its pairs would otherwise lose their step)."""
    pending = None
    for line in lines:
        plain = _ANSI.sub("", line)
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

    def parse(self, line: str) -> tuple[int, dict[str, float]] | None:
        line = _SOURCE.sub("", _ANSI.sub("", line)).strip()
        if not line or len(line) > _MAX_LINE:
            return None
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
        step_match = _STEP.search(line) or _BATCH.search(line)
        by_epoch = step_match is None
        if by_epoch:
            # an epoch-only log (``Epoch 1/35, Train Loss: 1.63``): the epoch is the step; else
            # a counter leading the line (``[ (3 ) Loss: 0.03, ...``, ``12: loss=...``)
            step_match = _EPOCH.search(line) or _LEADING.match(line)
            if step_match is None:
                return None
        pairs = {}
        for key, value in _PAIR.findall(line):
            if key.lower() in _STEP_KEYS:
                continue
            pairs[key.lower()] = float(value)
        for kind, key, value in _SPACED.findall(line):
            name, number = key.lower(), float(value)
            if kind:
                # "Train Loss: 1.6, Test Acc: 59.9": the qualifier belongs to the name
                if pairs.get(name) == number:
                    del pairs[name]
                pairs[f"{_kind(kind)}/{name}"] = number
            else:
                pairs.setdefault(name, number)
        pairs.pop("epoch_step", None)
        if not pairs:
            return None
        prefix = _PREFIX.match(line)
        if prefix:
            kind = _kind(prefix.group(1))
            pairs = {k if "/" in k else f"{kind}/{k}": v for k, v in pairs.items()}
        local = int(step_match.group(1))
        if by_epoch:
            return local, pairs
        total = int(step_match.group(2)) if step_match.group(2) else None
        return self._global_step(line, local, total), pairs

    def _global_step(self, line: str, local: int, total: int | None) -> int:
        epoch_match = _EPOCH.search(line)
        if epoch_match is None:
            return local
        epoch = int(epoch_match.group(1))
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


#: A W&B run's ``files/`` folder keeps the run's console as ``output.log``.
CONSOLE_FILES = ("output.log", "files/output.log")


def find_console_file(folder: Path) -> Path | None:
    """The console log a run folder keeps (W&B's ``files/output.log``), or None."""
    return next((folder / name for name in CONSOLE_FILES if (folder / name).is_file()), None)


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
    parser = _Parser()
    try:
        with path.open("rb") as handle:
            pending = b""
            while True:
                block = handle.read(CHUNK_BYTES)
                buffer = pending + block
                lines = re.split(rb"[\r\n]", buffer)
                pending = lines.pop() if block else b""
                if len(pending) > _MAX_LINE:
                    pending = b""  # a runaway line: not a progress line
                # a record wrapped across a block boundary loses only its own pairs
                texts = (
                    raw.decode("utf-8", "replace")
                    for raw in (lines if block else [*lines, pending])
                )
                for text in logical_lines(texts):
                    parsed = parser.parse(text)
                    if parsed is None:
                        continue
                    issues.lines += 1
                    step, values = parsed
                    collector.add(values, step=step)
                if not block:
                    break
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    return Scalars(frame=collector.frame(), format=FORMAT, issues=issues)

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
_STEP = re.compile(r"(?i)\b(?:global[_ ]step|step|iter(?:ation)?)\b\s*[:=]?\s*\[?\s*(\d+)"
                   r"(?:\s*/\s*(\d+))?")
#: A counter of batches within an epoch, the step when no step word is on the line.
_BATCH = re.compile(r"(?i)\bbatch(?:es)?\b\s*[:=]?\s*\[?\s*(\d+)(?:\s*/\s*(\d+))?")
_EPOCH = re.compile(r"(?i)\b(?:epoch|ep)\b\s*[:=]?\s*\[?\s*(\d+)(?:\s*/\s*\d+)?")
#: A tqdm bar's ``n/total`` count (``50/500 [00:10<01:30, 4.9it/s]``).
_BAR = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
_PAIR = re.compile(r"([A-Za-z_][\w/.()\-]*)\s*(?::|=)\s*(" + _NUMBER + r")(?![\w.])")
#: ``loss 4.2345`` (nanoGPT's ``iter 100: loss 4.2345, time 12.3ms``) and ``train loss 2.1,
#: val loss 2.3``: the metric words that are read without a ``:`` or ``=``.
_SPACED = re.compile(r"(?i)\b(?:(train(?:ing)?|val(?:id(?:ation)?)?|eval(?:uation)?)\s+)?"
                     r"(loss|acc(?:uracy)?|lr|ppl|perplexity)\s+(" + _NUMBER + r")(?![\w.])")
_PREFIX = re.compile(r"(?i)^\W*(train(?:ing)?|eval(?:uation)?|val(?:id(?:ation)?)?|test)\b")
_STEP_KEYS = {"step", "global_step", "iter", "iteration", "batch", "ep", "epoch_step"}


def looks_like_console(head: bytes) -> bool:
    """Whether some of the first lines are progress lines (a step and numbers)."""
    text = head.decode("utf-8", "replace")
    parser = _Parser()
    return any(parser.parse(line) is not None for line in re.split(r"[\r\n]+", text))


def _kind(word: str) -> str:
    word = word.lower()
    return "train" if word.startswith("train") else "eval"


def _dict_values(text: str) -> dict[str, float] | None:
    try:
        record = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(record, dict):
        return None
    values = {str(k): float(v) for k, v in record.items()
              if isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool)
                                          and abs(v) < 2**1023)}
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
        line = _ANSI.sub("", line).strip()
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
        if step_match is None:
            return None
        pairs = {}
        for key, value in _PAIR.findall(line):
            if key.lower() in _STEP_KEYS:
                continue
            pairs[key.lower()] = float(value)
        for kind, key, value in _SPACED.findall(line):
            name = key.lower()
            if kind:
                name = f"{_kind(kind)}/{name}"
            pairs.setdefault(name, float(value))
        pairs.pop("epoch_step", None)
        if not pairs:
            return None
        prefix = _PREFIX.match(line)
        if prefix:
            kind = _kind(prefix.group(1)) if not prefix.group(1).lower().startswith("test") \
                else "test"
            pairs = {k if "/" in k else f"{kind}/{k}": v for k, v in pairs.items()}
        local = int(step_match.group(1))
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


def read_console(path: str | Path) -> Scalars:
    """Read the progress lines of a console log.

    Raises:
        DiagError: an unreadable file.
    """
    path = Path(path)
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
                for raw in lines if block else [*lines, pending]:
                    parsed = parser.parse(raw.decode("utf-8", "replace"))
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

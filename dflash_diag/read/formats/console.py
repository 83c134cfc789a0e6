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

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DICT_LINE = re.compile(r"(?i)\bstep\s*[:=]?\s*(\d+)\s*[:,-]?\s*(\{.*\})\s*$")
_STEP = re.compile(r"(?i)\b(?:global[_ ]step|step|iter(?:ation)?)\b\s*[:=]?\s*\[?\s*(\d+)")
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
_PAIR = re.compile(r"([A-Za-z_][\w/.()\-]*)\s*(?::|=)\s*(" + _NUMBER + r")(?![\w.])")
_PREFIX = re.compile(r"(?i)^\W*(train(?:ing)?|eval(?:uation)?|val(?:idation)?)\b")
_STEP_KEYS = {"step", "global_step", "iter", "iteration"}


def looks_like_console(head: bytes) -> bool:
    """Whether some of the first lines are progress lines (a step and numbers)."""
    text = head.decode("utf-8", "replace")
    hits = sum(1 for line in re.split(r"[\r\n]+", text)[:200] if _parse_line(line) is not None)
    return hits >= 1


def _parse_line(line: str) -> tuple[int, dict[str, float]] | None:
    line = _ANSI.sub("", line).strip()
    if not line or len(line) > _MAX_LINE:
        return None
    match = _DICT_LINE.search(line)
    if match:
        try:
            record = ast.literal_eval(match.group(2))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            record = None
        if isinstance(record, dict):
            values = {str(k): float(v) for k, v in record.items()
                      if isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool)
                                                  and abs(v) < 2**1023)}
            if values:
                return int(match.group(1)), values
    step_match = _STEP.search(line)
    if step_match is None:
        return None
    pairs = {}
    for key, value in _PAIR.findall(line):
        if key.lower() in _STEP_KEYS:
            continue
        pairs[key.lower()] = float(value)
    if not pairs:
        return None
    prefix = _PREFIX.match(line)
    if prefix:
        word = prefix.group(1).lower()
        kind = "train" if word.startswith("train") else "eval"
        pairs = {k if "/" in k else f"{kind}/{k}": v for k, v in pairs.items()}
    return int(step_match.group(1)), pairs


def read_console(path: str | Path) -> Scalars:
    """Read the progress lines of a console log.

    Raises:
        DiagError: an unreadable file.
    """
    path = Path(path)
    collector = RowCollector()
    issues = ParseIssues()
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
                    parsed = _parse_line(raw.decode("utf-8", "replace"))
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

"""Output samples in README.md and docs/*.md, checked against (or regenerated from) the CLI.

A sample is a fenced ``text`` block right after a marker comment that says which command made it::

    <!-- sample: COLUMNS=100 dflash-diag converge sample_logs/train.jsonl · from "run " to "event " -->

``from``/``to`` (optional) cut an excerpt: from the first output line that starts with the one
prefix to the next line that starts with the other and its indented continuation lines. The command runs in-process
through typer's runner (a pipe, so plain text) from the repository root. Durations measured
against the wall clock ("last record 3 h ago") depend on when the sample is made, so both sides
are compared with them replaced by ``<age>``.

``python -m tests.doc_samples`` lists the stale samples; ``--write`` regenerates them.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/*.md")

MARKER = re.compile(
    r"<!-- sample: (?P<cmd>.+?)"
    r'(?: · from "(?P<start>[^"]*)"(?: to "(?P<end>[^"]*)")?)? -->\n```text\n'
    r"(?P<body>.*?)```",
    re.DOTALL,
)
# "1 d 2 h", "11 h 50 min", "42 s": ages that follow from the wall clock at the time of the run
AGE = re.compile(r"\b\d+ (?:d|h|min|s)(?: \d+ (?:h|min|s))?(?= ago| \(--stall)")


@dataclass(frozen=True)
class Sample:
    """One marked block: where it is, the command that makes it, its text."""

    path: Path
    command: str
    start: str | None
    end: str | None
    body: str
    span: tuple[int, int]  # of the body in the file


def samples(path: Path) -> list[Sample]:
    text = path.read_text(encoding="utf-8")
    return [
        Sample(path, m["cmd"], m["start"], m["end"], m["body"], m.span("body"))
        for m in MARKER.finditer(text)
    ]


def all_samples() -> list[Sample]:
    found: list[Sample] = []
    for pattern in DOCS:
        for path in sorted(ROOT.glob(pattern)):
            found.extend(samples(path))
    return found


def run(command: str) -> str:
    """The output of a ``[VAR=value ...] dflash-diag ARGS`` command line, lines right-stripped."""
    from typer.testing import CliRunner

    from dflash_diag.cli import app

    words = shlex.split(command)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if not words or words[0] != "dflash-diag":
        raise ValueError(f"a sample command must run dflash-diag: {command!r}")
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, words[1:], env=env)
    finally:
        os.chdir(cwd)
    if result.exit_code not in (0, 1):
        raise RuntimeError(f"{command!r} exited {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()) + "\n"


def excerpt(output: str, start: str | None, end: str | None) -> str:
    lines = output.splitlines()
    first = 0
    if start is not None:
        first = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
        if first is None:
            raise ValueError(f"no output line starts with {start!r}")
    last = len(lines) - 1
    if end is not None:
        last = next((i for i in range(first + 1, len(lines)) if lines[i].startswith(end)), None)
        if last is None:
            raise ValueError(f"no output line after {start!r} starts with {end!r}")
        while last + 1 < len(lines) and lines[last + 1].startswith(" "):
            last += 1  # the end line's continuation lines belong to it
    return "\n".join(lines[first : last + 1]) + "\n"


def expected(sample: Sample) -> str:
    return excerpt(run(sample.command), sample.start, sample.end)


def comparable(text: str) -> str:
    return AGE.sub("<age>", text)


def write(stale: list[tuple[Sample, str]]) -> None:
    by_path: dict[Path, list[tuple[Sample, str]]] = {}
    for sample, new in stale:
        by_path.setdefault(sample.path, []).append((sample, new))
    for path, edits in by_path.items():
        text = path.read_text(encoding="utf-8")
        for sample, new in sorted(edits, key=lambda e: e[0].span, reverse=True):
            a, b = sample.span
            text = text[:a] + new + text[b:]
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate the stale samples")
    args = parser.parse_args(argv)
    stale = []
    for sample in all_samples():
        new = expected(sample)
        if comparable(new) != comparable(sample.body):
            stale.append((sample, new))
            print(f"stale: {sample.path.relative_to(ROOT)}: {sample.command}")
    if args.write and stale:
        write(stale)
        print(f"rewrote {len(stale)} sample(s)")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())

"""The real-log harness: every corpus log through the six commands, checked against its
recorded expectation, and watch's answer (every key its JSON shares with converge's but the
windows and the live alerts) and compare's (verdict and forecast of the regime over converge's
records) against converge's.

A corpus root (``shared/wild``, ``shared/wild_heldout``) holds one folder per public repository
with its logs at their original relative paths. An item is one log as a user would name it: a
file (``trainer_state.json``, ``metrics.csv``, JSONL, console text, ``mlflow.db``), or a folder
for the formats that are folders (an ``mlruns`` store, a TensorBoard run, a ``wandb`` folder).

The expectations file (``tests/diag/wild_expectations.toml``) records per item either
``expect = "read"`` with the windows ``converge`` makes at the default window and the metrics
read, or ``expect = "error"`` with a substring of the one clear line every command must give.
``tests/diag/test_wild.py`` runs a fast subset in the suite; ``benchmarks/bench_wild.py`` runs
all and prints the shares.

Commands run in-process through the real CLI entry point (typer's ``CliRunner``), each under a
wall-clock limit (``SIGALRM``), so a hang is a timeout, not a stuck run.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from dflash_diag.cli import app

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the harness needs 3.11's TOML reader
    tomllib = None

ROOT = Path(__file__).resolve().parents[2]
EXPECTATIONS = ROOT / "tests" / "diag" / "wild_expectations.toml"
#: The commands every item goes through (the log's path is appended; compare gets it twice).
COMMANDS: dict[str, tuple[str, ...]] = {
    "converge": ("converge",),
    "converge-json": ("converge", "-f", "json"),
    "compare": ("compare",),
    "watch": ("watch", "--once"),
    "watch-json": ("watch", "--once", "-f", "json"),
    "compare-json": ("compare", "-f", "json"),
}
#: What every command must answer alike: converge's JSON against watch's frame on the same bytes
#: (every key both have but the windows, which watch shows the latest of).
SAME_ANSWER = (
    "verdict",
    "forecast",
    "restarts",
    "restart_details",
    "acceptance",
    "drafter",
    "lr",
    "window",
    "alerts",
    "schedule_events",
    "skipped_lines",
    "nonfinite",
    "notes",
)
#: The alerts of a live view alone (the file's clock and state), which converge never gives.
LIVE_ALERTS = {"stall", "reset", "nonfinite", "missing"}
#: Files that are never a log of their own (configs, the corpus' own records).
_NOT_LOGS = {
    "SOURCES.md",
    "index.csv",
    "meta.yaml",
    "hparams.yaml",
    "config.yaml",
    "README.md",
    "LICENSE",
    "params",
    "tags",
}
_LOG_SUFFIXES = (
    ".json",
    ".jsonl",
    ".csv",
    ".tsv",
    ".log",
    ".txt",
    ".out",
    ".gz",
    ".db",
    ".wandb",
    ".ndjson",
)
#: Canonical metric columns reported per item (and the validation series from eval events).
METRIC_COLUMNS = (
    "loss",
    "acc",
    "lr",
    "grad_norm",
    "epoch",
    "n_tokens",
    "tok_per_sec",
    "tau_train",
    "acc_pos",
)


@dataclass(frozen=True)
class Expectation:
    """One corpus log's recorded outcome (see the module docstring)."""

    path: str
    expect: str
    windows: int | None = None
    metrics: tuple[str, ...] = ()
    error: str | None = None
    fast: bool = False
    note: str = ""


@dataclass
class Outcome:
    """What one command did on one item."""

    command: str
    kind: str  # "read", "error" (one clear line), "traceback", "timeout", "unclear"
    exit_code: int | None
    line: str = ""
    windows: int | None = None
    seconds: float = 0.0
    answer: dict | None = None  # the JSON's SAME_ANSWER keys (converge-json, watch-json)


@dataclass
class ItemResult:
    """The commands' outcomes on one item, and what was read."""

    path: str
    outcomes: list[Outcome] = field(default_factory=list)
    metrics: tuple[str, ...] = ()

    @property
    def windows(self) -> int | None:
        return next((o.windows for o in self.outcomes if o.command == "converge-json"), None)

    def answer(self, command: str) -> dict | None:
        """The SAME_ANSWER keys of ``command``'s JSON (None: it gave no JSON)."""
        return next((o.answer for o in self.outcomes if o.command == command), None)

    def kinds(self) -> set[str]:
        return {o.kind for o in self.outcomes}


def load_expectations(path: Path = EXPECTATIONS) -> dict[str, Expectation]:
    """The expectations by item path (relative to the corpus root)."""
    if not path.is_file() or tomllib is None:
        return {}
    data = tomllib.loads(path.read_text())
    out = {}
    for entry in data.get("log", []):
        out[entry["path"]] = Expectation(
            path=entry["path"],
            expect=entry["expect"],
            windows=entry.get("windows"),
            metrics=tuple(entry.get("metrics", ())),
            error=entry.get("error"),
            fast=bool(entry.get("fast", False)),
            note=entry.get("note", ""),
        )
    return out


def discover(root: Path) -> list[str]:
    """The items of a corpus root, as paths relative to it (sorted)."""
    items: set[str] = set()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if here.name == "mlruns" or (here.name == "wandb" and here != root):
            items.add(here.relative_to(root).as_posix())
            dirs[:] = []
            continue
        if any("tfevents" in f for f in files):
            items.add(here.relative_to(root).as_posix())
            dirs[:] = [d for d in dirs if not any("tfevents" in f for f in os.listdir(here / d))]
            files = [f for f in files if "tfevents" not in f]
        dirs.sort()
        for name in files:
            if name in _NOT_LOGS or here == root:
                continue
            if name.endswith(_LOG_SUFFIXES) or name == "trainer_state.json":
                items.add((here / name).relative_to(root).as_posix())
    return sorted(items)


def indexed(root: Path) -> list[str] | None:
    """The items listed in the corpus' ``index.csv`` (column ``path``), when it has one."""
    index = root / "index.csv"
    if not index.is_file():
        return None
    with index.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    out = []
    for row in rows:
        raw = (row.get("path") or "").strip()
        for prefix in (f"{root.as_posix().rstrip('/')}/", "shared/wild_heldout/", "shared/wild/"):
            if raw.startswith(prefix):
                raw = raw[len(prefix) :]
                break
        if raw and (root / raw).exists():
            out.append(raw)
    return sorted(set(out)) or None


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_command(
    command: str, path: Path, timeout: float = 60.0, options: tuple[str, ...] = ()
) -> Outcome:
    """One command on one item (with ``options`` after it), classified."""
    args = [*COMMANDS[command], str(path)] + ([str(path)] if command.startswith("compare") else [])
    args += options
    runner = CliRunner()
    start = time.perf_counter()
    try:
        with _time_limit(timeout):
            result = runner.invoke(app, args, catch_exceptions=True)
    except TimeoutError:
        return Outcome(command, "timeout", None, seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if isinstance(result.exception, TimeoutError):
        return Outcome(command, "timeout", None, seconds=seconds)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        name = type(result.exception).__name__
        return Outcome(
            command, "traceback", result.exit_code, f"{name}: {result.exception}", seconds=seconds
        )
    stderr_lines = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code == 0:
        windows = answer = None
        if command.endswith("-json"):
            try:
                report = json.loads(result.stdout)
                answer = _answer(report)
                windows = None if command == "compare-json" else len(report["windows"])
            except (ValueError, KeyError, TypeError, IndexError):
                return Outcome(
                    command, "unclear", 0, f"{command}: not a JSON report", seconds=seconds
                )
        return Outcome(command, "read", 0, windows=windows, seconds=seconds, answer=answer)
    errors = [line for line in stderr_lines if line.startswith("dflash-diag: error:")]
    if result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output:
        return Outcome(command, "error", 2, errors[0], seconds=seconds)
    return Outcome(
        command, "unclear", result.exit_code, " | ".join(stderr_lines[-3:]), seconds=seconds
    )


def _answer(report: dict) -> dict:
    """What a JSON report answers: converge's and watch's SAME_ANSWER keys and their records'
    span (first step, count); compare's verdict and forecast for each regime, keyed by its span."""
    if "regimes" in report:
        return {
            (r["start_step"], r["n"]): {
                key: r["diagnosis"].get(key) for key in ("verdict", "forecast")
            }
            for r in report["regimes"]
        }
    answer = {key: report.get(key) for key in SAME_ANSWER}
    answer["alerts"] = [a for a in answer["alerts"] or [] if a.get("kind") not in LIVE_ALERTS]
    # the first step and the records analysed, as a regime gives them
    answer["span"] = (report["windows"][0]["start"], sum(w["n"] for w in report["windows"]))
    return answer


def metrics_read(path: Path) -> tuple[str, ...]:
    """The canonical metrics read from a log with no flags (validation as ``eval_*``)."""
    from dflash_diag.read.jsonl import load_log
    from dflash_diag.read.validation import validation_series_names

    log = load_log([str(path)])
    found = [
        c
        for c in METRIC_COLUMNS
        if c in log.metrics.columns and log.metrics[c].null_count() < log.metrics.height
    ]
    return tuple(found) + validation_series_names(log)


def run_item(
    root: Path, item: str, timeout: float = 60.0, commands: tuple[str, ...] = tuple(COMMANDS)
) -> ItemResult:
    """Every command on one item (and, when it reads, the metrics it holds)."""
    path = root / item
    result = ItemResult(item, [run_command(c, path, timeout) for c in commands])
    if any(o.kind == "read" for o in result.outcomes if o.command.startswith("converge")):
        with contextlib.suppress(Exception):
            result.metrics = metrics_read(path)
    return result


#: Option sets under which watch must still answer as converge does (``bench_wild --options``):
#: a given window (small enough that watch prunes), every phase, the trend and target settings,
#: and a first step a third into the log (appended per item).
OPTION_SETS: tuple[tuple[str, ...], ...] = (
    ("--window", "20"),
    ("--phase", "all"),
    ("--no-noise-aware",),
    ("--threshold", "0.01"),
    ("--target-tau", "3"),
)


def option_problems(root: Path, item: str, timeout: float = 60.0) -> tuple[int, list[str]]:
    """converge and watch on ``item`` under each of :data:`OPTION_SETS` and a ``--from-step`` a
    third into its windows: how many option sets both read, and where watch's answer differs."""
    path = root / item
    try:
        with _time_limit(timeout):
            stdout = CliRunner().invoke(app, ["converge", str(path), "-f", "json"]).stdout
        windows = json.loads(stdout)["windows"]
    except (TimeoutError, ValueError, KeyError, TypeError):
        return 0, []  # converge does not read it: nothing to compare
    if not windows:
        return 0, []
    third = windows[len(windows) // 3]["start"]
    compared, out = 0, []
    for options in (*OPTION_SETS, ("--from-step", str(third))):
        converge = run_command("converge-json", path, timeout, options).answer
        watch = run_command("watch-json", path, timeout, options).answer
        if converge is None or watch is None:
            if (converge is None) != (watch is None):
                out.append(f"{' '.join(options)}: only one of converge and watch reads it")
            continue
        compared += 1
        out.extend(
            f"{' '.join(options)}: watch's {key} is not converge's"
            for key in SAME_ANSWER
            if converge[key] != watch[key]
        )
    return compared, out


def problems(expectation: Expectation | None, result: ItemResult) -> list[str]:
    """How an item's outcomes differ from its expectation (empty: as recorded)."""
    out = []
    for outcome in result.outcomes:
        if outcome.kind in ("traceback", "timeout", "unclear"):
            out.append(f"{outcome.command}: {outcome.kind} {outcome.line}".rstrip())
    converge, watch = result.answer("converge-json"), result.answer("watch-json")
    if converge is not None and watch is not None:
        out.extend(
            f"watch's {key} is not converge's" for key in SAME_ANSWER if converge[key] != watch[key]
        )
    # compare's regime over converge's records (a one-phase log's, a migration's new phase)
    regimes = result.answer("compare-json")
    if converge is not None and regimes is not None and converge["span"] in regimes:
        regime = regimes[converge["span"]]
        out.extend(
            f"compare's {key} of the records {converge['span']} is not converge's"
            for key in ("verdict", "forecast")
            if converge[key] != regime[key]
        )
    if expectation is None:
        return out
    if expectation.expect == "read":
        for outcome in result.outcomes:
            if outcome.kind == "error":
                out.append(f"{outcome.command}: refused: {outcome.line}")
        if (
            expectation.windows is not None
            and result.windows is not None
            and result.windows != expectation.windows
        ):
            out.append(f"windows {result.windows}, expected {expectation.windows}")
        if (
            result.metrics
            and expectation.metrics
            and set(result.metrics) != set(expectation.metrics)
        ):
            out.append(f"metrics {list(result.metrics)}, expected {list(expectation.metrics)}")
    else:
        for outcome in result.outcomes:
            if outcome.kind == "read":
                out.append(f"{outcome.command}: read, expected the error {expectation.error!r}")
            elif (
                outcome.kind == "error"
                and expectation.error
                and expectation.error not in outcome.line
            ):
                out.append(f"{outcome.command}: {outcome.line!r} lacks {expectation.error!r}")
    return out


def reads_with_no_flags(result: ItemResult) -> bool:
    """Every command read the log (and converge made at least one window)."""
    return result.kinds() == {"read"} and bool(result.windows)


def gives_one_clear_line(result: ItemResult) -> bool:
    """Every command refused it with one clear line and exit 2."""
    return result.kinds() == {"error"}


def draft_entry(result: ItemResult) -> str:
    """A TOML entry recording what an item does now (for a person to check and keep)."""
    if reads_with_no_flags(result):
        metrics = ", ".join(f'"{m}"' for m in result.metrics)
        return (
            f'[[log]]\npath = "{result.path}"\nexpect = "read"\nwindows = {result.windows}\n'
            f"metrics = [{metrics}]\n"
        )
    line = next((o.line for o in result.outcomes if o.kind == "error"), "")
    return f'[[log]]\npath = "{result.path}"\nexpect = "error"\nerror = "{error_phrase(line)}"\n'


#: The phrases that tell one clear line from another (the rest names the file and its series).
_PHRASES = (
    "cannot tell the format",
    "only validation series",
    "no series maps to loss or acc",
    "no progress line",
    "Git LFS pointer",
    "no record has a 'step' field",
    "no records in it",
    "empty log",
    "not a TensorBoard event file",
    "no such file",
    "one JSON document",
    "not a trainer_state.json",
    "not a history of per-epoch lists",
)


def error_phrase(line: str) -> str:
    """The telling phrase of an error line, for an expectation."""
    found = next((p for p in _PHRASES if p in line), None)
    return found if found is not None else line.split(": ")[-1][:60].replace('"', "'")

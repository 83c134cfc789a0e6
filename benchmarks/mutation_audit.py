"""Mutation audit: apply plausible one-line bugs one at a time and see whether the tests notice.

Each mutation replaces one exact piece of a source line (it must occur exactly once in its file),
runs the given test files (``pytest -x -q``), records whether they failed (caught) or passed
(survived), and restores the file byte for byte from a copy taken before (never from git: the
working tree may hold uncommitted work). The list below is the issue 19 audit; edit it for the
next one. Results are printed as a markdown table (for docs/reliability.md).

    python benchmarks/mutation_audit.py               # every mutation
    python benchmarks/mutation_audit.py --only 3,7    # some of them
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

READERS = (
    "tests/diag/test_reader_counts.py",
    "tests/diag/test_reader_bounds.py",
    "tests/diag/test_formats_readers.py",
    "tests/diag/test_formats_canonical.py",
    "tests/diag/test_formats_cli.py",
)
JSONL = (
    "tests/diag/test_reader.py",
    "tests/diag/test_reliability.py",
    "tests/diag/test_reader_counts.py",
    "tests/diag/test_reader_bounds.py",
)
ANALYSIS = (
    "tests/diag/test_acceptance.py",
    "tests/diag/test_diagnosis.py",
    "tests/diag/test_walk_evidence.py",
    "tests/diag/test_cli_converge.py",
    "tests/diag/test_mutation_guards.py",
)
COMPARE = (
    "tests/diag/test_compare.py",
    "tests/diag/test_compare_cli.py",
    "tests/diag/test_mutation_guards.py",
)
WATCH = (
    "tests/diag/test_watch.py",
    "tests/diag/test_watch_cli.py",
    "tests/diag/test_mutation_guards.py",
)
WINDOWS = (
    "tests/diag/test_windows_trend.py",
    "tests/diag/test_cli_converge.py",
    "tests/diag/test_verdict.py",
    "tests/diag/test_mutation_guards.py",
)


@dataclass(frozen=True)
class Mutation:
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


M = Mutation
MUTATIONS: list[Mutation] = [
    # -- this round's own changes (issue 19) --
    M(
        "dflash_diag/read/formats/tensorboard.py",
        "offset += consumed",
        "offset = consumed",
        READERS,
        "TensorBoard: file offset of the pending record not accumulated",
    ),
    M(
        "dflash_diag/read/formats/tensorboard.py",
        "if offset + 16 + length > _size(handle):",
        "if offset + length > _size(handle):",
        READERS,
        "TensorBoard: torn-tail test of an oversize record forgets the 16 framing bytes",
    ),
    M(
        "dflash_diag/read/formats/wandb_offline.py",
        "data = stream.read(BLOCK * CHUNK_BLOCKS)",
        "data = stream.read(BLOCK * CHUNK_BLOCKS - 7)",
        READERS,
        "W&B: chunks not block-aligned",
    ),
    M(
        "dflash_diag/read/formats/wandb_offline.py",
        "            if joined > MAX_RECORD_BYTES:",
        "            if len(payload) > MAX_RECORD_BYTES:",
        READERS,
        "W&B: the cap applied to one piece, not to the joined record",
    ),
    M(
        "dflash_diag/read/formats/mlflow_store.py",
        'pl.when(pl.col("step").is_null()).then(pl.lit(0, pl.Int64))',
        'pl.when(pl.col("step").is_null()).then(pl.lit(None, pl.Int64))',
        READERS,
        "MLflow: a line without a step read as no step, not step 0",
    ),
    M(
        "dflash_diag/read/formats/mlflow_store.py",
        "parts = parts.filter(pl.any_horizontal(pl.all().is_not_null()))",
        "parts = parts.filter(pl.all_horizontal(pl.all().is_not_null()))",
        READERS,
        "MLflow: the blank-line filter drops lines without a step",
    ),
    M(
        "dflash_diag/read/formats/mlflow_store.py",
        'number = float("nan") if is_nan else _number(value)',
        "number = _number(value)",
        READERS,
        "MLflow SQLite: is_nan ignored (NaN read as the stored 0)",
    ),
    M(
        "dflash_diag/read/formats/mlflow_store.py",
        "                    steps.append(step_value(step))",
        "                    steps.append(int(step))",
        READERS,
        "MLflow SQLite: a REAL step beyond int64 taken as it is",
    ),
    M(
        "dflash_diag/read/formats/checks.py",
        'return (pl.col("step") > -STEP_LIMIT) & (pl.col("step") < STEP_LIMIT)',
        'return pl.col("step").abs() < STEP_LIMIT',
        READERS + JSONL,
        "steps: range test by abs() (overflows at -2^63)",
    ),
    M(
        "dflash_diag/read/formats/checks.py",
        "    if abs(number) >= STEP_LIMIT:",
        "    if abs(number) > STEP_LIMIT:",
        READERS,
        "steps: 2^53 itself taken as in range",
    ),
    M(
        "dflash_diag/read/formats/checks.py",
        "exprs.append((~pl.col(name).explode().is_finite()).sum().alias(name))",
        "exprs.append(pl.col(name).explode().is_nan().sum().alias(name))",
        READERS,
        "NaN count: Inf list elements not counted",
    ),
    M(
        "dflash_diag/read/formats/checks.py",
        "        issues.bad_step += rows.len()",
        "        issues.bad_step += len(bad_rows)",
        READERS,
        "bad steps counted per piece, not per record",
    ),
    M(
        "dflash_diag/read/formats/canonical.py",
        'if n not in ("step", "time") or n in res.scalars])',
        'if n != "step"])',
        READERS,
        "NaN count: the format's own time column counted (TensorBoard events without wall time)",
    ),
    M(
        "dflash_diag/read/formats/canonical.py",
        "        return step_value(value)  # exactly: an int beyond the float range is out of range too",
        "        return value",
        READERS,
        "RowCollector: an int step taken as it is (beyond int64)",
    ),
    M(
        "dflash_diag/read/jsonl.py",
        "    if longest is None or longest <= MAX_LIST_ELEMENTS:",
        "    if longest is None or longest >= MAX_LIST_ELEMENTS:",
        JSONL,
        "JSONL: lists cut only when short (comparison reversed)",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "self._means[column] = mean_positions(self.rows, column, self.block_size - 1)",
        "self._means[column] = mean_positions(self.rows, column, self.block_size)",
        ANALYSIS,
        "list-based taus read B positions, not B-1",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        'means = position_means_by_group(rows, column, "_window", inp.block_size - 1)',
        'means = position_means_by_group(rows, column, "_window")',
        ANALYSIS,
        "per-window tau series reads every position",
    ),
    M(
        "dflash_diag/read/formats/csv_metrics.py",
        "for index, cell in enumerate(row[:len(header)]):",
        "for index, cell in enumerate(row[1:len(header)]):",
        READERS,
        "wide CSV: cells shifted by one column",
    ),
    M(
        "dflash_diag/read/formats/trainer_state.py",
        "        self.text = self.text[self.pos:] + self.decoder.decode(chunk, final=not chunk)",
        "        self.text = self.text[self.pos:] + self.decoder.decode(chunk)",
        READERS,
        "trainer_state scanner: the decoder never told the input ended",
    ),
    M(
        "dflash_diag/read/formats/trainer_state.py",
        "        self.consumed += self.pos",
        "        self.consumed = self.pos",
        READERS,
        "trainer_state scanner: offsets of the log_history array lost after two refills",
    ),
    M(
        "dflash_diag/watch/state.py",
        "_refuse_compressed(chunk.data[:2], self.path)",
        "_refuse_compressed(chunk.data[2:4], self.path)",
        WATCH,
        "watch: gzip magic looked for at the wrong bytes once the file appears",
    ),
    # -- code changed in the 40 commits before this round --
    M(
        "dflash_diag/analysis/spans.py",
        'return str(start) if end == start else f"{start}-{end}"',
        'return f"{start}-{end}"',
        WINDOWS + COMPARE,
        "a one-step window labelled 5-5",
    ),
    M(
        "dflash_diag/analysis/spans.py",
        "min(window.end, max(last_step, window.start))",
        "min(window.end, last_step)",
        WINDOWS + WATCH,
        "a window label may end before it starts",
    ),
    M(
        "dflash_diag/analysis/alerts.py",
        "        if v <= before[-1]:",
        "        if v < before[-1]:",
        WATCH + WINDOWS,
        "loss spike: a plateau value counts as a local peak",
    ),
    M(
        "dflash_diag/analysis/alerts.py",
        "scale = max(1.4826 * mad, rel_floor * abs(median))",
        "scale = min(1.4826 * mad, rel_floor * abs(median))",
        WATCH + WINDOWS,
        "loss spike: the relative floor used as a ceiling",
    ),
    M(
        "dflash_diag/compare/align.py",
        '            / pl.col("w").filter(finite_loss).sum()',
        '            / pl.col("w").sum()',
        COMPARE,
        "two-run windows: NaN losses' weights in the denominator",
    ),
    M(
        "dflash_diag/compare/align.py",
        "last_x = float(max(xa.max(), xb.max()))",
        "last_x = float(min(xa.max(), xb.max()))",
        COMPARE,
        "two-run windows: the last label ends at the shorter run",
    ),
    M(
        "dflash_diag/analysis/restarts.py",
        'is_restart = (pl.col("step") <= previous_max).fill_null(False)',
        'is_restart = (pl.col("step") < previous_max).fill_null(False)',
        ("tests/diag/test_restarts_phase.py", *WINDOWS),
        "a repeated step is no restart",
    ),
    M(
        "dflash_diag/analysis/restarts.py",
        'merged.filter(later_min.is_null() | (pl.col("step") < later_min))',
        'merged.filter(later_min.is_null() | (pl.col("step") <= later_min))',
        ("tests/diag/test_restarts_phase.py", *WINDOWS),
        "restart purge keeps the orphan at the resumed step",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "    if n_records < min_records:",
        "    if n_records <= min_records:",
        ANALYSIS,
        "the walk needs one record more than WALK_MIN_RECORDS to lead",
    ),
    M(
        "dflash_diag/analysis/schedule.py",
        "total_epochs = epoch + max(0, header.total_steps - step) / steps_per_epoch",
        "total_epochs = epoch + header.total_steps / steps_per_epoch",
        ("tests/diag/test_schedule.py", "tests/diag/test_cli_converge.py"),
        "a resumed run's end epoch counts every step again",
    ),
    M(
        "dflash_diag/compare/boundary.py",
        "    if acc_before == 0 and acc_after == 0:",
        "    if acc_before == 0 or acc_after == 0:",
        COMPARE,
        "boundary: acc 0 on one side taken as no accuracy signal",
    ),
    M(
        "dflash_diag/compare/runs.py",
        '        condition = condition & (pl.col("step") <= high)',
        '        condition = condition & (pl.col("step") < high)',
        COMPARE,
        "compare --to-step excludes the last step",
    ),
    M(
        "dflash_diag/analysis/schedule_events.py",
        '        earlier = finite.filter(pl.col("step") < step)',
        '        earlier = finite.filter(pl.col("step") <= step)',
        ("tests/diag/test_schedule_events.py", "tests/diag/test_schedule_events_cli.py"),
        "schedule events: the lr before a resume includes the resume step's",
    ),
    M(
        "dflash_diag/analysis/verdict.py",
        "wide = any(w.end > w.start for w in windows)",
        "wide = all(w.end > w.start for w in windows)",
        WINDOWS,
        "not-enough-data hint: a smaller --window suggested only when every window is wide",
    ),
    M(
        "dflash_diag/read/jsonl.py",
        "kept = frame if frame.select(keep.all()).item() else frame.filter(keep)",
        "kept = frame",
        JSONL,
        "JSONL: out-of-range steps kept (the no-copy shortcut taken always)",
    ),
    M(
        "dflash_diag/read/formats/protobuf.py",
        "        out.append(low | (0x80 if n else 0))",
        "        out.append(low | 0x80 if n > 1 else low)",
        READERS,
        "varint writer: continuation bit missed before a last group of 1",
    ),
]


def run(mutation: Mutation, timeout: float) -> tuple[str, float]:
    """Apply one mutation, run its tests, restore the file: ``(outcome, seconds)``."""
    path = ROOT / mutation.file
    original = path.read_bytes()
    text = original.decode()
    if text.count(mutation.old) != 1:
        return f"not applicable ({text.count(mutation.old)} matches)", 0.0
    with tempfile.NamedTemporaryFile(delete=False) as backup:
        backup.write(original)
    start = time.perf_counter()
    try:
        path.write_text(text.replace(mutation.old, mutation.new))
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-x",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    *mutation.tests,
                ],
                cwd=ROOT,
                check=False,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            failed = [
                line.split("::", 1)[1].split(" ")[0]
                for line in done.stdout.splitlines()
                if line.startswith("FAILED ")
            ]
            outcome = (
                f"caught ({failed[0] if failed else 'rc ' + str(done.returncode)})"
                if done.returncode not in (0, 5)
                else "survived"
                if done.returncode == 0
                else "no tests"
            )
        except subprocess.TimeoutExpired:
            outcome = "caught (timeout)"
    finally:
        shutil.copyfile(backup.name, path)
        Path(backup.name).unlink()
    assert path.read_bytes() == original
    return outcome, time.perf_counter() - start


def line_of(mutation: Mutation) -> int:
    text = (ROOT / mutation.file).read_text()
    return text[: text.find(mutation.old)].count("\n") + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated 1-based numbers of the mutations to run")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutation")
    args = parser.parse_args()
    chosen = (
        [int(x) for x in args.only.split(",")] if args.only else list(range(1, len(MUTATIONS) + 1))
    )
    caught = 0
    print("| # | file:line | mutation | outcome |")
    print("|---:|---|---|---|")
    for number in chosen:
        mutation = MUTATIONS[number - 1]
        where = f"{mutation.file.removeprefix('dflash_diag/')}:{line_of(mutation)}"
        outcome, seconds = run(mutation, args.timeout)
        caught += outcome.startswith("caught")
        print(f"| {number} | {where} | {mutation.what} | {outcome} |", flush=True)
        print(f"  ({seconds:.0f} s)", file=sys.stderr, flush=True)
    print(f"\ncaught {caught} of {len(chosen)} ({100 * caught / len(chosen):.0f}%)")


if __name__ == "__main__":
    main()

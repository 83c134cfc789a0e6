"""Mutation audit: apply plausible one-line bugs one at a time and see whether the tests notice.

Each mutation replaces one exact piece of a source line (it must occur exactly once in its file),
runs the given test files (``pytest -x -q``), records whether they failed (caught) or passed
(survived), and restores the file byte for byte from a copy taken before (never from git: the
working tree may hold uncommitted work). Each audit is one list: :data:`ROUND3` (issue 19's first,
37 mutations) and :data:`ROUND4` (issue 19's fresh audit of the code changed after it: the option
table, the format registry, the estimator table, the forecast, the training step loop, the run
lock, the preflight checks) and :data:`ROUND5` (held out: bugs in the next session's code, run
once before any test was written for them); add the next audit as another list in :data:`AUDITS`. A test entry
may be a pytest argument (``-k`` and its expression: the training tests take minutes a file).
Results are printed as a markdown table (for docs/reliability.md).

    python benchmarks/mutation_audit.py                  # every mutation of the latest audit
    python benchmarks/mutation_audit.py --only 3,7       # some of them
    python benchmarks/mutation_audit.py --audit 3        # an earlier audit
    python benchmarks/mutation_audit.py --check          # each applies (no tests run)
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
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
ROUND3: list[Mutation] = [
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
        "peak = ~np.isnan(values) & (values > nearest_before)",
        "peak = ~np.isnan(values) & (values >= nearest_before)",
        WATCH + WINDOWS,
        "loss spike: a plateau value counts as a local peak",
    ),
    M(
        "dflash_diag/analysis/alerts.py",
        "np.maximum(1.4826 * mad, rel_floor * np.abs(median))",
        "np.minimum(1.4826 * mad, rel_floor * np.abs(median))",
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
        'wide = bool((table.array("end") > table.array("start")).any())',
        'wide = bool((table.array("end") > table.array("start")).all())',
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

# -- issue 19, fresh audit (audit 4): code changed since 8dc726f --------------------------------
OPTIONS_T = (
    "tests/diag/test_options.py",
    "tests/diag/test_cache.py",
    "tests/diag/test_mutation_guards.py",
)
RANGES = (*OPTIONS_T, "tests/diag/test_cli_properties.py")
REGISTRY = (
    "tests/diag/test_format_registry.py",
    "tests/diag/test_formats_readers.py",
    "tests/diag/test_formats_cli.py",
    "tests/diag/test_mutation_guards.py",
)
# the sniffs of detect.py: its compressed-file names and reading cases are tested on every command
DETECT = (*REGISTRY, "tests/diag/test_reliability.py", "tests/diag/test_wild_read.py")
# load.py's folder and pipe cases are tested on real folders (test_wild_read, test_reliability)
LOAD = (
    "tests/diag/test_wild_read.py",
    "tests/diag/test_reliability.py",
    "tests/diag/test_load_paths.py",
    "tests/diag/test_formats_canonical.py",
    "tests/diag/test_formats_cli.py",
    "tests/diag/test_reader.py",
    "tests/diag/test_compare.py",
    "tests/diag/test_mutation_guards.py",
)
ESTIMATORS_T = (
    "tests/diag/test_estimators.py",
    "tests/diag/test_acceptance.py",
    "tests/diag/test_walk_evidence.py",
    "tests/diag/test_walk_in_sample.py",
    "tests/diag/test_mutation_guards.py",
)
RECENT = (
    "tests/diag/test_recent_walk.py",
    "tests/diag/test_walk_evidence.py",
    "tests/diag/test_mutation_guards.py",
)
FORECAST_T = (
    "tests/diag/test_forecast.py",
    "tests/diag/test_forecast_short_runs.py",
    "tests/diag/test_mutation_guards.py",
)
TRAINER_STATE = (
    "tests/diag/test_formats_readers.py",
    "tests/diag/test_reader_bounds.py",
    "tests/diag/test_reader_counts.py",
    "tests/diag/test_mutation_guards.py",
)
SCAN = (
    "tests/diag/test_foreign_jsonl_scan.py",
    "tests/diag/test_formats_readers.py",
    "tests/diag/test_mutation_guards.py",
)
# The training tests are minutes each file: a selection per mutation (-k), the slow lock and
# 100 MB cases only where the mutation is in that code.
FAULT_GUARDS = "tests/pipelines/test_fault_guards.py"
TRAIN_FAULTS = "tests/pipelines/test_train_faults.py"
PROGRAMS = "tests/pipelines/test_programs.py"
STEP_T = (
    "tests/pipelines/test_programs.py",
    "tests/pipelines/test_data_parallel.py",
    FAULT_GUARDS,
    "-k",
    "not sigkill and not overwrite",
)

ROUND4: list[Mutation] = [
    # -- dflash_diag/cli/options.py
    M(
        "dflash_diag/cli/options.py",
        "if not 1 <= size < 2**53:",
        "if not 0 <= size < 2**53:",
        RANGES,
        "--window 0 accepted",
    ),
    M(
        "dflash_diag/cli/options.py",
        'feeds="diagnosis.trend.acc_threshold",',
        'feeds="diagnosis.trend.loss_threshold",',
        OPTIONS_T,
        "--threshold feeds the loss threshold",
    ),
    M(
        "dflash_diag/cli/options.py",
        "        convert=_negate,\n",
        "",
        OPTIONS_T,
        "--no-cache fed to the cache flag without negation",
    ),
    M(
        "dflash_diag/cli/options.py",
        "        defaults.LOSS_THRESHOLD,",
        "        defaults.ACC_THRESHOLD,",
        OPTIONS_T,
        "--loss-threshold defaults to the accuracy threshold",
    ),
    M(
        "dflash_diag/cli/options.py",
        "for p in ctx.command.params if p.name in kwargs}",
        "for p in ctx.command.params if p.name in shared}",
        RANGES,
        "a command's own numeric options escape the range check",
    ),
    M(
        "dflash_diag/cli/options.py",
        'feeds="diagnosis.trend.acc_threshold",\n        min=0.0,',
        'feeds="diagnosis.trend.acc_threshold",',
        RANGES,
        "--threshold loses its lower bound (negative accepted)",
    ),
    # -- read/formats/registry.py, detect.py
    M(
        "dflash_diag/read/formats/registry.py",
        "            priority=70,",
        "            priority=5,",
        DETECT,
        "sniff order: TensorBoard tried before trainer_state.json (an HF output folder)",
    ),
    M(
        "dflash_diag/read/formats/registry.py",
        "    if not sep or not rest.strip():",
        "    if not sep:",
        DETECT,
        "a one-line JSON document with its newline taken as JSONL",
    ),
    M(
        "dflash_diag/read/formats/registry.py",
        'one_line = b"\\n" not in head.lstrip().rstrip()',
        'one_line = b"\\n" not in head',
        DETECT,
        "a one-line JSON history ending in a newline not told",
    ),
    M(
        "dflash_diag/read/formats/registry.py",
        "len(head) >= detect.HEAD_BYTES - 4",
        "len(head) >= detect.HEAD_BYTES",
        DETECT,
        "console sniff past the head skipped when a BOM was dropped from it",
    ),
    M(
        "dflash_diag/read/formats/detect.py",
        'head[3:4] not in b"123456789"',
        'head[2:3] not in b"123456789"',
        DETECT,
        "bz2 magic's block-size digit looked for at the wrong byte",
    ),
    M(
        "dflash_diag/read/formats/detect.py",
        'head = head.lstrip(b"\\x00")',
        'head = head.rstrip(b"\\x00")',
        DETECT,
        "zero-fill stripped from the end, not the start",
    ),
    M(
        "dflash_diag/read/formats/detect.py",
        "        head = head[3:]",
        "        head = head[2:]",
        DETECT,
        "the UTF-8 byte-order mark cut by one byte too few",
    ),
    # -- read/formats/load.py
    M(
        "dflash_diag/read/formats/load.py",
        "fmt, alternatives = found[0], tuple(found[1:])",
        "fmt, alternatives = found[0], tuple(found[2:])",
        LOAD,
        "a folder's second source never read",
    ),
    M(
        "dflash_diag/read/formats/load.py",
        'later_repeat = (pl.col("step") == pl.col("step").shift(-1)).fill_null(False)',
        'later_repeat = (pl.col("step") == pl.col("step").shift(1)).fill_null(False)',
        LOAD,
        "two-writer log keeps the earlier record of each repeat",
    ),
    M(
        "dflash_diag/read/formats/load.py",
        '.then(pl.col("run") + offset)',
        '.then(pl.col("run"))',
        LOAD,
        "header indices of later inputs not offset",
    ),
    M(
        "dflash_diag/read/formats/load.py",
        "if not 1 <= index <= n_inputs:",
        "if not 0 <= index <= n_inputs:",
        LOAD,
        "--field 0:NEW=OLD accepted (maps the last input)",
    ),
    M(
        "dflash_diag/read/formats/load.py",
        "lists=lists or not can_reread(name),",
        "lists=lists,",
        (*LOAD, "tests/diag/test_cli_converge.py"),
        "standard input's lists left for a second read",
    ),
    # -- analysis/estimators.py
    M(
        "dflash_diag/analysis/estimators.py",
        "for k in range(block_size))",
        "for k in range(block_size - 1))",
        ESTIMATORS_T,
        "harmonic tau drops the last step length (A_{B-1} - A_B)",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "return next((e for e in ranked if e.can_lead), ranked[0] if ranked else None)",
        "return next((e for e in ranked if e.can_lead), None)",
        ESTIMATORS_T,
        "no primary estimate when every ranked one is held back",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "        _harmonic_series,\n        reads_lists=True,\n        promises=True,",
        "        _harmonic_series,\n        reads_lists=True,",
        ESTIMATORS_T,
        "harmonic loses its promises flag (no mismatch alarm without a walk)",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "if held_out_named or epoch is None",
        "if epoch is None",
        ESTIMATORS_T,
        "a held-out walk taken as in-sample after epoch 1",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "before = [tau for step, tau in points if step <= w.last_step]",
        "before = [tau for step, tau in points if step < w.last_step]",
        ESTIMATORS_T + FORECAST_T,
        "measured series: an eval at a window's last step left to the next window",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        "start = windows[0].start - windows[0].index * size",
        "start = windows[0].start",
        ESTIMATORS_T + FORECAST_T,
        "list-based series: window index misaligned when the first window is not index 0",
    ),
    M(
        "dflash_diag/analysis/estimators.py",
        'and bool((rows["n_blocks"] > 0).all())',
        'and bool((rows["n_blocks"] > 0).any())',
        ESTIMATORS_T,
        "n_blocks weights used when some are zero",
    ),
    # -- analysis/recent_walk.py
    M(
        "dflash_diag/analysis/recent_walk.py",
        'span = walked.filter(pl.col("step") > last - span_steps)',
        'span = walked.filter(pl.col("step") >= last - span_steps)',
        RECENT,
        "recent walk reaches back one step more than a window",
    ),
    M(
        "dflash_diag/analysis/recent_walk.py",
        "if k < min(min_records, len(tokens)):",
        "if k < min_records:",
        RECENT,
        "a span with fewer walked records than the minimum gives no walk",
    ),
    M(
        "dflash_diag/analysis/recent_walk.py",
        "se = math.sqrt(residual / (k * (k - 1))) / (s / k)",
        "se = math.sqrt(residual / (k * k)) / (s / k)",
        RECENT,
        "recent walk's standard error divides by k^2, not k(k-1)",
    ),
    # -- analysis/acceptance.py
    M(
        "dflash_diag/analysis/acceptance.py",
        "replace(e, error=e.tau - measured_tau)",
        "replace(e, error=measured_tau - e.tau)",
        ESTIMATORS_T,
        "estimate errors' sign reversed",
    ),
    M(
        "dflash_diag/analysis/acceptance.py",
        "or (measured_tau - 1) >= MISMATCH_RATIO * (promised.tau - 1)",
        "or measured_tau >= MISMATCH_RATIO * promised.tau",
        ESTIMATORS_T,
        "mismatch alarm compares taus, not extra tokens",
    ),
    M(
        "dflash_diag/analysis/acceptance.py",
        "(e for e in estimates if e.can_lead and BY_NAME[e.name].promises)",
        "(e for e in estimates if BY_NAME[e.name].promises)",
        ESTIMATORS_T,
        "a held-back walk raises the mismatch alarm",
    ),
    M(
        "dflash_diag/analysis/acceptance.py",
        "(target_tau - 1.0) / (block_size - 1) if linear else None",
        "(target_tau - 1.0) / block_size if linear else None",
        ESTIMATORS_T,
        "tau target's accuracy divides by B, not B-1",
    ),
    # -- analysis/target_eta.py, run_forecast.py
    M(
        "dflash_diag/analysis/target_eta.py",
        "early_col, late_col = (3, 2) if higher else (2, 3)",
        "early_col, late_col = (2, 3) if higher else (3, 2)",
        FORECAST_T,
        "ETA's early and late ends read off the wrong band edges",
    ),
    M(
        "dflash_diag/analysis/run_forecast.py",
        "and first_step <= e.step <= last_step",
        "and first_step < e.step <= last_step",
        FORECAST_T,
        "an eval at the first analysed step left out of the forecast",
    ),
    M(
        "dflash_diag/analysis/run_forecast.py",
        'best=block_size if name == "tau" else BEST.get(name),',
        "best=BEST.get(name),",
        FORECAST_T,
        "tau forecast not bounded by B",
    ),
    M(
        "dflash_diag/analysis/run_forecast.py",
        "loss_window = next((w for w in reversed(windows) if w.loss is not None), None)",
        "loss_window = next((w for w in windows if w.loss is not None), None)",
        FORECAST_T,
        "loss target's current value is the first window's",
    ),
    # -- read/formats/trainer_state.py, foreign_jsonl_scan.py
    M(
        "dflash_diag/read/formats/trainer_state.py",
        'plain = text is None or ("true" not in text and "false" not in text)',
        'plain = text is None or "true" not in text',
        TRAINER_STATE,
        "trainer_state: a false among numbers read as 0 by the fast path",
    ),
    M(
        "dflash_diag/read/formats/trainer_state.py",
        'pl.int_range(first_row, first_row + n_entries, dtype=pl.Int64).alias("row"),',
        'pl.int_range(0, n_entries, dtype=pl.Int64).alias("row"),',
        TRAINER_STATE,
        "trainer_state: row numbers restart in each piece",
    ),
    M(
        "dflash_diag/read/formats/foreign_jsonl_scan.py",
        "str.contains(_NUMERIC_TEXT).any()).item():",
        "str.contains(_NUMERIC_TEXT).all()).item():",
        SCAN,
        "JSONL scan: a column with some numeric strings taken by the fast path",
    ),
    M(
        "dflash_diag/read/formats/foreign_jsonl_scan.py",
        'if "time" in tree:',
        'if "_timestamp" in tree:',
        SCAN,
        "JSONL scan: a 'time' key taken by the fast path",
    ),
    # -- pipelines/train_step.py
    M(
        "pipelines/train_step.py",
        "anchors = anchor_generator(cfg.seed, step, micro * dp.world_size + dp.rank)",
        "anchors = anchor_generator(cfg.seed, step, micro + dp.rank)",
        STEP_T,
        "anchor draws of ranks overlap (micro + rank)",
    ),
    M(
        "pipelines/train_step.py",
        "last = micro == n_micro - 1",
        "last = micro == 0",
        STEP_T,
        "DDP gradients all-reduced at the first micro-batch, not the last",
    ),
    M(
        "pipelines/train_step.py",
        "record=step // (cfg.log_every * cfg.walk_every) - 1,",
        "record=step // (cfg.log_every * cfg.walk_every),",
        ("tests/pipelines/test_walk_log.py",),
        "held-out walk starts at its second record's sequences",
    ),
    M(
        "pipelines/train_step.py",
        "local, m = m, reduce_step(dp, m)",
        "local, m = m, m",
        STEP_T,
        "step metrics not summed over ranks",
    ),
    # -- pipelines/train_loop.py
    M(
        "pipelines/train_loop.py",
        "runlog.checkpoint(k, r.cursor, loop.program.script)",
        "runlog.checkpoint(k, loop.setup.loader.state_dict(), loop.program.script)",
        (FAULT_GUARDS, "-k", "resume_from_a_periodic or several_target"),
        "periodic checkpoint stores the read-ahead loader's cursor",
    ),
    M(
        "pipelines/train_loop.py",
        'if state.reason != "signal":',
        'if state.reason == "max_steps":',
        (TRAIN_FAULTS, PROGRAMS, FAULT_GUARDS, "-k", "skipped or nonfinite or skips"),
        "every-step-skipped check only when the run reached max_steps",
    ),
    M(
        "pipelines/train_loop.py",
        "walk = loop.program.walks and walk_due(cfg, k) and loop.dp.is_main",
        "walk = loop.program.walks and walk_due(cfg, k - 1) and loop.dp.is_main",
        ("tests/pipelines/test_walk_log.py",),
        "walk due one step early",
    ),
    M(
        "pipelines/train_loop.py",
        "    if k % cfg.log_every == 0:\n        log_step",
        "    if (k - 1) % cfg.log_every == 0:\n        log_step",
        (PROGRAMS, "tests/pipelines/test_walk_log.py"),
        "metrics record written one step after its interval",
    ),
    # -- pipelines/async_pipeline.py
    M(
        "pipelines/async_pipeline.py",
        "        while self.next_seq not in self.pending:",
        "        if self.next_seq not in self.pending:",
        (FAULT_GUARDS, PROGRAMS, "-k", "several_target or stage"),
        "drafter reorders at most one early micro-batch",
    ),
    M(
        "pipelines/async_pipeline.py",
        '+ (cfg.device == "cpu")',
        "",
        ("tests/pipelines/test_config.py",),
        "CPU threads split without the drafter's stage",
    ),
    M(
        "pipelines/async_pipeline.py",
        "steps_per_epoch=setup.loader.batches_per_epoch() / cfg.grad_accum",
        "steps_per_epoch=setup.loader.batches_per_epoch()",
        (
            PROGRAMS,
            "tests/pipelines/test_resume_schedule.py",
            "tests/pipelines/test_progress.py",
            FAULT_GUARDS,
            "-k",
            "not sigkill and not overwrite",
        ),
        "pipeline's steps per epoch ignores grad_accum",
    ),
    # -- pipelines/run_lock.py
    M(
        "pipelines/run_lock.py",
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
        "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)",
        (TRAIN_FAULTS, "-k", "lock or two_runs"),
        "run lock shared, not exclusive",
    ),
    M(
        "pipelines/run_lock.py",
        "if p.name == LOCK_FILE or p.stat().st_size == 0:",
        "if p.stat().st_size == 0:",
        (TRAIN_FAULTS, "-k", "lock"),
        "lock file (holding the pid) left behind at release",
    ),
    M(
        "pipelines/run_lock.py",
        'parts[5].rsplit(":", 1)[-1] == str(inode)',
        'parts[5].split(":", 1)[-1] == str(inode)',
        (TRAIN_FAULTS, "-k", "lock"),
        "lock holder's inode compared with the device's minor number too",
    ),
    # -- pipelines/preflight.py
    M(
        "pipelines/preflight.py",
        "if not 0 <= n <= cpus:",
        "if not 0 <= n < cpus:",
        ("tests/pipelines/test_reliability.py", FAULT_GUARDS, "-k", "thread or preflight"),
        "torch_threads equal to the CPU count refused",
    ),
    M(
        "pipelines/preflight.py",
        "elif longest > NAME_MAX:",
        "elif longest >= NAME_MAX:",
        (TRAIN_FAULTS, FAULT_GUARDS, "-k", "300_byte or preflight"),
        "a 255-byte name refused",
    ),
    M(
        "pipelines/preflight.py",
        "        probe.rmdir()\n",
        "",
        (TRAIN_FAULTS, "tests/pipelines/test_cli.py", "-k", "checkpoint_dir or runs_and_eval"),
        "the checkpoint-directory probe left behind",
    ),
    M(
        "pipelines/preflight.py",
        "    finally:\n        if created:",
        "    finally:\n        if not created:",
        (
            "tests/pipelines/test_reliability.py",
            "tests/pipelines/test_cli.py",
            "-k",
            "one_line or runs_and_eval or torn",
        ),
        "the log probe removes an existing log instead of the one it created",
    ),
]

#: A held-out audit (issue 19's "a held-out set checks the same"): one-line bugs in the code of
#: the session after round 4 (the foreign-JSONL cache, the MLflow merge by step, the readers'
#: speed-ups, the option conversion, the robust forecast fits, the walk's source), written by
#: someone who wrote none of its tests, after they were written, and run once; no test was
#: added for them before the figure was taken.
CACHE_T = ("tests/diag/test_scalars_cache.py", "tests/diag/test_cache.py")
FORECAST_T = ("tests/diag/test_forecast.py", "tests/diag/test_forecast_short_runs.py")
MLFLOW_T = (
    "tests/diag/test_mlflow_wide.py",
    "tests/diag/test_formats_readers.py",
    "tests/diag/test_formats_canonical.py",
)
ROUND5: list[Mutation] = [
    M(
        "dflash_diag/read/cache.py",  # grown_since, shared by both caches since
        'if grown == 0 and (st.st_mtime_ns, st.st_ctime_ns) != (meta["mtime_ns"], meta["ctime_ns"]):',
        'if grown == 0 and st.st_mtime_ns != meta["mtime_ns"]:',
        CACHE_T,
        "a same-size rewrite with the old mtime restored reuses the cache",
    ),
    M(
        "dflash_diag/read/scalars_cache.py",
        "[(s, n + lines_before) for s, n in getattr(moved, name)]",
        "[(s, n) for s, n in getattr(moved, name)]",
        CACHE_T,
        "the new bytes' line numbers not shifted past the cached lines",
    ),
    M(
        "dflash_diag/read/formats/canonical.py",
        'if not frame["row"].is_sorted():',
        'if frame["row"].is_sorted():',
        MLFLOW_T,
        "rows sorted only when they already are",
    ),
    M(
        "dflash_diag/analysis/curve_families.py",
        "HUBER_K = 1.345",
        "HUBER_K = 134.5",
        FORECAST_T,
        "the robust refits weigh nothing down",
    ),
    M(
        "dflash_diag/analysis/run_forecast.py",
        '(pl.col("lr") >= 0)',
        '(pl.col("lr") > 0)',
        FORECAST_T,
        "a logged lr of 0 (warmup's first step) left out of the lr timeline",
    ),
    M(
        "dflash_diag/cli/fast_params.py",
        "value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx",
        "value, choices=list(annotation), case_sensitive=False, ctx=ctx",
        ("tests/diag/test_fast_params.py", "tests/diag/test_options.py"),
        "choices converted case-insensitively",
    ),
    M(
        "dflash_diag/read/formats/mlflow_store.py",
        "& (step.diff().fill_null(1) > 0).all()",
        "& (step.diff().fill_null(1) >= 0).all()",
        MLFLOW_T,
        "a metric file with a repeated step taken as in logging order",
    ),
    M(
        "dflash_diag/read/formats/mlflow_store.py",
        'piece["timestamp"][0] >= last[0] and piece["step"][0] > last[1]',
        'piece["timestamp"][0] >= last[0] and piece["step"][0] >= last[1]',
        MLFLOW_T,
        "a chunk starting at the previous chunk's last step taken as in order",
    ),
    M(
        "dflash_diag/analysis/windows.py",
        "return gaps.filter(gaps > 0)",
        "return gaps.filter(gaps >= 0)",
        WINDOWS,
        "repeated steps count as zero gaps in the logging interval",
    ),
    M(
        "dflash_diag/read/formats/trainer_state.py",
        'if "true" in text or "false" in text or "train_runtime" in text:',
        'if "true" in text or "false" in text:',
        ("tests/diag/test_formats_readers.py", "tests/diag/test_wild_read.py"),
        "the run's closing summary read by the polars piece path",
    ),
    M(
        "dflash_diag/read/formats/tensorboard.py",
        "return first + int(bad.argmax())",
        "return first + int(bad.argmax()) + 1",
        ("tests/diag/test_formats_readers.py", "tests/diag/test_reader_fuzz.py"),
        "one cycle past the first differing one taken as a repeat",
    ),
    M(
        "pipelines/run_setup.py",
        'source = (saved.get("source") or "data") if saved else cfg.walk_source',
        'source = (saved.get("source") or EVAL_PROMPTS) if saved else cfg.walk_source',
        (
            "tests/pipelines/test_walk_log.py",
            "tests/pipelines/test_fault_guards.py",
            "-k",
            "walk or resum",
        ),
        "a checkpoint with no walk source resumes on the eval-prompt walk",
    ),
]

#: The audits by number (``--audit``); the latest is the default.
AUDITS: dict[str, list[Mutation]] = {"3": ROUND3, "4": ROUND4, "5": ROUND5}


def run(
    mutation: Mutation, timeout: float, tests: tuple[str, ...] | None = None
) -> tuple[str, float]:
    """Apply one mutation, run its tests (or ``tests``), restore the file: ``(outcome, seconds)``."""
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
                    *(tests or mutation.tests),
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
    parser.add_argument("--audit", choices=sorted(AUDITS), default=max(AUDITS, key=int))
    parser.add_argument(
        "--check", action="store_true", help="only check that each mutation applies once"
    )
    parser.add_argument(
        "--tests",
        help="pytest arguments, one string, run instead of each mutation's own (a new guard's "
        "check): --tests 'tests/x.py -k name'",
    )
    args = parser.parse_args()
    # kill (SIGTERM) stops the audit through the restoring ``finally``, never mid-mutation
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    mutations = AUDITS[args.audit]
    chosen = (
        [int(x) for x in args.only.split(",")] if args.only else list(range(1, len(mutations) + 1))
    )
    if args.check:
        bad = [
            n
            for n in chosen
            if (ROOT / mutations[n - 1].file).read_text().count(mutations[n - 1].old) != 1
        ]
        print(f"{len(chosen) - len(bad)} of {len(chosen)} apply" + (f"; not: {bad}" if bad else ""))
        sys.exit(1 if bad else 0)
    caught = 0
    print("| # | file:line | mutation | outcome |")
    print("|---:|---|---|---|")
    for number in chosen:
        mutation = mutations[number - 1]
        where = f"{mutation.file.removeprefix('dflash_diag/')}:{line_of(mutation)}"
        outcome, seconds = run(
            mutation, args.timeout, tuple(shlex.split(args.tests)) if args.tests else None
        )
        caught += outcome.startswith("caught")
        print(f"| {number} | {where} | {mutation.what} | {outcome} |", flush=True)
        print(f"  ({seconds:.0f} s)", file=sys.stderr, flush=True)
    print(f"\ncaught {caught} of {len(chosen)} ({100 * caught / len(chosen):.0f}%)")


if __name__ == "__main__":
    main()

"""From any format's scalars to the canonical parsed log every analysis reads.

Every reader of :mod:`dflash_diag.read.formats` produces the same intermediate, a long frame of
scalars (:data:`SCALAR_SCHEMA`): one row per value, ``row`` numbering the writer's records in
the order they were written (a TensorBoard event, a W&B history row, a CSV line...), ``step``
the writer's own step for that record when it has one, ``key`` the metric name as written and
``value`` the number. :func:`to_parsed_log` applies a preset (or a user's field map) and builds
the :class:`~dflash_diag.read.records.ParsedLog` the JSONL reader builds: metric records with the
canonical columns, ``eval`` events carrying a measured ``tau``, and a ``run_start`` header
carrying the block size.

Records and restarts: records are merged by step, so a train row and an eval row written at
the same step become one record (they are different kinds, not a restart). Only a step that
goes BELOW the previous record's step starts a new segment (TensorBoard's own rule for orphaned
data); the downstream restart logic then purges the orphaned records as it does for JSONL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dflash_diag.logschema import METRIC_LISTS, METRIC_NUMBERS
from dflash_diag.read.aliases import GENERAL, VALIDATION, first_alias
from dflash_diag.read.formats.checks import count_nonfinite, drop_bad_steps, step_expr, step_value
from dflash_diag.read.presets import Preset, detect_preset, field_map_preset, normalise_key
from dflash_diag.read.records import (
    MAX_LIST_ELEMENTS,
    STEP_LIMIT,
    LogEvent,
    ParsedLog,
    ParseIssues,
)

#: The long frame of scalars that every format reader produces.
SCALAR_SCHEMA: dict[str, pl.DataType] = {
    "row": pl.Int64(),
    "step": pl.Int64(),
    "key": pl.String(),
    "value": pl.Float64(),
    "time": pl.Float64(),
}


@dataclass
class Scalars:
    """What a format reader hands over.

    Attributes:
        frame: the long frame (:data:`SCALAR_SCHEMA`).
        format: the format's display name ("TensorBoard", ...).
        issues: what the reader skipped (malformed records, a torn tail...), with ``lines``
            counting the records read.
        meta: run facts the format records besides metrics (``block_size``, ``ttt_length``,
            ``max_steps``), from a run config or a header.
        notes: remarks for the user (e.g. which of several runs was read).
        wide: records already in wide form (a reader's fast path): columns ``row``, ``step``,
            ``time`` and one Float64 column per key, one row per record; their rows number
            the same writer records as the long frame's (the two together are the log). A
            reader whose record is one line of several values spaces its rows by the number of
            keys (JSONL: the i-th key as record ``row + i``); one whose record is a logging call
            (trainer_state) gives all its values the record's row.
    """

    frame: pl.DataFrame
    format: str
    issues: ParseIssues = field(default_factory=ParseIssues)
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wide: list[pl.DataFrame] = field(default_factory=list)
    as_lines: Callable[[], Scalars] | None = None

    def long_frame(self) -> pl.DataFrame:
        """Everything as one long frame in row order (the wide pieces unpivoted: a wide row's
        i-th key column was written as record ``row + i``; its ``time`` is the first one's)."""
        pieces = [self.frame]
        for wide in self.wide:
            for i, key in enumerate(c for c in wide.columns if c not in WIDE_FIXED):
                pieces.append(
                    wide.select(
                        (pl.col("row") + i).alias("row"),
                        "step",
                        pl.lit(key).alias("key"),
                        pl.col(key).cast(pl.Float64).alias("value"),
                        pl.col("time").cast(pl.Float64),
                    )
                )
        return pl.concat(pieces).filter(pl.col("value").is_not_null()).sort("row")


def contiguous(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with each column in one chunk, copied a column at a time (each column's
    pieces are freed as its copy is made).

    A frame whose columns are chunked differently is copied whole, every column at once, by
    the first ``select`` that meets a one-chunk column (a ``row`` or ``seq`` range): the
    pieces' chunks and the copy would both be held for as long as the reader's frame is.
    """
    columns = []
    for name in frame.columns:
        columns.append(frame.drop_in_place(name).rechunk())
    return pl.DataFrame(columns)


def long_frame(
    rows: list[int],
    steps: list[int | None],
    keys: list[str],
    values: list[float | None],
    times: list[float | None],
) -> pl.DataFrame:
    """The long frame (:data:`SCALAR_SCHEMA`) of a reader's value lists, one entry per value."""
    return pl.DataFrame(
        {"row": rows, "step": steps, "key": keys, "value": values, "time": times},
        schema=SCALAR_SCHEMA,
    )


def empty_scalars() -> pl.DataFrame:
    """A long frame with no rows."""
    return pl.DataFrame(schema=SCALAR_SCHEMA)


class RowCollector:
    """Builds the long frame from dict records (W&B rows, HF log_history, CSV lines...).

    Nested objects are flattened with "/" (so ``{"train": {"acc": 1}}`` is ``train/acc``);
    numbers and numeric strings are kept, anything else is skipped (strings, lists, bools).
    """

    #: Values gathered in Python lists before they are packed into a polars piece (a value in
    #: the lists costs about 100 bytes, in a piece 48: a large log is not held as objects).
    PIECE_VALUES = 2**16

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.steps: list[int | None] = []
        self.keys: list[str] = []
        self.values: list[float] = []
        self.times: list[float | None] = []
        self.n_records = 0
        self._pieces: list[pl.DataFrame] = []
        self._tail: pl.DataFrame | None = None  # add_long's records after its last piece

    def add(self, record: Mapping[str, Any], step: Any = None, time: Any = None) -> None:
        """Add one record; ``step``/``time`` are the format's own (None: none)."""
        row = self.n_records
        self.n_records += 1
        step_value = _as_step(step)
        time_value = _as_float(time)
        for key, value in _flatten(record, ""):
            number = _as_float(value)
            if number is None:
                continue
            self.rows.append(row)
            self.steps.append(step_value)
            self.keys.append(key)
            self.values.append(number)
            self.times.append(time_value)
        if len(self.values) >= self.PIECE_VALUES:
            self._pack()

    def add_numbers(self, values: Mapping[str, float], step: int) -> None:
        """Add one flat record of floats at an int step: what :meth:`add` makes of it, without
        its per-value checks (a text reader's records are floats already)."""
        row = self.n_records
        self.n_records += 1
        step_at = step if -STEP_LIMIT < step < STEP_LIMIT else step_value(step)
        count = len(values)
        self.rows.extend([row] * count)
        self.steps.extend([step_at] * count)
        self.keys.extend(values)
        self.values.extend(values.values())
        self.times.extend([None] * count)
        if len(self.values) >= self.PIECE_VALUES:
            self._pack()

    def add_long(self, piece: pl.DataFrame, n_records: int) -> None:
        """Add ``n_records`` records already laid out as the long frame (a reader's column-wise
        path), their rows numbered from :attr:`n_records` on; once called, records are added
        this way only.

        The frame is cut into pieces where :meth:`add` would have packed them (after the
        record that brings a piece to :data:`PIECE_VALUES` values): polars sums a column chunk
        by chunk, so the same records in other chunks could move a mean in its last bits.
        """
        parts = [p for p in (self._tail, self._lists()) if p is not None]
        if parts:
            piece = pl.concat([*parts, piece])
        self._tail = None
        self.rows, self.steps, self.keys, self.values, self.times = [], [], [], [], []
        self.n_records += n_records
        rows = piece["row"]
        # the value count at each record's end
        ends = (rows != rows.shift(-1)).fill_null(True).arg_true() + 1
        start = 0
        while True:
            i = ends.search_sorted(start + self.PIECE_VALUES)
            if i == ends.len():
                break
            end = int(ends[i])
            self._pieces.append(piece.slice(start, end - start).rechunk())
            start = end
        if start < piece.height:
            self._tail = piece.slice(start).rechunk()

    def _lists(self) -> pl.DataFrame | None:
        """The values added since the last piece, as a long frame (None: none)."""
        if not self.rows:
            return None
        return long_frame(self.rows, self.steps, self.keys, self.values, self.times)

    def _pack(self) -> None:
        self._pieces.append(long_frame(self.rows, self.steps, self.keys, self.values, self.times))
        self.rows, self.steps, self.keys, self.values, self.times = [], [], [], [], []

    def frame(self) -> pl.DataFrame:
        """The long frame of everything added."""
        if self._tail is not None:
            self._pieces.append(self._tail)
            self._tail = None
        self._pack()
        pieces, self._pieces = self._pieces, []
        frame = pieces[0] if len(pieces) == 1 else pl.concat(pieces)
        self._pieces = [frame]
        return frame


#: Nesting levels flattened; deeper objects are no metric (and must not exhaust the stack).
_MAX_DEPTH = 16


def _flatten(record: Mapping[str, Any], prefix: str, depth: int = 0):
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if depth < _MAX_DEPTH:
                yield from _flatten(value, name + "/", depth + 1)
        else:
            yield name, value


def _as_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float: no metric
            return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _as_step(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return step_value(value)  # exactly: an int beyond the float range is out of range too
    number = _as_float(value)
    return None if number is None else step_value(number)


@dataclass
class Resolution:
    """Which log key feeds which canonical field (for messages and tests)."""

    preset: Preset | None
    detected: bool
    scalars: dict[str, str] = field(default_factory=dict)
    acc_pos: list[str] = field(default_factory=list)
    loss_parts: list[str] = field(default_factory=list)
    eval_tau: str | None = None
    eval_fields: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


#: Prefix of the pivoted key columns (a log key may be called "step" or "time").
_PREFIX = "k:"

#: Canonical scalars read from a log without any preset or map (the JSONL schema's names).
_IDENTITY = {name: (re.escape(name),) for name in METRIC_NUMBERS if name != "step"}


def resolve_fields(
    keys: Sequence[str],
    preset: Preset | None,
    fields: Mapping[str, str] | None,
    detect: bool = True,
) -> Resolution:
    """Match a preset (given, else detected) and a user map against the keys of a log.

    Warnings are collected in ``missing``: a user-mapped field that never occurs, and a
    preset's required fields that never occur.
    """
    detected = False
    if preset is None and detect:
        preset = detect_preset(keys)
        detected = preset is not None
    effective = field_map_preset(fields or {}, preset) if (fields or preset) else None
    names = sorted(set(keys))
    res = Resolution(preset=preset, detected=detected)
    scalar_candidates: dict[str, tuple[str, ...]] = {
        name: _IDENTITY.get(name, ()) + GENERAL.get(name, ()) for name in {*_IDENTITY, *GENERAL}
    }
    user = {normalise_key(k) for k in (fields or {})}
    if effective is not None:
        for canonical, candidates in effective.fields.items():
            # a user's map is taken at its word; a preset's names come before the general ones
            scalar_candidates[canonical] = tuple(candidates) + (
                () if canonical in user else scalar_candidates.get(canonical, ())
            )
    for canonical, candidates in scalar_candidates.items():
        key = _first_match(candidates, names)
        if key is not None:
            res.scalars[canonical] = key
    if effective is not None and effective.acc_pos:
        res.acc_pos = _numbered(effective.acc_pos, names)
    elif "acc_pos" in names:
        pass  # a native list column is not in the long frame; nothing to assemble
    if effective is not None and effective.loss_from_positions and "loss" not in res.scalars:
        res.loss_parts = _numbered((effective.loss_from_positions[0],), names)
    eval_candidates = {name: tuple(cands) for name, cands in VALIDATION.items()}
    if effective is not None:
        res.eval_tau = _first_match(effective.eval_tau, names)
        for name, candidates in effective.eval_fields.items():
            eval_candidates[name] = tuple(candidates) + eval_candidates.get(name, ())
    taken = set(res.scalars.values())
    for name, candidates in eval_candidates.items():
        key = _first_match(candidates, [n for n in names if n not in taken])
        if key is not None:
            res.eval_fields[name] = key
    for canonical, log_name in (fields or {}).items():
        if canonical == "acc_pos":
            if not res.acc_pos:
                res.missing.append(f"{canonical}={log_name}")
        elif (
            canonical not in ("step", "accept_pos")
            and res.scalars.get(canonical) != normalise_key(log_name)
        ) or (canonical == "step" and normalise_key(log_name) not in names):
            res.missing.append(f"{canonical}={log_name}")
    if preset is not None:
        for canonical in preset.required:
            user = canonical in (fields or {})
            # per-position accuracies stand in for an overall one (the preset's trainer may log
            # only those in another version)
            covered = canonical == "acc" and bool(res.acc_pos)
            if not user and canonical not in res.scalars and not covered:
                res.missing.append(f"{canonical} ({', '.join(preset.fields.get(canonical, ()))})")
        if preset.acc_pos and not res.acc_pos and "acc_pos" not in (fields or {}):
            res.missing.append(f"acc_pos ({preset.acc_pos[0]})")
    return res


def _first_match(candidates: Sequence[str], names: Sequence[str]) -> str | None:
    return first_alias(candidates, names)


def _numbered(patterns: Sequence[str], names: Sequence[str]) -> list[str]:
    """Keys of a numbered family, in the order of their numbers."""
    for pattern in patterns:
        found = []
        for name in names:
            match = re.fullmatch(pattern, name)
            if match:
                found.append((int(match.group(1)), name))
        if found:
            return [name for _, name in sorted(found)[:MAX_LIST_ELEMENTS]]
    return []


@dataclass
class Canonical:
    """The canonical log built from one input, with how it was read."""

    log: ParsedLog
    resolution: Resolution
    format: str
    notes: list[str] = field(default_factory=list)

    @property
    def description(self) -> str:
        """``read as TensorBoard, preset specforge-dflash (detected)``."""
        res = self.resolution
        if res.preset is None:
            how = "no preset"
        else:
            how = f"preset {res.preset.name}" + (" (detected)" if res.detected else "")
        return f"read as {self.format}, {how}"


def to_parsed_log(
    scalars: Scalars,
    *,
    source: int = 0,
    preset: Preset | None = None,
    fields: Mapping[str, str] | None = None,
    detect: bool = True,
    release: bool = False,
) -> Canonical:
    """Apply a preset and field map to a reader's scalars: the canonical :class:`ParsedLog`.

    Args:
        scalars: a format reader's output.
        source: the ``source`` index to stamp on the records.
        preset: the preset to apply (None: detect one from the keys when ``detect``).
        fields: a user's ``--field`` map (canonical name -> log key), layered over the preset.
        detect: detect a preset when none is given.
        release: empty ``scalars.wide`` once its pieces are taken in (for a caller with no
            more use for them: the pieces are then freed as the records are built from them,
            not held beside the records to the end).
    """
    frame = scalars.frame
    if _has_dots(frame):
        frame = frame.with_columns(pl.col("key").str.replace_all(".", "/", literal=True))
    wides = [
        w.rename({c: normalise_key(c) for c in w.columns if c not in WIDE_FIXED})
        for w in scalars.wide
    ]
    keys = set(frame["key"].unique().to_list())
    for wide in wides:
        keys.update(c for c in wide.columns if c not in WIDE_FIXED)
    res = resolve_fields(sorted(keys), preset, fields, detect)
    effective = res.preset
    issues = ParseIssues()
    issues.merge(scalars.issues)
    notes = list(scalars.notes)
    if res.missing:
        notes.append("never in the log: " + "; ".join(res.missing))

    step_keys = _step_keys(effective, fields)
    if scalars.as_lines is not None and any(k in w.columns for w in wides for k in step_keys):
        # a step key among values the reader merged by step: each of its lines is a record
        return to_parsed_log(
            scalars.as_lines(),
            source=source,
            preset=preset,
            fields=fields,
            detect=detect,
            release=release,
        )
    if release:
        scalars.wide = []  # the renamed pieces above are the only holders now
    frame = _apply_step_keys(frame, step_keys)
    wides = [_apply_wide_step_keys(w, step_keys) for w in wides]
    wanted = (
        set(res.scalars.values())
        | set(res.acc_pos)
        | set(res.loss_parts)
        | set(res.eval_fields.values())
    )
    if res.eval_tau:
        wanted.add(res.eval_tau)
    if not frame["row"].is_sorted():
        frame = frame.sort("row", maintain_order=True)
    frame = _epoch_as_step(frame, wides, notes)
    no_step = frame.filter(pl.col("step").is_null())
    if no_step.height:
        issues.without_step += no_step["row"].n_unique()
        frame = frame.filter(pl.col("step").is_not_null())
    for i, wide in enumerate(wides):
        if wide["step"].null_count():
            issues.without_step += wide["step"].null_count()
            wides[i] = wide.filter(pl.col("step").is_not_null())
    # the loop's name held the last piece (its columns) to the end of this function: every
    # copy made of the records below was then held beside the piece's buffers
    wide = None
    frame, wides = drop_bad_steps(frame, wides, issues)  # before segments: 2^63 is no restart
    frame, wides = _segments(frame, wides)
    parts = [_merge_by_step(frame, sorted(wanted))]
    del frame  # the long frame is the largest thing held: free it before the wide parts join
    parts += [
        w.select(
            "_segment",
            "step",
            pl.col("time").cast(pl.Float64),
            *(
                pl.col(k).cast(pl.Float64).alias(_PREFIX + k)
                for k in sorted(wanted)
                if k in w.columns
            ),
        )
        for w in wides
    ]
    del wides  # the parts hold what is used of them
    several = len(parts) > 1
    records = pl.concat(parts, how="diagonal_relaxed") if several else parts[0]
    del parts
    if not _in_order(records):
        # stable: a step's rows keep their order, so the last value of each key is the last written
        records = records.sort("_segment", "step", maintain_order=True)
    if several and records.height > 1:
        # a step written partly by each path (an eval record between two fast runs): one record
        # (the frame's columns are taken out of it as the merged ones are made)
        records = _merge_duplicate_steps(records, take=True)
    records = records.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("seq"))
    metrics, events = _build(records, res, effective, source, scalars.meta)
    count_nonfinite(
        metrics,
        issues,
        [
            n
            for n in (*METRIC_NUMBERS, *METRIC_LISTS)
            if (n not in ("step", "time") or n in res.scalars)
            # a column of nulls holds no NaN (and counting would materialise it)
            and metrics[n].null_count() < metrics.height
        ],
    )
    log = ParsedLog(
        metrics=metrics,
        events=events,
        issues=issues,
        sources=[],
        fields=dict(fields or {}),
        foreign=True,
        presets=[effective.name] if effective is not None else [],
    )
    log.next_line_no = records.height + 1
    return Canonical(log=log, resolution=res, format=scalars.format, notes=notes)


#: Keys of an epoch counter that stands in for the step in an epoch-only log.
_EPOCH_KEYS = ("epoch", "Epoch", "train/epoch")


def _epoch_as_step(
    frame: pl.DataFrame, wides: list[pl.DataFrame], notes: list[str]
) -> pl.DataFrame:
    """In a log with no step at all but whole-numbered epochs (Keras' ``CSVLogger``, per-epoch
    JSONL), the epoch is the step, and a note says so."""
    if wides or not frame.height or frame["step"].null_count() < frame.height:
        return frame
    epochs = (
        frame.filter(pl.col("key").is_in(_EPOCH_KEYS))
        .group_by("row")
        .agg(pl.col("value").first().alias("_epoch"))
    )
    if (
        not epochs.height
        or not epochs.select((pl.col("_epoch") == pl.col("_epoch").round(0)).all()).item()
    ):
        return frame
    notes.append("no step in the log: the epoch is the step")
    return (
        frame.join(epochs, on="row", how="left")
        .with_columns(pl.col("_epoch").cast(pl.Int64, strict=False).alias("step"))
        .drop("_epoch")
    )


def _merge_by_step(frame: pl.DataFrame, wanted: Sequence[str]) -> pl.DataFrame:
    """The long frame's records merged by (segment, step): columns ``_segment``, ``step``,
    ``time`` (the earliest) and ``k:<key>`` (the key's last value) for each wanted key.

    In row order the long frame is sorted by (segment, step) (a segment ends where the step goes
    down), so each record is a run of rows: the merge numbers the runs and scatters each key's
    last value per run into a column, with no group-by over the values (a filtered aggregation
    per key costs about 115 bytes and a Python-speed pass per value: 2 GB for 10M values).
    """
    if not frame.select(_sorted_by_segment_step()).item():
        # not so (a frame from elsewhere): a stable sort keeps each record's rows in row order
        frame = frame.sort("_segment", "step", maintain_order=True)
    boundary = (pl.col("_segment") != pl.col("_segment").shift(1)) | (
        pl.col("step") != pl.col("step").shift(1)
    )
    starts = frame.select(boundary.fill_null(True).alias("_start")).to_series()
    if starts.all():
        # a record per row (an MLflow metric file, a TensorBoard tag): nothing to merge
        key, value = pl.col("key"), pl.col("value")
        return frame.select(
            "_segment",
            "step",
            "time",
            *(pl.when(key == k).then(value).alias(_PREFIX + k) for k in wanted),
        )
    run = (starts.cum_sum().cast(pl.UInt32) - 1).alias("_run").set_sorted()
    records = (
        pl.DataFrame([run, frame["time"]])
        .group_by("_run", maintain_order=True)
        .agg(pl.col("time").min())
    )
    heads = frame.select("_segment", "step").filter(starts)
    columns = [heads["_segment"], heads["step"], records["time"]]
    n_records = heads.height
    del records, heads
    for name in wanted:
        mine = frame["key"] == name
        values = pl.DataFrame([run.filter(mine), frame["value"].filter(mine)])
        del mine
        # the last of each run of a key's rows is its value in that record
        last = values.filter((pl.col("_run") != pl.col("_run").shift(-1)).fill_null(True))
        del values
        if last.height == n_records:  # the key in every record: its values are the column
            columns.append(last["value"].alias(_PREFIX + name))
            continue
        column = pl.Series(_PREFIX + name, dtype=pl.Float64).extend_constant(None, n_records)
        columns.append(column.scatter(last["_run"], last["value"]) if last.height else column)
    return pl.DataFrame(columns)


def _merge_duplicate_steps(records: pl.DataFrame, *, take: bool = False) -> pl.DataFrame:
    """Records sorted by (segment, step) with each (segment, step) written more than once made
    one record: the earliest time, each key's last value (the records as they are if none is).

    ``take``: the columns are taken out of ``records`` as the merged ones are made (the
    caller's frame is left empty where anything was merged), so that each is freed before the
    next is copied.

    Sorted, a duplicate is the row right after its twin (no hashing), and only the runs of
    equal (segment, step) are grouped (a few rows: an eval record at a train step); the other
    records are kept and the merged values scattered into their runs' first rows (a group-by
    over every record held about 2.5x the records at once).
    """
    same = (
        (pl.col("_segment") == pl.col("_segment").shift(1))
        & (pl.col("step") == pl.col("step").shift(1))
    ).fill_null(False)
    flags = records.select(same.alias("dup"), same.shift(-1).fill_null(False).alias("next"))
    duplicate, followed = flags["dup"], flags["next"]
    del flags
    if not duplicate.any():
        return records
    value_columns = [c for c in records.columns if c.startswith(_PREFIX)]
    merged = (
        records.filter(duplicate | followed)
        .group_by("_segment", "step", maintain_order=True)
        .agg(pl.col("time").min(), *(pl.col(c).drop_nulls().last() for c in value_columns))
    )
    keep = ~duplicate
    # the first row of each run of duplicates, in the kept records (runs in merged's order)
    heads = followed.filter(keep).arg_true()
    del followed, duplicate
    n_kept = int(keep.sum())
    if not take:
        records = records.clone()  # (shares the buffers: the caller's frame stays whole)
    # column by column, each taken out of the frame: its filtered copy is made and (taken)
    # the column freed before the next one, so one column is spare at a time, not the frame
    columns: list[pl.Series] = []
    segment = None
    for name in records.columns:
        column = records.drop_in_place(name)
        if name == "_segment" and column.min() == column.max():
            columns.append(pl.Series(name, dtype=column.dtype))  # one segment: a literal
            segment = column[0]
        elif name in ("_segment", "step"):
            columns.append(column.filter(keep))
        elif column.null_count() == column.len() and merged[name].null_count() == merged.height:
            # nothing but nulls (an absent time, a key of other records): no buffer to copy
            columns.append(pl.Series(name, dtype=column.dtype))
        else:
            columns.append(column.filter(keep).scatter(heads, merged[name]))
        del column
    out = pl.DataFrame([c for c in columns if c.len() == n_kept])
    return out.with_columns(
        pl.lit(segment if c.name == "_segment" else None, c.dtype).alias(c.name)
        for c in columns
        if c.len() != n_kept
    ).select(*(c.name for c in columns))


def _sorted_by_segment_step() -> pl.Expr:
    segment = pl.col("_segment").diff().fill_null(0)
    return ((segment > 0) | ((segment == 0) & (pl.col("step").diff().fill_null(0) >= 0))).all()


def _in_order(records: pl.DataFrame) -> bool:
    """Whether the records are sorted by (segment, step) already (the usual case): one pass
    instead of a two-key sort of every record."""
    if records["step"].null_count():
        return False
    segment = records["_segment"]
    if segment.min() == segment.max():
        # one segment (the usual case): a check of the steps alone, with no column of diffs
        return records["step"].is_sorted()
    return bool(
        records.select(
            (pl.col("_segment").diff().fill_null(0) > 0)
            | (
                (pl.col("_segment").diff().fill_null(0) == 0)
                & (pl.col("step").diff().fill_null(0) >= 0)
            )
        )
        .to_series()
        .all()
    )


def _has_dots(frame: pl.DataFrame) -> bool:
    return bool(frame.height) and bool(
        frame.select(pl.col("key").str.contains(".", literal=True).any()).item()
    )


#: Columns of a wide piece that are not keys.
WIDE_FIXED = ("row", "step", "time")


def _step_keys(preset: Preset | None, fields: Mapping[str, str] | None) -> tuple[str, ...]:
    """The keys holding the step: the map's, else the preset's (none: the format's own)."""
    if fields and "step" in fields:
        return (normalise_key(fields["step"]),)
    return tuple(preset.step_keys) if preset is not None else ()


def _apply_step_keys(frame: pl.DataFrame, step_keys: tuple[str, ...]) -> pl.DataFrame:
    """Take each record's step from the step keys when present."""
    if not step_keys:
        return frame
    ranked = pl.DataFrame(
        {"key": list(step_keys), "_rank": list(range(len(step_keys)))},
        schema={"key": pl.String, "_rank": pl.Int64},
    )
    chosen = (
        frame.join(ranked, on="key", how="inner")
        .sort("row", "_rank")
        .group_by("row", maintain_order=True)
        .agg(pl.col("value").first().alias("_step"))
    )
    if chosen.height == 0:
        return frame
    return (
        frame.join(chosen, on="row", how="left")
        .with_columns(pl.coalesce(step_expr(pl.col("_step")), pl.col("step")).alias("step"))
        .drop("_step")
    )


def _apply_wide_step_keys(wide: pl.DataFrame, step_keys: tuple[str, ...]) -> pl.DataFrame:
    present = [k for k in step_keys if k in wide.columns]
    if not present:
        return wide
    return wide.with_columns(
        pl.coalesce(
            *(step_expr(pl.col(k).cast(pl.Float64)) for k in present), pl.col("step")
        ).alias("step")
    )


def _segments(
    frame: pl.DataFrame, wides: list[pl.DataFrame]
) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """Number the segments: a record whose step is below the previous record's starts one.

    The records of the long frame and of the wide pieces interleave by ``row``; when steps
    never go down (the usual case) everything is segment 0 without any join.
    """
    order = pl.concat([frame.select("row", "step"), *(w.select("row", "step") for w in wides)])
    if wides and not order["row"].is_sorted():
        order = order.sort("row")
    # (no null step is left here: a sorted column has no step below the one before it)
    if order["step"].is_sorted() or not (
        order.select((pl.col("step") < pl.col("step").shift(1)).any()).item()
    ):
        zero = pl.lit(0, pl.UInt32).alias("_segment")
        return frame.with_columns(zero), [w.with_columns(zero) for w in wides]
    # within a row the step is one, so rows in order tell the same as records would
    marks = (
        order.with_columns(
            (pl.col("step") < pl.col("step").shift(1))
            .fill_null(False)
            .cum_sum()
            .cast(pl.UInt32)
            .alias("_segment")
        )
        .unique("row", keep="first")
        .select("row", "_segment")
    )
    return (
        frame.join(marks, on="row", how="left"),
        [w.join(marks, on="row", how="left") for w in wides],
    )


def _build(
    records: pl.DataFrame,
    res: Resolution,
    preset: Preset | None,
    source: int,
    meta: Mapping[str, Any],
) -> tuple[pl.DataFrame, list[LogEvent]]:
    """The metric frame (canonical columns) and the events of the merged records.

    Columns the build is done with (a validation key's, once its events are made; a position
    key's, once in ``acc_pos``) are taken out of ``records`` (freed as it goes on).
    """
    cols = {c[len(_PREFIX) :] for c in records.columns if c.startswith(_PREFIX)}
    evals = _eval_events(records, res, preset, source)
    # a validation key no metric reads: its column is done with (freed before the build's)
    metric_keys = {*res.scalars.values(), *res.acc_pos, *res.loss_parts}
    for key in {*res.eval_fields.values(), res.eval_tau} & cols - metric_keys:
        records.drop_in_place(_PREFIX + key)

    def col(key: str | None) -> pl.Expr:
        if key is None or key not in cols:
            return pl.lit(None, pl.Float64)
        return pl.col(_PREFIX + key).cast(pl.Float64)

    exprs: dict[str, pl.Expr] = {}
    for name in METRIC_NUMBERS:
        if name in ("step",):
            continue
        if name == "time" and "time" not in res.scalars:
            exprs["time"] = pl.col("time")
            continue
        exprs[name] = col(res.scalars.get(name))
    if "tau_train" in res.scalars and preset is not None and preset.tau_train_offset:
        exprs["tau_train"] = exprs["tau_train"] + preset.tau_train_offset
    present_pos = [k for k in res.acc_pos if k in cols]
    mean_acc = preset is not None and preset.acc_from_positions and "acc" not in res.scalars
    if present_pos and not any(records[_PREFIX + k].null_count() for k in present_pos):
        # a position in every record (the usual case): the list and the mean made in numpy
        acc_pos, acc = _position_columns(records, present_pos, res, mean_acc)
        records = records.with_columns(acc_pos, *([acc] if acc is not None else []))
        exprs["acc_pos"] = pl.col(acc_pos.name)
        if acc is not None:
            exprs["acc"] = pl.col(acc.name)
        del acc_pos, acc
    elif present_pos:
        any_pos = pl.any_horizontal(*(col(k).is_not_null() for k in present_pos))
        exprs["acc_pos"] = pl.when(any_pos).then(_row_list([col(k) for k in present_pos]))
        if mean_acc:
            exprs["acc"] = pl.when(any_pos).then(pl.mean_horizontal(*(col(k) for k in present_pos)))
    else:
        exprs["acc_pos"] = pl.lit(None, pl.List(pl.Float64))
    exprs["accept_pos"] = pl.lit(None, pl.List(pl.Float64))
    parts = [k for k in res.loss_parts if k in cols]
    if parts and preset is not None and preset.loss_from_positions:
        decay = preset.loss_from_positions[1]
        exprs["loss"] = pl.when(pl.any_horizontal(*(col(k).is_not_null() for k in parts))).then(
            pl.sum_horizontal(*(col(k) * decay**i for i, k in enumerate(parts)))
        )
    metric_names = [n for n in exprs if n not in ("time",)]
    block_size, block_source = _block_size(preset, meta, len(present_pos))
    total_steps = _as_step(meta.get("max_steps"))
    header_needed = block_size is not None or bool(total_steps and total_steps > 0)
    built = records.select(
        pl.lit(source, pl.Int32).alias("source"),
        pl.col("seq"),
        pl.lit(0 if header_needed else -1, pl.Int32).alias("run"),
        pl.lit(None, pl.String).alias("script"),
        pl.col("step").cast(pl.Int64),
        *(exprs[n].alias(n) for n in (m for m in METRIC_NUMBERS if m != "step")),
        *(exprs[n].alias(n) for n in METRIC_LISTS),
    )
    is_metric = pl.any_horizontal(
        *(pl.col(n).is_not_null() for n in metric_names if n not in ("epoch",))
    )
    metrics = built.filter(is_metric)
    events: list[LogEvent] = []
    if header_needed:
        header: dict[str, Any] = {"script": None, "block_size": block_size}
        if block_source is not None:
            header["block_size_source"] = block_source
        if total_steps and total_steps > 0:
            # the run's length (HF's max_steps): the schedule position says how far it is
            header["schedule"] = {"total_steps": total_steps}
        if preset is not None:
            header["preset"] = preset.name
        events.append(LogEvent(kind="run_start", source=source, seq=0, step=None, fields=header))
    events += evals
    return metrics, events


#: Rows whose positions' mean is taken at a time (:func:`_position_columns`).
_MEAN_ROWS = 2**16


def _position_columns(
    records: pl.DataFrame, keys: list[str], res: Resolution, mean: bool
) -> tuple[pl.Series, pl.Series | None]:
    """``acc_pos`` (and with ``mean`` the positions' mean, ``acc``) of records that hold every
    position key, as :func:`_row_list` and ``mean_horizontal`` make them.

    The values are copied into one row-major numpy buffer that the list column then wraps,
    and a position column used for nothing else is taken out of ``records`` (freed) once
    copied: polars' select held the columns, the fixed-width array, the list and the mean's
    intermediates at once (+63 MiB at 1M records of three positions).
    """
    import numpy as np

    used = (
        set(res.scalars.values())
        | set(res.loss_parts)
        | set(res.eval_fields.values())
        | ({res.eval_tau} if res.eval_tau else set())
    )
    acc = None
    if mean:
        # polars' own mean (its sum's order is its own), before the columns go, a slice of
        # rows at a time into one buffer: over every row at once its intermediates were
        # another 2-3 columns (a row's mean is the same in any slice)
        total = np.empty(records.height, dtype=np.float64)
        positions = records.select(_PREFIX + k for k in keys)
        for start in range(0, records.height, _MEAN_ROWS):
            part = positions.slice(start, _MEAN_ROWS).select(pl.mean_horizontal(pl.all()))
            total[start : start + part.height] = part.to_series().to_numpy()
        del positions
        acc = pl.Series("_acc", total)
    values = np.empty((records.height, len(keys)), dtype=np.float64)
    for i, key in enumerate(keys):
        name = _PREFIX + key
        column = records[name] if key in used else records.drop_in_place(name)
        values[:, i] = column.to_numpy()
        del column
    return pl.Series("_acc_pos", values).cast(pl.List(pl.Float64)), acc


def _row_list(columns: list[pl.Expr]) -> pl.Expr:
    """Each row's values of ``columns`` as one ``List(Float64)``: built as a fixed-width array
    and cast (``concat_list`` builds a list per row: 25x slower, 0.5 s for 300k rows of 7)."""
    if hasattr(pl, "concat_arr"):  # polars >= 1.19
        return pl.concat_arr(columns).cast(pl.List(pl.Float64))
    return pl.concat_list(columns)


def _block_size(
    preset: Preset | None, meta: Mapping[str, Any], n_positions: int
) -> tuple[int | None, str | None]:
    """B and where it came from (the report names the source: this header is made up)."""
    for key in ("block_size",):
        value = _as_step(meta.get(key))
        if value is not None and value >= 2:
            return value, "the log's block_size"
    ttt = _as_step(meta.get("ttt_length"))
    if ttt is not None and ttt >= 1:
        return ttt + 1, "ttt_length + 1"
    if n_positions >= 1:
        return n_positions + 1, f"{n_positions} acc positions + 1"
    if preset is not None and preset.block_size:
        return preset.block_size, f"preset {preset.name}"
    return None, None


def _eval_events(
    records: pl.DataFrame, res: Resolution, preset: Preset | None, source: int
) -> list[LogEvent]:
    keys = {
        name: _PREFIX + key
        for name, key in res.eval_fields.items()
        if _PREFIX + key in records.columns
    }
    tau_key = (
        _PREFIX + res.eval_tau
        if res.eval_tau and _PREFIX + res.eval_tau in records.columns
        else None
    )
    if not keys and tau_key is None:
        return []
    selected = [pl.col("seq"), pl.col("step")]
    if tau_key is not None:
        selected.append(pl.col(tau_key).alias("_tau"))
    selected += [pl.col(key).alias(name) for name, key in keys.items()]
    present = [pl.col(c).is_not_null() for c in (["_tau"] if tau_key else []) + list(keys)]
    rows = records.select(selected).filter(pl.any_horizontal(*present))
    offset = preset.eval_tau_offset if preset is not None else 0.0
    events = []
    for row in rows.iter_rows(named=True):
        fields: dict[str, Any] = {k: row[k] for k in keys if row[k] is not None}
        tau = row.get("_tau")
        if tau is not None:
            fields["tau"] = tau + offset
            fields["tau_basis"] = f"{res.eval_tau}" + (f" + {offset:g}" if offset else "")
        events.append(
            LogEvent(
                kind="eval",
                source=source,
                seq=int(row["seq"]),
                step=int(row["step"]),
                fields=fields,
            )
        )
    return events

"""MLflow's local stores: the file store (``mlruns/``) and the SQLite store (``mlflow.db``).

File store: ``mlruns/<experiment id>/<run id>/`` holds ``meta.yaml`` (``start_time`` in ms,
``lifecycle_stage``...), ``params/<name>`` (the value as text) and ``metrics/<key>``: one line
per logged value, ``<timestamp ms> <value> <step>`` (files of very old versions lack the step:
MLflow reads those as step 0). A "/" in a key makes sub-folders (``metrics/train/loss``).
Deleted runs move to ``.trash``.

SQLite store (the default tracking URI since MLflow 3.7 is ``sqlite:///mlflow.db``): table
``runs`` (``run_uuid``, ``name``, ``start_time``, ``lifecycle_stage``), table ``metrics``
(``key``, ``value``, ``timestamp``, ``step``, ``is_nan``: NaN is stored as 0 with ``is_nan``
set) and table ``params`` (``key``, ``value``). Read with the standard library's ``sqlite3``.

A store usually holds many runs: the most recently started active run is read, and a note says
which (a run's own folder reads that run).
"""

from __future__ import annotations

import functools
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.files import line_chunks
from dflash_diag.read.formats.canonical import SCALAR_SCHEMA, WIDE_FIXED, Scalars, empty_scalars
from dflash_diag.read.formats.checks import step_expr, step_value
from dflash_diag.read.presets import normalise_key
from dflash_diag.read.records import STEP_LIMIT, ParseIssues

FORMAT_FILES = "MLflow file store"
FORMAT_SQLITE = "MLflow SQLite store"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Params that carry run facts the diagnostics use.
_META_PARAMS = ("block_size", "ttt_length", "max_steps")


@dataclass(frozen=True)
class _Run:
    path: Path
    start_time: int
    name: str


def _meta(run: Path) -> tuple[int, str, str]:
    """``(start_time, run name, lifecycle stage)`` from a run's ``meta.yaml`` (simple key: value)."""
    try:
        text = (run / "meta.yaml").read_text(errors="replace")
    except OSError:
        return 0, run.name, "active"
    fields = dict(re.findall(r"(?m)^(\w+):\s*'?([^'\n]*)'?\s*$", text))
    start = fields.get("start_time", "0")
    return (
        int(start) if start.isdigit() else 0,
        fields.get("run_name", run.name),
        fields.get("lifecycle_stage", "active"),
    )


def is_run_folder(path: Path) -> bool:
    """A run's own folder: it has ``metrics/`` and ``meta.yaml``."""
    return (path / "metrics").is_dir() and (path / "meta.yaml").is_file()


def looks_like_file_store(path: Path) -> bool:
    """A store, an experiment or a run folder of the MLflow file store."""
    if is_run_folder(path):
        return True
    return any(is_run_folder(run) for run in _candidate_runs(path, limit=50))


def _candidate_runs(path: Path, limit: int | None = None):
    count = 0
    for child in sorted(path.iterdir()) if path.is_dir() else ():
        if not child.is_dir() or child.name.startswith("."):
            continue
        if is_run_folder(child):
            yield child
            count += 1
        else:
            for grandchild in sorted(child.iterdir()):
                if grandchild.is_dir() and is_run_folder(grandchild):
                    yield grandchild
                    count += 1
        if limit is not None and count >= limit:
            return


def read_file_store(path: str | Path, *, merged: bool = True) -> Scalars:
    """Read a run of the MLflow file store (the latest active one below ``path``).

    Each metric file is one typed series (timestamp, step, value; no Python object per line).
    When the run's lines are in logging order (every file's steps rise, its timestamps never
    fall, and no step is written after a higher one in time), the reader merges them by step
    itself, into one wide frame (:attr:`Scalars.wide`) with a column per metric: the merge the
    canonical step would make of the long frame (a record per step, its earliest time, each
    metric's value), without holding a row per value. Otherwise (a restart, a repeated step, a
    step out of range) it gives the long frame, one row per line in logging order, as it always
    did; ``merged=False`` asks for that form whatever the order.

    Raises:
        DiagError: no run below ``path``, or an unreadable metric file.
    """
    path = Path(path)
    notes = []
    if is_run_folder(path):
        run = path
    else:
        runs, deleted = [], []
        for candidate in _candidate_runs(path):
            start, name, stage = _meta(candidate)
            (runs if stage == "active" else deleted).append(_Run(candidate, start, name))
        if not runs and deleted:
            # a store of deleted runs only (not yet garbage-collected): their data is all there is
            runs = deleted
            notes.append(f"only deleted runs in the store ({len(deleted)}): read the latest")
        if not runs:
            raise DiagError(f"{path}: no MLflow run in it (mlruns/<experiment>/<run>/metrics)")
        latest = max(runs, key=lambda r: (r.start_time, str(r.path)))
        run = latest.path
        if len(runs) > 1:
            notes.append(f"latest of {len(runs)} MLflow runs: {latest.name} ({run.name})")
    metrics_dir = run / "metrics"
    issues = ParseIssues()
    series = [
        _read_metric_file(file, file.relative_to(metrics_dir).as_posix(), issues)
        for file in sorted(p for p in metrics_dir.rglob("*") if p.is_file())
    ]
    meta = _params(run / "params")
    wide = _merged_by_step(series) if merged else None
    if wide is not None:
        return Scalars(
            frame=empty_scalars(),
            format=FORMAT_FILES,
            issues=issues,
            meta=meta,
            notes=notes,
            wide=[wide],
            as_lines=functools.partial(read_file_store, path, merged=False),
        )
    pieces = [s.frame.with_columns(pl.lit(s.key, pl.String).alias("key")) for s in series]
    del series
    frame = pl.concat(pieces) if pieces else pl.DataFrame(schema=_METRIC_SCHEMA)
    del pieces
    return Scalars(
        frame=_ordered(frame.select(list(_METRIC_SCHEMA))),
        format=FORMAT_FILES,
        issues=issues,
        meta=meta,
        notes=notes,
    )


#: Bytes of a metric file parsed at once (line-aligned): memory is a chunk's lines, not the file's.
CHUNK_BYTES = 16 * 2**20
#: ``<timestamp> <value> [<step>]``, any whitespace between; more fields are ignored (the
#: lenient parse of a chunk that the CSV parser leaves a line of).
_LINE = r"^\s*(\S+)\s+(\S+)(?:\s+(\S+))?"
_METRIC_SCHEMA = {"timestamp": pl.Int64, "step": pl.Int64, "key": pl.String, "value": pl.Float64}
#: One metric file's values: its key is the file's, held once.
_SERIES_SCHEMA = {"timestamp": pl.Int64, "step": pl.Int64, "value": pl.Float64}


@dataclass
class _Series:
    """One metric file: its key, its values in file order, and whether they are in logging
    order on their own (steps rising strictly, timestamps never falling, every step in range:
    what lets the reader merge by step without the long frame)."""

    key: str
    frame: pl.DataFrame
    in_order: bool


def _read_metric_file(file: Path, key: str, issues: ParseIssues) -> _Series:
    """One metric file, streamed in line-aligned chunks, each parsed by polars (no Python
    object per line: 10M lines used to cost 2.7 GB and 18 s)."""
    pieces: list[pl.DataFrame] = []
    in_order = True
    last: tuple[int, int] | None = None  # the previous chunk's last (timestamp, step)
    try:
        with file.open("rb") as handle:
            for text, _final in line_chunks(handle, CHUNK_BYTES):
                piece = _parse_metric_lines(text, issues)
                if not piece.height:
                    continue
                if in_order:
                    in_order = _chunk_in_order(piece, last)
                    last = (piece["timestamp"][-1], piece["step"][-1])
                pieces.append(piece)
    except OSError as exc:
        raise DiagError(f"cannot read {file}: {exc}") from None
    return _Series(key, _contiguous(pieces), in_order)


def _contiguous(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    """The chunks' lines as one frame of contiguous columns, joined a column at a time (the
    chunks' copy of a column is released as it is joined: the file is never held twice).

    Columns of one buffer each: polars aligns the chunks of columns that differ in them by
    copying, at every select that mixes them, and so would the analysis."""
    if not pieces:
        return pl.DataFrame(schema=_SERIES_SCHEMA)
    columns = []
    for name in _SERIES_SCHEMA:
        columns.append(pl.concat([p[name] for p in pieces], rechunk=True))
        pieces[:] = [p.drop(name) for p in pieces]  # the caller's list too: now released
    return pl.DataFrame(columns)


def _chunk_in_order(piece: pl.DataFrame, last: tuple[int, int] | None) -> bool:
    """Whether a chunk's lines continue a file in logging order (see :class:`_Series`)."""
    ts, step = pl.col("timestamp"), pl.col("step")
    ordered = piece.select(
        (ts.diff().fill_null(0) >= 0).all()
        & (step.diff().fill_null(1) > 0).all()
        # out of range: read as OUT_OF_RANGE (-2^63), to be left out and counted by the
        # canonical step, which names each such record by its line in logging order
        & (step > -STEP_LIMIT).all()
    ).item()
    if not ordered:
        return False
    return last is None or (piece["timestamp"][0] >= last[0] and piece["step"][0] > last[1])


def _merged_by_step(series: list[_Series]) -> pl.DataFrame | None:
    """The run's records merged by step (columns ``row``, ``step``, ``time``, one per key), or
    None when the long frame is needed to say what the records are.

    The canonical step numbers segments in logging order (timestamp, step, key) and merges each
    segment's rows by step, the earliest time and each key's last value. When every file is in
    logging order on its own and no line is written after a line of a higher step (sorted by
    timestamp, then step, the steps never go down), that order has one segment and a key at most
    once per step: the merge is a join of the files on step, which is what this builds.
    """
    present = [s for s in series if s.frame.height]
    names = [normalise_key(s.key) for s in present]
    if (
        not present
        or not all(s.in_order for s in present)
        # two files read as one key (``a.b`` and ``a/b``), or a key named like a fixed column
        or len(set(names)) < len(names)
        or any(name in WIDE_FIXED for name in names)
    ):
        return None
    if len(present) == 1:
        frame = present[0].frame
        records = frame.select("step", (pl.col("timestamp") / 1000.0).alias("time"))
        columns = [frame["value"].alias(present[0].key)]
    else:
        order = pl.concat([s.frame.select("timestamp", "step") for s in present]).sort(
            "timestamp", "step"
        )
        step = pl.col("step")
        if not order.select((step.diff().fill_null(0) >= 0).all()).item():
            return None  # a step written after a higher one: restarts are the canonical step's
        # sorted by time, each step's first line carries its earliest time
        records = order.filter((step != step.shift(1)).fill_null(True)).select(
            "step", (pl.col("timestamp") / 1000.0).alias("time")
        )
        del order
        columns = []
        for s in present:
            at = records["step"].search_sorted(s.frame["step"], side="left")
            column = pl.Series(s.key, dtype=pl.Float64).extend_constant(None, records.height)
            columns.append(column.scatter(at, s.frame["value"]))
    rows = pl.int_range(0, records.height * len(columns), len(columns), dtype=pl.Int64, eager=True)
    return pl.DataFrame([rows.alias("row"), records["step"], records["time"], *columns])


def _parse_metric_lines(text: bytes, issues: ParseIssues) -> pl.DataFrame:
    """The values of a chunk of lines; blank lines skipped, others counted, bad ones malformed.

    MLflow writes one space between fields: polars' CSV parser reads that at C speed. A chunk
    where that leaves a line unread (tabs, several spaces) is parsed again by the lenient
    pattern, which splits at any whitespace.
    """
    try:
        parts = pl.read_csv(
            text,
            has_header=False,
            separator=" ",
            quote_char=None,
            schema=_FIELDS,
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
        )
    except (Exception, pl.exceptions.PanicException):  # noqa: BLE001
        parts = None
    if parts is not None:
        parts = parts.filter(pl.any_horizontal(pl.all().is_not_null()))  # blank lines
        if parts.select(_bad().any()).item():
            parts = None
    if parts is None:
        lines = pl.Series("line", [text.decode("utf-8", "replace")]).str.split("\n").explode()
        parts = (
            lines.to_frame()
            .filter(pl.col("line").str.strip_chars() != "")
            .select(pl.col("line").str.extract_groups(_LINE).struct.unnest())
            .rename({"1": "timestamp", "2": "value", "3": "step"})
        )
    issues.lines += parts.height
    parsed = parts.select(
        pl.col("timestamp").cast(pl.Int64, strict=False),
        # no step field: MLflow reads such (very old) files as step 0
        pl.when(pl.col("step").is_null())
        .then(pl.lit(0, pl.Int64))
        .otherwise(step_expr(pl.col("step").cast(pl.Float64, strict=False)))
        .alias("step"),
        pl.col("value").cast(pl.Float64, strict=False),
        _bad().alias("_bad"),
    )
    good = parsed.filter(~pl.col("_bad"))
    issues.malformed += parsed.height - good.height
    return good.drop("_bad")


#: The fields of a metric line, as text (converted after: a bad one is a malformed line).
_FIELDS = {"timestamp": pl.String, "value": pl.String, "step": pl.String}


def _bad() -> pl.Expr:
    """A line that is no ``<timestamp> <value> [<step>]``: a field missing or not a number."""
    number = pl.col("step").cast(pl.Float64, strict=False)
    return (
        pl.col("timestamp").cast(pl.Int64, strict=False).is_null()
        | pl.col("value").cast(pl.Float64, strict=False).is_null()
        | (pl.col("step").is_not_null() & number.is_null())
    )


def _ordered(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows in logging order (timestamp, then step): one row per logged value."""
    if not frame.select(_in_logging_order()).item():
        # a copy of every value: only when needed (one metric file is written in order)
        frame = frame.sort("timestamp", "step", "key", maintain_order=True)
    return frame.select(
        pl.int_range(0, pl.len(), dtype=pl.Int64).alias("row"),
        "step",
        "key",
        "value",
        (pl.col("timestamp") / 1000.0).alias("time"),
    ).cast(SCALAR_SCHEMA)


def _in_logging_order() -> pl.Expr:
    """Whether rows are sorted by (timestamp, step, key) already (nulls last, as the sort
    puts them: a null anywhere takes the sort)."""
    ts, step, key = pl.col("timestamp"), pl.col("step"), pl.col("key")
    later = ts > ts.shift(1)
    same = ts == ts.shift(1)
    step_later = step > step.shift(1)
    step_same = step == step.shift(1)
    ordered = later | (same & (step_later | (step_same & (key >= key.shift(1)))))
    no_nulls = ts.is_not_null().all() & step.is_not_null().all() & key.is_not_null().all()
    return no_nulls & ordered.slice(1).all()


def _params(folder: Path) -> dict[str, str]:
    meta = {}
    for name in _META_PARAMS:
        try:
            meta[name] = (folder / name).read_text().strip()
        except OSError:
            continue
    return meta


def _number(value: object) -> float | None:
    """A stored number as a float (SQLite integers are 64-bit: always a float), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def looks_like_sqlite(head: bytes) -> bool:
    """Whether a file starts with the SQLite header."""
    return head.startswith(SQLITE_MAGIC)


def read_sqlite_store(path: str | Path) -> Scalars:
    """Read the latest active run of an ``mlflow.db``.

    Raises:
        DiagError: not an MLflow database, or no run in it.
    """
    name = str(path)
    name = name.removeprefix("sqlite:///")
    try:
        connection = sqlite3.connect(f"file:{name}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise DiagError(f"cannot open {name}: {exc}") from None
    try:
        with connection:
            tables = {
                row[0]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if not {"runs", "metrics"} <= tables:
                raise DiagError(
                    f"{name}: an SQLite file, but not an MLflow store (no runs/metrics tables)"
                )
            runs = connection.execute(
                "SELECT run_uuid, name, start_time FROM runs WHERE lifecycle_stage = 'active' "
                "ORDER BY start_time DESC, run_uuid"
            ).fetchall()
            if not runs:
                raise DiagError(f"{name}: no active MLflow run in it")
            run_uuid, run_name, _ = runs[0]
            notes = (
                [f"latest of {len(runs)} MLflow runs: {run_name} ({run_uuid})"]
                if len(runs) > 1
                else []
            )
            keys, values, timestamps, steps = [], [], [], []
            rows = bad = 0
            cursor = connection.execute(
                "SELECT key, value, is_nan, timestamp, step FROM metrics WHERE run_uuid = ? "
                "ORDER BY timestamp, step, key",
                (run_uuid,),
            )
            while batch := cursor.fetchmany(65536):
                for key, value, is_nan, timestamp, step in batch:
                    rows += 1
                    # SQLite keeps whatever type was stored: text in `value` (a damaged or
                    # hand-edited store), a step beyond int64 stored as REAL. Such a row is
                    # left out and counted, never a TypeError that refuses the whole store.
                    number = float("nan") if is_nan else _number(value)
                    if (
                        number is None
                        or not isinstance(key, str)
                        or not isinstance(timestamp, int)
                        or _number(step) is None
                    ):
                        bad += 1
                        continue
                    keys.append(key)
                    values.append(number)
                    timestamps.append(timestamp)
                    steps.append(step_value(step))
            meta = {}
            if "params" in tables:
                for key, value in connection.execute(
                    "SELECT key, value FROM params WHERE run_uuid = ?", (run_uuid,)
                ):
                    if key in _META_PARAMS:
                        meta[key] = value
    except sqlite3.Error as exc:
        raise DiagError(f"{name}: cannot read the MLflow store ({exc})") from None
    finally:
        connection.close()
    frame = pl.DataFrame(
        {"timestamp": timestamps, "step": steps, "key": keys, "value": values},
        schema={"timestamp": pl.Int64, "step": pl.Int64, "key": pl.String, "value": pl.Float64},
    )
    issues = ParseIssues(lines=rows, malformed=bad)
    return Scalars(
        frame=_ordered(frame), format=FORMAT_SQLITE, issues=issues, meta=meta, notes=notes
    )

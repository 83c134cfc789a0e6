"""CSV metrics, as PyTorch Lightning's ``CSVLogger`` writes them (``version_N/metrics.csv``).

One header line naming every metric ever logged, then one line per logging call; a call fills
only its own columns (train and validation metrics land on different, sparse lines). ``step``
is the step column (Lightning writes it); ``epoch`` is a metric like the others. Given a
``lightning_logs/`` folder, the highest ``version_N`` is read.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.aliases import STEP
from dflash_diag.read.formats.canonical import SCALAR_SCHEMA, Scalars
from dflash_diag.read.formats.checks import step_expr, step_value
from dflash_diag.read.records import ParseIssues

FORMAT = "CSV metrics"
FILENAME = "metrics.csv"
#: Step columns, first present wins.
STEP_COLUMNS = STEP


#: Column separators tried, in order: Lightning's comma, a console table's tab, a semicolon.
SEPARATORS = (",", "\t", ";")


def separator(head: bytes) -> str | None:
    """The separator of a header line naming a step column (None: not such a table)."""
    first = head.split(b"\n", 1)[0].strip().decode("utf-8", "replace").lstrip("\ufeff")
    for sep in SEPARATORS:
        names = [n.strip().strip('"') for n in first.split(sep)]
        if len(names) >= 2 and any(n in STEP_COLUMNS for n in names):
            return sep
    return None


def looks_like_metrics_csv(head: bytes) -> bool:
    """Whether the first line is a CSV (or tab-separated) header with a step column (or an
    ``epoch`` column and another: Keras' ``CSVLogger``)."""
    if separator(head) is not None:
        return True
    first = head.split(b"\n", 1)[0].strip().decode("utf-8", "replace").lstrip("\ufeff")
    names = [n.strip().strip('"') for n in first.split(",")]
    return len(names) >= 2 and "epoch" in names and all(n and not _is_number(n) for n in names)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def find_metrics_csv(folder: Path) -> Path | None:
    """``metrics.csv`` of a version folder, or of the newest ``version_N`` below ``folder``."""
    direct = folder / FILENAME
    if direct.is_file():
        return direct
    versions = []
    for child in folder.rglob(FILENAME):
        # the nearest version_N folder of the file's own path below ``folder`` (a folder
        # above, or the folder given, may be named anything)
        match = next(
            (
                m
                for part in reversed(child.parent.relative_to(folder).parts)
                if (m := re.fullmatch(r"version_(\d+)", part))
            ),
            None,
        )
        versions.append((int(match.group(1)) if match else -1, child.stat().st_mtime, child))
    return max(versions)[2] if versions else None


def read_metrics_csv(path: str | Path) -> Scalars:
    """Read a ``metrics.csv`` (or the newest one below a folder) into scalars.

    Raises:
        DiagError: no file, not CSV, or no step column.
    """
    path = Path(path)
    notes = []
    if path.is_dir():
        found = find_metrics_csv(path)
        if found is None:
            raise DiagError(f"{path}: no metrics.csv in it")
        if found.parent != path:
            notes.append(f"read {found}")
        path = found
    header = _header(path)
    step_column = next((c for c in STEP_COLUMNS if c in header), None)
    if step_column is None and "epoch" not in header:
        raise DiagError(f"{path}: no step column (one of {', '.join(STEP_COLUMNS)})")
    if len(header) > WIDE_COLUMNS and step_column is not None:
        return _read_wide(path, header, step_column, notes)
    try:
        # Every column as text: sparse lines and values such as "nan" must not upset the
        # type inference; numbers are converted below, anything else becomes null. Scanned, so
        # the text columns are converted as they are read, not all held first.
        with path.open("rb") as handle:
            sep = separator(handle.read(64 * 2**10)) or ","
        table = pl.scan_csv(path, infer_schema=False, truncate_ragged_lines=True, separator=sep)
        columns = table.collect_schema().names()
        step_column = next((c for c in STEP_COLUMNS if c in columns), None)
        if step_column is None and "epoch" not in columns:
            raise DiagError(f"{path}: no step column (one of {', '.join(STEP_COLUMNS)})")
        if step_column is None:
            # Keras' CSVLogger: one line per epoch; the canonical log takes the epoch as the step
            table = table.with_columns(pl.lit(None, pl.String).alias("_no_step"))
            columns.append("_no_step")
            step_column = "_no_step"
        numbers = (
            table.with_row_index("row")
            .select(
                pl.col("row").cast(pl.Int64),
                step_expr(
                    pl.col(step_column).str.strip_chars().cast(pl.Float64, strict=False)
                ).alias("step"),
                *(
                    pl.col(c).str.strip_chars().cast(pl.Float64, strict=False).alias(c)
                    for c in columns
                    if c != step_column
                ),
            )
            .collect()
        )
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise DiagError(
            f"{path}: not a readable CSV file ({' '.join(str(exc).split())[:160]})"
        ) from None
    issues = ParseIssues(lines=numbers.height)
    value_columns = [c for c in numbers.columns if c not in ("row", "step")]
    if not value_columns:
        return Scalars(frame=pl.DataFrame(schema=SCALAR_SCHEMA), format=FORMAT, issues=issues)
    # One column at a time, in unpivot's order (column by column, rows in order): an unpivot of
    # the whole table holds every cell before the filter drops the empty ones, and a
    # Lightning file's lines fill a few of its columns (1M lines of 10 columns: 10M cells,
    # 0.9 GB, for 3M values).
    parts = [
        numbers.select(
            "row",
            "step",
            pl.lit(column, pl.String).alias("key"),
            pl.col(column).alias("value"),
            pl.lit(None, pl.Float64).alias("time"),
        ).filter(pl.col("value").is_not_null())
        for column in value_columns
    ]
    long = pl.concat(parts, rechunk=True) if len(parts) > 1 else parts[0]
    return Scalars(frame=long.cast(SCALAR_SCHEMA), format=FORMAT, issues=issues, notes=notes)


#: Columns above which the file is read row by row: polars' reader holds a buffer per column
#: (100k columns in a 5.7 MB file cost over 1 GB), the row reader only the cells that hold a
#: value. Lightning writes a column per metric ever logged: tens, rarely hundreds.
WIDE_COLUMNS = 1024
#: Bytes of the header line read at most (a longer one is no metrics.csv worth reading).
_MAX_HEADER_BYTES = 16 * 2**20


def _header(path: Path) -> list[str]:
    """The column names of the first line."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(_MAX_HEADER_BYTES)
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    if len(first) >= _MAX_HEADER_BYTES and not first.endswith(b"\n"):
        raise DiagError(
            f"{path}: a header line over {_MAX_HEADER_BYTES >> 20} MiB is no metrics.csv"
        )
    line = first.decode("utf-8", "replace").removeprefix("\ufeff").rstrip("\r\n")
    return [
        name.strip().strip('"')
        for name in next(csv.reader([line], delimiter=separator(first) or ","), [])
    ]


def _read_wide(path: Path, header: list[str], step_column: str, notes: list[str]) -> Scalars:
    """A file of more than :data:`WIDE_COLUMNS` columns, row by row with :mod:`csv`: memory is
    one row and the cells that hold a number, however many columns the header names."""
    step_index = header.index(step_column)
    collector_rows, steps, keys, values = [], [], [], []
    issues = ParseIssues()
    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as handle:
            reader = csv.reader(handle)
            next(reader, None)
            for row in reader:
                issues.lines += 1  # a blank line too, as polars' null row
                step = _number(row[step_index]) if step_index < len(row) else None
                step_int = None if step is None else step_value(step)
                for index, cell in enumerate(row[: len(header)]):
                    if not cell or index == step_index:
                        continue
                    number = _number(cell)
                    if number is None:
                        continue
                    collector_rows.append(issues.lines - 1)
                    steps.append(step_int)
                    keys.append(header[index])
                    values.append(number)
    except (OSError, csv.Error) as exc:
        raise DiagError(
            f"{path}: not a readable CSV file ({' '.join(str(exc).split())[:160]})"
        ) from None
    frame = pl.DataFrame(
        {
            "row": collector_rows,
            "step": steps,
            "key": keys,
            "value": values,
            "time": [None] * len(values),
        },
        schema=SCALAR_SCHEMA,
    )
    return Scalars(frame=frame, format=FORMAT, issues=issues, notes=notes)


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None

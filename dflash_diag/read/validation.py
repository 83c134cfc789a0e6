"""The validation series of a parsed log, under one set of canonical names for every format.

Every reader keeps validation apart from training: held-out loss and accuracy (HF's
``eval_loss``, Lightning's ``val_loss``, TensorBoard's ``eval/accuracy``, console ``Val`` lines,
any name of :data:`dflash_diag.read.aliases.VALIDATION`) become ``eval`` events carrying
``loss`` and ``acc``; this project's own eval records carry the measured ``tau``. This module
gives them to an analysis as one frame, one row per eval step, with the canonical series names
of :data:`~dflash_diag.read.aliases.VALIDATION_SERIES`: ``eval_loss``, ``eval_acc``,
``eval_tau``.
"""

from __future__ import annotations

import polars as pl

from dflash_diag.read.aliases import VALIDATION_SERIES
from dflash_diag.read.records import ParsedLog


def validation_frame(log: ParsedLog) -> pl.DataFrame:
    """``step`` and the canonical validation series (Float64, null where an eval lacks one),
    in step order; a step evaluated twice keeps its last values.

    Returns:
        a frame with columns ``step``, ``eval_loss``, ``eval_acc``, ``eval_tau`` (no rows when
        the log holds no validation).
    """
    rows: dict[int, dict[str, float | None]] = {}
    for event in log.events:
        if event.kind != "eval" or event.step is None:
            continue
        row = rows.setdefault(int(event.step), dict.fromkeys(VALIDATION_SERIES.values()))
        for field, series in VALIDATION_SERIES.items():
            value = event.fields.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[series] = float(value)
    schema = {"step": pl.Int64, **{name: pl.Float64 for name in VALIDATION_SERIES.values()}}
    return (
        pl.DataFrame(
            [{"step": step, **values} for step, values in sorted(rows.items())],
            schema=schema,
            orient="row",
        )
        if rows
        else pl.DataFrame(schema=schema)
    )


def validation_series_names(log: ParsedLog) -> tuple[str, ...]:
    """The canonical validation series the log holds at least one value of."""
    frame = validation_frame(log)
    return tuple(
        name
        for name in VALIDATION_SERIES.values()
        if frame.height and frame[name].null_count() < frame.height
    )

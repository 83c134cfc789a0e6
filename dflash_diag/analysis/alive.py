"""Is the run alive? Checks on the raw records before any window is judged.

A trend test on a dead metric says nothing useful: a loss that is exactly 0.0 in every record
has no trend (Mann-Kendall p = 1) and would read as a plateau; an accuracy of 37 (a percentage,
or garbage) gives an acceptance length of 1e23. So, before the windows:

* **left out and counted** (:func:`screen_records`): accuracies outside [0, 1] (their ``acc``
  becomes null; loss and the other fields of the record stay), and records whose ``n_pred`` is
  zero or negative (a batch that predicted no token has no accuracy and no per-token loss: its
  ``acc`` and ``loss`` become null, so it never gets a vote, and its window's weighted mean is
  taken over the records that did predict). Each kind is one note in the report.
* **broken** (:func:`broken_reason`): a loss that is constant (exactly 0.0 included) over every
  finite record, a loss that jumps to exactly 0.0 and stays there for its last :data:`MIN_RECORDS` or
  more records (a cross-entropy is never exactly zero: nothing is computed; a loss that decayed
  below :data:`TINY_LOSS` first is a perfect fit, not a dead run), or an accuracy that is constant
  while there is no moving loss: the run (or its logging) is dead, and the verdict says so (``broken``) instead of judging a trend. An accuracy
  constant beside a moving loss is a broken metric, not a broken run: the verdict judges the
  loss instead, with a note; a constant loss beside a moving accuracy likewise.

A metric needs :data:`MIN_RECORDS` finite records before "constant" means anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import polars as pl

from dflash_diag.analysis.numbers import plural
from dflash_diag.analysis.windows import all_finite

#: Fewest finite records of a metric before its being constant is called broken.
MIN_RECORDS = 5
#: A loss below this before it turns exactly 0.0 decayed there (a fit to rounding), rather than
#: jumping there from a real value (122.1 -> 0.0: nothing computed).
TINY_LOSS = 1e-6


@dataclass(frozen=True)
class Screening:
    """What :func:`screen_records` left out.

    Attributes:
        acc_out_of_range: records whose accuracy was outside [0, 1] (their ``acc`` left out).
        nonpositive_n_pred: records with ``n_pred <= 0`` (their ``acc`` and ``loss`` left out).
        constant: metric -> its one value, for a metric constant beside the other one moving
            (the verdict judges the other one).
        notes: one line per kind left out, for the report.
    """

    acc_out_of_range: int = 0
    nonpositive_n_pred: int = 0
    constant: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _finite(frame: pl.DataFrame, name: str) -> pl.Series:
    if name not in frame.columns or frame.height == 0:
        return pl.Series(name, [], pl.Float64)
    values = frame[name].drop_nulls()
    return values.filter(values.is_finite())


def finite_range(frame: pl.DataFrame, name: str) -> tuple[int, object, object]:
    """``(count, min, max)`` of the finite values of ``name`` (min and max None without one):
    what ``_finite(frame, name)`` gives, without its copy where the column has no NaN or Inf
    (the usual log: its min and max are those of its finite values)."""
    if name not in frame.columns or frame.height == 0:
        return 0, None, None
    column = frame[name]
    if not column.dtype.is_float() or not all_finite(column):
        column = _finite(frame, name)
        return column.len(), column.min(), column.max()
    # min and max pass over nulls: no copy of the column without them (a screened accuracy's)
    return column.len() - column.null_count(), column.min(), column.max()


def constant_value(frame: pl.DataFrame, name: str, min_records: int = MIN_RECORDS) -> float | None:
    """The one value of ``name`` when at least ``min_records`` finite records all hold it."""
    return _constant_in(finite_range(frame, name), min_records)


def _constant_in(span: tuple[int, object, object], min_records: int = MIN_RECORDS) -> float | None:
    """:func:`constant_value` of a :func:`finite_range`."""
    count, low, high = span
    if count < min_records:
        return None
    return float(cast(float, low)) if low == high else None


def _moves(span: tuple[int, object, object]) -> bool:
    """:func:`moving` of a :func:`finite_range`."""
    count, low, high = span
    return count >= 2 and low != high


#: The columns :func:`screening_flags` adds: whether a record's accuracy, or its accuracy and
#: loss, were left out (watch keeps them for the records it prunes).
SCREENED_FLAGS = ("acc_out", "n_pred_out")


def _nonpositive_n_pred() -> pl.Expr:
    return (pl.col("n_pred") <= 0).fill_null(False)


def _acc_outside() -> pl.Expr:
    return (pl.col("acc").is_finite() & ((pl.col("acc") < 0) | (pl.col("acc") > 1))).fill_null(
        False
    )


def screening_flags(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (not yet screened) with :data:`SCREENED_FLAGS`: which records
    :func:`screen_records` leaves out of the accuracy for being outside [0, 1], and of the loss
    and accuracy for ``n_pred <= 0`` (a record so left out is not counted twice)."""
    n_pred = _nonpositive_n_pred() if "n_pred" in frame.columns else pl.lit(False)
    acc = _acc_outside() if "acc" in frame.columns else pl.lit(False)
    return frame.with_columns(
        (acc & ~n_pred).alias("acc_out"), n_pred.cast(pl.Boolean).alias("n_pred_out")
    )


def screen_records(frame: pl.DataFrame) -> tuple[pl.DataFrame, Screening]:
    """``frame`` with out-of-range accuracies and non-positive ``n_pred`` records left out.

    Returns:
        The screened frame (same rows; offending values set to null) and what was left out.
    """
    if frame.height == 0:
        return frame, Screening()
    bad_acc = bad_n = 0
    if "n_pred" in frame.columns:
        nonpositive = _nonpositive_n_pred()
        bad_n = int(frame.select(nonpositive.sum()).item())
        if bad_n:
            frame = frame.with_columns(
                *(
                    pl.when(nonpositive).then(None).otherwise(pl.col(c)).alias(c)
                    for c in ("acc", "loss")
                    if c in frame.columns
                )
            )
    if "acc" in frame.columns:
        outside = _acc_outside()
        bad_acc = int(frame.select(outside.sum()).item())
        if bad_acc:
            frame = frame.with_columns(
                pl.when(outside).then(None).otherwise(pl.col("acc")).alias("acc")
            )
    return frame, _screening(frame, bad_acc, bad_n)


def whole_log_screening(screening: Screening, every_record: pl.DataFrame) -> Screening:
    """The screening of every record converge reads, from ``screening`` (the records in view)
    and ``every_record`` (watch's pruned records, screened, with their :data:`SCREENED_FLAGS`,
    then the records in view, whose flags are null): the counts of both, and a metric constant
    in every record, not in the view alone, as converge screens the whole log."""
    flagged = {
        name: int(every_record[name].sum()) if name in every_record.columns else 0
        for name in SCREENED_FLAGS
    }
    return _screening(
        every_record,
        screening.acc_out_of_range + flagged["acc_out"],
        screening.nonpositive_n_pred + flagged["n_pred_out"],
    )


def _screening(frame: pl.DataFrame, bad_acc: int, bad_n: int) -> Screening:
    """What was left out (counted by the caller) and the metrics constant in ``frame``
    (screened), with the report's notes."""
    notes: list[str] = []
    if bad_n:
        notes.append(
            f"{plural(bad_n, 'record')} with n_pred <= 0 left out of the loss and "
            "accuracy (no predicted token: no vote)"
        )
    if bad_acc:
        notes.append(
            f"{plural(bad_acc, 'accuracy value')} outside [0, 1] left out (a percentage? "
            "an accuracy is a fraction)"
        )
    constant: dict[str, float] = {}
    # each column's finite range once (a million records in watch's whole-log screening)
    ranges = {name: finite_range(frame, name) for name in ("acc", "loss")}
    for name, other in (("acc", "loss"), ("loss", "acc")):
        value = _constant_in(ranges[name])
        if value is not None and _moves(ranges[other]):
            constant[name] = value
    for name, value in constant.items():
        other = "loss" if name == "acc" else "acc"
        notes.append(
            f"{name} is constant ({value:.4g}) in every record while the {other} moves: "
            f"the {name} is not measured; the verdict judges the {other}"
        )
    return Screening(bad_acc, bad_n, constant, notes)


def moving(frame: pl.DataFrame, name: str) -> bool:
    """Whether ``name`` has at least two distinct finite values."""
    return _moves(finite_range(frame, name))


def zero_tail(frame: pl.DataFrame, min_records: int = MIN_RECORDS) -> tuple[int, int] | None:
    """``(first step, records)`` of a run of finite losses that are exactly 0.0 up to the last
    one, when it holds at least ``min_records`` records and the loss before it was not already
    below :data:`TINY_LOSS`; else None."""
    if "loss" not in frame.columns or frame.height == 0:
        return None
    last = frame["loss"].drop_nulls().tail(min_records)
    if last.len() < min_records or bool((last != 0.0).any()):
        return None  # the usual case, decided on the last few records
    rows = frame.select("step", "loss").filter(pl.col("loss").is_finite().fill_null(False))
    if rows.height < min_records:
        return None
    nonzero = rows["loss"] != 0.0
    if not bool(nonzero.any()):
        n = rows.height
    else:
        last_nonzero = int(nonzero.arg_true()[-1])
        n = rows.height - 1 - last_nonzero
        if abs(float(rows["loss"][last_nonzero])) < TINY_LOSS:
            return (
                None  # a loss that decayed to 1e-12 and underflowed: a perfect fit, not a dead run
            )
    if n < min_records:
        return None
    return int(rows["step"][rows.height - n]), n


def broken_reason(frame: pl.DataFrame, min_records: int = MIN_RECORDS) -> str | None:
    """Why the run is not alive, or None: without a moving accuracy, the loss constant (exactly
    zero included) over every finite record; without a moving loss, the accuracy constant."""
    loss = constant_value(frame, "loss", min_records)
    if loss is not None and not moving(frame, "acc"):
        n_loss = finite_range(frame, "loss")[0]
        what = "exactly 0.0" if loss == 0 else f"constant ({loss:.6g})"
        return (
            f"loss is {what} in all {plural(n_loss, 'record')}: nothing is being learned or logged"
        )
    zero_since = zero_tail(frame)
    if zero_since is not None:
        step, n = zero_since
        return (
            f"loss is exactly 0.0 in the last {plural(n, 'record')} (since step {step}): a "
            "loss that is exactly zero is not computed (every label masked?), not learned"
        )
    if moving(frame, "loss"):
        return None
    acc = constant_value(frame, "acc", min_records)
    if acc is not None:
        n_acc = finite_range(frame, "acc")[0]
        return f"acc is constant ({acc:.4g}) in all {plural(n_acc, 'record')}: nothing is being learned or logged"
    return None

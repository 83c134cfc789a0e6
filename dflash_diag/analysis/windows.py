"""N-step windows: per-window counts and means of loss and accuracy (docs/design.md, Diagnosis rules).

A window's mean is weighted by ``n_pred`` (the accuracy denominator) when every entry of the window
carries it: batches hold different numbers of predicted tokens, and the per-token mean is the exact
accuracy of the window. Otherwise it is the plain mean of the entries. NaN and Inf are left out of
the means and counted per window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast, overload

import numpy as np
import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.numbers import plural


@dataclass(frozen=True, kw_only=True)
class Window:
    """One window of ``size`` steps, ``start <= step <= end``.

    Attributes:
        index: position of the window from the aligned start (gaps skip indices).
        start: first step of the window (aligned), inclusive.
        end: last step of the window, inclusive (``start + size - 1``).
        n: metric entries in the window.
        first_step: the smallest step actually present.
        last_step: the largest step actually present.
        loss: mean loss (None if no finite loss).
        acc: mean accuracy (None if no finite accuracy).
        weighted: the means are ``n_pred``-weighted.
        acc_se: standard error of the entries' accuracy (None with fewer than two).
        loss_se: standard error of the entries' loss (None with fewer than two).
        nonfinite: NaN/Inf values of ``loss``, ``acc``, ``tau_train`` and ``lr`` in the window.
        tau_train: mean prefix acceptance length (``n_blocks``-weighted where present) or None.
        lr: plain mean of the finite learning rates (None if none).
        tok_per_sec: plain mean of the finite throughputs (None if none; legacy records have
            no ``tok_per_sec``).
        tau_walk: the walked tau, ``sum walk_tokens / sum walk_steps`` over the window's records
            that carry both (a ratio of sums, not a mean of ratios); None without any.
        tau_walk_se: the walked tau's standard error, from the spread of the walked records
            around the ratio (:func:`ratio_se`); None with fewer than two walked records.
        walk_n: the walked records in the window (those that count toward ``tau_walk``).
    """

    index: int
    start: int
    end: int
    n: int
    first_step: int
    last_step: int
    loss: float | None
    acc: float | None
    weighted: bool
    acc_se: float | None
    loss_se: float | None
    nonfinite: int
    tau_train: float | None
    lr: float | None = None
    tok_per_sec: float | None = None
    tau_walk: float | None = None
    tau_walk_se: float | None = None
    walk_n: int = 0


def ratio_se(tokens: list[float], steps: list[float]) -> float | None:
    """Standard error of the ratio of sums ``R = sum t / sum s`` over records ``(t_i, s_i)``.

    The linearised (delta-method) estimator of a ratio of sums:
    ``SE(R) = sqrt(sum (t_i - R s_i)^2 / (n (n - 1))) / mean(s)``. Each record walks a few whole
    sequences, so the records, not the steps inside them, are the independent draws: steps of one
    sequence are correlated (looping data accepts all or nothing). None with fewer than two
    records or no steps. The plain-Python reference of the polars query in :func:`_aggregate`.
    """
    n = len(tokens)
    if n < 2 or n != len(steps):
        return None
    total_s = sum(steps)
    if total_s <= 0:
        return None
    r = sum(tokens) / total_s
    residual = sum((t - r * s) ** 2 for t, s in zip(tokens, steps, strict=True))
    return math.sqrt(residual / (n * (n - 1))) / (total_s / n)


def _ratio_se_expr() -> pl.Expr:
    """:func:`ratio_se` from per-window sums: ``sum (t - R s)^2 = sum t^2 - 2 R sum ts + R^2 sum s^2``
    (clipped at zero: the expansion can cancel to a tiny negative when every record has the same
    ratio)."""
    n = pl.col("_walk_n").cast(pl.Float64)
    t, s = pl.col("_walk_tokens_sum"), pl.col("_walk_steps_sum")
    r = t / s
    residual = pl.col("_walk_tt") - 2.0 * r * pl.col("_walk_ts") + r * r * pl.col("_walk_ss")
    residual = pl.when(residual > 0).then(residual).otherwise(0.0)
    return pl.when((pl.col("_walk_n") >= 2) & (s > 0)).then(
        (residual / (n * (n - 1.0))).sqrt() / (s / n)
    )


def window_index(start: int, size: int) -> pl.Expr:
    """The window number of each row's step, for windows aligned to ``start``."""
    return ((pl.col("step") - start) // size).alias("_window")


#: Steps per piece of :func:`window_keys`.
_KEY_PIECE = 1 << 18  # a piece of _WINDOW_PIECE rows (cut at a window start) in one go


def window_keys(steps: pl.Series, size: int, start: int) -> pl.Series | None:
    """:func:`window_index` of ``steps`` (all at or after ``start``, no null) as a ``_window``
    column, Int32 where every key fits: computed a piece at a time. The expression's ``step -
    start`` and its quotient are two million-row Int64 columns, which polars' allocator keeps
    after the query (+15 MiB of converge's peak at a million records); this is one of 4 MB.
    Made by polars, not numpy: ``pl.Series(name, ndarray)`` imports ``numpy.ma`` (7-15 ms of a
    process) for its mask check. None for steps that are not Int64 (the expression then)."""
    if steps.dtype != pl.Int64 or steps.null_count():
        return None
    high = steps.max()
    top = (cast(int, high) - start) // size if high is not None else 0
    kind = pl.Int32 if top < 2**31 else pl.Int64
    pieces = [
        ((steps.slice(low, _KEY_PIECE) - start) // size).cast(kind)
        for low in range(0, len(steps), _KEY_PIECE)
    ]
    if not pieces:
        return pl.Series("_window", [], dtype=kind)
    keys = pieces[0] if len(pieces) == 1 else pl.concat(pieces, rechunk=True)
    return keys.alias("_window")


def _masked(value: str, mask: pl.Expr) -> pl.Expr:
    """``value`` where ``mask`` holds, else null: the group-by then runs plain (fast) aggregations
    instead of a filter per group."""
    return pl.when(mask).then(pl.col(value)).otherwise(None)


def _finite(name: str) -> pl.Expr:
    return pl.col(name).is_finite().fill_null(False)


def _positive_weight(value: str, weight: str) -> pl.Expr:
    return _finite(value) & _finite(weight) & (pl.col(weight) > 0).fill_null(False)


def _weighted_mean_parts(value: str, with_sd: bool, weights: bool) -> list[pl.Expr]:
    """Per-window aggregations of ``value``: finite count, plain mean (and sd), and, with
    ``weights``, the weighted sum over the entries with a finite positive weight (masked by
    :func:`_masked_columns`)."""
    ok = pl.col(f"_{value}_ok")
    parts = [
        ok.count().alias(f"_{value}_n"),
        ok.mean().alias(f"_{value}_plain"),
        *([ok.std().alias(f"_{value}_sd")] if with_sd else []),
    ]
    if weights:
        weighted = pl.col(f"_{value}_w")
        parts += [
            weighted.count().alias(f"_{value}_wn"),
            (weighted * pl.col(f"_{value}_wt")).sum().alias(f"_{value}_wsum"),
            pl.col(f"_{value}_wt").sum().alias(f"_{value}_wden"),
        ]
    return parts


def _finite_values(value: str, clean: set[str]) -> pl.Expr:
    """``value`` where finite, else null; a column with no NaN or Inf (``clean``) is taken as
    it is: the same values, without a masked copy of a million rows."""
    return pl.col(value) if value in clean else _masked(value, _finite(value))


def _weight_everywhere(frame: pl.DataFrame, value: str, weight: str, clean: set[str]) -> bool:
    """Whether the rows with a positive weight are exactly the rows with a value, and the rows
    with a weight (both columns without NaN or Inf): then the masked value and weight are the
    columns as they are (a pipeline log's ``n_pred`` beside every ``acc``), and the query needs
    no masked copy of either (two million-row columns of its peak memory each)."""
    if value not in clean or weight not in clean:
        return False
    # Clean columns: a value is finite where it is not null. Null counts are polars' metadata,
    # and without nulls the test is the weights' minimum: no query of three masks a million rows.
    value_nulls, weight_nulls = frame[value].null_count(), frame[weight].null_count()
    if value_nulls != weight_nulls:
        return False  # the rows with both cannot be as many as the rows of each
    if value_nulls == 0:
        low = frame[weight].min()
        return low is None or cast(float, low) > 0
    return _weight_everywhere_query(frame, value, weight)


def _weight_everywhere_query(frame: pl.DataFrame, value: str, weight: str) -> bool:
    """:func:`_weight_everywhere`'s test as one query (any nulls)."""
    counts = frame.select(
        _positive_weight(value, weight).sum().alias("both"),
        pl.col(value).count().alias("value"),
        pl.col(weight).count().alias("weight"),
    ).row(0)
    # the rows with a positive weight are among those with a value and those with a weight
    return counts[0] == counts[1] == counts[2]


def _masked_columns(
    value: str, weight: str, weights: bool, clean: set[str], everywhere: bool = False
) -> list[pl.Expr]:
    if not weights:
        return [_finite_values(value, clean).alias(f"_{value}_ok")]
    if everywhere:  # _weight_everywhere: the masks keep every value and weight
        return [
            pl.col(value).alias(f"_{value}_ok"),
            pl.col(value).alias(f"_{value}_w"),
            pl.col(weight).alias(f"_{value}_wt"),
        ]
    has_weight = _positive_weight(value, weight)
    return [
        _finite_values(value, clean).alias(f"_{value}_ok"),
        _masked(value, has_weight).alias(f"_{value}_w"),
        _masked(weight, has_weight).alias(f"_{value}_wt"),
    ]


def _picked_mean(
    value: str, with_se: bool, weights: bool
) -> tuple[pl.Expr, pl.Expr, pl.Expr | None]:
    """(mean, weighted, standard error) of ``value`` per window, from :func:`_weighted_mean_parts`.

    The mean is ``n_pred``-weighted when every finite entry has a weight (and the weights do not
    sum to zero), else plain; None without a finite entry. The standard error needs two entries.
    Without ``weights`` (no weight in the whole log) the mean is the plain one.
    """
    n = pl.col(f"_{value}_n")
    sd = pl.col(f"_{value}_sd")
    if weights:
        wden = pl.col(f"_{value}_wden")
        use_weights = (n > 0) & (pl.col(f"_{value}_wn") == n) & wden.is_not_null() & (wden != 0)
        mean = (
            pl.when(n == 0)
            .then(None)
            .when(use_weights)
            .then(pl.col(f"_{value}_wsum") / wden)
            .otherwise(pl.col(f"_{value}_plain"))
        )
    else:
        # no entry has a weight: wn = 0, so use_weights is false where n > 0 (and n = 0 is null)
        use_weights = pl.lit(False)
        mean = pl.when(n == 0).then(None).otherwise(pl.col(f"_{value}_plain"))
    if not with_se:
        return mean, use_weights, None
    se = pl.when((n >= 2) & sd.is_finite().fill_null(False)).then(sd / n.cast(pl.Float64).sqrt())
    return mean, use_weights, se


#: A record counts toward the walked tau when both its walk fields are finite and it walked.
_walked = (
    _finite("walk_tokens") & _finite("walk_steps") & (pl.col("walk_steps") > 0).fill_null(False)
)

_NULL = pl.lit(None, pl.Float64)


def _with_values(frame: pl.DataFrame, names: Sequence[str]) -> set[str]:
    """The columns of ``names`` that hold a value somewhere in ``frame`` (not all null)."""
    return {
        name for name in names if name in frame.columns and frame[name].null_count() < frame.height
    }


def _without_nonfinite(frame: pl.DataFrame, names: Sequence[str]) -> set[str]:
    """The float columns of ``names`` whose values are all finite or null (no NaN, no Inf)."""
    return {name for name in names if frame.schema[name] == pl.Float64 and all_finite(frame[name])}


def all_finite(column: pl.Series) -> bool:
    """Whether every non-null value of a float ``column`` is finite.

    A finite sum says so without a boolean column of a million rows: a NaN or an Inf makes the
    sum NaN or infinite. A sum that is not finite (a NaN, an Inf, or finite values whose sum
    overflows) is decided by the values themselves.
    """
    total = column.sum()
    if total is not None and math.isfinite(cast(float, total)):
        return True
    return bool(column.is_finite().all(ignore_nulls=True))


def _aggregate(
    frame: pl.DataFrame, size: int, start: int, *, elide_empty: bool = True
) -> pl.DataFrame:
    """One row per non-empty window (sorted), with the columns :class:`Window` is built from.

    A field no record holds (HF logs have no accuracy, no weights, no walk) is a null literal in
    the result instead of a masked column and its aggregations: what the query would have
    computed from all-null columns (no entry: a null mean, a plain mean without weights, no walk),
    at about half the query's cost on such a log. ``elide_empty=False`` computes every field
    (the tests compare the two).
    """
    names = (
        "loss",
        "acc",
        "tau_train",
        "lr",
        "tok_per_sec",
        "n_pred",
        "n_blocks",
        "walk_tokens",
        "walk_steps",
    )
    has = _with_values(frame, names) if elide_empty else set(names)
    for name in names:
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.Float64).alias(name))
    # Columns without NaN or Inf (the usual log) need no masked copy and count no non-finite
    # value: each such copy is a million-row column of the query's peak memory.
    clean = _without_nonfinite(frame, sorted(has)) if elide_empty else set()
    counted = [name for name in ("loss", "acc", "tau_train", "lr") if name in has - clean]
    nonfinite = pl.lit(0, pl.Int64)
    for i, name in enumerate(counted):
        term = (pl.col(name).is_nan() | pl.col(name).is_infinite()).fill_null(False).cast(pl.Int64)
        nonfinite = term if i == 0 else nonfinite + term
    # no column counted: every window's count is 0, a literal, not a summed column of zeros
    counts = [nonfinite.alias("_nonfinite")] if counted else []
    nonfinite_sum = [pl.col("_nonfinite").sum()] if counted else []
    nonfinite_out = pl.col("_nonfinite") if counted else pl.lit(0, pl.Int64).alias("_nonfinite")
    masked: list[pl.Expr] = []
    parts: list[pl.Expr] = []
    picked: dict[str, tuple[pl.Expr, pl.Expr, pl.Expr | None]] = {}
    for value, weight, with_se in (
        ("acc", "n_pred", True),
        ("loss", "n_pred", True),
        ("tau_train", "n_blocks", False),
    ):
        if value not in has:
            picked[value] = (_NULL, pl.lit(False), _NULL if with_se else None)
            continue
        weights = weight in has
        everywhere = weights and elide_empty and _weight_everywhere(frame, value, weight, clean)
        masked += _masked_columns(value, weight, weights, clean, everywhere)
        parts += _weighted_mean_parts(value, with_sd=with_se, weights=weights)
        picked[value] = _picked_mean(value, with_se=with_se, weights=weights)
    means = {}
    for name in ("lr", "tok_per_sec"):
        if name in has:
            masked.append(_finite_values(name, clean).alias(f"_{name}_ok"))
            parts.append(pl.col(f"_{name}_ok").mean().alias(f"_{name}_mean"))
            means[name] = pl.col(f"_{name}_mean")
        else:
            means[name] = _NULL
    walked = {"walk_tokens", "walk_steps"} <= has
    if walked:
        masked += [
            _masked(name, _walked).alias(f"_{name}_ok") for name in ("walk_tokens", "walk_steps")
        ]
        parts += [
            *(
                pl.col(f"_{name}_ok").sum().alias(f"_{name}_sum")
                for name in ("walk_tokens", "walk_steps")
            ),
            # The second moments the walked tau's standard error needs (ratio_se).
            pl.col("_walk_tokens_ok").count().alias("_walk_n"),
            (pl.col("_walk_tokens_ok") ** 2).sum().alias("_walk_tt"),
            (pl.col("_walk_steps_ok") ** 2).sum().alias("_walk_ss"),
            (pl.col("_walk_tokens_ok") * pl.col("_walk_steps_ok")).sum().alias("_walk_ts"),
        ]
        tau_walk = (
            pl.when(pl.col("_walk_steps_sum") > 0)
            .then(pl.col("_walk_tokens_sum") / pl.col("_walk_steps_sum"))
            .alias("_tau_walk")
        )
        walk = [tau_walk, _ratio_se_expr().alias("_tau_walk_se"), pl.col("_walk_n").cast(pl.Int64)]
    else:
        # a record walks only with both fields: no walked record, no walked tau
        walk = [
            _NULL.alias("_tau_walk"),
            _NULL.alias("_tau_walk_se"),
            pl.lit(0, pl.Int64).alias("_walk_n"),
        ]
    acc, acc_weighted, acc_se = picked["acc"]
    loss, loss_weighted, loss_se = picked["loss"]
    tau, _, _ = picked["tau_train"]
    assert acc_se is not None
    assert loss_se is not None
    steps = frame["step"]
    # Records in step order (resolve_restarts' output): each window is one run of rows, and a
    # group-by on a key flagged sorted takes slices instead of hashing a million keys (about
    # half the query's time). The sums then run in row order.
    in_order = steps.is_sorted()
    low = steps.min()
    # window_keys' conditions (the keys of the whole frame are made only where they are used:
    # records in step order take them a piece at a time)
    keyed = steps.dtype == pl.Int64 and not steps.null_count()
    keyed = keyed and (low is None or cast(int, low) >= start)

    def windows_of(lazy: pl.LazyFrame, index: pl.Expr) -> pl.DataFrame:
        return (
            lazy.select(index, pl.col("step"), *counts, *masked)
            .group_by("_window")
            .agg(
                pl.len().alias("_n"),
                pl.col("step").min().alias("_first"),
                pl.col("step").max().alias("_last"),
                *nonfinite_sum,
                *parts,
            )
            .sort("_window")
            .select(
                pl.col("_window").cast(pl.Int64),
                # cast first: the key may be Int32, and a window's start past 2^31 not
                (pl.col("_window").cast(pl.Int64) * size + start).alias("_start"),
                pl.col("_n").cast(pl.Int64),
                pl.col("_first").cast(pl.Int64),
                pl.col("_last").cast(pl.Int64),
                loss.alias("_loss"),
                acc.alias("_acc"),
                # The flag follows accuracy; a log without accuracy reports the loss's weighting.
                (acc_weighted | (acc.is_null() & loss_weighted)).alias("_weighted"),
                acc_se.alias("_acc_se"),
                loss_se.alias("_loss_se"),
                nonfinite_out.cast(pl.Int64),
                tau.alias("_tau"),
                means["lr"].alias("_lr_mean"),
                means["tok_per_sec"].alias("_tok_per_sec_mean"),
                *walk,
            )
            # The in-memory engine's group-by sums like the eager API always did; the streaming
            # engine accumulates in another order, and the means would move in their last bits.
            .collect(engine="in-memory")
        )

    def by_expression() -> pl.DataFrame:
        index = window_index(start, size)
        index = index.set_sorted() if in_order else index
        lazy = frame.lazy()
        if steps.null_count() or (low is not None and cast(int, low) < start):
            # a filter copies every column it keeps: only where it drops a record
            lazy = lazy.filter(pl.col("step") >= start)
        return windows_of(lazy, index)

    if not keyed:
        return by_expression()
    if not in_order:
        keys = window_keys(steps, size, start)
        if keys is None:
            return by_expression()
        return windows_of(frame.hstack([keys]).lazy(), pl.col("_window"))
    # In step order every window is a run of rows: the query runs on pieces of whole windows, and
    # each window's aggregates are those of the same rows in the same order. On the whole frame
    # its key, masked columns and products (value * weight) are million-row columns held at once,
    # which polars' allocator keeps after the query (+18 MiB of converge's peak at a million
    # records).
    pieces = []
    for low_row, high_row in window_pieces(steps, size, start, _WINDOW_PIECE):
        piece = frame.slice(low_row, high_row - low_row)
        piece_keys = window_keys(piece["step"], size, start)
        if piece_keys is None:  # keys declined (the steps' type and nulls are the whole column's)
            return by_expression()
        pieces.append(windows_of(piece.hstack([piece_keys.set_sorted()]).lazy(), pl.col("_window")))
    return pieces[0] if len(pieces) == 1 else pl.concat(pieces, rechunk=True)


#: Rows per piece of the windows' query on records in step order (:func:`window_pieces`).
_WINDOW_PIECE = 1 << 17


def window_pieces(steps: pl.Series, size: int, start: int, rows: int) -> list[tuple[int, int]]:
    """``(low, high)`` row ranges that cover sorted ``steps`` in order, each about ``rows`` long
    and cut where a window of ``size`` steps aligned to ``start`` starts (a window longer than
    ``rows`` is one piece)."""
    height = len(steps)
    if height <= rows:
        return [(0, height)]
    at = steps.gather(list(range(rows, height, rows))).to_list()
    # the first step of the window of each of those rows: the piece starts at its first record
    firsts = pl.Series([(step - start) // size * size + start for step in at], dtype=steps.dtype)
    cuts = steps.search_sorted(firsts, side="left").to_list()
    bounds = sorted({0, *cuts, height})  # a window longer than a piece repeats a cut
    return list(itertools.pairwise(bounds))


#: Records a window should hold (``--window auto``): enough for a mean and a standard error.
AUTO_RECORDS = 5
#: Windows ``--window auto`` keeps at least, where the log is long enough: twice the verdict's
#: minimum, so a trend has room to show.
AUTO_MIN_WINDOWS = 2 * defaults.MIN_POINTS


@dataclass(frozen=True)
class WindowChoice:
    """The steps per window used and how they were chosen.

    Attributes:
        size: steps per window.
        basis: "--window" (given), or the auto rule's account (logging interval, records per
            window).
        interval: the logging interval found (median step between records), None when given.
    """

    size: int
    basis: str
    interval: int | None = None
    settled: bool = True
    """A longer log at the same logging interval gets the same size (watch fixes it then):
    False while the auto rule still lowers the records per window for a short log."""


def _distinct_gaps(steps: pl.Series) -> pl.Series:
    """The differences between consecutive distinct steps, in step order."""
    if steps.null_count():
        steps = steps.drop_nulls()
    if steps.is_sorted():
        # records in step order (the usual case): the distinct steps are where the column moves,
        # so their differences are its positive ones; no unique and no sort (each a copy of the
        # column, with a hash table for the unique: 240 -> 163 MB over the column at 10M steps)
        gaps = steps.diff()
        return gaps.filter(gaps > 0)
    return steps.unique().sort().diff().drop_nulls()


#: Steps per piece of :func:`_gap_counts` on steps in order: the differences of one piece at a
#: time (half a MiB) instead of a column of them (8 MB a million steps, and the filtered copy).
_GAP_PIECE = 1 << 16
#: Gaps below this are tallied by ``bincount`` (a log's logging interval); larger ones by a sort.
_GAP_TALLY = 1 << 14


def _gap_counts(steps: pl.Series) -> tuple[list[int], list[int]]:
    """The distinct differences between consecutive distinct steps, ascending, and how often
    each occurs: what :func:`_distinct_gaps` holds, as a tally."""
    present = steps.drop_nulls() if steps.null_count() else steps
    if not (present.dtype.is_integer() and present.is_sorted()):
        values, counts = np.unique(_distinct_gaps(present).to_numpy(), return_counts=True)
        return values.tolist(), counts.tolist()
    column = present.to_numpy()
    tally: dict[int, int] = {}
    for low in range(0, len(column) - 1, _GAP_PIECE):
        # the piece overlaps the next by one step: every consecutive pair is differenced once
        gaps = np.diff(column[low : low + _GAP_PIECE + 1])
        gaps = gaps[gaps > 0]  # the distinct steps are where the sorted column moves
        if not gaps.size:
            continue
        if int(gaps.max()) < _GAP_TALLY:
            counts = np.bincount(gaps)
            values = np.flatnonzero(counts)
            counts = counts[values]
        else:
            values, counts = np.unique(gaps, return_counts=True)
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            tally[value] = tally.get(value, 0) + count
    ordered = sorted(tally)
    return ordered, [tally[value] for value in ordered]


def _median_of_tally(values: list[int], counts: list[int]) -> float:
    """The median of the multiset ``values`` x ``counts`` (values ascending), as polars' median
    of the column gives it: the middle value, or the mean of the two middle ones."""
    total = sum(counts)
    middle: list[int] = []
    seen = 0
    for value, count in zip(values, counts, strict=True):
        seen += count
        while len(middle) < 2 and seen > ((total - 1) // 2 if not middle else total // 2):
            middle.append(value)
        if len(middle) == 2:
            break
    return (float(middle[0]) + float(middle[1])) / 2.0


def logging_interval(steps: pl.Series) -> int | None:
    """The median positive step difference between consecutive distinct steps (None with fewer
    than two)."""
    values, counts = _gap_counts(steps)
    if not values:
        return None
    return max(1, int(_median_of_tally(values, counts)))


def choose_window(frame: pl.DataFrame, size: int | None = None) -> WindowChoice:
    """The steps per window: ``size`` when given, else ``--window auto``'s rule.

    Auto: ``k`` records of the logging interval ``i`` (the median step between records), with
    ``k`` = :data:`AUTO_RECORDS` (5), lowered toward 1 while the log would give fewer than
    :data:`AUTO_MIN_WINDOWS` (10) windows. A log written every step (``i`` = 1, this project's
    own) keeps ``defaults.WINDOW`` (50) steps while they give the verdict its
    ``defaults.MIN_POINTS`` (5) windows (250 steps); a shorter one gets 10 windows the same way
    (35 epochs logged at step = epoch: 3-step windows, where one 50-step window gave no verdict).
    With HF's ``logging_steps=500`` that is 2500-step windows of 5 records; every command then
    judges the same windows (converge, compare, watch).
    """
    if size is not None:
        return WindowChoice(size, "--window")
    steps = (
        frame["step"]
        if "step" in frame.columns and frame.height
        else pl.Series("step", [], pl.Int64)
    )
    values, counts = _gap_counts(steps)
    if not values:
        return WindowChoice(defaults.WINDOW, "auto: fewer than two steps logged", settled=False)
    # logging_interval's, from the gaps tallied once
    interval = max(1, int(_median_of_tally(values, counts)))
    n = sum(counts) + 1 + (steps.null_count() > 0)  # distinct steps (n_unique counts a null)
    most = defaults.WINDOW if interval == 1 else AUTO_RECORDS
    # the most records (up to ``most``) that still give AUTO_MIN_WINDOWS windows, at least one;
    # a log written every step keeps its 50 steps while they give the verdict its windows: this
    # project's runs are read in 50-step windows wherever they can be
    k = max(1, min(most, n // AUTO_MIN_WINDOWS))
    if interval == 1 and n // most >= defaults.MIN_POINTS:
        k = most
    if interval == 1:
        basis = f"auto: {plural(k, 'step')}, logged every step" + (
            f" (a short log: {n} steps)" if k < most else ""
        )
    else:
        basis = f"auto: {plural(k, 'record')} of the {interval}-step logging interval"
    return WindowChoice(k * interval, basis, interval, settled=k == most)


#: The polars type of each :class:`Window` field, in field order (a :class:`WindowTable`'s
#: columns).
WINDOW_SCHEMA: dict[str, pl.DataType] = {
    "index": pl.Int64(),
    "start": pl.Int64(),
    "end": pl.Int64(),
    "n": pl.Int64(),
    "first_step": pl.Int64(),
    "last_step": pl.Int64(),
    "loss": pl.Float64(),
    "acc": pl.Float64(),
    "weighted": pl.Boolean(),
    "acc_se": pl.Float64(),
    "loss_se": pl.Float64(),
    "nonfinite": pl.Int64(),
    "tau_train": pl.Float64(),
    "lr": pl.Float64(),
    "tok_per_sec": pl.Float64(),
    "tau_walk": pl.Float64(),
    "tau_walk_se": pl.Float64(),
    "walk_n": pl.Int64(),
}


def _window_objects(columns: list[list[object]]) -> list[Window]:
    """:class:`Window` objects from one list per field (in :data:`WINDOW_SCHEMA` order).

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 18 calls
    per window, most of building 20,000 windows. Filling the instance dict at once gives the
    same objects (equal, same hash and repr) at a third of the cost.
    """
    names = tuple(WINDOW_SCHEMA)
    new = object.__new__
    out: list[Window] = []
    append = out.append
    for values in zip(*columns, strict=True):
        window = new(Window)
        window.__dict__.update(zip(names, values, strict=True))
        append(window)
    return out


class WindowTable(Sequence[Window]):
    """Windows as columns: one array per :class:`Window` field, so a stage that reads every
    window (trend arrows, loss spikes, the verdict's points) is a few array operations instead of
    a Python loop over objects. The :class:`Window` objects are built on first use
    (:meth:`windows`), once; as a sequence of windows, indexing builds only the window asked
    for, iterating builds them all.

    A float field's array holds NaN where the window's value is None; :meth:`given` tells the two
    apart (a window built by hand may hold a NaN).
    """

    def __init__(self, frame: pl.DataFrame, windows: list[Window] | None = None) -> None:
        """``frame``: one row per window, the columns of :data:`WINDOW_SCHEMA`; ``windows``:
        the same windows as objects, when the caller has them."""
        assert frame.columns == list(WINDOW_SCHEMA), frame.columns
        self.frame = frame
        self._windows = windows
        self._arrays: dict[str, np.ndarray] = {}
        self._given: dict[str, np.ndarray] = {}

    @classmethod
    def from_windows(cls, windows: Sequence[Window]) -> WindowTable:
        """The table of windows given as objects (watch's merged windows, a caller's own)."""
        frame = pl.DataFrame(
            {name: [getattr(w, name) for w in windows] for name in WINDOW_SCHEMA},
            schema=WINDOW_SCHEMA,
        )
        return cls(frame, list(windows))

    def __len__(self) -> int:
        return self.frame.height

    @overload
    def __getitem__(self, i: int) -> Window: ...

    @overload
    def __getitem__(self, i: slice) -> list[Window]: ...

    def __getitem__(self, i: int | slice) -> Window | list[Window]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1 or self._windows is not None:
                return self.windows()[i]
            return self.slice(start, stop).windows()
        return self.window(i)

    def __iter__(self) -> Iterator[Window]:
        return iter(self.windows())

    def __reversed__(self) -> Iterator[Window]:
        return reversed(self.windows())

    def windows(self) -> list[Window]:
        """The windows as :class:`Window` objects, in step order (built once)."""
        if self._windows is None:
            self._windows = _window_objects([c.to_list() for c in self.frame.get_columns()])
        return self._windows

    def window(self, i: int) -> Window:
        """Window ``i`` (negative: counted from the newest) as a :class:`Window`, built alone: a
        stage that reads a few windows (the newest, a spike's) leaves the rest as columns.

        Raises:
            IndexError: no window ``i``.
        """
        if self._windows is not None:
            return self._windows[i]
        height = self.frame.height
        if not -height <= i < height:
            raise IndexError(f"window {i} of {height}")
        window = object.__new__(Window)  # as _window_objects builds them: the same object
        window.__dict__.update(zip(WINDOW_SCHEMA, self.frame.row(i), strict=True))
        return window

    def column(self, name: str) -> list[object]:
        """The field ``name`` of every window as Python values (None where None): what
        ``[getattr(w, name) for w in windows]`` gives, without the objects."""
        if self._windows is not None:
            return [getattr(w, name) for w in self._windows]
        return self.frame[name].to_list()

    def newest_given(self, name: str) -> int | None:
        """The position of the newest window whose field ``name`` is not None (None: none)."""
        given = self.given(name)
        if not given.any():
            return None
        return len(given) - 1 - int(np.argmax(given[::-1]))

    def slice(self, start: int, stop: int) -> WindowTable:
        """Windows ``start`` to ``stop`` (positions, as a list slice with a step of 1 takes
        them)."""
        start, stop, _ = slice(start, stop).indices(self.frame.height)
        stop = max(start, stop)
        windows = self._windows[start:stop] if self._windows is not None else None
        return WindowTable(self.frame.slice(start, stop - start), windows)

    def array(self, name: str) -> np.ndarray:
        """The field ``name`` of every window as a numpy array (NaN where None)."""
        if name not in self._arrays:
            self._arrays[name] = self.frame[name].to_numpy()
        return self._arrays[name]

    def given(self, name: str) -> np.ndarray:
        """Where the field ``name`` is not None (a boolean array)."""
        if name not in self._given:
            self._given[name] = self.frame[name].is_not_null().to_numpy()
        return self._given[name]

    def tail(self, count: int) -> WindowTable:
        """The newest ``count`` windows (all of them when there are fewer)."""
        if count >= self.frame.height:
            return self
        windows = self._windows[-count:] if self._windows is not None and count > 0 else None
        return WindowTable(self.frame.tail(max(count, 0)), windows)


def empty_window_table() -> WindowTable:
    """A table of no windows."""
    return WindowTable(pl.DataFrame(schema=WINDOW_SCHEMA), [])


def merge_window_tables(earlier: WindowTable, table: WindowTable) -> WindowTable:
    """``earlier``'s windows before ``table``'s first, then ``table``'s (both in index order).

    Watch's pruned windows and its recent ones: a window of ``earlier`` at or after ``table``'s
    first holds records that a restart superseded (it rewound to there), as converge's restart
    resolution drops them. In columns: a long watch has tens of thousands of pruned windows and
    merges them every refresh.
    """
    if not len(earlier):
        return table
    if not len(table):
        return earlier
    first = table.frame["index"][0]
    kept = earlier.frame.filter(pl.col("index") < first)
    return WindowTable(pl.concat([kept, table.frame]))


def compute_window_table(
    frame: pl.DataFrame, size: int = defaults.WINDOW, start: int | None = None
) -> WindowTable:
    """:func:`compute_windows` as a :class:`WindowTable` (the columns, objects built on use).

    Raises:
        ValueError: ``size`` < 1.
    """
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    if frame.height == 0:
        return empty_window_table()
    if start is None:
        start = int(cast(int, frame["step"].min()))
    table = _aggregate(frame, size, start)
    columns = table.get_columns()
    columns.insert(2, (columns[1] + (size - 1)).alias("end"))
    return WindowTable(
        pl.DataFrame([c.alias(name) for c, name in zip(columns, WINDOW_SCHEMA, strict=True)])
    )


def compute_windows(
    frame: pl.DataFrame, size: int = defaults.WINDOW, start: int | None = None
) -> list[Window]:
    """Bin metric records into ``size``-step windows aligned to ``start`` (default: first step).

    The aggregation is one polars query; Python only turns its columns into :class:`Window`
    objects (:func:`compute_window_table` keeps the columns).

    Args:
        frame: metric records (``step``, ``loss``, ``acc``, ``n_pred``; ``n_blocks``, ``tau_train``,
            ``lr`` and ``tok_per_sec`` are used when present).
        size: steps per window (>= 1).
        start: the first window's first step; records before it are ignored.

    Returns:
        The non-empty windows in step order.

    Raises:
        ValueError: ``size`` < 1.
    """
    return compute_window_table(frame, size, start).windows()


def window_rows(frame: pl.DataFrame, window: Window) -> pl.DataFrame:
    """The records of ``frame`` that fall in ``window``."""
    return frame.filter(pl.col("step").is_between(window.start, window.end))

"""The acceptance-length (tau) estimators as one table (docs/diagnostics.md, "Acceptance").

Each :class:`Estimator` record says how its tau is computed from a window's :class:`Evidence`,
how its per-window series is computed, whether it can lead and where it ranks (its place in
:data:`ESTIMATORS`, strongest evidence first), its display text, and the evidence it needs.
Everything else reads the table: the report's ranking line, the leading rule, the mismatch
warning, the forecast's cheap series. Adding an estimator is one entry.

The walk is passed as one value, :class:`Walk` (its tau, basis, standard error, record count and
whether it read training sequences).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.eval_columns import eval_steps, field_values, in_range, latest_per_step
from dflash_diag.analysis.numbers import plural
from dflash_diag.analysis.windows import Window, WindowTable, ratio_se, window_index
from dflash_diag.read.records import LogEvent

# -- formulas (pure) -------------------------------------------------------------------------------


def linear_tau(acc: float, block_size: int) -> float:
    """1 + (B-1) * acc."""
    return 1.0 + (block_size - 1) * acc


def chain_tau(acc_pos: Sequence[float]) -> float:
    """1 + sum_k prod_{j<=k} acc_pos[j] (positions treated as independent)."""
    total, running = 1.0, 1.0
    for p in acc_pos:
        running *= p
        total += running
    return total


def prefix_tau(accept_pos: Sequence[float]) -> float:
    """1 + sum_k accept_pos[k]: mean over uniformly drawn anchors of 1 + the correct prefix."""
    return 1.0 + sum(accept_pos)


def harmonic_tau(accept_pos: Sequence[float], block_size: int) -> float | None:
    """1 / sum_{k=0}^{B-1} (A_k - A_{k+1}) / (k+1), A_0 = 1, A_k = accept_pos[k-1], A_B = 0.

    ``A_k - A_{k+1}`` is the share of anchors whose step advances k + 1 tokens; decoding visits
    such a step once per k + 1 anchors, so the harmonic mean of the step lengths over anchors is
    the mean step length of decoding (exact when the accepted length is constant within a step).
    Positions beyond the list, or beyond B - 1, count as never accepted. None when the sum is not
    positive (a list that is not a survival curve).
    """
    survival = [1.0, *(float(a) for a in list(accept_pos)[: block_size - 1])]
    survival += [0.0] * (block_size + 1 - len(survival))  # ... A_{B-1}, and A_B = 0
    total = sum((survival[k] - survival[k + 1]) / (k + 1) for k in range(block_size))
    return 1.0 / total if total > 0 and math.isfinite(total) else None


# -- per-position means ----------------------------------------------------------------------------


def _weight(rows: pl.DataFrame) -> pl.Expr:
    if (
        "n_blocks" in rows.columns
        and rows["n_blocks"].is_not_null().all()
        and bool((rows["n_blocks"] > 0).all())
    ):
        return pl.col("n_blocks").cast(pl.Float64)
    return pl.lit(1.0)


def mean_positions(
    rows: pl.DataFrame, column: str, positions: int | None = None
) -> list[float] | None:
    """Per-position mean of a list column, weighted by ``n_blocks`` where every row has it;
    the first ``positions`` only (None: all)."""
    if column not in rows.columns or rows.height == 0:
        return None
    by_window = position_means_by_group(
        rows.with_columns(pl.lit(0).alias("_g")), column, "_g", positions
    )
    return by_window.get(0)


def position_means_by_group(
    rows: pl.DataFrame,
    column: str,
    group: str,
    positions: int | None = None,
    weight: pl.Expr | None = None,
) -> dict[int, list[float]]:
    """Per-position means of a list column for each value of ``group`` (one polars query),
    weighted by ``n_blocks`` where every row has it; NaN/Inf elements are left out.

    ``positions``: the first so many positions only (a block of B tokens drafts B - 1: a
    longer list's tail is no position and must not change tau; None: all). ``weight``: the
    weights decided over a larger frame that ``rows`` is part of (None: over ``rows``).
    """
    if column not in rows.columns or rows.height == 0:
        return {}
    values = pl.col(column) if positions is None else pl.col(column).list.head(positions)
    exploded = (
        rows.select(
            pl.col(group), values, (_weight(rows) if weight is None else weight).alias("_w")
        )
        .filter(pl.col(column).is_not_null() & (pl.col(column).list.len() > 0))
        .with_columns(pl.int_ranges(pl.col(column).list.len()).alias("_pos"))
        .explode([column, "_pos"])
        .filter(pl.col(column).is_finite())
    )
    if exploded.height == 0:
        return {}
    means = (
        exploded.group_by(group, "_pos")
        .agg(((pl.col(column) * pl.col("_w")).sum() / pl.col("_w").sum()).alias("_mean"))
        .sort(group, "_pos")
    )
    out: dict[int, list[float]] = {}
    for g, value in zip(means[group].to_list(), means["_mean"].to_list(), strict=True):
        out.setdefault(int(g), []).append(float(value))
    return out


def measurements(
    evals: Sequence[LogEvent], up_to_step: int | None = None, from_step: int | None = None
) -> list[LogEvent]:
    """The eval records with a step and a finite tau, within the bounds, in step order (for a
    step evaluated twice the later record wins)."""
    # columns, not a Python test per record: a log may hold 100,000 evals
    steps, has = eval_steps(evals)
    keep = in_range(steps, has, up_to_step, from_step) & ~np.isnan(field_values(evals, "tau"))
    return [evals[i] for i in latest_per_step(steps, keep).tolist()]


# -- estimates and their evidence ------------------------------------------------------------------


@dataclass(frozen=True)
class TauEstimate:
    """One acceptance-length estimate.

    Attributes:
        name: an :data:`ESTIMATORS` entry's name.
        tau: the estimate.
        basis: what it was computed from, for the report (with the reason when ``held_back``).
        error: ``tau - measured tau`` when a measured tau exists (None for the measured one).
        se: the estimate's standard error where known (the walk's; the measured tau's when its
            eval recorded per-prompt results, :func:`eval_se`), else None.
        held_back: why the estimate may not lead although its rank would let it (a short
            phrase: the walk on too little or too noisy evidence); None when it may.
    """

    name: str
    tau: float
    basis: str
    error: float | None = None
    se: float | None = None
    held_back: str | None = None

    @property
    def upper_view(self) -> bool:
        """An estimate that never leads (the size-biased ``prefix`` view): listed only."""
        entry = BY_NAME.get(self.name)
        return entry is not None and not entry.leads

    @property
    def can_lead(self) -> bool:
        """Ranked (an entry that leads) and not held back: may be the primary estimate."""
        return self.name in ESTIMATOR_ORDER and self.held_back is None


@dataclass(frozen=True)
class Walk:
    """The walked tau of a span of records, the walk estimate's whole evidence.

    Attributes:
        tau: ``sum walk_tokens / sum walk_steps`` over the span's walked records.
        basis: words for where it comes from.
        se: its standard error (None with fewer than two records).
        n: the walked records behind it (None: unknown, and the walk leads as before: a caller
            that does not count records does not judge them).
        in_sample: why the walk read sequences the drafter trained on (:func:`walk_in_sample`):
            it is then listed, never leading; None when it did not.
    """

    tau: float
    basis: str = "walk_tokens / walk_steps"
    se: float | None = None
    n: int | None = None
    in_sample: str | None = None


@dataclass(frozen=True)
class Evidence:
    """What one window of a log gives the estimators.

    Attributes:
        rows: the window's records, with ``acc_pos``/``accept_pos`` where logged.
        block_size: B.
        where: words naming the window, for the bases.
        acc: the window's accuracy.
        tau_train: the window's mean ``tau_train``.
        walk: the walked tau (None without one).
        measured: the eval record measured (None without one: the training estimates only).
    """

    rows: pl.DataFrame
    block_size: int
    where: str = "last window"
    acc: float | None = None
    tau_train: float | None = None
    walk: Walk | None = None
    measured: LogEvent | None = None
    _means: dict[str, list[float] | None] = field(default_factory=dict, compare=False, repr=False)

    def positions(self, column: str) -> list[float] | None:
        """The per-position means of ``column`` over the B - 1 drafted positions (computed once:
        two estimators read ``accept_pos``)."""
        if column not in self._means:
            self._means[column] = mean_positions(self.rows, column, self.block_size - 1)
        return self._means[column]


@dataclass(frozen=True)
class SeriesInput:
    """What a per-window series is computed from.

    Attributes:
        windows: the windows, in step order (at least one).
        frame: the records analysed.
        load: ``rows -> rows with acc_pos/accept_pos`` (a log read without its lists).
        evals: the log's eval records.
        block_size: B.
    """

    windows: Sequence[Window]
    frame: pl.DataFrame
    load: Callable[[pl.DataFrame], pl.DataFrame]
    evals: Sequence[LogEvent]
    block_size: int


@dataclass(frozen=True)
class Estimator:
    """One tau estimator: a row of :data:`ESTIMATORS`.

    Attributes:
        name: its name in the report and the JSON.
        label: what it is, in a few words, for the report.
        needs: the evidence it needs (the fields of the log it reads).
        estimate: ``evidence -> estimate`` (None when the evidence lacks what it needs).
        series: ``input -> its value per window`` (None where a window cannot give one); None
            for an estimator that never leads (no primary series).
        leads: it can be the primary estimate, ranked by its place in the table.
        reads_lists: its series reads the per-position lists (a second pass over a log read
            without them, paid only when asked for).
        promises: it undoes the size bias of uniform anchors, so the measured tau is compared with
            it for the train/serve mismatch warning.
        from_evals: its points are the eval records themselves (a tau target's ETA is fitted on
            them, not on per-window values).
    """

    name: str
    label: str
    needs: str
    estimate: Callable[[Evidence], TauEstimate | None]
    series: Callable[[SeriesInput], list[float | None]] | None = None
    leads: bool = True
    reads_lists: bool = False
    promises: bool = False
    from_evals: bool = False


def walk_held_back(
    tau: float,
    se: float | None,
    n_records: int,
    min_records: int = defaults.WALK_MIN_RECORDS,
    max_rel_se: float = defaults.WALK_MAX_REL_SE,
) -> str | None:
    """Why a walked tau may not lead the estimates, or None when its evidence is adequate.

    Each walked record walks only a few training sequences, and on looping data a sequence is
    accepted nearly all or nothing, so per-record walked tau can spread over several tokens: the
    ratio of a few records is then no better evidence than the harmonic estimate from every
    record's ``accept_pos``. The walk leads with at least ``min_records`` records and a relative
    standard error ``se / tau`` of at most ``max_rel_se``.
    """
    if n_records < min_records:
        return f"walk too thin to lead: {plural(n_records, 'record')}, {min_records} needed"
    if se is None or not math.isfinite(se) or tau <= 0:
        return "walk too noisy to lead: no standard error"
    rel = se / tau
    if rel > max_rel_se:
        return (
            f"walk too noisy to lead: ±{rel:.0%} over {plural(n_records, 'record')} "
            f"(limit ±{max_rel_se:.0%}; more walk_seqs would help)"
        )
    return None


def walk_in_sample(held_out_named: bool, epoch: float | None) -> str | None:
    """Why a walk may not lead because it walked sequences the drafter has trained on, or None.

    A log whose ``run_start`` header names no held-out split (``walk_held_out``: logs written
    before the trainer held one out) walked the step's own training batch: out of sample in the
    first epoch, but from epoch 1 on the drafter has trained on those sequences and the walk
    drifts high as it memorises them. ``epoch``: the latest epoch of the window's walked records.
    """
    if held_out_named or epoch is None or not math.isfinite(epoch) or epoch < 1:
        return None
    return (
        f"walk in-sample, unfit to lead: it walks training sequences (no held-out split "
        f"in the header), trained on since epoch 1; epoch {epoch:.1f} here"
    )


# -- the estimators --------------------------------------------------------------------------------


def eval_se(fields: dict) -> float | None:
    """Standard error of an eval's tau between its prompts, from its per-prompt results
    (``prompt_tokens``, ``prompt_steps``: the pipeline writes them since issue 22), the prompts
    as the draws (:func:`~dflash_diag.analysis.windows.ratio_se`). None for an eval without
    them (older logs, other trainers), with lists that do not pair up, or under two prompts.

    The steps of one prompt are correlated (a drafter accepts a whole easy passage or none of
    it), so the histogram alone, its steps taken as independent, would understate the error:
    on a 160-step pipeline run's 8-prompt evals the SE between prompts was 1.1-2.1x that."""
    tokens, steps = fields.get("prompt_tokens"), fields.get("prompt_steps")
    if not isinstance(tokens, list) or not isinstance(steps, list) or len(tokens) != len(steps):
        return None
    if not all(_count(x) for x in (*tokens, *steps)):
        return None
    return ratio_se([float(t) for t in tokens], [float(s) for s in steps])


def _count(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _measured(ev: Evidence) -> TauEstimate | None:
    if ev.measured is None:
        return None
    n_prompts = ev.measured.fields.get("n_prompts")
    basis = f"eval at step {ev.measured.step}"
    if isinstance(n_prompts, (int, float)) and not isinstance(n_prompts, bool):
        basis += f", {int(n_prompts)} prompts"
    return TauEstimate(
        MEASURED, float(ev.measured.fields["tau"]), basis, se=eval_se(ev.measured.fields)
    )


def _measured_series(inp: SeriesInput) -> list[float | None]:
    """The latest eval at or before each window's last step."""
    # measurements(), as columns: unique steps in order, so the latest at or before a step is
    # one bisection away (a scan of every eval per window was 1 s at 19,000 windows and 950
    # evals; a Python pass per eval, 0.3 s at 100,000 evals)
    steps, has = eval_steps(inp.evals)
    taus = field_values(inp.evals, "tau")
    keep = in_range(steps, has, inp.windows[-1].last_step, None) & ~np.isnan(taus)
    chosen = latest_per_step(steps, keep)
    points = taus[chosen].tolist()
    last_steps = (
        inp.windows.array("last_step")
        if isinstance(inp.windows, WindowTable)  # its column: no Window object built
        else np.array([w.last_step for w in inp.windows], dtype=np.int64)
    )
    counts = np.searchsorted(steps[chosen], last_steps, side="right").tolist()
    return [points[count - 1] if count else None for count in counts]


def _walk(ev: Evidence) -> TauEstimate | None:
    walk = ev.walk
    if walk is None or not math.isfinite(walk.tau):
        return None
    held = walk_held_back(walk.tau, walk.se, walk.n) if walk.n is not None else None
    held = walk.in_sample or held
    basis = walk.basis
    if held is not None:
        basis += f"; {held}"  # the phrase names the record count
    elif walk.n is not None:
        basis += f", {plural(walk.n, 'record')}"
    return TauEstimate(WALK, walk.tau, basis, se=walk.se, held_back=held)


def _linear(ev: Evidence) -> TauEstimate | None:
    if ev.acc is None or not math.isfinite(ev.acc):
        return None
    return TauEstimate(LINEAR, linear_tau(ev.acc, ev.block_size), f"1 + {ev.block_size - 1} * acc")


def _prefix(ev: Evidence) -> TauEstimate | None:
    if ev.tau_train is not None and math.isfinite(ev.tau_train):
        return TauEstimate(PREFIX, ev.tau_train, f"tau_train, {ev.where}: size-biased upper view")
    accept = ev.positions("accept_pos")
    if not accept:
        return None
    return TauEstimate(
        PREFIX, prefix_tau(accept), f"1 + sum accept_pos, {ev.where}: size-biased upper view"
    )


#: Records whose lists a list-based series reads back at a time (whole windows per batch).
SERIES_BATCH_ROWS = 65_536


def _window_batches(rows: pl.DataFrame, size: int) -> list[pl.DataFrame]:
    """``rows`` (window order, a ``_window`` column) cut into slices of whole windows, each of
    at least ``size`` rows but the last (one slice when the rows are fewer)."""
    if rows.height <= size:
        return [rows]
    index = rows["_window"].to_numpy()
    # a slice ends where a window ends, at the first window end after each ``size`` rows
    ends = np.flatnonzero(index[1:] != index[:-1]) + 1
    cuts, last = [0], 0
    for end in ends.tolist():
        if end - last >= size:
            cuts.append(end)
            last = end
    cuts.append(rows.height)
    return [rows.slice(a, b - a) for a, b in pairwise(cuts) if b > a]


def from_positions(
    name: str, column: str, formula: Callable[[list[float], int], float | None]
) -> tuple[Callable[[Evidence], TauEstimate | None], Callable[[SeriesInput], list[float | None]]]:
    """The estimate and the series of an estimator computed from the per-position means of a
    list column (``formula(means, B)``): the window's means for one, one polars query grouping
    every window's records for the other."""

    def estimate(ev: Evidence) -> TauEstimate | None:
        means = ev.positions(column)
        tau = formula(means, ev.block_size) if means else None
        return None if tau is None else TauEstimate(name, tau, f"{column}, {ev.where}")

    def series(inp: SeriesInput) -> list[float | None]:
        windows = inp.windows
        size = windows[0].end - windows[0].start + 1
        start = windows[0].start - windows[0].index * size
        span = inp.frame.filter(
            pl.col("step").is_between(windows[0].start, windows[-1].end)
        ).with_columns(window_index(start, size))
        weight = _weight(span)  # decided over every row of the series, batches or not
        means: dict[int, list[float]] = {}
        for batch in _window_batches(span, SERIES_BATCH_ROWS):
            # the lists of a batch of whole windows at a time: a log read without its lists
            # holds one batch's lists at once, not every record's (1M records: 1 GB)
            rows = inp.load(batch)
            means.update(
                position_means_by_group(rows, column, "_window", inp.block_size - 1, weight)
            )
        indices = (
            windows.array("index").tolist()
            if isinstance(windows, WindowTable)  # its column: no Window object built
            else [w.index for w in windows]
        )
        return [
            formula(values, inp.block_size) if values else None
            for values in (means.get(i) for i in indices)
        ]

    return estimate, series


MEASURED, WALK, HARMONIC, CHAIN, LINEAR, PREFIX = (
    "measured",
    "walk",
    "harmonic",
    "chain",
    "linear",
    "prefix",
)
_harmonic, _harmonic_series = from_positions(HARMONIC, "accept_pos", harmonic_tau)
_chain, _chain_series = from_positions(CHAIN, "acc_pos", lambda means, _b: chain_tau(means))


def _window_field(inp: SeriesInput, name: str) -> list[Any]:
    """Field ``name`` of every window of ``inp`` (None where a window has none): from the
    column of a :class:`WindowTable` (watch's tens of thousands of judged windows build no
    :class:`Window` objects), else from each window."""
    if isinstance(inp.windows, WindowTable):
        return inp.windows.frame[name].to_list()
    return [getattr(w, name) for w in inp.windows]


#: Every estimator, strongest evidence first: the report's primary estimate is the first that
#: may lead (:func:`leading`), and the estimates are listed in this order.
ESTIMATORS: tuple[Estimator, ...] = (
    Estimator(
        MEASURED,
        "measured by speculative decoding",
        "eval records with tau",
        _measured,
        _measured_series,
        from_evals=True,
    ),
    Estimator(
        WALK,
        "training predictions walked as decoding",
        "walk_tokens, walk_steps",
        _walk,
        lambda inp: _window_field(inp, "tau_walk"),
        promises=True,
    ),
    Estimator(
        HARMONIC,
        "harmonic, from accept_pos",
        "accept_pos",
        _harmonic,
        _harmonic_series,
        reads_lists=True,
        promises=True,
    ),
    Estimator(
        CHAIN,
        "independent positions, from acc_pos",
        "acc_pos",
        _chain,
        _chain_series,
        reads_lists=True,
    ),
    Estimator(
        LINEAR,
        "1 + (B-1) * acc",
        "acc",
        _linear,
        lambda inp: [
            linear_tau(acc, inp.block_size) if acc is not None else None
            for acc in _window_field(inp, "acc")
        ],
    ),
    Estimator(
        PREFIX,
        "tau_train: size-biased upper view, never primary",
        "tau_train, else accept_pos",
        _prefix,
        leads=False,
    ),
)
#: The estimators by name.
BY_NAME: dict[str, Estimator] = {e.name: e for e in ESTIMATORS}
#: The estimators that can be the primary estimate, strongest evidence first.
ESTIMATOR_ORDER: tuple[str, ...] = tuple(e.name for e in ESTIMATORS if e.leads)
#: What each estimator is, in a few words, for the report.
ESTIMATOR_LABELS: dict[str, str] = {e.name: e.label for e in ESTIMATORS}


def ranking_text() -> str:
    """The ranking the report states: ``measured > walk > ...`` (the leading entries in order)."""
    return " > ".join(ESTIMATOR_ORDER)


def estimator_label(name: str) -> str:
    """What estimator ``name`` is, in a few words (the table's ``label``)."""
    return BY_NAME[name].label


def estimates_of(evidence: Evidence) -> list[TauEstimate]:
    """Every estimate ``evidence`` supports, in table order (``measured`` only with a measured
    eval record in it)."""
    return [e for e in (entry.estimate(evidence) for entry in ESTIMATORS) if e is not None]


def leading(estimates: Sequence[TauEstimate]) -> TauEstimate | None:
    """The primary estimate: the strongest that may lead; when every ranked one is held back,
    the strongest ranked one (a noisy walk is still better than no estimate)."""
    ranked = [e for e in estimates if e.name in ESTIMATOR_ORDER]
    return next((e for e in ranked if e.can_lead), ranked[0] if ranked else None)


def estimator_series(name: str | None, inp: SeriesInput) -> list[float | None]:
    """The value of estimator ``name`` per window (None where a window cannot give one, and for
    an unknown name or one without a series)."""
    entry = BY_NAME.get(name) if name is not None else None
    if entry is None or entry.series is None or not inp.windows:
        return [None] * len(inp.windows)
    return entry.series(inp)

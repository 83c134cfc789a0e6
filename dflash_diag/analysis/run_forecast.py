"""The forecast section of a diagnosis: the plan, every tracked metric at the end, the target's ETA.

Which series each metric is forecast from: ``loss`` and ``acc`` from the training records
(binned, :func:`~dflash_diag.analysis.forecast.binned`); ``eval_loss`` and ``eval_acc`` from the
eval records that carry them; ``tau`` from the measured evals when there are
:data:`~dflash_diag.analysis.forecast.MIN_POINTS` of them, else from the primary estimator's
per-window series (an estimate: only as good as that estimator).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import polars as pl

from dflash_diag.analysis.acceptance import Acceptance
from dflash_diag.analysis.eval_columns import eval_steps, field_values, in_range
from dflash_diag.analysis.forecast import (
    FINAL_SHARE,
    MAX_EVAL_POINTS,
    MIN_POINTS,
    MetricForecast,
    Series,
    Timeline,
    binned,
    forecast_series,
    steps_array,
)
from dflash_diag.analysis.plan import UNPLANNED_HORIZON, RunPlan, plan_of
from dflash_diag.analysis.schedule import ScheduleHeader
from dflash_diag.analysis.target_eta import TargetEta, eta_to
from dflash_diag.analysis.windows import AUTO_RECORDS, Window, WindowTable
from dflash_diag.read.records import LogEvent

#: Metrics forecast, in report order, with their direction (True: higher is better).
METRICS = {"loss": False, "acc": True, "tau": True, "eval_loss": False, "eval_acc": True}
#: The best value each metric can take, where it is bounded (a loss >= 0, an accuracy <= 1; tau
#: <= the block size, given per log).
BEST = {"loss": 0.0, "acc": 1.0, "eval_loss": 0.0, "eval_acc": 1.0}
#: The worst value, where bounded (an accuracy >= 0, a tau >= 1: the verified token).
WORST = {"acc": 0.0, "eval_acc": 0.0, "tau": 1.0}
#: Records a window needs before its tau estimate is a point of the forecast: the auto window's
#: records (a short log's windows of 2-4 steps gave tau forecasts no better than the last value:
#: 62% error against 61% on the pipeline runs cut at 30%).
MIN_TAU_POINT_RECORDS = AUTO_RECORDS


@dataclass(frozen=True)
class ForecastConfig:
    """Forecast settings (the commands' ``--end-step``, ``--schedule`` and ``--target-loss``).

    Attributes:
        end_step: the planned end when the log does not record it (wins over the header).
        schedule: the lr shape after warmup when nothing records it (cosine, linear, constant).
        target_loss: a loss target: the ETA is to this loss instead of the acc/tau target.
        enabled: False skips the forecast (a command that does not show it).
    """

    end_step: int | None = None
    schedule: str | None = None
    target_loss: float | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.end_step is not None and self.end_step < 1:
            raise ValueError(f"--end-step must be >= 1, got {self.end_step}")
        if self.target_loss is not None and not math.isfinite(self.target_loss):
            raise ValueError(f"--target-loss must be a finite number, got {self.target_loss}")


@dataclass(frozen=True, kw_only=True)
class RunForecast:
    """The forecast section.

    Attributes:
        plan: the run's plan.
        step: the step forecast: the planned end, else the horizon (``last_step + span``).
        planned: whether ``step`` is a planned end.
        last_step: the newest step.
        metrics: the forecast per metric (only metrics the log tracks).
        target: the ETA to the target, when a target applies.
        notes: remarks (lr assumed constant, horizon without a plan).
    """

    plan: RunPlan
    step: int
    planned: bool
    last_step: int
    metrics: dict[str, MetricForecast]
    target: TargetEta | None = None
    notes: list[str] = field(default_factory=list)


def eval_series(evals: Sequence[LogEvent], name: str, first_step: int, last_step: int) -> Series:
    """The eval records' ``name`` values in the analysed range, one point per eval (a step
    evaluated twice gives two), in step order (then value order)."""
    # columns, not a Python test per record: a log may hold 100,000 evals
    steps, has = eval_steps(evals)
    values = field_values(evals, name)
    keep = in_range(steps, has, last_step, first_step) & ~np.isnan(values)
    xs, ys = steps[keep].astype(np.float64), values[keep]
    order = np.lexsort((ys, xs))  # stable, as the sort of (step, value) pairs was
    xs, ys = xs[order], ys[order]
    return Series(
        tuple(xs.tolist()),
        tuple(ys.tolist()),
        (1,) * len(xs),
        f"{len(xs)} evals",
    )


def _as_table(windows: Sequence[Window] | WindowTable) -> WindowTable:
    return windows if isinstance(windows, WindowTable) else WindowTable.from_windows(windows)


def _middles(table: WindowTable) -> np.ndarray:
    """Each window's middle step, ``(first_step + last_step) / 2.0`` as Python computes it (the
    integer sum, exact, then one float division: the same bits)."""
    return (table.array("first_step") + table.array("last_step")) / 2.0


def tau_input(
    evals: Sequence[LogEvent],
    windows: Sequence[Window] | WindowTable,
    tau_series: Sequence[float | None],
    estimator: str | None,
    first_step: int,
    last_step: int,
) -> Series:
    """The tau series to forecast: measured evals when there are enough, else the primary
    estimator's per-window values."""
    return _tau_input(evals, windows, tau_series, estimator, first_step, last_step)[0]


def _tau_input(
    evals: Sequence[LogEvent],
    windows: Sequence[Window] | WindowTable,
    tau_series: Sequence[float | None],
    estimator: str | None,
    first_step: int,
    last_step: int,
) -> tuple[Series, bool]:
    """:func:`tau_input`, and whether its points are the evals (one point per eval record)."""
    measured = eval_series(evals, "tau", first_step, last_step)
    if len(measured.steps) >= MIN_POINTS or not any(v is not None for v in tau_series):
        series = Series(
            measured.steps,
            measured.values,
            measured.counts,
            f"{len(measured.steps)} measured evals",
        )
        return series, True
    # tau_series is empty when the diagnosis did not compute it (nothing to pair then); the
    # windows' columns, not their objects, are read
    table = _as_table(windows)
    count = min(len(table), len(tau_series))
    middles = _middles(table)[:count].tolist()
    ns = cast(list[int], table.column("n"))[:count]
    pts = [
        (middle, v, n)
        for middle, v, n in zip(middles, tau_series[:count], ns, strict=True)
        if v is not None and math.isfinite(v) and n >= MIN_TAU_POINT_RECORDS
    ]
    series = Series(
        tuple(p[0] for p in pts),
        tuple(p[1] for p in pts),
        tuple(p[2] for p in pts),
        f"{len(pts)} per-window {estimator} estimates",
    )
    return series, False


def records_at_the_end(series: Series, first_step: int, last_step: int, end_step: int) -> float:
    """How many records the run's last :data:`~dflash_diag.analysis.forecast.FINAL_SHARE` of
    steps will hold, at the prefix's rate (what a training metric's level at the end is the mean
    of: its forecast's noise)."""
    per_step = sum(series.counts) / max(last_step - first_step, 1)
    return max(1.0, per_step * FINAL_SHARE * max(end_step - first_step, 1))


def _lr_points(
    frame: pl.DataFrame,
    windows: Sequence[Window] | WindowTable,
    steps: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The logged lr as ``(steps, lrs)`` arrays: every record's when the records carry it, else
    each window's mean at its middle step.

    The records' own lr, not the windows': a short prefix is one or two windows, whose means
    flatten a warmup and a decay the progress variables must follow (lr summed so far, annealing
    area). Read as columns: a long log has millions of records, and a Python tuple per record
    cost more than the rest of the forecast. ``steps``: the step column
    (:func:`_step_column`), when the caller has it; the steps returned are integers where it is.
    """
    if "lr" in frame.columns:
        if steps is None:
            steps = _step_column(frame)
        lrs = _float_column(frame, "lr")
        # numpy's view of the columns, not a filtered frame: no copy of a million records where
        # every lr counts (a null lr is NaN here, left out as drop_nulls left it out)
        keep = np.isfinite(lrs) & (lrs >= 0)
        if frame["step"].null_count():
            keep &= frame["step"].is_not_null().to_numpy()
        if not keep.all():
            steps, lrs = steps[keep], lrs[keep]
        if steps.size:
            return steps, lrs
    return _window_lrs(_as_table(windows))


def _float_column(frame: pl.DataFrame, name: str) -> np.ndarray:
    """Column ``name`` as float64 numpy (null: NaN), as polars' cast to Float64 gives it: a view
    of a float column, numpy's conversion of another (freed when the forecast is done, where
    polars' allocator would keep a cast's pages)."""
    values = frame[name].to_numpy()
    return values if values.dtype == np.float64 else values.astype(np.float64)


def _step_column(frame: pl.DataFrame) -> np.ndarray:
    """The step column as numpy with the values of its float64 cast
    (:func:`~dflash_diag.analysis.forecast.steps_array`): polars' own integers (a view, not an
    8 MB float copy of a million steps) when they are floats exactly, else floats (null: NaN)."""
    return steps_array(frame["step"].to_numpy())


def _window_lrs(table: WindowTable) -> tuple[np.ndarray, np.ndarray]:
    """Each window's mean lr at its middle step, for the windows with one."""
    given = table.given("lr")
    return _middles(table)[given], table.array("lr")[given].astype(float)


def forecast_run(
    frame: pl.DataFrame,
    *,
    plan: RunPlan,
    evals: Sequence[LogEvent] = (),
    windows: Sequence[Window] | WindowTable = (),
    tau_series: Sequence[float | None] = (),
    tau_estimator: str | None = None,
    target: tuple[str, float, float | None] | None = None,
    seconds_per_step: float | None = None,
    block_size: int | None = None,
) -> RunForecast:
    """Forecast every tracked metric of ``frame`` at the plan's end and the target's ETA.

    Args:
        frame: the analysed records (``step``, ``loss``, ``acc``, ``lr``), in step order.
        plan: the run's plan (:func:`dflash_diag.analysis.plan.plan_of`).
        evals: the log's eval records.
        windows: the analysed windows (the lr per window and the tau series' steps).
        tau_series: the primary estimator's value per window.
        tau_estimator: its name.
        target: ``(metric, target value, current value)`` of the active target, if any.
        seconds_per_step: for the ETA's hours.
        block_size: the drafter's block size B (tau is at most B).
    """
    first_step = int(cast(int, frame["step"].min()))
    last_step = int(cast(int, frame["step"].max()))
    notes: list[str] = []
    if plan.end_step is not None:
        step, planned = plan.end_step, True
    else:
        span = max(1, last_step - first_step)
        step, planned = last_step + max(1, round(UNPLANNED_HORIZON * span)), False
        notes.append(f"no planned end: forecast to +{step - last_step:,} steps (give --end-step)")
    # the step column once, for the lr timeline and both binned series
    steps = _step_column(frame)
    lr_steps, lrs = _lr_points(frame, windows, steps)
    timeline = Timeline(plan, lr_steps, lrs, max(step, last_step))
    del lr_steps, lrs
    if timeline.note and (not planned or step > last_step):
        notes.append(timeline.note)
    inputs: dict[str, Series] = {}
    for name in ("loss", "acc"):
        if name in frame.columns and frame[name].null_count() < frame.height:
            inputs[name] = binned(steps, frame[name].to_numpy(), basis="binned train records")
    # the series whose points are eval records, one each: bounded (MAX_EVAL_POINTS) in the fits
    from_evals = set()
    tau, tau_from_evals = _tau_input(
        evals, windows, tau_series, tau_estimator, first_step, last_step
    )
    if tau.steps:
        inputs["tau"] = tau
        if tau_from_evals:
            from_evals.add("tau")
    for name in ("loss", "acc"):
        series = eval_series(evals, name, first_step, last_step)
        if series.steps:
            inputs[f"eval_{name}"] = series
            from_evals.add(f"eval_{name}")
    metrics = {
        name: forecast_series(
            name,
            series,
            timeline=timeline,
            target_step=step,
            higher_is_better=METRICS[name],
            best=block_size if name == "tau" else BEST.get(name),
            worst=WORST.get(name),
            final_records=(
                records_at_the_end(series, first_step, last_step, step)
                if name in ("loss", "acc")
                else None
            ),
            max_points=MAX_EVAL_POINTS if name in from_evals else None,
        )
        for name, series in inputs.items()
        if series.steps
    }
    eta = None
    if target is not None:
        metric, goal, current = target
        fc = metrics.get(metric) or MetricForecast(
            metric=metric,
            step=step,
            value=None,
            low=None,
            high=None,
            reason=f"no {metric} series in the log",
            higher_is_better=METRICS.get(metric, True),
        )
        eta = eta_to(
            fc,
            target=goal,
            current=current,
            last_step=last_step,
            planned=planned,
            seconds_per_step=seconds_per_step,
        )
    return RunForecast(
        plan=plan,
        step=step,
        planned=planned,
        last_step=last_step,
        metrics=metrics,
        target=eta,
        notes=notes,
    )


def forecast_of(
    frame: pl.DataFrame,
    header: Mapping[str, Any],
    *,
    evals: Sequence[LogEvent],
    windows: Sequence[Window] | WindowTable,
    tau_series: Sequence[float | None],
    acceptance: Acceptance,
    config: ForecastConfig,
    peak_lr: float | None,
    seconds_per_step: float | None,
    block_size: int | None,
) -> RunForecast:
    """The forecast section of a diagnosis: the plan from the governing header's fields, the
    logged lr and the flags; the active target (``--target-loss``, else a tau target, else the
    acc target)."""
    sched = ScheduleHeader.from_fields(header.get("schedule"))
    # A header that records only the length is another trainer's (HF's max_steps).
    recorded_by = (
        "header"
        if (sched is None or sched.kind is not None or header.get("script"))
        else "max_steps"
    )
    table = _as_table(windows)
    lr_steps, lrs = _window_lrs(table)
    plan = plan_of(
        sched,
        steps=lr_steps,
        lrs=lrs,
        end_step=config.end_step,
        schedule=config.schedule,
        peak_lr=peak_lr,
        recorded_by=recorded_by,
    )
    newest_loss = table.newest_given("loss")
    if config.target_loss is not None:
        loss = table.window(newest_loss).loss if newest_loss is not None else None
        target = ("loss", config.target_loss, loss)
    elif acceptance.target_kind == "tau" and acceptance.target_tau is not None:
        target = ("tau", acceptance.target_tau, acceptance.tau)
    elif acceptance.acc is not None and acceptance.target_acc is not None:
        target = ("acc", acceptance.target_acc, acceptance.acc)
    else:
        target = None
    return forecast_run(
        frame,
        plan=plan,
        evals=evals,
        windows=table,
        tau_series=tau_series,
        tau_estimator=acceptance.estimator,
        target=target,
        seconds_per_step=seconds_per_step,
        block_size=block_size,
    )

"""One diagnosis of a training log, computed once and rendered by every command.

:func:`diagnose` builds a :class:`Diagnosis` (windows with trends, schedule position, accuracy,
acceptance with every estimator, target progress, verdict with its ETA, restarts, alerts) from a
loaded log and one :class:`DiagnosisConfig`. ``converge`` renders it; ``watch`` keeps the recent
records of a growing log and runs :func:`diagnose_frame` on them each refresh; ``compare`` runs it
once per regime. No command computes any of these numbers on its own, so the three agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.acceptance import (
    Acceptance,
    AcceptanceConfig,
    block_size_for,
    estimate_acceptance,
)
from dflash_diag.analysis.alerts import Alert, loss_spikes, value_resolution
from dflash_diag.analysis.alive import broken_reason, screen_records, whole_log_screening
from dflash_diag.analysis.drafter import (
    NATIVE_SCHEMA,
    DrafterEvidence,
    detect_drafter,
    is_schema_header,
)
from dflash_diag.analysis.estimators import (
    BY_NAME,
    Evidence,
    SeriesInput,
    TauEstimate,
    Walk,
    estimates_of,
    measurements,
    walk_in_sample,
)
from dflash_diag.analysis.estimators import estimator_series as series_of
from dflash_diag.analysis.numbers import finite_number, plural
from dflash_diag.analysis.phase import Phase, Selection, select_phase
from dflash_diag.analysis.recent_walk import recent_walk
from dflash_diag.analysis.restarts import Restart, before_then, resolve_restarts
from dflash_diag.analysis.run_forecast import ForecastConfig, RunForecast, forecast_of
from dflash_diag.analysis.schedule import ScheduleHeader, SchedulePosition, schedule_position
from dflash_diag.analysis.spans import window_label
from dflash_diag.analysis.target_eta import verdict_with_eta
from dflash_diag.analysis.trend import TrendConfig, trend_columns
from dflash_diag.analysis.validation import judge_validation
from dflash_diag.analysis.verdict import (
    DIVERGING,
    Verdict,
    VerdictConfig,
    eta_toward,
    fitted_slope,
    judge,
    with_health,
)
from dflash_diag.analysis.window_rows import WindowRow, WindowRows
from dflash_diag.analysis.windows import (
    Window,
    WindowChoice,
    WindowTable,
    all_finite,
    choose_window,
    compute_window_table,
    logging_interval,
    merge_window_tables,
    window_rows,
)
from dflash_diag.errors import DiagError
from dflash_diag.read.records import LogEvent, ParsedLog

#: ``rows -> rows with acc_pos/accept_pos``: a log read without its per-position lists reads them
#: back for the rows that need them (:func:`dflash_diag.read.jsonl.fetch_lists`).
ListLoader = Callable[[pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True)
class DiagnosisConfig:
    """Every knob of the analysis; the three commands map their shared options onto it.

    Attributes:
        phase: "auto", "pipeline" or "all".
        from_step: first step analysed (inclusive); windows align to it.
        to_step: last step analysed (inclusive).
        window: steps per window; None (``--window auto``, the default): chosen from the
            logging interval (:func:`dflash_diag.analysis.windows.choose_window`).
        keep_all: keep entries orphaned by restarts instead of purging them.
        peak_lr: peak lr when the header does not give one.
        trend: arrow thresholds.
        acceptance: block size, target and baseline.
        verdict: significance settings.
        spike_factor: robust standard deviations that make a window's loss a spike (alerts).
        forecast: the planned end, schedule and loss target of the forecast.
    """

    phase: Phase | str = Phase.AUTO
    from_step: int | None = None
    to_step: int | None = None
    window: int | None = None
    keep_all: bool = False
    peak_lr: float | None = None
    trend: TrendConfig = field(default_factory=TrendConfig)
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    spike_factor: float = defaults.SPIKE_FACTOR
    forecast: ForecastConfig = field(default_factory=ForecastConfig)

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 1:
            raise ValueError(f"--window must be >= 1, got {self.window}")
        if self.peak_lr is not None and not (self.peak_lr > 0 and math.isfinite(self.peak_lr)):
            raise ValueError(f"--peak-lr must be > 0, got {self.peak_lr}")
        if (
            self.from_step is not None
            and self.to_step is not None
            and self.from_step > self.to_step
        ):
            raise ValueError(f"--from-step {self.from_step} is after --to-step {self.to_step}")
        if not self.spike_factor > 0:
            raise ValueError(f"spike factor must be positive, got {self.spike_factor}")
        Phase(self.phase)  # raises ValueError for an unknown phase


@dataclass(kw_only=True)
class Diagnosis:
    """Everything the commands show about one log (or one regime of it).

    Attributes:
        selection: which records were analysed and why.
        windows: windows with trends, in step order (:func:`diagnose_frame` gives a
            :class:`~dflash_diag.analysis.window_rows.WindowRows`: the rows are built as they are
            read, from the columns :attr:`window_table` holds).
        schedule: lr schedule position at the last step.
        acceptance: accuracy, every tau estimate, the primary one, target progress.
        verdict: trend verdict and the ETA in the target's units.
        restarts: restarts found.
        alerts: loss spikes and a diverging verdict (watch adds its live ones).
        header: the ``run_start`` header governing the last analysed record, if any.
        notes: remarks worth a line in the report.
        tau_series: the primary estimator's value per window (aligned with ``windows``; the
            measured one is the latest eval at or before each window's last step); empty unless
            asked for (``series=True``) or a tau target needed it.
        last_step: the last analysed step.
        drafter: whether the log is a drafter's and why; without one, ``acceptance`` holds the
            accuracy only (no tau, no baseline, no target) and the JSON's ``acceptance`` is null.
        window: the steps per window used, and how they were chosen.
        forecast: every tracked metric at the planned end and the target's ETA (the verdict's
            ETA is this one's); None when the config disables it.
    """

    selection: Selection
    windows: Sequence[WindowRow]
    schedule: SchedulePosition
    acceptance: Acceptance
    verdict: Verdict
    restarts: list[Restart] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    header: LogEvent | None = None
    notes: list[str] = field(default_factory=list)
    tau_series: list[float | None] = field(default_factory=list)
    last_step: int | None = None
    drafter: DrafterEvidence = field(default_factory=lambda: DrafterEvidence(True, "assumed"))
    window: WindowChoice | None = None
    forecast: RunForecast | None = None

    @property
    def window_table(self) -> WindowTable:
        """The windows as columns (:class:`~dflash_diag.analysis.windows.WindowTable`)."""
        if isinstance(self.windows, WindowRows):
            return self.windows.table
        return WindowTable.from_windows([row.window for row in self.windows])


def governing_header(log: ParsedLog, frame: pl.DataFrame) -> LogEvent | None:
    """The ``run_start`` header of the last record of ``frame``, if any."""
    if frame.height == 0 or "run" not in frame.columns:
        return None
    # a query, not `frame["run"][-1]`: that materialises a reader's constant column (4 MB a
    # million rows), which the frame then keeps
    run = frame.select(pl.col("run").last()).item()
    headers = log.run_starts
    if run is None or run < 0 or run >= len(headers):
        return None
    return headers[run]


def walked_epoch(
    frame: pl.DataFrame, first_step: int, last_step: int, steps_per_epoch: float | None
) -> float | None:
    """The latest epoch of the walked records of steps ``first_step``-``last_step`` (from
    ``epoch``, else the step over the header's ``steps_per_epoch``; None when neither is known)."""
    rows = frame.filter(pl.col("step").is_between(first_step, last_step))
    if "walk_tokens" in rows.columns:
        rows = rows.filter(pl.col("walk_tokens").is_not_null())
    if rows.height == 0:
        return None
    if "epoch" in rows.columns:
        epoch = finite_number(rows["epoch"].drop_nulls().drop_nans().max())
        if epoch is not None:
            return epoch
    if steps_per_epoch:
        return float(cast(float, rows["step"].max())) / steps_per_epoch
    return None


def header_number(header: LogEvent | None, name: str) -> float | None:
    """A positive finite number of the header, else None."""
    if header is None:
        return None
    value = finite_number(header.fields.get(name))
    return value if value is not None and value > 0 else None


def max_lr_of(frame: pl.DataFrame) -> float | None:
    """The largest finite lr of ``frame`` (the "max seen" peak of every command)."""
    if "lr" not in frame.columns or frame.height == 0:
        return None
    lr = frame["lr"]
    if lr.dtype.is_float() and all_finite(lr):
        # no NaN or Inf: the largest of the column (nulls left out), without two copies of it
        return float(cast(float, lr.max())) if lr.len() > lr.null_count() else None
    lr = lr.drop_nulls()
    lr = lr.filter(lr.is_finite())
    return float(cast(float, lr.max())) if lr.len() else None


def diagnose(
    log: ParsedLog, config: DiagnosisConfig | None = None, *, lists: ListLoader | None = None
) -> Diagnosis:
    """The whole analysis of one log: restarts resolved, phase selected, :func:`diagnose_frame`.

    Args:
        log: the parsed log.
        config: the analysis settings.
        lists: reads the per-position lists back for given rows when ``log`` was loaded without
            them; None: :func:`~dflash_diag.read.jsonl.fetch_lists` where lists are pending.

    Raises:
        DiagError: nothing left to analyse after phase and step selection.
    """
    config = config or DiagnosisConfig()
    if lists is None and log.lists_pending:
        # load_log's default leaves the lists in the files: read back the rows that need them
        from dflash_diag.read.jsonl import fetch_lists

        def lists(rows: pl.DataFrame) -> pl.DataFrame:
            return fetch_lists(log, rows)

    frame, restarts = resolve_restarts(log.metrics, keep_all=config.keep_all)
    selected, selection = select_phase(frame, config.phase, config.from_step, config.to_step)
    if selected.height == 0:
        bounds = ""
        if config.from_step is not None or config.to_step is not None:
            bounds = f" in steps {config.from_step or '...'}-{config.to_step or '...'}"
        raise DiagError(
            f"nothing selected: no {selection.phase} entries{bounds} "
            f"({selection.total} metric records in the log)"
        )
    diagnosis = diagnose_frame(
        selected,
        selection=selection,
        restarts=restarts,
        evals=log.evals,
        header=governing_header(log, selected),
        config=config,
        lists=lists,
        max_lr=max_lr_of(log.metrics),
        origin=config.from_step,
        foreign=log.foreign,
        presets=log.presets,
    )
    diagnosis.notes += block_size_notes(log, selected)
    return diagnosis


def block_size_changes(
    log: ParsedLog, frame: pl.DataFrame | Callable[[], pl.DataFrame]
) -> list[tuple[int, int, int]]:
    """``(step, before, after)`` for each change of the ``run_start`` headers' block size
    between consecutive runs of ``frame`` (the first step governed by the new header);
    ``frame`` may be a function giving it, called only where the headers name two sizes."""
    headers = log.run_starts
    sizes = {header_number(h, "block_size") for h in headers} - {None}
    if len(sizes) < 2:
        return []  # one block size in every header: nothing to look for in the records
    if callable(frame):
        frame = frame()
    if frame.height == 0 or "run" not in frame.columns:
        return []
    firsts = frame.filter(pl.col("run") >= 0).group_by("run").agg(pl.col("step").min()).sort("step")
    out, previous = [], None
    for run, step in zip(firsts["run"].to_list(), firsts["step"].to_list(), strict=True):
        size = header_number(headers[run], "block_size") if run < len(headers) else None
        if size is None:
            continue
        if previous is not None and int(size) != previous:
            out.append((int(step), previous, int(size)))
        previous = int(size)
    return out


def block_size_notes(log: ParsedLog, frame: pl.DataFrame | Callable[[], pl.DataFrame]) -> list[str]:
    """A note per block-size change: the acceptance estimates use the last header's B, and
    accuracies of different B are different quantities (compare splits the regimes there)."""
    return [
        f"block size changes at step {step}: B={before} -> B={after} (run_start headers); "
        f"the acceptance uses B={after}, and the trend mixes two block sizes (see compare)"
        for step, before, after in block_size_changes(log, frame)
    ]


def diagnose_frame(
    frame: pl.DataFrame,
    *,
    selection: Selection,
    evals: Sequence[LogEvent] = (),
    header: LogEvent | None = None,
    config: DiagnosisConfig | None = None,
    restarts: Sequence[Restart] = (),
    lists: ListLoader | None = None,
    max_lr: float | None = None,
    origin: int | None = None,
    history: int | None = None,
    series: bool = False,
    foreign: bool = False,
    presets: Sequence[str] = (),
    window_choice: WindowChoice | None = None,
    earlier_windows: Sequence[Window] | WindowTable = (),
    earlier_records: pl.DataFrame | None = None,
) -> Diagnosis:
    """The diagnosis of selected records (restarts resolved, step order, at least one row).

    Args:
        frame: the records analysed.
        selection: how they were selected (for the report).
        evals: the log's eval records (those after the last record are ignored).
        header: the ``run_start`` header governing the last record.
        config: the analysis settings.
        restarts: the restarts found, for the report.
        lists: see :func:`diagnose`.
        max_lr: the largest lr of every record read (the "max seen" peak).
        origin: the first window's first step (default: the first record's step).
        history: judge only the newest this many windows (watch's view); None: all.
        series: compute ``tau_series`` (watch's sparkline) even when no tau target needs it: for
            a log read without its lists, a list-based estimator's series is a second pass.
        foreign: the log was read by another trainer's reader (not this project's JSONL schema,
            which is a drafter's by contract): the drafter detector needs other evidence.
        presets: the trainer presets the readers applied (a drafter trainer's is evidence).
        window_choice: the windows to use (watch fixes them once for the whole log); None:
            ``config.window``, or the auto rule on ``frame``.
        earlier_windows: windows of records no longer in ``frame`` (watch's pruned ones): the
            verdict judges them with the windows of ``frame``, as converge judges the whole log.
        earlier_records: the ``step``, ``loss``, ``acc`` and ``lr`` of those records, screened
            (:func:`~dflash_diag.analysis.alive.screen_records`), in step order: the forecast
            fits them with ``frame``'s, as converge's fits the whole log (a record at or after
            ``frame``'s first step is superseded, as a restart supersedes it); with their
            :data:`~dflash_diag.analysis.alive.SCREENED_FLAGS`, the screening's counts and
            notes are the whole log's.
    """
    config = config or DiagnosisConfig()
    load = lists or (lambda rows: rows)
    # The alive checks come first: values that are no measurement never reach a window.
    frame, screening = screen_records(frame)
    choice = window_choice or choose_window(frame, config.window)
    config = replace(config, window=choice.size)
    # The per-window stages (trends, spikes, the verdict's points, the forecast's lr points) and
    # the JSON and CSV outputs read the windows' columns; a Window object is built only for a
    # window read alone (the newest, a spike's), or for all when something iterates them.
    table = compute_window_table(frame, choice.size, start=origin)
    # The verdict judges every window (watch: its pruned ones too); the rest shows the newest.
    judged = (
        merge_window_tables(
            earlier_windows
            if isinstance(earlier_windows, WindowTable)
            else WindowTable.from_windows(earlier_windows),
            table,
        )
        if len(earlier_windows)
        else table
    )
    if history is not None:
        table = table.tail(history)
    if not table:
        raise DiagError("nothing to analyse: no metric records in the selected range")
    trends = trend_columns(table, config.trend)
    last_step = int(cast(int, frame["step"].max()))
    # Every record converge reads: watch's pruned ones joined with the kept ones. The whole-log
    # answers (the forecast, the lr's phase, the spikes' rounding) read these, not the view's.
    every_record = before_then(earlier_records, frame)
    if earlier_records is not None:
        # what converge leaves out of the whole log, and a metric constant in all of it
        screening = whole_log_screening(screening, every_record)
    schedule = schedule_position(
        frame,
        ScheduleHeader.from_fields(header.fields.get("schedule")) if header else None,
        peak_lr=config.peak_lr,
        steps_per_epoch=header_number(header, "steps_per_epoch"),
        max_lr=max_lr,
        earlier_lr=(
            every_record["lr"].head(every_record.height - frame.height)
            if earlier_records is not None
            else None
        ),
    )
    block_size, _ = block_size_for(config.acceptance, header_number(header, "block_size"))
    # Evals count from the start of the selection (the origin), not of the windows judged: watch
    # judges its recent windows, but an eval before them is still the latest measurement.
    first_step = origin if origin is not None else int(cast(int, frame["step"].min()))
    last = table.window(-1)
    newest_acc = table.newest_given("acc")
    acc_window = table.window(newest_acc) if newest_acc is not None else None
    if acc_window is not None:
        acc_basis = (
            f"mean of the last window, steps {window_label(acc_window, last_step)}, "
            f"{plural(acc_window.n, 'entry', 'entries')}"
        )
    else:
        acc_basis = "no accuracy in the log"
    held_out_named = bool(header is not None and header.fields.get("walk_held_out"))

    # The walk reads back up to a window's steps; a short log written every step gets smaller
    # windows (the auto rule's ten), but its walk keeps the 50 steps it reads in a long one.
    walk_span = max(choice.size, defaults.WINDOW) if choice.interval == 1 else choice.size

    def walk_to(step: int | None) -> Walk | None:
        """The walk of the latest walked records up to ``step`` (:mod:`recent_walk`)."""
        recent = recent_walk(frame, walk_span, up_to_step=step)
        if recent is None:
            return None
        first, latest = recent.first_step, recent.last_step
        epoch = walked_epoch(frame, first, latest, header_number(header, "steps_per_epoch"))
        span = f"step {latest}" if first == latest else f"steps {first}-{latest}"
        return Walk(
            recent.tau,
            f"walk_tokens / walk_steps, latest records, {span}",
            se=recent.se,
            n=recent.n,
            in_sample=walk_in_sample(held_out_named, epoch),
        )

    def estimates_at(step: int) -> list[TauEstimate]:
        first = table.window(0)
        index = (step - first.start) // choice.size + first.index  # = config.window
        indices = table.array("index")
        at = int(np.searchsorted(indices, index))  # the windows are in index order
        if at == len(indices) or indices[at] != index:
            return []
        w = table.window(at)
        rows = load(window_rows(frame, w))
        where = f"window {window_label(w, last_step)}"
        return estimates_of(
            Evidence(
                rows,
                block_size,
                where,
                acc=w.acc,
                tau_train=w.tau_train,
                walk=walk_to(w.last_step),
            )
        )

    last_rows = load(window_rows(frame, last))
    acceptance = estimate_acceptance(
        acc_window.acc if acc_window else None,
        acc_basis,
        last_rows,
        measurements(evals, last_step, first_step),
        config.acceptance,
        header_block_size=header_number(header, "block_size"),
        tau_train=last.tau_train,
        up_to_step=last_step,
        walk=walk_to(last_step),
        estimates_at=estimates_at,
    )
    drafter = detect_drafter(
        frame,
        header=header,
        evals=evals,
        block_size_option=config.acceptance.block_size,
        foreign=foreign,
        list_rows=last_rows,
        presets=presets,
    )
    if not drafter.is_drafter:
        acceptance = accuracy_only(acceptance)
    elif acceptance.block_size_source == "header" and not is_schema_header(header):
        # A header a reader made up from another trainer's metadata or preset is no header.
        assert header is not None
        preset = header.fields.get("preset")
        source = header.fields.get("block_size_source") or (
            f"preset {preset}" if preset else "the log's metadata"
        )
        acceptance = replace(acceptance, block_size_source=str(source))
    verdict = judge(
        judged,
        current_acc=acceptance.acc if drafter.is_drafter else None,
        target_acc=config.acceptance.target_acc,
        frame=frame,
        config=config.verdict,
        skip=set(screening.constant),
    )
    if not drafter.is_drafter:
        verdict = replace(
            verdict,
            eta_steps=None,
            eta_hours=None,
            eta_reason="no ETA: no target (not a drafter's log)",
        )
    tau_goal = acceptance.target_tau if acceptance.target_kind == "tau" else None
    tau_target = tau_goal is not None
    # The forecast of tau reads the primary's series; the list-based ones cost a second pass
    # over a log read without its lists, so they are paid only when asked for.
    primary_entry = BY_NAME.get(acceptance.estimator) if acceptance.estimator else None
    cheap = primary_entry is not None and not primary_entry.reads_lists and config.forecast.enabled
    fits_tau = tau_target or cheap  # the forecast fits tau where converge computes its series
    # Watch's forecast fits the series over every window it judges, its pruned ones too (a
    # list-based estimator has no lists there: those windows give no point).
    judged_series = (
        estimator_series(acceptance.estimator, judged, frame, load, evals, block_size)
        if fits_tau and config.forecast.enabled and judged is not table
        else None
    )
    if judged_series is not None and cheap:
        # an estimate read off each window alone: the recent windows' are the judged tail
        tau_series = judged_series[len(judged_series) - len(table) :]
    elif series or fits_tau:
        tau_series = estimator_series(acceptance.estimator, table, frame, load, evals, block_size)
    else:
        tau_series = []
    if tau_goal is not None:
        points, basis = estimator_points(
            acceptance.estimator, table, tau_series, evals, first_step, last_step
        )
        verdict = eta_toward(
            verdict,
            current=acceptance.tau,
            goal=tau_goal,
            slope=fitted_slope(points),
            basis=basis,
            units=f"tau ({acceptance.estimator})",
        )
    forecast = None
    if config.forecast.enabled:
        # Watch's view is its recent windows; its forecast, like its verdict, reads the whole
        # log, so that it forecasts what converge forecasts: tau too only where converge has the
        # series (a list-based one computed for watch's sparkline alone is not fitted).
        forecast_windows = judged  # every window (converge's table; watch's pruned ones too)
        if judged_series is not None:
            forecast_series = judged_series
        else:
            forecast_series = tau_series if fits_tau else []
        forecast = forecast_of(
            every_record,
            header.fields if header else {},
            evals=evals,
            windows=forecast_windows,
            tau_series=forecast_series,
            acceptance=acceptance,
            config=config.forecast,
            peak_lr=config.peak_lr,
            seconds_per_step=verdict.seconds_per_step,
            block_size=block_size,
        )
        # The ETA is the forecast's; the straight line stays the verdict's trend statistic.
        verdict = verdict_with_eta(verdict, forecast.target, last_step)
    # The final eval comes after the last training record (HF evaluates at max_steps, logs at
    # multiples of logging_steps): evals up to one logging interval later belong to the run,
    # whichever way the window was chosen (a given --window, compare's one size for every
    # regime: the interval is the records' all the same).
    interval = choice.interval if choice.interval is not None else logging_interval(frame["step"])
    validation = judge_validation(
        evals,
        up_to_step=last_step + (interval or 0),
        from_step=first_step,
        with_tau=drafter.is_drafter,
        alpha=config.verdict.alpha,
        min_points=config.verdict.min_points,
    )
    verdict = with_health(verdict, broken=broken_reason(frame), validation=validation)
    alerts = []
    # A spike must stand out by more than the log's rounding (values written to 4 decimals).
    losses = (
        every_record["loss"].drop_nulls()
        if "loss" in every_record.columns
        else pl.Series([], dtype=pl.Float64)
    )
    resolution = value_resolution(losses.gather_every(max(1, losses.len() // 2000)).to_list())
    # Spikes are looked for in every judged window, as converge does (watch: its pruned ones too).
    for i in loss_spikes(judged.array("loss"), factor=config.spike_factor, resolution=resolution):
        w = judged.window(i)
        alerts.append(
            Alert(
                "loss_spike",
                f"loss spike in steps {window_label(w, last_step)}: {w.loss:.4g}",
                w.start,
            )
        )
    if verdict.status == DIVERGING:
        alerts.append(Alert("diverging", f"diverging: {verdict.reason}"))
    notes = list(screening.notes) + list(schedule.notes)
    if not drafter.is_drafter:
        notes.append(f"not a drafter's log ({drafter.reason}): no acceptance section")
    elif drafter.reason != NATIVE_SCHEMA:
        notes.append(f"drafter log: {drafter.reason}")
    return Diagnosis(
        selection=selection,
        windows=WindowRows(table, trends),
        schedule=schedule,
        acceptance=acceptance,
        verdict=verdict,
        restarts=list(restarts),
        alerts=alerts,
        header=header,
        notes=notes,
        tau_series=tau_series,
        last_step=last_step,
        drafter=drafter,
        window=choice,
        forecast=forecast,
    )


def accuracy_only(acceptance: Acceptance) -> Acceptance:
    """The acceptance of a log that is not a drafter's: the accuracy, nothing derived from a
    block size (no tau, no estimates, no baseline comparison, no drafter target)."""
    return replace(
        acceptance,
        estimates=[],
        estimator=None,
        tau=None,
        target_acc=None,
        target_tau=None,
        progress=None,
        vs_baseline=None,
        measured_step=None,
        measured_age=None,
        calibration=None,
        warnings=[],
    )


def estimator_series(
    name: str | None,
    windows: Sequence[Window],
    frame: pl.DataFrame,
    load: ListLoader,
    evals: Sequence[LogEvent],
    block_size: int,
) -> list[float | None]:
    """The value of estimator ``name`` per window (None where a window cannot give one).

    ``measured`` is the latest eval at or before each window's last step; the list-based
    estimators read the lists of every window (for a log read without them, that is a second
    pass over the selected lines, paid only when a tau series is needed).
    """
    return series_of(name, SeriesInput(windows, frame, load, evals, block_size))


def estimator_points(
    name: str | None,
    windows: Sequence[Window],
    series: Sequence[float | None],
    evals: Sequence[LogEvent],
    first_step: int,
    last_step: int,
) -> tuple[list[tuple[float, float]], str]:
    """The ``(step, tau)`` points a tau target's ETA is fitted on, and their description: the eval
    points for ``measured`` (an estimator whose points are the evals), the per-window estimates
    otherwise."""
    entry = BY_NAME.get(name) if name is not None else None
    if entry is not None and entry.from_evals:
        points = [
            (float(e.step), float(e.fields["tau"]))
            for e in measurements(evals, last_step, first_step)
            if e.step is not None  # always: measurements keeps only records with a step
        ]
        return points, f"eval points ({len(points)})"
    points = [
        ((w.first_step + w.last_step) / 2.0, v)
        for w, v in zip(windows, series, strict=True)
        if v is not None
    ]
    return points, f"per-window {name} estimates ({len(points)})"

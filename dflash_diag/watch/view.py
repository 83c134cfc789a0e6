"""The view model of `dflash-diag watch`: one frame as plain data, built from a `LiveLog`.

`build_view` runs the one diagnosis (`dflash_diag.analysis.diagnosis.diagnose_frame`: windows,
trend, schedule, acceptance, verdict) on the recent records the state keeps and adds the live view's own parts: sparkline series over
the recent windows, the time since the last record and the `Alert`s. No file access, no drawing
(`dflash_diag.watch.render` draws it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from dflash_diag.analysis.acceptance import Acceptance
from dflash_diag.analysis.alerts import Alert, stall_alert
from dflash_diag.analysis.diagnosis import (
    Diagnosis,
    WindowRow,
    block_size_notes,
    diagnose_frame,
    governing_header,
)
from dflash_diag.analysis.restarts import before_then
from dflash_diag.analysis.schedule import SchedulePosition
from dflash_diag.analysis.schedule_events import (
    ScheduleEvent,
    detect_schedule_events,
    resumes_anything,
)
from dflash_diag.analysis.trend import Trend
from dflash_diag.analysis.verdict import Verdict
from dflash_diag.analysis.windows import Window
from dflash_diag.read.records import LogEvent
from dflash_diag.watch.state import LiveLog


@dataclass(frozen=True)
class Series:
    """One sparkline row: a per-window series, its newest value and how to print it."""

    name: str
    values: list[float | None]
    fmt: str
    current: float | None = None
    """The frame's one value of this quantity where it is not the newest window's mean (the
    diagnosis' tau, the last lr): the number printed beside the sparkline."""

    @property
    def latest(self) -> float | None:
        """The number shown: ``current`` where given, else the newest window's value."""
        if self.current is not None:
            return self.current
        return self.values[-1] if self.values else None


@dataclass(frozen=True, kw_only=True)
class WatchView:
    """Everything one frame of the live view shows, as plain data.

    The analysis is :attr:`diagnosis` (converge's, on the recent records); ``windows``,
    ``trends``, ``schedule``, ``acceptance`` and ``verdict`` read it, so the frame holds no copy.

    Attributes:
        path: the log followed.
        total_records: metric records read since the start (the whole file).
        last_step: the newest record's step.
        since_last_record: seconds since the newest record (None before any).
        selection: which records are shown (the phase rule's reason).
        series: per-window sparkline series (loss, acc, tau, lr, tok/s), oldest first.
        alerts: problems to show in red.
        skipped_lines, nonfinite: the reader's counts over the whole file.
        restarts: steps where the log went back (seen in the recent records).
        resets: truncations/rotations of the file seen.
        waiting: a line saying why there is nothing to show yet, or None.
        diagnosis: the diagnosis of the recent records (None while waiting).
        table_rows: how many of the latest windows the table lists.
        schedule_events: lr schedule restarts at resumes (see analysis.schedule_events).
        notes: converge's notes on the same bytes (values left out, a metric not measured, not a
            drafter's log, a block size that changed, steps out of range).
    """

    path: str
    total_records: int
    last_step: int | None
    since_last_record: float | None
    selection: str
    series: list[Series]
    alerts: list[Alert]
    skipped_lines: int
    nonfinite: int
    restarts: list[int]
    resets: int
    waiting: str | None = None
    diagnosis: Diagnosis | None = None
    table_rows: int = 6
    schedule_events: list[ScheduleEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[WindowRow]:
        """The latest windows with their trends, oldest first (the table's rows)."""
        if self.diagnosis is None:
            return []
        return list(self.diagnosis.windows[-self.table_rows :])

    @property
    def windows(self) -> list[Window]:
        """The latest windows, oldest first."""
        return [row.window for row in self.rows]

    @property
    def trends(self) -> list[Trend]:
        """One `Trend` per entry of ``windows``."""
        return [row.trend for row in self.rows]

    @property
    def schedule(self) -> SchedulePosition | None:
        """The lr schedule position at the newest record."""
        return self.diagnosis.schedule if self.diagnosis is not None else None

    @property
    def acceptance(self) -> Acceptance | None:
        """The acceptance estimate of the newest window."""
        return self.diagnosis.acceptance if self.diagnosis is not None else None

    @property
    def verdict(self) -> Verdict | None:
        """The verdict over every window of the log."""
        return self.diagnosis.verdict if self.diagnosis is not None else None


def _selection_text(live: LiveLog, size: int) -> str:
    phase = live.phase_used or live.config.analysis.phase
    what = "pipeline entries" if phase == "pipeline" else "all entries"
    return f"{what}, {size}-step windows from step {live.origin}"


def _header(live: LiveLog, frame) -> LogEvent | None:
    """The ``run_start`` header governing the newest record (converge's rule)."""
    if live.log is None:
        return None
    return governing_header(live.log, frame)


def build_view(live: LiveLog) -> WatchView:
    """The current frame of the live view, from the state of ``live`` (no file access).

    The diagnosis (windows, trends, schedule, acceptance, verdict, loss-spike alerts) is
    :func:`dflash_diag.analysis.diagnosis.diagnose_frame`, the one converge and compare use, run on
    the recent records that ``live`` keeps (the last ``history`` windows); the frame adds the live
    parts: sparkline series, the time since the last record, stall/reset/NaN alerts.
    """
    config = live.config
    frame = live.records()
    since = live.seconds_since_last_record()
    alerts: list[Alert] = []
    if live.tail.resets:
        alerts.append(
            Alert("reset", f"the log was truncated or replaced {live.tail.resets}x; re-read it")
        )
    if live.nonfinite_last:
        where = ", ".join(
            f"{name} (last at step {step})" for name, step in live.nonfinite_last.items()
        )
        alerts.append(Alert("nonfinite", f"NaN/Inf in {where}", max(live.nonfinite_last.values())))
    if live.missing and live.log is not None:
        alerts.append(
            Alert(
                "missing",
                "the log file is gone (deleted or moved away): showing what "
                "was read before; it is picked up again if it comes back",
            )
        )
    stall = stall_alert(since, config.stall)
    if stall is not None:
        alerts.append(stall)
    # The schedule's restarts read the lr around each resume step, which may have been pruned.
    headers = live.headers()
    lr_records = frame
    if frame.height and resumes_anything(headers):
        lr_records = before_then(live.earlier_records(), frame)
    # the parts every frame has, waiting or not
    frame_view = functools.partial(
        WatchView,
        path=str(live.path),
        total_records=live.total_records,
        last_step=live.last_step,
        since_last_record=since,
        skipped_lines=live.issues.malformed,
        nonfinite=live.issues.nonfinite_total,
        restarts=[r.step for r in live.restarts_in_file_order()],
        resets=live.tail.resets,
        schedule_events=detect_schedule_events(
            headers,
            lr_records["step"] if frame.height else [],
            lr_records["lr"] if frame.height else [],
        ),
    )
    diagnosis = None
    if (
        frame.height
        and live.origin is not None
        and live.selection is not None
        and live.log is not None
    ):
        diagnosis = diagnose_frame(
            frame,
            selection=live.selection,
            evals=live.log.evals,
            header=_header(live, frame),
            config=config.analysis,
            restarts=live.restarts_in_file_order(),
            max_lr=live.max_lr,
            origin=live.origin,
            history=config.history,
            series=True,
            foreign=live.log.foreign,
            presets=live.log.presets,
            window_choice=live.window_choice(frame),
            earlier_windows=live.earlier_windows(),
            earlier_records=live.earlier_records(),
        )
    if diagnosis is None:
        waiting = "waiting for the log to appear" if live.log is None else "no metric records yet"
        if live.log is not None and live.last_step is not None:
            # Metric records exist, only none that --phase / --from-step select: say so.
            what = "pipeline entries" if config.analysis.phase == "pipeline" else "records"
            where = (
                f" at or after step {config.analysis.from_step}"
                if config.analysis.from_step is not None
                else ""
            )
            waiting = f"no {what}{where} yet (the log's last step is {live.last_step})"
        return frame_view(selection="", series=[], alerts=alerts, waiting=waiting)

    windows = [row.window for row in diagnosis.windows]
    acceptance = diagnosis.acceptance
    estimator = acceptance.estimator
    series = [
        Series("loss", [w.loss for w in windows], ".4f"),
        Series("acc", [w.acc for w in windows], ".4f"),
        Series(
            f"tau ({estimator or '-'})", list(diagnosis.tau_series), ".2f", current=acceptance.tau
        ),
        Series("lr", [w.lr for w in windows], ".2e", current=diagnosis.schedule.current),
    ]
    if any(w.tok_per_sec is not None for w in windows):  # legacy records have no tok/s
        series.append(Series("tok/s", [w.tok_per_sec for w in windows], ",.0f"))
    return frame_view(
        selection=_selection_text(live, diagnosis.window.size if diagnosis.window else 0),
        series=series,
        alerts=alerts + diagnosis.alerts,
        diagnosis=diagnosis,
        table_rows=config.table_rows,
        notes=[
            *diagnosis.notes,
            *(
                # every record's runs, joined only where the headers name two block sizes
                block_size_notes(live.log, lambda: before_then(live.earlier_records(), frame))
                if live.log is not None  # it is: the diagnosis needs it
                else []
            ),
            *live.issues.reader_notes(),
        ],
    )

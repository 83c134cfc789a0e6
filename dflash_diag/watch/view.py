"""The view model of `dflash-diag watch`: one frame as plain data, built from a `LiveLog`.

`build_view` runs the converge command's analysis (windows, trend, schedule, acceptance, verdict)
on the recent records the state keeps and adds the live view's own parts: sparkline series over
the recent windows, the time since the last record and the `Alert`s. No file access, no drawing
(`dflash_diag.watch.render` draws it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dflash_diag.analysis.acceptance import (
    Acceptance,
    AcceptanceConfig,
    estimate_acceptance,
    linear_tau,
)
from dflash_diag.analysis.alerts import Alert, loss_spikes, stall_alert
from dflash_diag.analysis.numbers import finite_number
from dflash_diag.analysis.schedule import ScheduleHeader, SchedulePosition, schedule_position
from dflash_diag.analysis.trend import Trend, TrendConfig, compute_trends
from dflash_diag.analysis.verdict import DIVERGING, Verdict, judge_toward
from dflash_diag.analysis.windows import Window, compute_windows, window_rows
from dflash_diag.watch.state import LiveLog


@dataclass(frozen=True)
class Series:
    """One sparkline row: a per-window series, its newest value and how to print it."""

    name: str
    values: list[float | None]
    fmt: str

    @property
    def latest(self) -> float | None:
        """The newest window's value."""
        return self.values[-1] if self.values else None


@dataclass(frozen=True, kw_only=True)
class WatchView:
    """Everything one frame of the live view shows, as plain data.

    Attributes:
        path: the log followed.
        total_records: metric records read since the start (the whole file).
        last_step: the newest record's step.
        since_last_record: seconds since the newest record (None before any).
        selection: which records are shown (the phase rule's reason).
        series: per-window sparkline series (loss, acc, tau, lr, tok/s), oldest first.
        windows: the latest windows, oldest first, and their trends.
        trends: one `Trend` per entry of ``windows``.
        schedule: the lr schedule position at the newest record.
        tau_estimator: which estimate the tau series is ("prefix" from tau_train, else "linear").
        acceptance: the converge acceptance estimate of the newest window, or None.
        verdict: the converge verdict over the recent windows, or None.
        alerts: problems to show in red.
        skipped_lines, nonfinite: the reader's counts over the whole file.
        restarts: steps where the log went back (seen in the recent records).
        resets: truncations/rotations of the file seen.
        waiting: a line saying why there is nothing to show yet, or None.
    """

    path: str
    total_records: int
    last_step: int | None
    since_last_record: float | None
    selection: str
    series: list[Series]
    windows: list[Window]
    trends: list[Trend]
    schedule: SchedulePosition | None
    tau_estimator: str | None
    acceptance: Acceptance | None
    verdict: Verdict | None
    alerts: list[Alert]
    skipped_lines: int
    nonfinite: int
    restarts: list[int]
    resets: int
    waiting: str | None = None


def _block_size(live: LiveLog) -> int:
    if live.config.block_size is not None:
        return live.config.block_size
    for header in reversed(live.headers()):
        b = finite_number(header.get("block_size"))
        if b is not None and b >= 2:
            return int(b)
    return 16


def _schedule_header(live: LiveLog) -> dict[str, Any] | None:
    headers = live.headers()
    return headers[-1] if headers else None


def _selection_text(live: LiveLog) -> str:
    phase = live.phase_used or live.config.phase
    what = "pipeline entries" if phase == "pipeline" else "all entries"
    return f"{what}, {live.config.window}-step windows from step {live.origin}"


def build_view(live: LiveLog) -> WatchView:
    """The current frame of the live view, from the state of ``live`` (no file access).

    The windows, trends, schedule position and verdict are the converge command's analysis, run
    on the recent records that ``live`` keeps (the last ``history`` windows).
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
        alerts.append(Alert("missing", "the log file is gone (deleted or moved away): showing what "
                                       "was read before; it is picked up again if it comes back"))
    stall = stall_alert(since, config.stall)
    if stall is not None:
        alerts.append(stall)
    base = {
        "path": str(live.path),
        "total_records": live.total_records,
        "last_step": live.last_step,
        "since_last_record": since,
        "skipped_lines": live.issues.malformed,
        "nonfinite": live.issues.nonfinite_total,
        "restarts": sorted(r.step for r in live.restarts.values()),
        "resets": live.tail.resets,
    }
    windows = []
    if frame.height and live.origin is not None:
        windows = compute_windows(frame, config.window, start=live.origin)
    if not windows:
        waiting = "waiting for the log to appear" if live.log is None else "no metric records yet"
        return WatchView(
            **base,
            selection="",
            series=[],
            windows=[],
            trends=[],
            schedule=None,
            tau_estimator=None,
            acceptance=None,
            verdict=None,
            alerts=alerts,
            waiting=waiting,
        )

    windows = windows[-config.history :]
    trends = compute_trends(windows, TrendConfig(acc_threshold=config.threshold))
    block = _block_size(live)
    tau_values = [w.tau_train for w in windows]
    if any(v is not None for v in tau_values):
        estimator = "prefix"
    else:
        estimator = "linear"
        tau_values = [linear_tau(w.acc, block) if w.acc is not None else None for w in windows]
    series = [
        Series("loss", [w.loss for w in windows], ".4f"),
        Series("acc", [w.acc for w in windows], ".4f"),
        Series(f"tau ({estimator})", tau_values, ".2f"),
        Series("lr", [w.lr for w in windows], ".2e"),
    ]
    if any(w.tok_per_sec is not None for w in windows):  # legacy records have no tok/s
        series.append(Series("tok/s", [w.tok_per_sec for w in windows], ",.0f"))

    for i in loss_spikes([w.loss for w in windows], factor=config.spike_factor):
        w = windows[i]
        alerts.append(
            Alert("loss_spike", f"loss spike in steps {w.start}-{w.end}: {w.loss:.4g}", w.start)
        )

    header = _schedule_header(live)
    schedule = schedule_position(
        frame,
        ScheduleHeader.from_fields(header.get("schedule")) if header else None,
        peak_lr=None,
        steps_per_epoch=finite_number(header.get("steps_per_epoch")) if header else None,
    )
    if schedule.peak_source == "max seen" and live.max_lr is not None:
        # the records kept are recent; the whole file's maximum is the better guess of the peak
        schedule = replace(
            schedule,
            peak=live.max_lr,
            fraction_of_peak=(schedule.current / live.max_lr) if schedule.current else None,
        )
    last = windows[-1]
    acceptance = estimate_acceptance(
        last.acc,
        f"mean of window {last.start}-{last.end}",
        window_rows(frame, last),
        live.log.evals if live.log is not None else [],
        AcceptanceConfig(block_size=config.block_size, target_acc=config.target_acc),
        header_block_size=_block_size(live) if config.block_size is None else None,
        tau_train=last.tau_train,
        up_to_step=last.end,
    )
    verdict = judge_toward(windows, acceptance, frame=frame)
    if verdict.status == DIVERGING:
        alerts.append(Alert("diverging", f"diverging: {verdict.reason}"))
    return WatchView(
        **base,
        selection=_selection_text(live),
        series=series,
        windows=windows[-config.table_rows :],
        trends=trends[-config.table_rows :],
        schedule=schedule,
        tau_estimator=estimator,
        acceptance=acceptance,
        verdict=verdict,
        alerts=alerts,
    )

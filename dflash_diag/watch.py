"""The live view of `dflash-diag watch`: an incrementally updated state, a view model, alerts.

Three layers, so the maths is testable without a terminal and the terminal code stays thin:

* `LiveLog` follows the log with `dflash_diag.tail.LogTail` and feeds only the newly appended
  complete lines to `dflash_diag.reader.parse_records`; it keeps every event (headers, evals) but
  only the recent metric records (the windows the view shows), so a refresh costs what the new
  lines cost, not what the file costs. Truncation or rotation rebuilds it from the new file.
* `build_view` turns the state into a `WatchView` (plain data): sparklines over the recent
  windows, the latest windows with arrows, schedule position, acceptance, verdict, time since the
  last record and `Alert`s. The analysis is the converge command's (windows, trend, schedule,
  acceptance, verdict), run on the recent records.
* `render_view` / `render_plain` draw a `WatchView` with rich, or as plain text.

The clock is injected everywhere (``clock=time.time`` by default) so tests are deterministic.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dflash_diag.acceptance import Acceptance, AcceptanceConfig, estimate_acceptance, linear_tau
from dflash_diag.errors import DiagError
from dflash_diag.phase import Phase, select_phase
from dflash_diag.reader import ParsedLog, ParseIssues, parse_records
from dflash_diag.restarts import Restart, resolve_restarts
from dflash_diag.safe_text import visible
from dflash_diag.schedule import ScheduleHeader, SchedulePosition, schedule_position
from dflash_diag.sparkline import sparkline
from dflash_diag.tail import LogTail
from dflash_diag.trend import ARROWS, Trend, TrendConfig, compute_trends
from dflash_diag.verdict import DIVERGING, Verdict, judge
from dflash_diag.windows import Window, compute_windows, window_index, window_rows

Clock = Callable[[], float]


@dataclass(frozen=True)
class WatchConfig:
    """Settings of the live view.

    Attributes:
        interval: seconds between refreshes (``--interval``).
        stall: seconds without a new record before the stall alert (``--stall``).
        window: steps per window (``--window``), aligned to the first selected step.
        history: windows kept and drawn in the sparklines; the verdict covers them too, so it
            says where the run is going now, not over its whole life.
        table_rows: latest windows listed with their arrows.
        threshold: acc change below which an arrow is flat (``--threshold``).
        spike_factor: robust standard deviations above its neighbours that make a window's loss
            a spike.
        phase: which records to show (auto, pipeline, all), as in converge.
        block_size: block size B for the tau estimate (``--block-size``; default: the header's,
            else 16).
        target_acc: accuracy target for the progress and the ETA (``--target-acc``).
        plot: add plotext line charts of loss and acc (``--plot``).
    """

    interval: float = 2.0
    stall: float = 300.0
    window: int = 50
    history: int = 40
    table_rows: int = 6
    threshold: float = 0.005
    spike_factor: float = 6.0
    phase: str = "auto"
    block_size: int | None = None
    target_acc: float = 0.27
    plot: bool = False

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"--interval must be positive, got {self.interval}")
        if not self.stall > 0:
            raise ValueError(f"--stall must be positive, got {self.stall}")
        if self.window < 1:
            raise ValueError(f"--window must be at least 1, got {self.window}")
        if self.history < 2:
            raise ValueError(f"history must be at least 2 windows, got {self.history}")
        if self.table_rows < 1:
            raise ValueError(f"table_rows must be at least 1, got {self.table_rows}")
        if self.threshold < 0:
            raise ValueError(f"--threshold must be >= 0, got {self.threshold}")
        if not self.spike_factor > 0:
            raise ValueError(f"spike factor must be positive, got {self.spike_factor}")
        if self.block_size is not None and self.block_size < 2:
            raise ValueError(f"--block-size must be at least 2, got {self.block_size}")
        if not 0 < self.target_acc <= 1:
            raise ValueError(f"--target-acc must be in (0, 1], got {self.target_acc}")
        try:
            Phase(self.phase)
        except ValueError:
            raise ValueError(f"unknown phase {self.phase!r} (auto, pipeline or all)") from None


# --------------------------------------------------------------------------------------------
# alerts


@dataclass(frozen=True)
class Alert:
    """One problem worth a red line in the live view.

    Attributes:
        kind: "nonfinite", "stall", "diverging", "loss_spike" or "reset".
        message: the sentence shown to the user.
        step: the step it concerns, where there is one.
    """

    kind: str
    message: str
    step: int | None = None


def loss_spikes(
    losses: Sequence[float | None],
    *,
    neighbours: int = 3,
    factor: float = 6.0,
    rel_floor: float = 0.02,
) -> list[int]:
    """Indices of windows whose mean loss is far above their neighbours'.

    A window is compared with up to ``neighbours`` windows on each side (the newest window has only
    earlier ones, so a spike shows as soon as it happens): it is a spike when it exceeds their
    median by more than ``factor`` robust standard deviations (1.4826 x MAD), with ``rel_floor``
    x median as the smallest deviation that counts, so a smooth noiseless curve flags nothing.

    Args:
        losses: window mean losses, oldest first; None/NaN windows are skipped (NaN has its own
            alert).
        neighbours: windows on each side to compare with; at least 2 finite ones are needed.
        factor: how many robust standard deviations make a spike.
        rel_floor: minimum deviation as a fraction of the neighbours' median.

    Returns:
        Indices into ``losses``, increasing.
    """
    finite = [v if v is not None and math.isfinite(v) else None for v in losses]
    out = []
    for i, v in enumerate(finite):
        if v is None:
            continue
        around = [
            u
            for u in finite[max(0, i - neighbours) : i] + finite[i + 1 : i + 1 + neighbours]
            if u is not None
        ]
        if len(around) < 2:
            continue
        median = statistics.median(around)
        mad = statistics.median(abs(u - median) for u in around)
        scale = max(1.4826 * mad, rel_floor * abs(median))
        if scale > 0 and v - median > factor * scale:
            out.append(i)
    return out


def stall_alert(seconds_since_last: float | None, stall_after: float) -> Alert | None:
    """The stall alert when no record arrived for ``stall_after`` seconds (``--stall``)."""
    if seconds_since_last is None or seconds_since_last < stall_after:
        return None
    return Alert(
        "stall",
        f"no new record for {format_duration(seconds_since_last)} (--stall {stall_after:g} s)",
    )


def format_duration(seconds: float) -> str:
    """Seconds as a short human duration: ``42 s``, ``5 min 03 s``, ``2 h 07 min``, ``3 d 4 h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


# --------------------------------------------------------------------------------------------
# the live state


@dataclass(frozen=True)
class RefreshStats:
    """What one `LiveLog.refresh` did.

    Attributes:
        new_lines: complete lines read this time.
        new_records: metric records among them.
        reset: the file was truncated or rotated and the state rebuilt.
        missing: the file does not exist right now.
        seconds: wall time the refresh took (parse and state update).
    """

    new_lines: int
    new_records: int
    reset: bool
    missing: bool
    seconds: float


class LiveLog:
    """Follows one log and keeps what the live view needs, updated from the new bytes only.

    Args:
        path: the log (a plain file; ``.gz`` and standard input cannot be followed).
        config: the view settings (window, history, phase).
        clock: wall clock, for the time since the last record.
        max_chunk_bytes: bound on the bytes parsed at once (a refresh parses a large backlog
            piece by piece, pruning in between, to bound memory); None parses all at once.
        fields: canonical name -> name in the log (``--field``), as for `parse_records`.

    Raises:
        DiagError: ``path`` is a ``.gz`` file or ``-``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        config: WatchConfig | None = None,
        *,
        clock: Clock = time.time,
        max_chunk_bytes: int | None = 16 * 2**20,
        fields: dict[str, str] | None = None,
    ) -> None:
        if str(path) == "-":
            raise DiagError("watch follows a file; standard input cannot be followed")
        if str(path).endswith(".gz"):
            raise DiagError(f"watch cannot follow a compressed log: {path}")
        self.path = Path(path)
        self.config = config or WatchConfig()
        self.clock = clock
        self.fields = fields or None
        self.tail = LogTail(self.path, max_chunk_bytes=max_chunk_bytes)
        self._clear()

    def _clear(self) -> None:
        self.log: ParsedLog | None = None  # recent metric records (file order) + every event
        self.issues = ParseIssues()  # cumulative over the whole file
        self.total_records = 0
        self.restarts: dict[tuple[int, int], Restart] = {}
        self.last_step: int | None = None
        self.last_record_time: float | None = None  # the latest record's own `time` field
        self.last_write: float | None = None  # file mtime when records last arrived
        self.max_lr: float | None = None
        self.origin: int | None = None  # first selected step: windows align to it
        self._origin_phase: str | None = None
        self.nonfinite_last: dict[str, int] = {}  # field -> last step where it was NaN/Inf

    def refresh(self) -> RefreshStats:
        """Read and parse the lines appended since the previous refresh and update the state.

        The new bytes are parsed in pieces of at most ``max_chunk_bytes`` (the state is pruned
        after each), so catching up with a large file needs memory for one piece, not the file.
        """
        t0 = time.perf_counter()
        lines = records = 0
        reset = missing = False
        while True:
            chunk = self.tail.read_new()
            if chunk.reset:
                self._clear()
                reset = True
            missing = chunk.missing
            if chunk.data:
                part = parse_records(
                    chunk.data, first_line_no=chunk.first_line_no, fields=self.fields
                )
                lines += chunk.n_lines
                records += part.metrics.height
                self._ingest(part)
                try:
                    self.last_write = os.stat(self.path).st_mtime
                except OSError:
                    self.last_write = self.clock()
            if missing or self.tail.backlog_bytes == 0:
                break
        return RefreshStats(
            new_lines=lines,
            new_records=records,
            reset=reset,
            missing=missing,
            seconds=time.perf_counter() - t0,
        )

    def _ingest(self, part: ParsedLog) -> None:
        self.issues.merge(part.issues)
        self.log = part if self.log is None else self.log.append(part)
        metrics = part.metrics
        if metrics.height == 0:
            return
        self.total_records += metrics.height
        self.last_step = int(metrics["step"][-1])
        times = metrics["time"].drop_nulls()
        times = times.filter(times.is_finite())
        if times.len():
            self.last_record_time = float(times[-1])
        lr = metrics["lr"].drop_nulls()
        lr = lr.filter(lr.is_finite())
        if lr.len():
            top = float(lr.max())
            self.max_lr = top if self.max_lr is None else max(self.max_lr, top)
        for name in part.issues.nonfinite:  # the reader counted them; find where they are
            if name in metrics.columns and metrics.schema[name] == pl.Float64:
                bad = metrics.filter(~pl.col(name).is_finite().fill_null(True))["step"]
            else:  # a list field (acc_pos, ...): any non-finite element
                bad = metrics.filter(
                    pl.col(name).list.eval(~pl.element().is_finite()).list.any().fill_null(False)
                )["step"]
            if bad.len():
                self.nonfinite_last[name] = int(bad[-1])
        self._prune()

    def records(self) -> pl.DataFrame:
        """The recent records, restarts resolved and the phase selected, in step order."""
        if self.log is None or self.log.metrics.height == 0:
            return pl.DataFrame()
        resolved, restarts = resolve_restarts(self.log.metrics)
        for r in restarts:
            self.restarts.setdefault((r.source, r.step), r)
        selected, selection = select_phase(resolved, self.config.phase)
        if selection.phase != self._origin_phase:
            # e.g. the first pipeline entries of a migrating run: windows align to them now
            self._origin_phase, self.origin = selection.phase, None
        if self.origin is not None and selected.height and int(selected["step"][0]) < self.origin:
            self.origin = int(selected["step"][0])  # a restart from before the first window
        return selected

    def _prune(self) -> None:
        """Keep the metric records of the last ``history`` windows (plus the newest chunk), so
        the per-refresh analysis stays the size of the view, whatever the file's size."""
        assert self.log is not None
        selected = self.records()
        if selected.height == 0:
            return
        if self.origin is None:
            self.origin = int(selected["step"][0])
        w = self.config.window
        last = int(selected["step"][-1])
        first_window = (last - self.origin) // w - (self.config.history - 1)
        cutoff = self.origin + max(first_window, 0) * w
        metrics = self.log.metrics
        newest_seq = int(metrics["seq"].max())
        kept = metrics.filter((pl.col("step") >= cutoff) | (pl.col("seq") == newest_seq))
        if kept.height < metrics.height:
            self.log = ParsedLog(
                metrics=kept,
                events=self.log.events,
                issues=self.log.issues,
                consumed_bytes=self.log.consumed_bytes,
                sources=self.log.sources,
            )

    def headers(self) -> list[dict[str, Any]]:
        """The fields of every ``run_start`` header read so far, in file order."""
        return [] if self.log is None else [e.fields for e in self.log.run_starts]

    @property
    def phase_used(self) -> str | None:
        """The phase the records shown belong to ("pipeline" or "all"), once known."""
        return self._origin_phase

    def seconds_since_last_record(self) -> float | None:
        """Seconds since the newest record: its ``time`` field where logged, else the time the
        file was last written with records."""
        reference = self.last_record_time if self.last_record_time is not None else self.last_write
        if reference is None:
            return None
        return max(0.0, self.clock() - reference)


# --------------------------------------------------------------------------------------------
# the view model


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


@dataclass(frozen=True)
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


def _window_means(frame: pl.DataFrame, start: int, size: int, column: str) -> dict[int, float]:
    """Mean of ``column``'s finite values per window index (lr, tok/s: plain means)."""
    if column not in frame.columns:
        return {}
    ok = pl.col(column).is_finite().fill_null(False)
    grouped = (
        frame.filter(pl.col("step") >= start)
        .with_columns(window_index(start, size))
        .group_by("_window")
        .agg(pl.col(column).filter(ok).mean().alias("m"))
    )
    return {int(w): m for w, m in grouped.iter_rows() if m is not None}


def _block_size(live: LiveLog) -> int:
    if live.config.block_size is not None:
        return live.config.block_size
    for header in reversed(live.headers()):
        b = header.get("block_size")
        if isinstance(b, (int, float)) and not isinstance(b, bool) and b >= 2:
            return int(b)
    return 16


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


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
    size, origin = config.window, live.origin
    block = _block_size(live)
    tau_values = [w.tau_train for w in windows]
    if any(v is not None for v in tau_values):
        estimator = "prefix"
    else:
        estimator = "linear"
        tau_values = [linear_tau(w.acc, block) if w.acc is not None else None for w in windows]
    lr = _window_means(frame, origin, size, "lr")
    tps = _window_means(frame, origin, size, "tok_per_sec")
    series = [
        Series("loss", [w.loss for w in windows], ".4f"),
        Series("acc", [w.acc for w in windows], ".4f"),
        Series(f"tau ({estimator})", tau_values, ".2f"),
        Series("lr", [lr.get(w.index) for w in windows], ".2e"),
    ]
    if tps:
        series.append(Series("tok/s", [tps.get(w.index) for w in windows], ",.0f"))

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
        steps_per_epoch=_number(header.get("steps_per_epoch")) if header else None,
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
    verdict = judge(windows, current_acc=last.acc, target_acc=config.target_acc, frame=frame)
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


# --------------------------------------------------------------------------------------------
# rendering


def _fmt(value: float | None, fmt: str) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def _literal(text: str) -> Text:
    """Text from a log or a path, shown as is: no markup, control characters made visible."""
    return Text(visible(text))


_ARROW_STYLE = {"up": "green", "down": "red", "flat": "yellow", None: ""}


def _plot(view: WatchView, width: int) -> Text:
    """plotext line charts of the loss and acc windows, side by side."""
    import plotext as plt  # only with --plot: it is the slowest import of the view

    loss = next(s for s in view.series if s.name == "loss")
    acc = next(s for s in view.series if s.name == "acc")
    steps = [w.start for w in view.windows]
    # The series span the history; the table only the latest rows: rebuild x from the history.
    n = len(loss.values)
    last_start = steps[-1] if steps else 0
    size = (view.windows[-1].end - view.windows[-1].start + 1) if view.windows else 1
    xs = [last_start - (n - 1 - i) * size for i in range(n)]
    plt.clear_figure()
    plt.subplots(1, 2)
    plt.plotsize(max(40, width), 14)
    for col, series in ((1, loss), (2, acc)):
        plt.subplot(1, col)
        pts = [(x, v) for x, v in zip(xs, series.values) if v is not None and math.isfinite(v)]
        if pts:
            plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="braille")
        plt.title(series.name)
    return Text.from_ansi(plt.build())


_VERDICT_STYLE = {"converging": "bold green", "plateau": "bold yellow", "diverging": "bold red"}


def _verdict_text(verdict: Verdict) -> Text:
    text = Text("verdict: ")
    text.append(verdict.status, style=_VERDICT_STYLE.get(verdict.status, "bold"))
    if verdict.slope_per_1k_steps is not None:
        text.append(f"  {verdict.metric} {verdict.slope_per_1k_steps:+.4g}/1k steps")
    if verdict.p_value is not None:
        text.append(f", p={verdict.p_value:.2g}")
    if verdict.eta_steps is not None:
        text.append(f", target in {verdict.eta_steps:,.0f} steps")
        if verdict.eta_hours is not None:
            text.append(f" (~{verdict.eta_hours:.1f} h)")
    if verdict.status not in _VERDICT_STYLE:
        text.append(f" ({verdict.reason})", style="dim")
    return text


def render_view(view: WatchView, *, plot: bool = False, width: int = 100) -> RenderableType:
    """Draw one frame with rich: header line, alerts, sparklines, latest windows, schedule,
    verdict. ``plot`` adds plotext charts of loss and acc ``width`` columns wide."""
    head = Text.assemble(("dflash-diag watch ", "bold"), _literal(view.path))
    facts = []
    if view.last_step is not None:
        facts.append(f"step {view.last_step}")
    facts.append(f"{view.total_records:,} records")
    if view.since_last_record is not None:
        facts.append(f"last record {format_duration(view.since_last_record)} ago")
    if view.skipped_lines:
        facts.append(f"{view.skipped_lines} malformed lines skipped")
    if view.nonfinite:
        facts.append(f"{view.nonfinite} NaN/Inf values")
    if view.restarts:
        facts.append("restarts at " + ", ".join(map(str, view.restarts[-3:])))
    parts: list[RenderableType] = [head, Text("  ·  ".join(facts), style="dim")]
    for alert in view.alerts:
        parts.append(Text(f"! {alert.message}", style="bold red"))
    if view.waiting:
        parts.append(Text(view.waiting, style="yellow"))
        return Group(*parts)
    parts.append(Text(view.selection, style="dim"))

    sparks = Table(box=None, show_header=False, pad_edge=False)
    sparks.add_column(style="bold")
    sparks.add_column()
    sparks.add_column(justify="right")
    for s in view.series:
        sparks.add_row(s.name, sparkline(s.values), _fmt(s.latest, s.fmt))
    parts.append(sparks)

    table = Table(title="latest windows", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (
        ("steps", "left"),
        ("n", "right"),
        ("loss", "right"),
        ("", "left"),
        ("acc", "right"),
        ("Δacc", "right"),
        (" ", "left"),
    ):
        table.add_column(name, justify=justify)
    for w, t in zip(view.windows, view.trends):
        table.add_row(
            f"{w.start}-{w.end}",
            str(w.n),
            _fmt(w.loss, ".4f"),
            Text(ARROWS[t.loss_trend], style=_ARROW_STYLE[t.loss_trend]),
            _fmt(w.acc, ".4f"),
            _fmt(t.acc_delta, "+.4f") if t.acc_delta is not None else "",
            Text(ARROWS[t.acc_trend], style=_ARROW_STYLE[t.acc_trend]),
        )
    parts.append(table)

    sched = view.schedule
    if sched is not None and sched.current is not None:
        line = f"lr {sched.current:.2e}"
        if sched.peak is not None and sched.fraction_of_peak is not None:
            line += f", {sched.fraction_of_peak:.0%} of peak {sched.peak:.2e} ({sched.peak_source})"
        if sched.phase:
            line += f", {sched.phase}"
            if sched.phase == "warmup" and sched.warmup_fraction is not None:
                line += f" {sched.warmup_fraction:.0%} done"
        if sched.run_fraction is not None:
            line += f", {sched.run_fraction:.0%} of the run"
        if sched.epoch is not None:
            line += f", epoch {sched.epoch:.2f}"
        parts.append(Text("schedule: " + line))
    acc = view.acceptance
    if acc is not None and acc.tau is not None:
        line = f"tau {acc.tau:.2f} ({acc.estimator})"
        if acc.progress is not None:
            line += f", {acc.progress:.0%} of the way to tau {acc.target_tau:.2f}"
        if acc.vs_baseline is not None:
            line += f", {acc.vs_baseline:+.2f} vs baseline {acc.baseline_tau:g}"
        parts.append(Text("acceptance: " + line))
        for warning in acc.warnings:
            parts.append(Text(f"! {warning}", style="bold red"))
    if view.verdict is not None:
        parts.append(_verdict_text(view.verdict))
    if plot and view.series:
        parts.append(_plot(view, width))
    return Group(*parts)

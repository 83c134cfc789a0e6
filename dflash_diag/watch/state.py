"""The state of `dflash-diag watch`: its settings and a log followed incrementally.

`LiveLog` follows the log with `dflash_diag.read.tail.LogTail` and feeds only the newly appended
complete lines to `dflash_diag.read.jsonl.parse_records`; it keeps every event (headers, evals) but
only the recent metric records (the windows the view shows), so a refresh costs what the new lines
cost, not what the file costs. Truncation or rotation rebuilds it from the new file.

The clock is injected (``clock=time.time`` by default) so tests are deterministic.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import polars as pl

from dflash_diag.analysis.alive import SCREENED_FLAGS, screen_records, screening_flags
from dflash_diag.analysis.diagnosis import DiagnosisConfig
from dflash_diag.analysis.phase import Selection, select_phase
from dflash_diag.analysis.restarts import (
    Restart,
    before_then,
    not_superseded,
    resolve_restarts,
)
from dflash_diag.analysis.windows import (
    WindowChoice,
    WindowTable,
    choose_window,
    compute_window_table,
    empty_window_table,
    merge_window_tables,
)
from dflash_diag.errors import DiagError
from dflash_diag.read.files import check_encoding
from dflash_diag.read.jsonl import fetch_lists, parse_clean_records, parse_records
from dflash_diag.read.records import ParsedLog, ParseIssues
from dflash_diag.read.tail import LogTail, TailChunk
from dflash_diag.watch.lazy_lists import no_string_in_arrays

Clock = Callable[[], float]

#: Pieces of at least this many bytes (a backlog, not a refresh's new lines) are parsed without
#: their per-position lists where that cannot change the view (`LiveLog` and
#: :mod:`dflash_diag.watch.lazy_lists`): the lists of the records kept are read back after.
LAZY_LISTS_BYTES = 2**20

#: What the forecast reads of a record (:func:`dflash_diag.analysis.run_forecast.forecast_run`),
#: kept for the pruned ones: 32 bytes a record, 32 MB for a million, where the records
#: themselves (lists and all) are dropped.
FORECAST_COLUMNS = ("step", "loss", "acc", "lr")
#: What else is kept of a pruned record, so that the notes are converge's: its run (the block
#: size's changes between runs) and what the screening left out of it (about 4 bytes more).
PRUNED_COLUMNS = (*FORECAST_COLUMNS, "run", *SCREENED_FLAGS)


@dataclass(frozen=True, kw_only=True)
class WatchConfig:
    """Settings of the live view.

    Attributes:
        interval: seconds between refreshes (``--interval``).
        stall: seconds without a new record before the stall alert (``--stall``).
        history: windows kept and drawn in the sparklines. The verdict judges every window
            of the log (the pruned ones are kept as window means) and the forecast fits every
            record (the pruned ones kept as their step, loss, acc and lr), as converge does.
        table_rows: latest windows listed with their arrows.
        plot: add plotext line charts of loss, acc and tau (``--plot``).
        analysis: the diagnosis settings, the ones converge and compare use (phase, first step,
            window: None for ``--window auto``, converge's rule fixed once a longer log gets
            the same; thresholds, targets...).
    """

    interval: float = 2.0
    stall: float = 300.0
    history: int = 40
    table_rows: int = 6
    plot: bool = False
    analysis: DiagnosisConfig = field(default_factory=DiagnosisConfig)

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"--interval must be positive, got {self.interval}")
        if not self.stall > 0:
            raise ValueError(f"--stall must be positive, got {self.stall}")
        if self.history < 2:
            raise ValueError(f"history must be at least 2 windows, got {self.history}")
        if self.table_rows < 1:
            raise ValueError(f"table_rows must be at least 1, got {self.table_rows}")


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


def _head(path: Path) -> bytes:
    """A regular file's first two bytes (a FIFO is never opened here: opening one blocks until
    a writer comes, and watch refuses it at once elsewhere)."""
    try:
        if not path.is_file():
            return b""
        with path.open("rb") as handle:
            return handle.read(2)
    except OSError:
        return b""  # missing or unreadable: the refresh says so


def _refuse_compressed(head: bytes, path: str | os.PathLike[str]) -> None:
    """Gzip data is told by its magic bytes, as converge tells it, not by the name: read as
    text it would be a view of malformed lines where converge reads its records."""
    if head[:2] == b"\x1f\x8b":
        raise DiagError(
            f"watch cannot follow a compressed log: {path} holds gzip data (read it with converge)"
        )


class LiveLog:
    """Follows one log and keeps what the live view needs, updated from the new bytes only.

    Args:
        path: the log (a plain file; ``.gz`` and standard input cannot be followed).
        config: the view settings (window, history, phase).
        clock: wall clock, for the time since the last record.
        max_chunk_bytes: bound on the bytes parsed at once (a refresh parses a large backlog
            piece by piece, pruning in between, to bound memory); None parses all at once.
        fields: canonical name -> name in the log (``--field``), as for `parse_records`.
        lazy_lists_bytes: pieces of at least this many bytes are parsed without their lists
            where nothing shown can depend on them (:data:`LAZY_LISTS_BYTES`); None: never.

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
        snapshot: Callable[[], ParsedLog] | None = None,
        lazy_lists_bytes: int | None = LAZY_LISTS_BYTES,
    ) -> None:
        if str(path) == "-":
            raise DiagError("watch follows a file; standard input cannot be followed")
        if str(path).endswith(".gz"):
            raise DiagError(f"watch cannot follow a compressed log: {path}")
        if snapshot is None:
            _refuse_compressed(_head(Path(path)), path)
        self.path = Path(path)
        self.config = config or WatchConfig()
        self.clock = clock
        self.fields = fields or None
        self.lazy_lists_bytes = lazy_lists_bytes
        # Formats that cannot be tailed (TensorBoard, MLflow, trainer_state.json...) are read
        # whole by `snapshot` whenever their files change.
        self.snapshot = snapshot
        self._snapshot_mark: tuple[float, int] | None = None
        # (the tail is never read then; it only keeps its reset count at 0)
        self.tail = LogTail(self.path, max_chunk_bytes=max_chunk_bytes)
        #: the path did not exist at the last refresh (deleted, or rotated and not re-created)
        self.missing = False
        self._clear()

    def _clear(self) -> None:
        self.log: ParsedLog | None = None  # recent metric records (file order) + every event
        self.issues = ParseIssues()  # cumulative over the whole file
        self.total_records = 0
        self.restarts: dict[tuple[int, int | None], Restart] = {}
        self.last_step: int | None = None
        self.last_record_time: float | None = None  # the latest record's own `time` field
        self.last_write: float | None = None  # file mtime when records last arrived
        self.max_lr: float | None = None
        self.origin: int | None = None  # first selected step: windows align to it
        self._origin_phase: str | None = None
        self.selection: Selection | None = None
        self.nonfinite_last: dict[str, int] = {}  # field -> last step where it was NaN/Inf
        self.window: WindowChoice | None = None  # fixed once known (auto: after 50 records)
        # the means of the pruned records' windows, as columns (tens of thousands in a long run)
        self.archived = empty_window_table()
        # the pruned records' screened PRUNED_COLUMNS: the forecast reads every record
        self.pruned_scalars: pl.DataFrame | None = None
        # (file offset, first line, last line) of the pieces parsed without their lists
        self._lists_unread: list[tuple[int, int, int]] = []

    def refresh(self) -> RefreshStats:
        """Read and parse the lines appended since the previous refresh and update the state.

        The new bytes are parsed in pieces of at most ``max_chunk_bytes`` (the state is pruned
        after each), so catching up with a large file needs memory for one piece, not the file.
        """
        t0 = time.perf_counter()
        if self.snapshot is not None:
            return self._refresh_snapshot(t0)
        lines = records = 0
        reset = missing = False
        while True:
            chunk = self.tail.read_new()
            if chunk.reset:
                self._clear()
                reset = True
            missing = chunk.missing
            if chunk.data:
                if chunk.first_line_no == 1:
                    check_encoding(chunk.data[:4], str(self.path))  # UTF-16: one line, not a view
                    _refuse_compressed(chunk.data[:2], self.path)  # whatever its name
                part = self._parse(chunk)
                lines += chunk.n_lines
                records += part.metrics.height
                self._ingest(part)
                try:
                    self.last_write = os.stat(self.path).st_mtime
                except OSError:
                    self.last_write = self.clock()
            if missing or self.tail.backlog_bytes == 0:
                break
        if self._lists_unread:
            self._read_kept_lists()
        self.missing = missing
        return RefreshStats(
            new_lines=lines,
            new_records=records,
            reset=reset,
            missing=missing,
            seconds=time.perf_counter() - t0,
        )

    def _parse(self, chunk: TailChunk) -> ParsedLog:
        """The records of a piece, without their lists where a large piece allows it.

        Reading the lists is most of a pipeline log's parse (about 40% of the first frame on
        1M records with one 15-element list). Leaving them out changes nothing else when
        polars reads every line of the piece at once (no ``NaN`` token, no number out of range:
        its list values are then finite) and no string is an array element (only a string can
        turn into a non-finite value in Python's decoding of a line polars rejects over a list
        of the wrong type). Such a line's non-numeric list values then go uncounted, which the
        view does not show. The lists of the records still kept after the refresh are read
        back (`_read_kept_lists`).
        """
        lazy = self.lazy_lists_bytes
        if (
            lazy is not None
            and chunk.start is not None
            and len(chunk.data) >= lazy
            and no_string_in_arrays(chunk.data)
        ):
            part = parse_clean_records(
                chunk.data, first_line_no=chunk.first_line_no, fields=self.fields, lists=False
            )
            if part is not None:
                last_line = chunk.first_line_no + chunk.n_lines - 1
                self._lists_unread.append((chunk.start, chunk.first_line_no, last_line))
                return part
        return parse_records(chunk.data, first_line_no=chunk.first_line_no, fields=self.fields)

    def _read_kept_lists(self) -> None:
        """Read back the lists of the kept records that were parsed without them."""
        ranges, self._lists_unread = self._lists_unread, []
        if self.log is None or self.log.metrics.height == 0:
            return
        metrics = self.log.metrics
        unread = pl.any_horizontal(
            pl.col("seq").is_between(first, last) for _, first, last in ranges
        )
        rows = metrics.filter(unread)
        if rows.height == 0:
            return
        source = ParsedLog(
            metrics=rows,
            events=[],
            issues=self.issues,
            sources=[str(self.path)],
            lists_pending=[0],
            fields=dict(self.fields or {}),
            chunk_starts={0: sorted((offset, first) for offset, first, _ in ranges)},
        )
        try:
            filled = fetch_lists(source, rows)
        except (DiagError, OSError):
            return  # the file went away since: the view goes without those lists
        self.log.metrics = pl.concat([metrics.filter(~unread), filled]).sort(
            "seq", maintain_order=True
        )

    def _refresh_snapshot(self, t0: float) -> RefreshStats:
        """Read the whole input again when any of its files changed (size or time)."""
        mark = _tree_mark(self.path)
        if mark is None:
            return RefreshStats(
                new_lines=0,
                new_records=0,
                reset=False,
                missing=True,
                seconds=time.perf_counter() - t0,
            )
        if mark == self._snapshot_mark:
            return RefreshStats(
                new_lines=0,
                new_records=0,
                reset=False,
                missing=False,
                seconds=time.perf_counter() - t0,
            )
        assert self.snapshot is not None
        part = self.snapshot()
        before = self.total_records
        self._clear()
        self._ingest(part)
        self._snapshot_mark = mark
        self.last_write = mark[0]
        return RefreshStats(
            new_lines=part.issues.lines,
            new_records=self.total_records - before,
            reset=False,
            missing=False,
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
            top = float(cast(float, lr.max()))
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
            # the same restart is seen at every refresh until its superseded records are pruned
            self.restarts.setdefault((r.source, r.seq), r)
        selected, selection = select_phase(
            resolved, self.config.analysis.phase, self.config.analysis.from_step
        )
        self.selection = selection
        if selection.phase != self._origin_phase:
            # e.g. the first pipeline entries of a migrating run: windows align to them now
            self._origin_phase, self.origin = selection.phase, None
            self.archived, self.pruned_scalars = empty_window_table(), None
        if self.origin is not None and selected.height and int(selected["step"][0]) < self.origin:
            self.origin = int(selected["step"][0])  # a restart from before the first window
        return selected

    def window_choice(self, frame: pl.DataFrame) -> WindowChoice:
        """The windows of the view: ``--window``, else converge's auto rule, fixed once a
        longer log would get the same (:attr:`WindowChoice.settled`: 50 records at a logging
        interval above 1, 250 steps logged every step); until then chosen on what there is,
        and nothing is pruned."""
        if self.window is not None:
            return self.window
        choice = choose_window(frame, self.config.analysis.window)
        if choice.settled and frame.height:
            self.window = choice
        return choice

    def earlier_windows(self) -> WindowTable:
        """The windows of the records pruned so far, in step order (the verdict judges them)."""
        return self.archived

    def restarts_in_file_order(self) -> list[Restart]:
        """Every restart seen so far, in file order (source, then place), as converge lists them."""
        return sorted(self.restarts.values(), key=lambda r: (r.source, r.seq or 0, r.step))

    def earlier_records(self) -> pl.DataFrame | None:
        """The :data:`PRUNED_COLUMNS` of the records pruned so far (screened), in step order,
        or None before any is pruned: the forecast fits every record, as converge's does, and
        the notes count what converge's screening leaves out of them."""
        return self.pruned_scalars

    def _prune(self) -> None:
        """Keep the metric records of the last ``history`` windows (plus the newest chunk), so
        the per-refresh analysis stays the size of the view, whatever the file's size. The
        pruned records are kept as their windows' means, for the verdict."""
        assert self.log is not None
        selected = self.records()
        if selected.height == 0:
            return
        if self.origin is None:
            self.origin = (
                self.config.analysis.from_step
                if self.config.analysis.from_step is not None
                else int(selected["step"][0])
            )
        choice = self.window_choice(selected)
        if self.window is None:
            return  # too few records to fix the windows: nothing worth pruning yet
        w = choice.size
        last = int(selected["step"][-1])
        first_window = (last - self.origin) // w - (self.config.history - 1)
        cutoff = self.origin + max(first_window, 0) * w
        dropped = selected.filter((pl.col("step") >= self.origin) & (pl.col("step") < cutoff))
        if dropped.height:
            screened, _ = screen_records(screening_flags(dropped))
            # windows from the first one pruned now replace any later ones (a restart rewound)
            archived = merge_window_tables(
                self.archived, compute_window_table(screened, w, start=self.origin)
            )
            if archived.frame.n_chunks() > 64:  # a chunk a prune: kept few for the queries
                archived = WindowTable(archived.frame.rechunk())
            self.archived = archived
            # the screening is row by row: these rows are what converge's screening gives them
            # (a restart that rewound into the pruned steps supersedes them)
            kept_scalars = before_then(
                self.pruned_scalars,
                screened.select(c for c in PRUNED_COLUMNS if c in screened.columns),
            )
            if kept_scalars.n_chunks() > 64:  # a long watch prunes a few rows a refresh
                kept_scalars = kept_scalars.rechunk()
            self.pruned_scalars = kept_scalars
        metrics = self.log.metrics
        newest_seq = int(cast(int, metrics["seq"].max()))
        # Records a restart superseded go too: kept, they would rewind to a new step each time
        # the restart's own first records are pruned (a restart at 16150, 16200... for one).
        kept = metrics.filter(
            (not_superseded(metrics) & (pl.col("step") >= cutoff)) | (pl.col("seq") == newest_seq)
        )
        if kept.height < metrics.height:
            self.log = ParsedLog(
                metrics=kept,
                events=self.log.events,
                issues=self.log.issues,
                consumed_bytes=self.log.consumed_bytes,
                sources=self.log.sources,
                foreign=self.log.foreign,
                presets=self.log.presets,
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


def _tree_mark(path: Path) -> tuple[float, int] | None:
    """Newest modification time and total size of a file or of the files below a folder."""
    try:
        if path.is_file():
            stat = path.stat()
            return stat.st_mtime, stat.st_size
        newest, total = 0.0, 0
        for root, _dirs, files in os.walk(path):
            for name in files:
                stat = os.stat(os.path.join(root, name))
                newest, total = max(newest, stat.st_mtime), total + stat.st_size
        return (newest, total) if path.exists() else None
    except OSError:
        return None

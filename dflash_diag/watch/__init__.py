"""The live view of `dflash-diag watch`: an incrementally updated state, a view model, alerts.

Three layers, so the maths is testable without a terminal and the terminal code stays thin:

* `dflash_diag.watch.state`: `WatchConfig` and `LiveLog`, which follows the log with
  `dflash_diag.read.tail.LogTail` and feeds only the newly appended complete lines to
  `dflash_diag.read.jsonl.parse_records`; it keeps every event (headers, evals) but only the recent
  metric records (the windows the view shows), so a refresh costs what the new lines cost, not
  what the file costs. Truncation or rotation rebuilds it from the new file.
* `dflash_diag.watch.view`: `build_view` turns the state into a `WatchView` (plain data):
  sparklines over the recent windows, the latest windows with arrows, schedule position,
  acceptance, verdict, time since the last record and the alerts of `dflash_diag.analysis.alerts`. The
  analysis is the converge command's (windows, trend, schedule, acceptance, verdict), run on the
  recent records.
* `dflash_diag.watch.render`: `render_view` draws a `WatchView` with rich.

This module gathers their public names, the ones the command and the package export.
The clock is injected everywhere (``clock=time.time`` by default) so tests are deterministic.
"""

from __future__ import annotations

from dflash_diag.analysis.alerts import Alert, format_duration, loss_spikes, stall_alert
from dflash_diag.watch.render import render_view
from dflash_diag.watch.state import Clock, LiveLog, RefreshStats, WatchConfig
from dflash_diag.watch.view import Series, WatchView, build_view

__all__ = [
    "Alert",
    "Clock",
    "LiveLog",
    "RefreshStats",
    "Series",
    "WatchConfig",
    "WatchView",
    "build_view",
    "format_duration",
    "loss_spikes",
    "render_view",
    "stall_alert",
]

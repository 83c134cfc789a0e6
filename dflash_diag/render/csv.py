"""CSV output: converge's windows, one row per window (compare has no CSV output)."""

from __future__ import annotations

import csv
import io

from dflash_diag.converge.report import ConvergeReport

CSV_COLUMNS = ("start", "end", "n", "first_step", "last_step", "loss", "loss_delta", "loss_trend",
               "acc", "acc_delta", "trend", "weighted", "nonfinite", "tau_train")


def render_csv(report: ConvergeReport) -> str:
    """The windows as CSV, one row per window (the summary is in the JSON output)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.windows:
        w, t = row.window, row.trend
        writer.writerow([w.start, w.end, w.n, w.first_step, w.last_step, _csv(w.loss),
                         _csv(t.loss_delta), t.loss_trend or "", _csv(w.acc), _csv(t.acc_delta),
                         t.acc_trend or "", int(w.weighted), w.nonfinite, _csv(w.tau_train)])
    return buffer.getvalue()


def _csv(value: float | None) -> str:
    return "" if value is None else repr(float(value))

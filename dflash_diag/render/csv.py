"""CSV output: converge's windows, one row per window; compare's regimes (one log, one row per
regime with its diagnosis) or aligned windows (two runs, one row per window)."""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dflash_diag.converge.report import ConvergeReport

if TYPE_CHECKING:
    from dflash_diag.compare.report import RegimeComparison, RunAlignment

CSV_COLUMNS = (
    "start",
    "end",
    "n",
    "first_step",
    "last_step",
    "loss",
    "loss_delta",
    "loss_trend",
    "acc",
    "acc_delta",
    "trend",
    "weighted",
    "nonfinite",
    "tau_train",
)


def render_csv(report: ConvergeReport) -> str:
    """The windows as CSV, one row per window (the summary is in the JSON output): the text of
    :func:`csv_pieces`, joined."""
    return "".join(csv_pieces(report))


def csv_pieces(report: ConvergeReport) -> Iterator[str]:
    """:func:`render_csv`'s text in pieces, in order (the command writes each as it comes): the
    header, then the rows a few thousand windows at a time, so that the text of every window is
    never held at once."""
    fast = _columns_text(report)
    if fast is not None:
        yield from fast
        return
    yield _csv_module_text(report)


def _csv_module_text(report: ConvergeReport) -> str:
    """The rows written by the csv module (it quotes what needs quoting)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.windows:
        w, t = row.window, row.trend
        writer.writerow(
            [
                w.start,
                w.end,
                w.n,
                w.first_step,
                w.last_step,
                _csv(w.loss),
                _csv(t.loss_delta),
                t.loss_trend or "",
                _csv(w.acc),
                _csv(t.acc_delta),
                t.acc_trend or "",
                int(w.weighted),
                w.nonfinite,
                _csv(w.tau_train),
            ]
        )
    return buffer.getvalue()


#: Text the csv module writes as it is (QUOTE_MINIMAL quotes a field holding one of these).
_NEEDS_QUOTES = (",", '"', "\r", "\n")


def _columns_text(report: ConvergeReport) -> Iterator[str] | None:
    """:func:`render_csv`'s text a column at a time (each field's column formatted once, see
    :mod:`dflash_diag.render.json_columns`) in pieces of rows, byte for byte what the csv module
    writes; None when a trend field is not a plain label (then the csv module writes the rows,
    quoting as needed)."""
    from dflash_diag.render.json_columns import row_column, row_pieces

    rows = report.windows
    for name in ("loss_trend", "acc_trend"):
        values = row_column(rows, name, trend=True)
        kinds = set(map(type, values))
        if not kinds <= {str, type(None)}:
            return None
        if any(c in text for text in set(values) if text is not None for c in _NEEDS_QUOTES):
            return None
    header = ",".join(CSV_COLUMNS) + "\n"
    return itertools.chain([header], map(_rows_text, row_pieces(rows)))


def _rows_text(rows: Sequence[Any]) -> str:
    """The CSV rows of ``rows`` (plain labels), a column at a time."""
    import polars as pl

    from dflash_diag.render.json_columns import (
        integer_column,
        joined_rows,
        number_column,
        row_column,
    )

    def window(name: str) -> list[Any]:
        return row_column(rows, name)

    labels = {
        "loss_trend": row_column(rows, "loss_trend", trend=True),
        "trend": row_column(rows, "acc_trend", trend=True),
    }

    def integers(values: list[Any]) -> pl.Series:
        return integer_column(values, str)  # the csv module writes str() of a number

    columns = {
        "start": integers(window("start")),
        "end": integers(window("end")),
        "n": integers(window("n")),
        "first_step": integers(window("first_step")),
        "last_step": integers(window("last_step")),
        "nonfinite": integers(window("nonfinite")),
        "loss": number_column(window("loss"), csv=True),
        "loss_delta": number_column(row_column(rows, "loss_delta", trend=True), csv=True),
        "loss_trend": pl.Series([v or "" for v in labels["loss_trend"]], dtype=pl.String),
        "acc": number_column(window("acc"), csv=True),
        "acc_delta": number_column(row_column(rows, "acc_delta", trend=True), csv=True),
        "trend": pl.Series([v or "" for v in labels["trend"]], dtype=pl.String),
        "weighted": integers([int(v) for v in window("weighted")]),
        "tau_train": number_column(window("tau_train"), csv=True),
    }
    return joined_rows([columns[name] for name in CSV_COLUMNS], ",", "\n")


def _csv(value: float | None) -> str:
    return "" if value is None else repr(float(value))


COMPARE_CSV_COLUMNS = (
    "regime",
    "start_step",
    "end_step",
    "n",
    "tokens_per_step",
    "tok_per_sec",
    "loss",
    "loss_trend",
    "acc_mean",
    "acc_trend",
    "acc",
    "tau",
    "estimator",
    "target_kind",
    "target_acc",
    "target_tau",
    "progress",
    "verdict",
    "eta_steps",
)
ALIGNMENT_CSV_COLUMNS = (
    "start",
    "end",
    "n_a",
    "n_b",
    "loss_a",
    "loss_b",
    "loss_diff",
    "acc_a",
    "acc_b",
    "acc_diff",
)


def render_compare_csv(
    comparisons: Sequence[RegimeComparison], alignment: RunAlignment | None = None
) -> str:
    """One log: one row per regime (its means and trends, then its diagnosis: ``acc`` of the last
    window, primary ``tau``, target progress, verdict). Two runs: one row per aligned window."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if alignment is not None:
        writer.writerow(ALIGNMENT_CSV_COLUMNS)
        for w in alignment.windows:
            writer.writerow(
                [
                    _csv(w.start),
                    _csv(w.end),
                    w.n_a,
                    w.n_b,
                    _csv(w.loss_a),
                    _csv(w.loss_b),
                    _csv(w.loss_diff),
                    _csv(w.acc_a),
                    _csv(w.acc_b),
                    _csv(w.acc_diff),
                ]
            )
        return buffer.getvalue()
    writer.writerow(COMPARE_CSV_COLUMNS)
    for comparison in comparisons:
        diagnoses = comparison.diagnoses or [None] * len(comparison.regimes)
        for r, d in zip(comparison.regimes, diagnoses, strict=True):
            row = [
                r.name,
                r.start_step,
                r.end_step,
                r.n,
                _csv(r.tokens_per_step),
                _csv(r.tok_per_sec),
                _csv(r.loss),
                _csv(r.loss_trend),
                _csv(r.acc),
                _csv(r.acc_trend),
            ]
            if d is None:
                row += [""] * 9
            else:
                a, v = d.acceptance, d.verdict
                row += [
                    _csv(a.acc),
                    _csv(a.tau),
                    a.estimator or "",
                    a.target_kind,
                    _csv(a.target_acc),
                    _csv(a.target_tau),
                    _csv(a.progress),
                    v.status,
                    _csv(v.eta_steps),
                ]
            writer.writerow(row)
    return buffer.getvalue()

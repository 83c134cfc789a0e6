"""JSON output of every command: every serialiser of the reports (the reports themselves are plain
data and import nothing from here), the one cleaner of non-finite numbers and the one encoder
(strict JSON, text written as UTF-8 rather than ``\\u`` escapes, so ``±`` reads the same in every
command's output)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from dflash_diag.render.json_columns import (
    integer_column,
    joined_objects,
    number_column,
    row_column,
    row_pieces,
    string_column,
)

if TYPE_CHECKING:  # polars: imported only by the commands that build these
    from dflash_diag.analysis.acceptance import Acceptance
    from dflash_diag.analysis.diagnosis import Diagnosis, WindowRow
    from dflash_diag.analysis.rank_skew import RankSkew
    from dflash_diag.analysis.run_forecast import RunForecast
    from dflash_diag.analysis.schedule_events import ScheduleEvent
    from dflash_diag.analysis.verdict import Verdict
    from dflash_diag.compare.report import RegimeComparison, RunAlignment
    from dflash_diag.converge.report import ConvergeReport
    from dflash_diag.watch.view import WatchView

#: The version of the JSON contract, the first key of converge's, compare's and watch's output:
#: raised when a key changes meaning or goes away (new keys are additive and keep it).
FORMAT_VERSION = 1


def json_number(value: float | None) -> float | None:
    """JSON has no NaN/Infinity: non-finite numbers become null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def clean_json(value: Any) -> Any:
    """``value`` with every non-finite float, however deeply nested, turned into null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean_json(x) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(x) for x in value]
    return value


def window_json(row: WindowRow) -> dict[str, Any]:
    """One window of the JSON contract (:func:`windows_text` writes many at once)."""
    return {
        "start": row.window.start,
        "end": row.window.end,
        "n": row.window.n,
        "loss": json_number(row.window.loss),
        "acc": json_number(row.window.acc),
        "acc_delta": json_number(row.trend.acc_delta),
        "trend": row.trend.acc_trend,
        "loss_delta": json_number(row.trend.loss_delta),
        "loss_trend": row.trend.loss_trend,
    }


def windows_text(rows: Sequence[WindowRow], separator: str, prefix: str = "") -> str:
    """The compact JSON text of every window (as ``_COMPACT.encode(window_json(row))`` writes
    it, byte for byte), each after ``prefix``, joined by ``separator``: a column per field, no
    dict per window (and, for a diagnosis' rows, no row object: the columns are read as they
    are)."""
    encode = _COMPACT.encode

    def window(name: str) -> list[Any]:
        return row_column(rows, name)

    def trend(name: str) -> list[Any]:
        return row_column(rows, name, trend=True)

    return joined_objects(
        [
            ("start", integer_column(window("start"), encode)),
            ("end", integer_column(window("end"), encode)),
            ("n", integer_column(window("n"), encode)),
            ("loss", number_column(window("loss"))),
            ("acc", number_column(window("acc"))),
            ("acc_delta", number_column(trend("acc_delta"))),
            ("trend", string_column(trend("acc_trend"), encode)),
            ("loss_delta", number_column(trend("loss_delta"))),
            ("loss_trend", string_column(trend("loss_trend"), encode)),
        ],
        encode,
        separator,
        prefix,
    )


def windows_pieces(rows: Sequence[WindowRow], separator: str, prefix: str = "") -> Iterator[str]:
    """:func:`windows_text`'s text in pieces (a few thousand windows each, and the
    separator between two): joined, the same text, byte for byte."""
    for i, piece in enumerate(row_pieces(rows)):
        if i:
            yield separator
        yield windows_text(piece, separator, prefix)


def acceptance_json(a: Acceptance) -> dict[str, Any]:
    """The ``acceptance`` object: the primary estimate, the target in its own units, every
    estimate with its error, and the measured/estimate ratio at the last eval."""
    c = a.calibration
    return {
        "acc": json_number(a.acc),
        "tau": json_number(a.tau),
        "estimator": a.estimator,
        "block_size": a.block_size,
        "target_acc": json_number(a.target_acc),
        "target_tau": json_number(a.target_tau),
        "progress": json_number(a.progress),
        "baseline_tau": json_number(a.baseline_tau),
        "target_kind": a.target_kind,
        "baseline_source": a.baseline_source,
        "measured_step": a.measured_step,
        "measured_age_steps": a.measured_age,
        "estimates": [
            {
                "name": e.name,
                "tau": json_number(e.tau),
                "basis": e.basis,
                "error": json_number(e.error),
                "se": json_number(e.se),
                "upper_view": e.upper_view,
                "held_back": e.held_back,
            }
            for e in a.estimates
        ],
        "calibration": None
        if c is None
        else {
            "estimator": c.estimator,
            "step": c.step,
            "estimate": json_number(c.estimate),
            "measured": json_number(c.measured),
            "ratio": json_number(c.ratio),
        },
        "warnings": list(a.warnings),
    }


def verdict_json(v: Verdict) -> dict[str, Any]:
    """The ``verdict`` object."""
    return {
        "status": v.status,
        "slope_per_1k_steps": json_number(v.slope_per_1k_steps),
        "p_value": json_number(v.p_value),
        "eta_steps": json_number(v.eta_steps),
        "eta_hours": json_number(v.eta_hours),
        "eta_reason": v.eta_reason,
        "reason": v.reason,
        "n_windows": v.n_points,
        "best_step": v.best_step,
        "validation": [
            {
                "field": t.field,
                "label": t.label,
                "status": t.status,
                "n_evals": t.n_points,
                "best_step": t.best_step,
                "best": json_number(t.best_value),
                "best_se": json_number(t.best_se),
                "latest_step": t.latest_step,
                "latest": json_number(t.latest_value),
                "latest_se": json_number(t.latest_se),
                "slope_per_1k_steps": json_number(t.slope_per_1k_steps),
                "p_value": json_number(t.p_value),
                "reason": t.reason,
            }
            for t in v.validation
        ],
    }


def forecast_json(f: RunForecast | None) -> dict[str, Any] | None:
    """The ``forecast`` object of the JSON contract (docs/diagnostics.md)."""
    if f is None:
        return None
    metrics = {
        name: {
            "value": json_number(m.value),
            "low": json_number(m.low),
            "high": json_number(m.high),
            "level": m.level,
            "method": m.method,
        }
        for name, m in f.metrics.items()
    }
    target = None
    if f.target is not None:
        t = f.target
        target = {
            "metric": t.metric,
            "target": json_number(t.target),
            "eta_step": t.eta_step,
            "eta_low_step": t.eta_low_step,
            "eta_high_step": t.eta_high_step,
            "eta_hours": json_number(t.eta_hours),
            "within_run": t.within_run,
        }
    return {
        "end_step": f.plan.end_step,
        "end_source": f.plan.end_source,
        "metrics": metrics,
        "target": target,
    }


def schedule_event_json(e: ScheduleEvent) -> dict[str, Any]:
    """One entry of the additive ``schedule_events`` key: the fields plus ``text``."""
    return {**asdict(e), "text": e.text()}


def rank_skew_json(r: RankSkew) -> dict[str, Any]:
    """The additive ``ranks`` key of the JSON outputs (non-finite numbers are null)."""
    return {
        "n": len(r.ranks),
        "first_step": r.first_step,
        "last_step": r.last_step,
        "common_steps": r.common_steps,
        "slowest": r.slowest,
        "fastest": r.fastest,
        "skew": r.skew,
        "slowest_vs_median": r.slowest_vs_median,
        "per_rank": [
            {
                "rank": s.rank,
                "path": s.path,
                "steps": s.steps,
                "tok_per_sec": s.tok_per_sec,
                "step_time": s.step_time,
                "wait_fraction": s.wait_fraction,
            }
            for s in r.ranks
        ],
    }


def diagnosis_json(d: Diagnosis) -> dict[str, Any]:
    """The keys every command's JSON shares for one diagnosis (converge's top level, watch's
    frame, compare's per-regime ``diagnosis``)."""
    return _diagnosis_json(d, lambda rows: [window_json(row) for row in rows])


def _diagnosis_json(
    d: Diagnosis, windows: Callable[[Sequence[WindowRow]], Any] | None
) -> dict[str, Any]:
    """:func:`diagnosis_json` with ``windows(d.windows)`` as its ``windows`` (None: no key)."""
    out = {} if windows is None else {"windows": windows(d.windows)}
    return out | {
        "lr": {
            "current": json_number(d.schedule.current),
            "peak": json_number(d.schedule.peak),
            "peak_source": d.schedule.peak_source,
            "fraction_of_peak": json_number(d.schedule.fraction_of_peak),
            "phase": d.schedule.phase,
        },
        "acceptance": acceptance_json(d.acceptance) if d.drafter.is_drafter else None,
        "drafter": {"is_drafter": d.drafter.is_drafter, "reason": d.drafter.reason},
        "window": None if d.window is None else {"size": d.window.size, "basis": d.window.basis},
        "verdict": verdict_json(d.verdict),
        "restarts": [r.step for r in d.restarts],
        "restart_details": [{"step": r.step, "after": r.previous_step} for r in d.restarts],
        "alerts": [{"kind": a.kind, "message": a.message, "step": a.step} for a in d.alerts],
        "forecast": forecast_json(d.forecast),
    }


def regime_diagnosis_json(d: Diagnosis) -> dict[str, Any]:
    """A regime's diagnosis in compare's JSON: converge's ``lr``, ``acceptance`` and ``verdict``
    objects for the regime's records (its windows are left out: compare's JSON stays small)."""
    full = _diagnosis_json(d, None)
    return {
        key: full[key] for key in ("lr", "acceptance", "drafter", "verdict", "alerts", "forecast")
    }


def converge_json(report: ConvergeReport) -> dict[str, Any]:
    """The JSON contract of converge: exactly the keys documented in docs/diagnostics.md (plus
    ``ranks`` when per-rank logs were given); non-finite numbers become null."""
    return _converge_json(report, lambda rows: [window_json(row) for row in rows])


def _converge_json(
    report: ConvergeReport, windows: Callable[[Sequence[WindowRow]], Any]
) -> dict[str, Any]:
    """:func:`converge_json` with ``windows(report.windows)`` as its ``windows``."""
    out = {"format_version": FORMAT_VERSION, **_diagnosis_json(report, windows)}
    out["skipped_lines"] = report.issues.malformed
    out["nonfinite"] = report.issues.nonfinite_total
    # what the text and markdown reports give as their ``note`` lines (values left out, a metric
    # not measured, not a drafter's log, a block size that changed...): a script reads them too
    out["notes"] = list(report.notes)
    if report.ranks is not None:
        out["ranks"] = rank_skew_json(report.ranks)
    if report.schedule_events:
        out["schedule_events"] = [schedule_event_json(e) for e in report.schedule_events]
    return out


def watch_json(view: WatchView) -> dict[str, Any]:
    """One watch frame as JSON: the diagnosis' keys (as converge's) plus the live facts."""
    out: dict[str, Any] = {"format_version": FORMAT_VERSION}
    if view.diagnosis is not None:
        out.update(diagnosis_json(view.diagnosis))
    out["alerts"] = [{"kind": a.kind, "message": a.message, "step": a.step} for a in view.alerts]
    out.update(
        {
            "path": view.path,
            "last_step": view.last_step,
            "total_records": view.total_records,
            "since_last_record": json_number(view.since_last_record),
            "skipped_lines": view.skipped_lines,
            "nonfinite": view.nonfinite,
            "waiting": view.waiting,
            "notes": list(view.notes),
        }
    )
    if view.schedule_events:
        out["schedule_events"] = [schedule_event_json(e) for e in view.schedule_events]
    return out


def render_json(report: ConvergeReport) -> str:
    """The JSON contract (:func:`converge_json`): one top-level key per line and one window per
    line, so it reads well and a million-step log's windows still encode fast (an indenting
    encoder falls back to the pure-Python one). The text of :func:`json_pieces`, joined."""
    return "".join(json_pieces(report))


def json_pieces(report: ConvergeReport) -> Iterator[str]:
    """:func:`render_json`'s text in pieces, in order (the command writes each as it comes): the
    keys before the windows, the windows a few thousand at a time (:func:`windows_pieces`), the
    keys after them. The whole text of 20,000 windows, and the columns it is made from, would
    otherwise be held at once (about 15 MiB at a million records)."""
    # the windows kept as they are here (their columns): written a column at a time by
    # windows_text, not as dicts
    data = _converge_json(report, lambda rows: rows)
    dump = _COMPACT.encode

    lines = ["{"]
    for i, (key, value) in enumerate(data.items()):
        comma = "," if i < len(data) - 1 else ""
        if key == "windows":
            if value:
                lines.append(f"  {dump(key)}: [")
                yield "\n".join(lines) + "\n"
                yield from windows_pieces(value, ",\n", prefix="    ")
                lines = ["", f"  ]{comma}"]  # the line after the last window's
            else:
                lines.append(f"  {dump(key)}: []{comma}")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}{comma}")
    lines += ["}", ""]  # the text ends with a newline
    yield "\n".join(lines)


def regime_comparison_json(c: RegimeComparison) -> dict[str, Any]:
    """One log's regimes and boundaries, with their documented keys first."""
    regimes = []
    for i, r in enumerate(c.regimes):
        d = asdict(r)
        d["config"] = asdict(r.config) if r.config is not None else None
        diagnosis = c.diagnoses[i] if i < len(c.diagnoses) else None
        d["diagnosis"] = regime_diagnosis_json(diagnosis) if diagnosis is not None else None
        regimes.append(d)
    out = {
        "regimes": regimes,
        "boundaries": [asdict(b) for b in c.boundaries],
        "split_on": c.split_on,
        "k": c.k,
        "notes": list(c.notes),
    }
    if c.schedule_events:
        out["schedule_events"] = [schedule_event_json(e) for e in c.schedule_events]
    return out


def alignment_json(a: RunAlignment) -> dict[str, Any]:
    """The ``alignment`` object of compare's JSON (runs aligned on steps or tokens)."""
    return {**_alignment_head(a), "windows": [asdict(w) for w in a.windows]}


def _alignment_head(a: RunAlignment) -> dict[str, Any]:
    return {
        "x": a.x,
        "width": a.width,
        "runs": list(a.names),
        "tokens_source": list(a.tokens_source),
    }


def compare_json(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> dict[str, Any]:
    """The JSON contract: ``regimes`` and ``boundaries`` (all runs), plus ``alignment``, plus
    ``ranks`` when per-rank logs were given."""
    out: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "regimes": [],
        "boundaries": [],
        "notes": [],
    }
    for comparison in comparisons:
        d = regime_comparison_json(comparison)
        out["regimes"] += d["regimes"]
        out["boundaries"] += d["boundaries"]
        out["notes"] += d["notes"]
        out.setdefault("k", d["k"])
        out.setdefault("split_on", d["split_on"])
        if "schedule_events" in d:
            out.setdefault("schedule_events", []).extend(d["schedule_events"])
    if alignment is not None:
        out["alignment"] = alignment_json(alignment)
    if ranks is not None:
        out["ranks"] = rank_skew_json(ranks)
    return out


#: Stands in for the aligned windows while the rest of compare's JSON is indented (a string no
#: log value can hold: NUL is escaped in JSON text).
_WINDOWS_SLOT = "\x00alignment windows\x00"


def render_compare_json(
    comparisons: Sequence[RegimeComparison],
    alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> str:
    """:func:`dump_json` of :func:`compare_json`, byte for byte, with the aligned windows written
    here: the indenting encoder is the pure-Python one (about 60 us a window, 70,000 windows
    for two 100k-step runs at ``-w 1``), and every window is the same flat object of numbers."""
    if alignment is None or not alignment.windows:
        return dump_json(compare_json(comparisons, alignment, ranks))
    # compare_json's keys in its order (the alignment before the ranks), no dict per window
    data = compare_json(comparisons, None, ranks)
    ranks_json = data.pop("ranks", None)
    data["alignment"] = {**_alignment_head(alignment), "windows": _WINDOWS_SLOT}
    if ranks_json is not None:
        data["ranks"] = ranks_json
    text = dump_json(data)
    slot = _COMPACT.encode(_WINDOWS_SLOT)
    at = text.index(slot)
    lead = at - (text.rfind("\n", 0, at) + 1) - len('"windows": ')
    try:
        written = _indented_windows(alignment.windows, lead)
    except _NotFlat:
        data["alignment"] = alignment_json(alignment)
        return dump_json(data)
    return text[:at] + written + text[at + len(slot) :]


class _NotFlat(Exception):
    """A window field holds a container: the encoder indents it, so it writes them all."""


def _indented_windows(windows: Sequence[Any], lead: int) -> str:
    """The list of ``asdict`` windows as the indent-2 encoder writes it, its key at ``lead``
    spaces: a number as ``repr`` writes it (what the encoder does), a non-finite one as null."""
    names = [f.name for f in fields(windows[0])]
    keys = [" " * (lead + 4) + _COMPACT.encode(name) + ": " for name in names]
    item, close = " " * (lead + 2), " " * lead

    def scalar(value: Any) -> str:
        kind = type(value)
        if kind is float and math.isfinite(value):
            return float.__repr__(value)
        if kind is int:
            return int.__repr__(value)
        if isinstance(value, (list, tuple, dict)) or hasattr(value, "__dataclass_fields__"):
            raise _NotFlat
        return _COMPACT.encode(clean_json(value))

    objects = [
        item
        + "{\n"
        + ",\n".join(key + scalar(getattr(w, name)) for key, name in zip(keys, names, strict=True))
        + "\n"
        + item
        + "}"
        for w in windows
    ]
    return "[\n" + ",\n".join(objects) + "\n" + close + "]"


def _json_default(value: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# The two layouts of the one encoder. Built once: json.dumps with options builds a new encoder per
# call, which is most of the cost over tens of thousands of windows.
_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_json_default)
_INDENTED = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_json_default, indent=2)


def dump_json(data: dict[str, Any]) -> str:
    """JSON text with NaN/Inf written as null (strict JSON for scripts), indented by two."""
    return _INDENTED.encode(clean_json(data))

"""JSON output of every command, with the one cleaner of non-finite numbers (strict JSON)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # polars: imported only by the commands that build these
    from dflash_diag.compare.report import RegimeComparison, RunAlignment
    from dflash_diag.converge.report import ConvergeReport
    from dflash_diag.read.ranks import RankSkew


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


def converge_json(report: ConvergeReport) -> dict[str, Any]:
    """The JSON contract of converge: exactly the keys documented in docs/diagnostics.md (plus
    ``ranks`` when per-rank logs were given); non-finite numbers become null."""
    out = {
        "windows": [
            {
                "start": row.window.start,
                "end": row.window.end,
                "n": row.window.n,
                "loss": json_number(row.window.loss),
                "acc": json_number(row.window.acc),
                "acc_delta": json_number(row.trend.acc_delta),
                "trend": row.trend.acc_trend,
            }
            for row in report.windows
        ],
        "lr": {
            "current": json_number(report.schedule.current),
            "peak": json_number(report.schedule.peak),
            "peak_source": report.schedule.peak_source,
            "fraction_of_peak": json_number(report.schedule.fraction_of_peak),
            "phase": report.schedule.phase,
        },
        "acceptance": {
            "acc": json_number(report.acceptance.acc),
            "tau": json_number(report.acceptance.tau),
            "estimator": report.acceptance.estimator,
            "block_size": report.acceptance.block_size,
            "target_acc": json_number(report.acceptance.target_acc),
            "target_tau": json_number(report.acceptance.target_tau),
            "progress": json_number(report.acceptance.progress),
            "baseline_tau": json_number(report.acceptance.baseline_tau),
        },
        "verdict": {
            "status": report.verdict.status,
            "slope_per_1k_steps": json_number(report.verdict.slope_per_1k_steps),
            "p_value": json_number(report.verdict.p_value),
            "eta_steps": json_number(report.verdict.eta_steps),
        },
        "restarts": [r.step for r in report.restarts],
        "skipped_lines": report.issues.malformed,
        "nonfinite": report.issues.nonfinite_total,
    }
    if report.ranks is not None:
        out["ranks"] = report.ranks.to_json_dict()
    return out


def render_json(report: ConvergeReport) -> str:
    """The JSON contract (:meth:`ConvergeReport.to_json_dict`): one top-level key per line and
    one window per line, so it reads well and a million-step log's windows still encode fast
    (``json.dumps(indent=...)`` falls back to the pure-Python encoder)."""
    data = report.to_json_dict()
    # One encoder for every line: json.dumps with options builds a new one per call, which is
    # most of the cost over tens of thousands of windows.
    dump = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode

    lines = ["{"]
    for i, (key, value) in enumerate(data.items()):
        comma = "," if i < len(data) - 1 else ""
        if key == "windows" and value:
            lines.append(f"  {dump(key)}: [")
            lines += [f"    {dump(w)}," for w in value[:-1]] + [f"    {dump(value[-1])}"]
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def compare_json(
    comparisons: Sequence[RegimeComparison], alignment: RunAlignment | None = None,
    ranks: RankSkew | None = None,
) -> dict[str, Any]:
    """The JSON contract: ``regimes`` and ``boundaries`` (all runs), plus ``alignment``, plus
    ``ranks`` when per-rank logs were given."""
    out: dict[str, Any] = {"regimes": [], "boundaries": [], "notes": []}
    for comparison in comparisons:
        d = comparison.to_dict()
        out["regimes"] += d["regimes"]
        out["boundaries"] += d["boundaries"]
        out["notes"] += d["notes"]
        out.setdefault("k", d["k"])
        out.setdefault("split_on", d["split_on"])
    if alignment is not None:
        out["alignment"] = alignment.to_dict()
    if ranks is not None:
        out["ranks"] = ranks.to_json_dict()
    return out


def _json_default(value: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dump_json(data: dict[str, Any]) -> str:
    """JSON text with NaN/Inf written as null (strict JSON for scripts)."""
    return json.dumps(clean_json(data), indent=2, default=_json_default, allow_nan=False)

"""The forecast as text (one line for converge, watch and compare) and as the JSON ``forecast``
object. Rendering only: the numbers come from :mod:`dflash_diag.analysis.run_forecast`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_diag.analysis.alerts import format_duration

if TYPE_CHECKING:  # polars: imported only by the commands that build these
    from dflash_diag.analysis.forecast import MetricForecast
    from dflash_diag.analysis.run_forecast import RunForecast
    from dflash_diag.analysis.target_eta import TargetEta

#: Names of the metrics in the line.
_LABELS = {
    "loss": "loss",
    "acc": "acc",
    "tau": "tau",
    "eval_loss": "eval loss",
    "eval_acc": "eval acc",
}


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def _band(m: MetricForecast) -> str:
    """``1.54 (1.42-1.66)``; a negative bound is written with "to" so no sign reads as a dash."""
    value, low, high = m.value, m.low, m.high
    # only called for available forecasts, which set the three together
    assert value is not None
    assert low is not None
    assert high is not None
    joint = " to " if (low < 0 or high < 0) else "-"
    return f"{_num(value)} ({_num(low)}{joint}{_num(high)})"


def _steps(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def target_phrase(t: TargetEta, last_step: int) -> str:
    """``target tau 3: step 812 (650-1,020), ~2 min`` or ``target tau 3: not within this run``."""
    head = f"target {t.metric} {t.target:.4g}: "
    if t.eta_step is not None and t.eta_step <= last_step:
        return head + "reached"
    if t.eta_step is not None:
        if t.eta_high_step is not None:
            span = f"{_steps(t.eta_low_step)}-{_steps(t.eta_high_step)}"
        else:  # the pessimistic edge never gets there before the end
            span = f"{_steps(t.eta_low_step)} to past the end"
        text = head + f"step {t.eta_step:,} ({span})"
        if t.eta_hours is not None:
            text += f", ~{format_duration(t.eta_hours * 3600.0)}"
        return text
    if t.within_run is False:
        return head + "not within this run"
    return head + t.reason.split(":")[0]


def forecast_line(f: RunForecast | None) -> str | None:
    """The one forecast line: where it looks, each metric with its 80% band, the target; None
    without a forecast."""
    if f is None or not f.metrics:
        return None
    if f.planned and f.last_step >= f.step:
        # nothing is left to forecast: the band is the fitted curve's at the end, a smoothed
        # reading of the last windows, and is labelled so
        where = f"run at its planned end, step {f.step:,} ({f.plan.end_source}); fitted there"
    elif f.planned:
        where = f"at the planned end, step {f.step:,} ({f.plan.end_source})"
    else:
        where = f"at +{f.step - f.last_step:,} steps (no planned end)"
    parts = []
    thin = []
    for name, m in f.metrics.items():
        if m.available:
            parts.append(f"{_LABELS.get(name, name)} {_band(m)}")
        else:
            thin.append(_LABELS.get(name, name))
    text = f"{where}, 80%: " + (" · ".join(parts) if parts else "no metric")
    if thin:
        text += f" · not enough evidence yet for {', '.join(thin)}"
    if f.target is not None:
        text += f" · {target_phrase(f.target, f.last_step)}"
    return text

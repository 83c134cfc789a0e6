"""Alerts of the live view: a loss spike, a stall, and the durations they are told in.

The other alerts (NaN/Inf, a diverging verdict, a truncated log) come straight from the state and
the verdict; see `dflash_diag.watch.view.build_view`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dflash_diag.analysis import defaults


@dataclass(frozen=True)
class Alert:
    """One problem worth a red line in the live view.

    Attributes:
        kind: "nonfinite", "stall", "diverging", "loss_spike", "reset" or "missing" (the log
            file was deleted or moved away while watched).
        message: the sentence shown to the user.
        step: the step it concerns, where there is one.
    """

    kind: str
    message: str
    step: int | None = None


def loss_spikes(
    losses: Sequence[float | None] | np.ndarray,
    *,
    neighbours: int = 3,
    factor: float = defaults.SPIKE_FACTOR,
    rel_floor: float = 0.02,
    resolution: float = 0.0,
) -> list[int]:
    """Indices of windows whose mean loss is far above their neighbours'.

    A window is compared with up to ``neighbours`` windows on each side (the newest window has only
    earlier ones, so a spike shows as soon as it happens): it is a spike when it is a local peak
    (above the windows just before and after it) and exceeds their median by more than ``factor``
    robust standard deviations (1.4826 x MAD), with ``rel_floor`` x median as the smallest
    deviation that counts, so a smooth noiseless curve flags nothing. The oldest window, with no
    earlier neighbour, is not judged: on a falling curve it is above every later one.

    Args:
        losses: window mean losses, oldest first; None/NaN windows are skipped (NaN has its own
            alert).
        neighbours: windows on each side to compare with; at least 2 finite ones are needed.
        factor: how many robust standard deviations make a spike.
        rel_floor: minimum deviation as a fraction of the neighbours' median.
        resolution: the smallest step the logged values can take (:func:`value_resolution`):
            the smallest deviation that counts, so values rounded to 4 decimals that move by one
            unit of the last decimal (0.0002 -> 0.0003) are no spike.

    Returns:
        Indices into ``losses``, increasing.
    """
    values = _as_floats(losses)
    n = len(values)
    if n == 0 or neighbours < 1:
        return []  # no earlier neighbour to judge a window against
    # One row per window of its neighbours (NaN where there is none or it is not finite): the
    # loop's lists, side by side, so every window is judged by the same float operations at once.
    padded = np.concatenate([np.full(neighbours, np.nan), values, np.full(neighbours, np.nan)])
    before = [padded[neighbours - k : neighbours - k + n] for k in range(1, neighbours + 1)]
    after = [padded[neighbours + k : neighbours + k + n] for k in range(1, neighbours + 1)]
    nearest_before = _first_present(before)
    nearest_after = _first_present(after)
    with np.errstate(invalid="ignore"):
        # a local peak with an earlier neighbour (the oldest window of a falling curve is above
        # the later ones: no spike; a steep fall is no peak)
        peak = ~np.isnan(values) & (values > nearest_before)
        peak &= np.isnan(nearest_after) | (values > nearest_after)
    around = np.stack([*before[::-1], *after], axis=1)
    count = (~np.isnan(around)).sum(axis=1)
    candidates = np.flatnonzero(peak & (count >= 2))
    if candidates.size == 0:
        return []
    around, count, v = around[candidates], count[candidates], values[candidates]
    median = _row_medians(around, count)
    mad = _row_medians(np.abs(around - median[:, None]), count)
    scale = np.maximum(np.maximum(1.4826 * mad, rel_floor * np.abs(median)), resolution)
    spike = (scale > 0) & (v - median > factor * scale)
    return candidates[spike].tolist()


def _as_floats(values: Sequence[float | None] | np.ndarray) -> np.ndarray:
    """``values`` as a float array, NaN for None and for every non-finite value."""
    if isinstance(values, np.ndarray):
        out = values.astype(np.float64, copy=True)
    else:
        out = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def _first_present(columns: list[np.ndarray]) -> np.ndarray:
    """Per row, the first of ``columns`` that is not NaN (NaN when none is)."""
    out = columns[0].copy()
    for column in columns[1:]:
        missing = np.isnan(out)
        out[missing] = column[missing]
    return out


def _row_medians(rows: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The median of each row's first ``count`` values once sorted (NaN sorts last), as
    ``statistics.median`` computes it: the middle value, or the mean of the two middle ones."""
    ordered = np.sort(rows, axis=1)
    picks = np.arange(len(rows))
    low = ordered[picks, (count - 1) // 2]
    high = ordered[picks, count // 2]
    return np.where(count % 2 == 1, high, (low + high) / 2)


def value_resolution(values: Sequence[float | None], max_decimals: int = 8) -> float:
    """The rounding step of logged values: ``10**-d`` for the fewest decimals ``d`` (up to
    ``max_decimals``) that every finite value is written with, else 0 (full precision)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return 0.0
    if len(finite) > 2000:  # a spread sample tells the rounding as well as a million values
        finite = finite[:: len(finite) // 2000]
    for d in range(max_decimals + 1):
        scale = 10.0**d
        if all(
            abs(v * scale - round(v * scale)) <= 1e-6 * max(1.0, abs(v * scale)) for v in finite
        ):
            return 1.0 / scale
    return 0.0


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

"""Unicode sparklines (▁▂▃▄▅▆▇█): a series drawn in one line of text, for the watch view."""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
MISSING = "·"  # no value (None): a gap, not a low value
NONFINITE = "!"  # NaN or Inf: shown, never silently dropped


def sparkline(
    values: Sequence[float | None],
    *,
    width: int | None = None,
    lo: float | None = None,
    hi: float | None = None,
) -> str:
    """Draw ``values`` as a sparkline, one character per value.

    Args:
        values: the series, oldest first. None draws ``·``; NaN and Inf draw ``!``.
        width: keep only the last ``width`` values (the recent end matters in a live view); None
            keeps them all.
        lo, hi: the value range mapped to ▁ and █; by default the finite values' min and max. Values
            outside the range are clamped. A flat series (hi == lo) draws mid-height blocks.

    Returns:
        A string of ``min(len(values), width)`` characters.

    Raises:
        ValueError: when ``width`` is negative or ``lo > hi``.
    """
    if width is not None:
        if width < 0:
            raise ValueError(f"width must be >= 0, got {width}")
        values = values[len(values) - width :] if width < len(values) else values
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite and lo is None and hi is None:
        return "".join(MISSING if v is None else NONFINITE for v in values)
    low = min(finite) if lo is None else lo
    high = max(finite) if hi is None else hi
    if low > high:
        raise ValueError(f"lo ({low}) must not exceed hi ({high})")
    # Halves keep the span finite even for values near the float maximum.
    half_low, span = low / 2, high / 2 - low / 2
    top = len(BLOCKS) - 1
    out = []
    for v in values:
        if v is None:
            out.append(MISSING)
        elif not math.isfinite(v):
            out.append(NONFINITE)
        elif span == 0:
            out.append(BLOCKS[top // 2])
        else:
            level = round((min(max(v, low), high) / 2 - half_low) / span * top)
            out.append(BLOCKS[level])
    return "".join(out)

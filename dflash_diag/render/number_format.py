"""Number formats shared by every command's output (converge, compare, watch).

No heavy imports: the command modules may use it at import time and ``dflash-diag --help`` stays
fast.
"""

from __future__ import annotations

import math


def format_number(value: float | None, fmt: str = ".4f") -> str:
    """``value`` in the format spec ``fmt``; ``-`` when unknown, ``nan``/``inf`` as such."""
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def format_lr(value: float | None) -> str:
    """A learning rate as printed by every command: ``6.00e-04``, or ``0.05`` from 1e-2 up
    (``-`` when unknown)."""
    return "-" if value is None else f"{value:.3g}" if value >= 1e-2 else f"{value:.2e}"


def format_percent(value: float | None) -> str:
    """A fraction as a whole percentage: ``0.756`` -> ``76%`` (``-`` when unknown)."""
    return "-" if value is None else f"{100 * value:.0f}%"

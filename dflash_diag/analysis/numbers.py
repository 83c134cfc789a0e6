"""Numbers read from decoded JSON (``run_start`` headers, their ``config`` and ``schedule``).

A header field is trusted as a number only when it is a finite int or float: ``true`` is an int in
Python but a flag, not a size; a string, NaN, Infinity or an integer too large for a float is no
usable setting.
"""

from __future__ import annotations

import math


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range (JSON integers are unbounded)
        return None
    return number if math.isfinite(number) else None

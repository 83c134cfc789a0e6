"""Range checks on numeric options, shared by every command: bad values are usage errors.

typer converts ``-w 99999999999999999999`` to a Python int and ``--threshold nan`` to a float NaN
without complaint; the first overflows the 64-bit integers of the frames (a traceback deep in
polars), the second passes every ``x < 0`` check and poisons the analysis. So every integer option
must lie within ±:data:`~dflash_diag.read.records.STEP_LIMIT` (2^53, the reader's step range) and
every real-valued option must be finite, checked before anything is read. The options' own ranges
(``--window`` at least 1, ``--alpha`` in (0, 1), ...) stay with the configs that use them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dflash_diag.errors import DiagError

#: Bound on integer options; the same as the reader's step range (2^53, see read/records.py),
#: repeated here so that ``--help`` does not import polars.
INT_LIMIT = 2**53


def check_numbers(options: Mapping[str, int | float | None]) -> None:
    """Check numeric option values, keyed by their flag (``{"--window": 50}``); None is unset.

    Raises:
        DiagError: an integer beyond ±2^53, or a NaN/infinite real number, naming the flag.
    """
    for flag, value in options.items():
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            if not -INT_LIMIT < value < INT_LIMIT:
                raise DiagError(f"{flag} must be between -2^53 and 2^53, got {value}")
        elif isinstance(value, float) and not math.isfinite(value):
            raise DiagError(f"{flag} must be a finite number, got {value}")
